"""Attribute selectors: plug-ins of ``SELECTOR_REGISTRY``.

A selector is ONE function in its own module of this package, registered with
``@SELECTOR_REGISTRY.register(name="...")``::

    fn(emb: Tensor[N, D], node_class: LongTensor[N], attrs: List[str], m_prime: int,
       seed: int = 42, **kw) -> Dict[int, List[Tuple[int, float]]]

returning, for every class index, M' (node index, score) pairs (nodes in the order chosen); an
entry may carry a third element, the attribute text to put in the prompt when it differs from the
node's (``tca`` uses it to keep TCA's repeats and spelling). Keyword arguments a selector may use:
``weight`` (JOINT_WEIGHT) and ``raw`` (per class index, the attribute list as the file gives it).
Ties are broken deterministically towards the lowest node index.

Three ways to add a selector (README, "Selectors"):

* a file in this package: every module here is imported below (pkgutil);
* your own module, outside argtca: ``python -m argtca.run --plugin MODULE`` (repeatable; a module
  name importable from PYTHONPATH or a path to a ``.py`` file), imported before the run;
* an installed package: an entry point in the group ``argtca.selectors`` pointing at a module
  (imported) or at a selector function (registered under the entry point's name); all are loaded
  when this package is imported, i.e. whenever selectors are looked up.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
from typing import Iterable, List

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import SelectorError

ENTRY_POINT_GROUP = "argtca.selectors"


class PluginError(RuntimeError):
    """A selector plug-in that cannot be loaded: the message names it and the fix."""


for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> List[str]:
    """Load every installed entry point of ``group``: a module is imported (its decorators
    register), a function is registered under the entry point's name unless it registered
    itself. Returns the entry points' names."""
    from importlib.metadata import entry_points
    try:
        eps = entry_points(group=group)
    except TypeError:  # Python < 3.10
        eps = entry_points().get(group, [])
    names = []
    for ep in eps:
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 (any failure of third-party code: one clear line)
            dist = getattr(getattr(ep, "dist", None), "name", "?")
            raise PluginError(
                f"selector entry point {ep.name} = {ep.value} (group {group}, package {dist}) "
                f"failed to load ({type(e).__name__}: {e}); fix or uninstall that package") from e
        if callable(obj) and not inspect.ismodule(obj) and not inspect.isclass(obj):
            registered = {id(SELECTOR_REGISTRY.get(n)) for n in SELECTOR_REGISTRY.registered_names()}
            if id(obj) not in registered:
                SELECTOR_REGISTRY.register(obj, name=ep.name)
        names.append(ep.name)
    return names


def load_plugins(modules: Iterable[str]) -> None:
    """Import each user module (``--plugin``): a dotted module name importable from PYTHONPATH
    (the current folder included) or a path to a ``.py`` file. Importing it registers its
    selectors."""
    for name in modules or ():
        name = str(name).strip()
        try:
            if name.endswith(".py") or os.path.sep in name:
                path = os.path.abspath(os.path.expanduser(name))
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"no such file: {path}")
                mod_name = os.path.splitext(os.path.basename(path))[0]
                loaded = sys.modules.get(mod_name)
                if loaded is not None and getattr(loaded, "__file__", None) == path:
                    continue  # already imported (its selectors are registered)
                spec = importlib.util.spec_from_file_location(mod_name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[mod_name] = module
                spec.loader.exec_module(module)
            else:
                if os.getcwd() not in sys.path and "" not in sys.path:
                    sys.path.insert(0, os.getcwd())
                importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 (user code: one clear line naming it)
            raise PluginError(
                f"--plugin {name}: cannot import it ({type(e).__name__}: {e}); give a module "
                f"importable from PYTHONPATH (e.g. PYTHONPATH=/path/to/folder) or a path to a "
                f".py file") from e


load_entry_points()

__all__ = ["SELECTOR_REGISTRY", "SelectorError", "PluginError", "ENTRY_POINT_GROUP",
           "load_entry_points", "load_plugins"]
