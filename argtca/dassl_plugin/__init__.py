"""argtca as a Dassl.pytorch plugin (what ``import argtca.dassl_compat`` installs).

Under Dassl argtca registers only

* its trainers (``DASSL_TRAINER_NAMES``: argtca's name -> Dassl's), all under names that Dassl and
  CoOp do not use: argtca's zero-shot row is ``ArgtcaZeroshotCLIP`` because CoOp owns
  ``ZeroshotCLIP``;
* its demo dataset (``Demo``). The CoOp datasets are CoOp's own classes (``DATASET.NAME``);
* the methods of the plug-ins named in ``$ARGTCA_PLUGINS`` (files or modules, as ``--plugin``)
  and of installed packages (entry-point group ``argtca.methods``), under their trainer names.

It adds its config keys to Dassl's defaults (:mod:`.config`) and registers no evaluator: the result
block (accuracy, ECE, AdaECE, MCE) is printed through Dassl's logger for CoOp's
``parse_test_res.py``. A name already taken is an error naming both owners.
"""
from __future__ import annotations

import os
import sys

from .config import (PLUGINS_ENV, DasslSetupError, check_dassl_cfg, extend_cfg,  # noqa: F401
                     plugin_names)

# argtca's trainer name -> its Dassl name (Dassl keys a trainer by its class name)
DASSL_TRAINER_NAMES = {"ZeroshotCLIP": "ArgtcaZeroshotCLIP"}

_installed = []


def dassl_name(argtca_name: str) -> str:
    return DASSL_TRAINER_NAMES.get(argtca_name, argtca_name)


def install() -> dict:
    """Register into Dassl (once). Returns ``{"trainers": {dassl name: argtca name},
    "datasets": [...]}``."""
    if _installed:
        return _installed[0]
    from dassl.data.datasets import DATASET_REGISTRY as D_DATASETS
    from dassl.engine import TRAINER_REGISTRY as D_TRAINERS
    from dassl.evaluation import EVALUATOR_REGISTRY as D_EVALUATORS

    import argtca.trainers  # noqa: F401  (argtca's registrations, installed packages' methods)
    from argtca.plugins import load_plugins
    from argtca.registry import TRAINER_REGISTRY

    from . import registry
    from .config import install_defaults
    from .datasets import make_demo_class
    from .trainers import make_trainer_class

    _install_excepthook()
    # CoOp's train.py has no --plugin flag: your own methods' files come from the environment,
    # before the defaults and the trainers are registered (their nodes and names with them)
    load_plugins(plugin_names())
    for reg in (D_TRAINERS, D_DATASETS, D_EVALUATORS):
        registry.guard(reg)
    install_defaults()
    done = {"trainers": {}, "datasets": []}
    for name in TRAINER_REGISTRY.registered_names():
        dname = dassl_name(TRAINER_REGISTRY.get(name).__name__)
        registry.register(D_TRAINERS, make_trainer_class(dname, name))
        done["trainers"][dname] = name
    demo = make_demo_class()
    registry.register(D_DATASETS, demo)
    done["datasets"].append(demo.__name__)
    _installed.append(done)
    return done


def _install_excepthook() -> None:
    """An uncaught argtca error (bad input, named in its message) ends CoOp's train.py with one
    ``error: ...`` line instead of a traceback; ARGTCA_DEBUG=1 shows the traceback. Other
    exceptions go to the previous hook unchanged."""
    previous = sys.excepthook
    if getattr(previous, "argtca", False):
        return

    def hook(tp, value, tb):
        if (str(getattr(tp, "__module__", "")).startswith("argtca")
                and not os.environ.get("ARGTCA_DEBUG")):
            msg = value.args[0] if isinstance(value, KeyError) and value.args else str(value)
            print(f"error: {msg}", file=sys.stderr)
            return
        previous(tp, value, tb)

    hook.argtca = True
    sys.excepthook = hook
