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

The answer is checked before it is used (:func:`argtca.selectors.contract.check_selection`): every
class present, exactly M' nodes each, every node an index of a node of that class, chosen once,
finite scores; anything else stops the run with one line naming the selector and its file.

Traits, declared when registering: ``needs_graph=False`` for a selector that does not read ``emb``
(it is then called with ``emb=None`` and Phase 1 neither encodes the nodes nor trains the GAT;
default True) and ``repeats=True`` for one that may choose a node twice. A name already taken (a
built-in's, say) is an error unless the registration asks for it with ``override=True``; the run's
phase1.json and summary.json then name the module and file that provided it, and its fingerprint
holds ``PROVIDER.SELECTOR`` and that file's sha256 (argtca/trainers/providers.py): a resume under
another provider is refused, and its runs are another experiment.

Three ways to add a selector (README, "Selectors"):

* a file in this package: every module here is imported below (pkgutil);
* your own module, outside argtca: ``python -m argtca.run --plugin MODULE`` (repeatable; a module
  name importable from PYTHONPATH or a path to a ``.py`` file), imported before the run;
* an installed package: an entry point in the group ``argtca.selectors`` pointing at a module
  (imported) or at a selector function (registered under the entry point's name); all are loaded
  when this package is imported, i.e. whenever selectors are looked up.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
import types
from typing import Iterable, List

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import SelectorError
from argtca.selectors.contract import TRAITS, Selector, check_selection

ENTRY_POINT_GROUP = "argtca.selectors"
# plug-in files are imported as submodules of this package name, so a file called random.py or
# json.py registers its selectors without replacing the standard library's module of that name
PLUGIN_PACKAGE = "_argtca_plugins"


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
            registered = {id(SELECTOR_REGISTRY.get(n))
                          for n in SELECTOR_REGISTRY.registered_names()}
            if id(obj) not in registered:
                if ep.name in SELECTOR_REGISTRY:   # a taken name is replaced only on purpose
                    dist = getattr(getattr(ep, "dist", None), "name", "?")
                    raise PluginError(
                        f"selector entry point {ep.name} = {ep.value} (group {group}, package "
                        f"{dist}) takes the name of the registered selector {ep.name!r}; "
                        f"rename the entry point, or register the function in its module with "
                        f"@SELECTOR_REGISTRY.register(name={ep.name!r}, override=True) to replace "
                        f"it on purpose (runs then record the package as its provider)")
                SELECTOR_REGISTRY.register(obj, name=ep.name)
        names.append(ep.name)
    return names


def _plugin_module_name(path: str) -> str:
    """``_argtca_plugins.<file stem>``, with a hash of the path when another file of that stem
    was loaded already."""
    if PLUGIN_PACKAGE not in sys.modules:
        pkg = types.ModuleType(PLUGIN_PACKAGE, "selector plug-in files given by path")
        pkg.__path__ = []   # a package, so plug-ins are its submodules
        sys.modules[PLUGIN_PACKAGE] = pkg
    stem = "".join(ch if ch.isalnum() or ch == "_" else "_"
                   for ch in os.path.splitext(os.path.basename(path))[0])
    name = f"{PLUGIN_PACKAGE}.{stem}"
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) != path:
        name += "_" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:8]
    return name


def load_plugins(modules: Iterable[str]) -> None:
    """Import each user module (``--plugin``): a dotted module name importable from PYTHONPATH
    (the current folder included) or a path to a ``.py`` file (imported under
    ``_argtca_plugins.``, never under its bare file name). Importing it registers its
    selectors."""
    for name in modules or ():
        name = str(name).strip()
        try:
            if name.endswith(".py") or os.path.sep in name:
                path = os.path.abspath(os.path.expanduser(name))
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"no such file: {path}")
                mod_name = _plugin_module_name(path)
                if mod_name in sys.modules:
                    continue  # already imported (its selectors are registered)
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
        except (ImportError, FileNotFoundError) as e:
            raise PluginError(
                f"--plugin {name}: cannot import it ({type(e).__name__}: {e}); give a module "
                f"importable from PYTHONPATH (e.g. PYTHONPATH=/path/to/folder) or a path to a "
                f".py file") from e
        except Exception as e:  # noqa: BLE001 (user code: one clear line naming it)
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise PluginError(f"--plugin {name}: importing it failed: {type(e).__name__}: "
                              f"{msg}") from e


def resolve_selector(name: str) -> Selector:
    """The selector registered as ``name`` (case-insensitive; unknown: KeyError listing the
    registered names) with the traits it declared and the module and file that provide it: the
    one lookup of ``TRAINER.ARGTCA.SELECTOR`` a run makes."""
    fn = SELECTOR_REGISTRY.get(name)
    traits = SELECTOR_REGISTRY.traits(name)
    try:
        file = inspect.getsourcefile(fn) or ""
    except TypeError:
        file = ""
    module = str(getattr(fn, "__module__", "") or "")
    unknown = sorted(set(traits) - set(TRAITS))
    if unknown:
        raise SelectorError(f'selector "{name}" ({file or module}) registers unknown trait(s) '
                            f'{", ".join(unknown)}; a selector may declare '
                            f'{", ".join(sorted(TRAITS))}')
    t = {**TRAITS, **traits}
    return Selector(name=str(name).lower(), fn=fn, needs_graph=bool(t["needs_graph"]),
                    repeats=bool(t["repeats"]), module=module, file=file)


load_entry_points()

__all__ = ["SELECTOR_REGISTRY", "SelectorError", "PluginError", "ENTRY_POINT_GROUP",
           "PLUGIN_PACKAGE", "Selector", "check_selection", "load_entry_points", "load_plugins",
           "resolve_selector"]
