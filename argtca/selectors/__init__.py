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

import importlib
import inspect
import pkgutil
from typing import List

from argtca.registry import PLUGIN_PACKAGE, PluginError  # noqa: F401
from argtca.registry import load_entry_points as _load_entry_points
from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import SelectorError
from argtca.selectors.contract import TRAITS, Selector, check_selection

ENTRY_POINT_GROUP = "argtca.selectors"

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> List[str]:
    """Load every installed entry point of ``group`` (argtca/plugins.py, the one loader): a
    module is imported (its decorators register), a function is registered under the entry
    point's name unless it registered itself. Returns the entry points' names."""
    return _load_entry_points(group, SELECTOR_REGISTRY, "selector")


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
           "PLUGIN_PACKAGE", "Selector", "check_selection", "load_entry_points",
           "resolve_selector"]
