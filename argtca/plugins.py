"""Code from outside argtca: the one loader of plug-ins (selectors and methods alike) and the one
call that declares a test-time method.

Loading. ``--plugin MODULE`` (``python -m argtca.run``, ``python -m argtca.experiments``,
``$PLUGINS`` of the scripts, ``$ARGTCA_PLUGINS`` under Dassl) imports a module by dotted name
(from PYTHONPATH or the current folder) or a ``.py`` file by path (as ``_argtca_plugins.<stem>``,
never under its bare name, so a file called random.py does not replace the standard library's);
importing it runs its registrations. Installed packages use entry points: group
``argtca.selectors`` (a module, or a selector function registered under the entry point's name;
loaded with :mod:`argtca.selectors`) and group ``argtca.methods`` (a module declaring methods;
loaded with :mod:`argtca.trainers`).

Declaring a method. :func:`method` turns one class into a method of every list (CLI, table1,
scripts, report, Dassl's registry): an :class:`~argtca.adapters.base.Adapter` (training-free, or
online when it is an :class:`~argtca.adapters.base.OnlineAdapter`), an
:class:`~argtca.engine.objectives.Objective` (TPT-style prompt tuning) or a
:class:`~argtca.trainers.base.TestTimeTrainer` subclass (its own trainer logic). It registers the
class, a trainer named after the key (its config node ``TRAINER.<KEY>``) and the node's defaults
with their facts, which join argtca's defaults while the module is imported
(docs/own-method.md). argtca's own methods are declared the same way, beside their classes
(argtca/adapters/<method>.py, argtca/trainers/methods.py, ts.py, argtca.py)::

    @method("zs_t2", label="Zero-shot CLIP, T=2", defaults={"TEMPERATURE": 2.0})
    class ZeroShotT2(Adapter):
        def __call__(self, img):                      # [B, V, E] -> probabilities [B, K]
            return (self.clip_logits(img[:, 0]) / self.node.TEMPERATURE).softmax(-1)
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
import types
from typing import Dict, Iterable, Optional

__all__ = ["PluginError", "PLUGIN_PACKAGE", "METHODS_GROUP", "load_plugins", "load_entry_points",
           "loaded_plugin_files", "method"]

from argtca.registry import (METHODS_GROUP, PLUGIN_PACKAGE, PluginError,  # noqa: F401
                             load_builtin_methods, load_entry_points)


def _plugin_module_name(path: str) -> str:
    """``_argtca_plugins.<file stem>``, with a hash of the path when another file of that stem
    was loaded already."""
    if PLUGIN_PACKAGE not in sys.modules:
        pkg = types.ModuleType(PLUGIN_PACKAGE, "plug-in files given by path")
        pkg.__path__ = []   # a package, so plug-ins are its submodules
        sys.modules[PLUGIN_PACKAGE] = pkg
    stem = "".join(ch if ch.isalnum() or ch == "_" else "_"
                   for ch in os.path.splitext(os.path.basename(path))[0])
    name = f"{PLUGIN_PACKAGE}.{stem}"
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) != path:
        name += "_" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:8]
    return name


def _is_path(name: str) -> bool:
    return name.endswith(".py") or os.path.sep in name


def load_plugins(modules: Iterable[str]) -> None:
    """Import each user module (``--plugin``): a dotted module name importable from PYTHONPATH
    (the current folder included) or a path to a ``.py`` file (imported under
    ``_argtca_plugins.``, never under its bare file name). Importing it registers its
    selectors and methods; a module is imported once per process. argtca's own selectors and
    methods are registered first, so that a plug-in registering over one (``override=True``)
    replaces it rather than being refused by it."""
    modules = [str(m).strip() for m in modules or () if str(m).strip()]
    if modules:
        import argtca.selectors  # noqa: F401
        load_builtin_methods()
    for name in modules:
        before = set(sys.modules)
        try:
            if _is_path(name):
                path = os.path.abspath(os.path.expanduser(name))
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"no such file: {path}")
                mod_name = _plugin_module_name(path)
                if mod_name in sys.modules:
                    continue  # already imported (its code is registered)
                spec = importlib.util.spec_from_file_location(mod_name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[mod_name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(mod_name, None)
                    raise
            else:
                if os.getcwd() not in sys.path and "" not in sys.path:
                    sys.path.insert(0, os.getcwd())
                importlib.import_module(name)
                mod_name = name
            # what it imported (its helpers) is part of its code (argtca/utils/code.py)
            from argtca.utils.code import IMPORTED_WITH
            IMPORTED_WITH.setdefault(mod_name, []).extend(
                m for m in sys.modules if m not in before and m != mod_name)
        except PluginError as e:   # a declaration refused by method(): already one line
            raise PluginError(f"--plugin {name}: {e}") from e
        except (ImportError, FileNotFoundError) as e:
            raise PluginError(
                f"--plugin {name}: cannot import it ({type(e).__name__}: {e}); give a module "
                f"importable from PYTHONPATH (e.g. PYTHONPATH=/path/to/folder) or a path to a "
                f".py file") from e
        except Exception as e:  # noqa: BLE001 (user code: one clear line naming it)
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise PluginError(f"--plugin {name}: importing it failed: {type(e).__name__}: "
                              f"{msg}") from e


def loaded_plugin_files(names: Iterable[str]) -> Dict[str, str]:
    """role name -> source file of each imported ``--plugin`` (a .py path or a module name):
    what enters a run's fingerprint by content as ``FILE_SHA256.PLUGIN.<name>``."""
    out: Dict[str, str] = {}
    for name in names or ():
        name = str(name).strip()
        if _is_path(name):
            path = os.path.abspath(os.path.expanduser(name))
        else:
            path = getattr(sys.modules.get(name), "__file__", None) or ""
        if path and os.path.isfile(path):
            out[os.path.splitext(os.path.basename(path))[0] if path.endswith(".py") and
                os.path.basename(path) != "__init__.py" else name] = path
    return out


