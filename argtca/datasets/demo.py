"""The offline ``demo`` dataset: 16 procedurally drawn object classes (see argtca/demo/).

It ignores ``DATASET.ROOT``: on first use the images are generated (about 5 s, deterministic
from a fixed seed) into ``$ARGTCA_CACHE/demo-<generator version>-<seed>`` (default
``~/.cache/argtca``), in CoOp's layout (``images/`` + ``split_zhou_Demo.json``), and read back
through the same split-file parser as the CoOp datasets.  ``test`` is the shifted domain (320
images), ``val`` (160) and ``train`` (256) are the training domain.  Every split is ordered
image-index-major, so ``DATASET.NUM_IMAGES=N`` keeps a class-balanced prefix.

``fine_grained = True``: like the CoOp fine-grained sets, TPT's AugMix views are used
(``TTA.AUGMIX auto``).  The classes are told apart by colour, shape and small parts, as in the
fine-grained benchmarks the TCA/C-TPT scripts use, and the demo CLIP was trained with crops,
rotations and colour jitter so the AugMix views stay in its training distribution.
"""
from __future__ import annotations

import os

from ..demo.generator import (DEFAULT_SEED, GENERATOR_VERSION, IMAGE_DIR, SPLIT_FILE,
                              ensure_dataset)
from ..demo.render import CLASSNAMES
from ..registry import DATASET_REGISTRY
from .base import DataError, DatasetBase, Datum
from .coop import SPLITS, check_images_exist, parse_split_json
from .images import check_images


@DATASET_REGISTRY.register()
class Demo(DatasetBase):
    key = "demo"
    report_rank = 99
    dataset_dir = f"demo-{GENERATOR_VERSION}"
    fine_grained = True
    seed = DEFAULT_SEED

    def __init__(self, cfg):
        split = str(cfg.DATASET.SPLIT)
        if split not in SPLITS:
            raise DataError(f"DATASET.SPLIT={split!r} is not a split of the demo dataset; use one "
                            f"of {', '.join(SPLITS)}")
        root = ensure_dataset(self.seed)
        self.split = split
        self.dataset_path = str(root)
        self.image_path = os.path.join(self.dataset_path, IMAGE_DIR)
        self.split_path = os.path.join(self.dataset_path, SPLIT_FILE)   # in the run fingerprint
        items, classnames = parse_split_json(self.split_path, self.image_path, split)
        if list(classnames) != list(CLASSNAMES):
            raise DataError(f"{self.dataset_path}/{SPLIT_FILE} names classes {classnames[:4]}..., "
                            f"not the generator's {list(CLASSNAMES[:4])}...: the cache folder is "
                            f"stale or edited; delete {self.dataset_path} to regenerate it")
        self.raw_classnames = list(classnames)
        n = int(cfg.DATASET.NUM_IMAGES)
        if n > 0:
            items = items[:n]
        what = f"Demo split {split!r} (delete {self.dataset_path} to regenerate it)"
        check_images_exist(items, what)
        check_images(items, what, cfg.DATASET.get("CHECK_IMAGES", "header"))
        super().__init__([Datum(d.impath, d.label, d.classname) for d in items], classnames,
                         root=self.dataset_path)
