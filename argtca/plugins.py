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
online when it is an :class:`~argtca.adapters.base.OnlineAdapter`) or an
:class:`~argtca.engine.objectives.Objective` (TPT-style prompt tuning). It registers the class, a
trainer named after the key (its config node ``TRAINER.<KEY>``) and the node's defaults, which
join argtca's defaults while the module is imported (docs/own-method.md)::

    @method("zs_t2", label="Zero-shot CLIP, T=2", defaults={"TEMPERATURE": 2.0})
    class ZeroShotT2(Adapter):
        def __call__(self, img):                      # [B, V, E] -> probabilities [B, K]
            return (self.clip_logits(img[:, 0]) / self.node.TEMPERATURE).softmax(-1)
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import types
from typing import Any, Dict, Iterable, Optional

__all__ = ["PluginError", "PLUGIN_PACKAGE", "METHODS_GROUP", "load_plugins", "load_entry_points",
           "loaded_plugin_files", "method"]

from argtca.registry import (METHODS_GROUP, PLUGIN_PACKAGE, PluginError,  # noqa: F401
                             load_entry_points)


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
        import argtca.trainers  # noqa: F401
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


def method(key: str, *, label: str = "", family: str = "", defaults: Optional[Dict] = None,
           paper: bool = False, override: bool = False):
    """Declare the decorated class, an ``Adapter`` or an ``Objective``, as the method ``key``.

    ``key``: lower case letters, digits and ``_`` (scripts, run folders, ``--methods``); the
    trainer is ``key.upper()`` and its config node ``TRAINER.<KEY>`` (its keys: ``defaults``, a
    dict, nested dicts for sub-nodes; the class's ``cfg_ranges`` checks them); ``label``: the
    report's name (default the key); ``family``: a key of argtca/config/methods.py FAMILIES
    (default: "online" for an online adapter, "training-free" for another, "tpt-family" for an
    objective); ``paper``: a row of the paper's Table 1 (built-ins only); ``override``: replace
    a registered method of that key on purpose. A problem is one :class:`PluginError` line."""
    def deco(cls):
        _declare(cls, key, label, family, defaults, paper, override)
        return cls
    return deco


def _declare(cls, key, label, family, defaults, paper, override) -> None:
    from argtca.adapters.base import Adapter
    from argtca.config.methods import FAMILIES, find_trainer
    from argtca.engine.objectives import Objective
    from argtca.registry import ADAPTER_REGISTRY, OBJECTIVE_REGISTRY, TRAINER_REGISTRY
    from argtca.trainers.base import TestTimeTrainer
    from argtca.trainers.zoo import FeatureTrainer, StreamTrainer

    where = f"method {key!r} ({cls.__module__}.{cls.__qualname__})"
    if not isinstance(key, str) or not _KEY.match(key):
        raise PluginError(f"{where}: the key must be lower-case letters, digits and _ starting "
                          f"with a letter (it names run folders and --methods rows)")
    if not inspect.isclass(cls) or not issubclass(cls, (Adapter, Objective)):
        raise PluginError(f"{where}: @method declares a subclass of argtca.adapters.Adapter "
                          f"(training-free or online) or argtca.engine.objectives.Objective "
                          f"(prompt tuning), not {cls!r}")
    online = issubclass(cls, Adapter) and bool(getattr(cls, "online", False))
    family = family or ("online" if online else "training-free" if issubclass(cls, Adapter)
                        else "tpt-family")
    if family not in FAMILIES:
        raise PluginError(f"{where}: family {family!r} is not one of {', '.join(FAMILIES)}")
    if issubclass(cls, Adapter) and family not in ("training-free", "online"):
        raise PluginError(f"{where}: an adapter is a training-free or online method, not "
                          f"family {family!r}")
    if defaults is not None and not isinstance(defaults, dict):
        raise PluginError(f"{where}: defaults must be a dict of the node's keys, got "
                          f"{type(defaults).__name__}")
    attrs: Dict[str, Any] = {
        "method": key, "label": str(label or key), "family": family, "paper": bool(paper),
        "defaults": dict(defaults or {}), "__module__": cls.__module__,
        "__doc__": cls.__doc__ or f"The method {key} ({cls.__qualname__})."}
    taken = find_trainer(key)
    if taken is not None and not override:
        raise PluginError(f"{where}: the method key {key!r} is taken by the trainer "
                          f"{taken.__module__}.{taken.__qualname__}; choose another key, or "
                          f"pass override=True to replace it on purpose")
    try:
        if issubclass(cls, Adapter):
            ADAPTER_REGISTRY.register(cls, name=key, override=override)
            base = StreamTrainer if online else FeatureTrainer
            attrs["adapter_name"] = key
        else:
            OBJECTIVE_REGISTRY.register(cls, name=key, override=override)
            base = TestTimeTrainer
            attrs["objective_name"] = key
            attrs["cfg_ranges"] = dict(getattr(cls, "cfg_ranges", None) or {})
        name = key.upper()
        attrs["__qualname__"] = name
        TRAINER_REGISTRY.register(type(name, (base,), attrs), override=override)
    except KeyError as e:   # the registry's "already registered by ..." line
        raise PluginError(f"{where}: {e.args[0] if e.args else e}") from None
