"""Every list of datasets, derived from what the registered dataset classes declare (their
``key``, ``aliases``, ``report_rank``, ``paper_column``, ``shift_column``, ``extended`` and
``ablation``: argtca/datasets/base.py). Adding a dataset is its class; no list names it."""
from __future__ import annotations

import re
from typing import List, Optional

from ..registry import DATASET_REGISTRY

__all__ = ["dataset_classes", "canon", "display_name", "report_rank", "table1_datasets",
           "shift_datasets", "ablation_datasets"]


def _plain(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(s).lower())


def dataset_classes() -> list:
    """The registered dataset classes that have a key, in registration order."""
    from . import coop  # noqa: F401  (registration of the built-in datasets)
    return [c for c in DATASET_REGISTRY.registered_objects() if getattr(c, "key", "")]


def _find(name: str) -> Optional[type]:
    k = _plain(name)
    for cls in dataset_classes():
        if k in {_plain(cls.key), _plain(cls.__name__), *map(_plain, cls.aliases)}:
            return cls
    return None


def canon(name: str) -> str:
    """The configs/datasets key of a dataset however it is spelled (its key, class name or an
    alias, any case and punctuation: ``OxfordPets``, ``oxfordpets``, ``pets`` ->
    ``oxford_pets``); a name no dataset declares, lower-cased."""
    cls = _find(name)
    return cls.key if cls is not None else str(name).lower()


def display_name(name: str) -> str:
    """The name tables show (the registered class name: ``OxfordPets``)."""
    cls = _find(name)
    return cls.__name__ if cls is not None else str(name)


def report_rank(name: str) -> int:
    """Its place in the report's column order; undeclared datasets after the declared."""
    cls = _find(name)
    return int(cls.report_rank) if cls is not None else 1000


def _ordered(attr: str) -> List[str]:
    found = [c for c in dataset_classes() if getattr(c, attr) is not None]
    return [c.key for c in sorted(found, key=lambda c: getattr(c, attr))]


def table1_datasets(extended: bool = False) -> List[str]:
    """The ArgTCA paper's Table 1 datasets in its column order; ``extended``: then the sets
    C-TPT's and TCA's tables add (ImageNet, SUN397)."""
    extra = [c.key for c in sorted(dataset_classes(), key=lambda c: c.report_rank)
             if c.extended] if extended else []
    return _ordered("paper_column") + extra


def shift_datasets() -> List[str]:
    """TPT's natural-shift table in its column order (ImageNet, -A, -V2, -R, -Sketch)."""
    return _ordered("shift_column")


def ablation_datasets() -> List[str]:
    return [c.key for c in sorted(dataset_classes(), key=lambda c: c.report_rank) if c.ablation]
