"""Datasets: CoOp's fine-grained sets (``coop``), SUN397 and the ImageNet family, one's own class
folders (``imagefolder``) and the demo set (``demo``). Test-time views live in
:mod:`argtca.views`."""
from __future__ import annotations

from ..registry import DATASET_REGISTRY
from .base import DataError, DatasetBase, Datum, read_json
from . import coop  # noqa: F401  (registers the CoOp datasets)
from . import imagenet, sun397  # noqa: F401  (registers SUN397 and ImageNet with its variants)
from . import imagefolder  # noqa: F401  (registers ImageFolder: your own class folders)
from .coop import COOP_DATASETS
from . import demo  # noqa: F401  (registers the demo dataset)

__all__ = ["DataError", "DatasetBase", "Datum", "read_json", "COOP_DATASETS",
           "resolve_dataset_class", "build_dataset"]


def resolve_dataset_class(name: str) -> type:
    """Registered class for a class name (``OxfordPets``) or a dataset key (``oxford_pets``),
    both case-insensitive. Unknown -> KeyError listing both spellings."""
    name = str(name or "").strip()
    if not name:
        raise KeyError("DATASET.NAME is empty: pass --dataset-config-file "
                       "configs/datasets/<name>.yaml or set DATASET.NAME; registered: "
                       + ", ".join(DATASET_REGISTRY.registered_names()))
    if name in DATASET_REGISTRY:
        return DATASET_REGISTRY.get(name)
    by_key = {}
    for reg in DATASET_REGISTRY.registered_names():
        cls = DATASET_REGISTRY.get(reg)
        key = getattr(cls, "key", "")
        if key:
            by_key[key.lower()] = cls
    if name.lower() in by_key:
        return by_key[name.lower()]
    classes = ", ".join(c.__name__ for c in map(DATASET_REGISTRY.get,
                                                 DATASET_REGISTRY.registered_names()))
    raise KeyError(f'dataset "{name}" is not registered; use a class name '
                   f'({classes}) '
                   f'or a key ({", ".join(sorted(by_key))})')


def build_dataset(cfg) -> DatasetBase:
    """``DATASET_REGISTRY.get(cfg.DATASET.NAME)(cfg)``; the name may also be a dataset key. With
    ``DATASET.OOD.NAME`` set: that dataset's images over these classes (:mod:`.ood`)."""
    dataset = resolve_dataset_class(cfg.DATASET.NAME)(cfg)
    if str(cfg.DATASET.get("OOD", {}).get("NAME", "") or "").strip():
        from .ood import ood_dataset
        return ood_dataset(cfg, dataset, resolve_dataset_class)
    return dataset
