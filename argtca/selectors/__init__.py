"""Attribute selectors: plug-ins of ``SELECTOR_REGISTRY``.

A selector is ONE function in its own module of this package, registered with
``@SELECTOR_REGISTRY.register(name="...")``::

    fn(emb: Tensor[N, D], node_class: LongTensor[N], attrs: List[str], m_prime: int,
       seed: int = 42, **kw) -> Dict[int, List[Tuple[int, float]]]

returning, for every class index, M' (node index, score) pairs (nodes in the order chosen).
Ties are broken deterministically towards the lowest node index. Every module of this package is
imported below (pkgutil), so adding a selector is adding one file with one decorator.
"""
from __future__ import annotations

import importlib
import pkgutil

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import SelectorError

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")

__all__ = ["SELECTOR_REGISTRY", "SelectorError"]
