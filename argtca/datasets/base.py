"""Dataset records in Dassl's style: a ``Datum`` per image and a ``DatasetBase`` holding the
evaluation split, the class names (ordered by label) and the view policy of the dataset."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple


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
    # A dataset declares itself once, here and on its class: every list of datasets (the report's
    # column order, table1's and shift's defaults, the aliases a report reads in older folders)
    # is derived from the registry (argtca/datasets/catalogue.py)
    key: str = ""            # short name used in configs/output paths (e.g. "caltech101")
    aliases: Tuple[str, ...] = ()       # other spellings of the key ("pets", "flowers102")
    report_rank: int = 100              # the report's column order (CoOp's / C-TPT's Table 1)
    paper_column: Optional[int] = None  # its column in the ArgTCA paper's Table 1
    shift_column: Optional[int] = None  # its column in TPT's natural-shift table (I/A/V/R/K)
    extended: bool = False              # ``table1 --extended`` adds it (C-TPT's and TCA's sets)
    ablation: bool = False              # a default dataset of the ablation commands

    def __init__(self, test: Sequence[Datum], classnames: Sequence[str], root: str = ""):
        # every reader ends here: the file or folder that named the classes (``class_source``,
        # set by the reader where it is not the root) is named if there are fewer than two
        refuse_single_class(classnames, getattr(self, "class_source", "") or root or self.name)
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


def refuse_single_class(classnames: Sequence[str], source: str,
                        fix: str = "give every class of the task (two at least)") -> None:
    """Fewer than two classes: every image would get the only label, so accuracy is 100 and
    ECE 0 by construction, whatever the method; refused for every dataset reader (split files,
    class folders, the Dassl bridge), naming ``source``."""
    if len(classnames) >= 2:
        return
    what = f"a single class ({classnames[0]!r})" if classnames else "no class"
    raise DataError(f"{source} holds {what}: every image would get the only label, so accuracy "
                    f"is 100 and ECE 0 by construction; {fix}")


def read_json(path: str):
    if not os.path.isfile(path):
        raise DataError(f"file not found: {path}")
    from ..utils.hashing import read_input
    try:
        # read once and noted: the run checks the bytes it used against its fingerprint
        return json.loads(read_input(path, log=True).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not valid JSON ({e}); re-download or fix the file") from e
