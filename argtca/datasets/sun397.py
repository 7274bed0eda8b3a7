"""SUN397 in CoOp's layout: ``sun397/SUN397/<letter>/<scene>/...jpg`` and CoOp's
``sun397/split_zhou_SUN397.json`` (fetched into argtca's cache when the data root lacks it)."""
from __future__ import annotations

from ..registry import DATASET_REGISTRY
from .coop import JsonSplitDataset

__all__ = ["SUN397"]


@DATASET_REGISTRY.register()
class SUN397(JsonSplitDataset):
    key = "sun397"
    aliases = ("sun",)
    report_rank, extended = 7, True
    dataset_dir = "sun397"
    image_dir = "SUN397"
    split_file = "split_zhou_SUN397.json"

    def split_missing_hint(self) -> str:
        return (super().split_missing_hint() + " (this file is over 4 MiB, so copies of CoOp's "
                "splits in other repositories, e.g. TCA's data_splits, lack it; Google Drive "
                "id 1y2RD81BYuiyvebdN-JymPfyWYcd8_MUq)")