# ------------------------------------------------------------------------------ methods
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_NODE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def method(key: str, *, label: str = "", family: str = "", defaults: Optional[Dict] = None,
           paper: Optional[bool] = None, override: bool = False, trainer: str = "",
           node: str = "", **traits):
    """Declare the decorated class as the method ``key``: an ``Adapter`` or an ``Objective``
    (a trainer is made for it), or a ``TestTimeTrainer`` subclass (a method with its own trainer
    logic, registered itself). argtca's own methods are declared with it too, beside their class.

    ``key``: lower case letters, digits and ``_`` (scripts, run folders, ``--methods``);
    ``trainer``: the trainer's name (``TRAINER.NAME``, Dassl's registry; default ``key.upper()``,
    for a trainer class its class name); ``node``: its config node ``TRAINER.<NODE>`` (default
    the trainer's name upper-cased); ``defaults``: that node's keys, each a
    :class:`~argtca.config.keys.Key` (default, one-line doc, ``check``/``choices``) or a plain
    value (a plug-in's shorthand), nested dicts for sub-nodes: its value checks are the Keys'
    (plus the class's own ``cfg_ranges``); ``label``: the report's name (default the key);
    ``family``: a key of argtca/config/methods.py FAMILIES (default: "online" for an online
    adapter, "training-free" for another, "tpt-family" for an objective, a trainer class's own);
    ``paper``: a row of the paper's Table 1 (built-ins only); ``override``: replace a registered
    method of that key on purpose. ``traits``: class attributes of the trainer, among
    ``tunes``, ``aliases`` (other names it answers to), ``rows`` (its names in table1's method
    sets), ``base_node`` (the node its prompts and objective read, e.g. a temperature-scaled
    variant's base method's) and ``reads_nodes`` (other nodes it reads). A problem is one
    :class:`PluginError` line."""
    def deco(cls):
        # the trainers make the trainer (argtca/trainers/declare.py): the declaration itself
        # stays on the registry's floor
        from argtca.registry import declare_method
        declare_method(cls, dict(key=key, label=label, family=family, defaults=defaults,
                                 paper=paper, override=override, trainer=trainer, node=node,
                                 traits=traits))
        return cls
    return deco


