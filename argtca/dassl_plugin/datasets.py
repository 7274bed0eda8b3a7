"""Data under Dassl: argtca's trainers evaluate the Datum list (impath, label, classname) of the
split Dassl's DataManager built from ``DATASET.NAME`` (CoOp's own classes for CoOp's datasets),
and argtca's demo is a Dassl dataset with real train/val/test splits."""
from __future__ import annotations

import math
import os
from typing import Dict, List

from argtca.datasets.base import DataError, DatasetBase, Datum
from argtca.datasets.coop import prompt_name

from .config import fine_grained


class DasslTestSet(DatasetBase):
    """argtca's view of one split of a Dassl dataset (what argtca's trainers read)."""

    def __init__(self, test, classnames, root: str, name: str, key: str, fine: bool):
        super().__init__(test, classnames, root=root)
        self._name, self.key, self.fine_grained = name, key, fine

    @property
    def name(self) -> str:
        return self._name


def test_set_from_dassl(cfg, dataset) -> DasslTestSet:
    """The split ``TEST.SPLIT`` ("test" or "val") of a Dassl dataset, first ``DATASET.NUM_IMAGES``
    items (all if <= 0), with class names ordered by label (``_`` shown as a space, as argtca's
    readers and the attribute files spell them)."""
    from argtca.registry import DATASET_REGISTRY
    name = str(cfg.DATASET.NAME)
    split = str(cfg.TEST.SPLIT)
    items = list(dataset.val if split == "val" else dataset.test)
    if not items:
        raise DataError(f"{name}: Dassl's DataManager built an empty {split!r} split; choose "
                        f"another TEST.SPLIT")
    names: Dict[int, str] = {}
    for part in (dataset.train_x, dataset.val, dataset.test):
        for d in part or []:
            old = names.setdefault(int(d.label), d.classname)
            if old != d.classname:
                raise DataError(f"{name}: label {d.label} is named both {old!r} and "
                                f"{d.classname!r}; fix the split file")
    labels = sorted(names)
    if labels != list(range(len(labels))):
        raise DataError(f"{name}: labels are not 0..K-1 (found {labels[:10]}...); "
                        "fix the split file")
    classnames = [prompt_name(names[i]) for i in labels]
    n = int(cfg.DATASET.NUM_IMAGES)
    if n > 0:
        items = items[:n]
    test = [Datum(d.impath, int(d.label), classnames[int(d.label)]) for d in items]
    root = getattr(dataset, "argtca_root", "") or os.path.abspath(
        os.path.expanduser(str(cfg.DATASET.ROOT)))
    key = getattr(DATASET_REGISTRY.get(name), "key", "") if name in DATASET_REGISTRY else ""
    fine = fine_grained(name)
    return DasslTestSet(test, classnames, root, name, key or name.lower(), bool(fine))


def subsample_classes(train, val, test, subsample: str = "all"):
    """CoOp's base-to-new protocol: "base" keeps the first ceil(K/2) labels of ``train``, "new" the
    rest, each relabelled from 0; "all" keeps everything."""
    from dassl.data.datasets import Datum as DDatum
    subsample = str(subsample).lower()
    if subsample == "all":
        return train, val, test
    if subsample not in ("base", "new"):
        raise DataError(f"DATASET.SUBSAMPLE_CLASSES={subsample!r}: use all, base or new")
    labels = sorted({d.label for d in train})
    m = math.ceil(len(labels) / 2)
    keep = labels[:m] if subsample == "base" else labels[m:]
    relabel = {y: i for i, y in enumerate(keep)}
    return tuple([DDatum(impath=d.impath, label=relabel[d.label], classname=d.classname)
                  for d in part if d.label in relabel] for part in (train, val, test))


def make_demo_class():
    """argtca's demo as a Dassl dataset named ``Demo``: train (256), val (160) and test (320, the
    shifted domain) from its split file; ``DATASET.NUM_SHOTS`` >= 1 samples K train and min(K, 4)
    val images per class (Dassl's ``generate_fewshot_dataset``, as CoOp's datasets do);
    ``DATASET.SUBSAMPLE_CLASSES`` base/new follows CoOp."""
    from dassl.data.datasets import DatasetBase as DDatasetBase, Datum as DDatum

    from argtca.datasets.demo import Demo as ArgtcaDemo

    class Demo(DDatasetBase):
        dataset_dir = ArgtcaDemo.dataset_dir

        def __init__(self, cfg):
            parts: List[list] = []
            root = ""
            for split in ("train", "val", "test"):
                c = cfg.clone()
                c.defrost()
                c.DATASET.SPLIT, c.DATASET.NUM_IMAGES = split, -1
                ds = ArgtcaDemo(c)   # generates the images on first use; checks the split file
                root = ds.dataset_path
                parts.append([DDatum(impath=d.impath, label=d.label, classname=d.classname)
                              for d in ds.test])
            train, val, test = parts
            k = int(cfg.DATASET.NUM_SHOTS)
            if k >= 1:
                train = self.generate_fewshot_dataset(train, num_shots=k)
                val = self.generate_fewshot_dataset(val, num_shots=min(k, 4))
            train, val, test = subsample_classes(
                train, val, test, cfg.DATASET.get("SUBSAMPLE_CLASSES", "all"))
            self.argtca_root = root
            super().__init__(train_x=train, val=val, test=test)

    Demo.__module__ = __name__
    Demo.__qualname__ = "Demo"
    return Demo
