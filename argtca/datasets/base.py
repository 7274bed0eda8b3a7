"""Dataset records in Dassl's style: a ``Datum`` per image and a ``DatasetBase`` holding the
evaluation split, the class names (ordered by label) and the view policy of the dataset."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Sequence


class DataError(ValueError):
    """Bad dataset input: the message names the file, the value and the fix."""


@dataclass(frozen=True)
class Datum:
    impath: str
    label: int
    classname: str


class DatasetBase:
    """A test-time-adaptation dataset: ``test`` (list of Datum), ``classnames`` by label.

    Subclasses set ``dataset_dir`` (CoOp folder name), ``fine_grained`` (TPT turns AugMix on for
    the fine-grained sets) and implement ``read_data(root, split) -> (items, classnames)``.
    """

    dataset_dir: str = ""
    fine_grained: bool = True
    key: str = ""            # short name used in configs/output paths (e.g. "caltech101")

    def __init__(self, test: Sequence[Datum], classnames: Sequence[str], root: str = ""):
        self.test: List[Datum] = list(test)
        self.classnames: List[str] = list(classnames)
        self.root = root

    @property
    def num_classes(self) -> int:
        return len(self.classnames)

    @property
    def lab2cname(self) -> Dict[int, str]:
        return {i: c for i, c in enumerate(self.classnames)}

    @property
    def name(self) -> str:
        return type(self).__name__


def read_json(path: str):
    if not os.path.isfile(path):
        raise DataError(f"file not found: {path}")
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path} is not valid JSON ({e}); re-download or fix the file") from e
