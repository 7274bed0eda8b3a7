"""ImageNet and its natural-distribution-shift test sets (TPT's I / A / V / R / K).

Layouts (the first one found under ``DATASET.ROOT`` is used; CoOp's DATASETS.md first, then TPT's
README, which puts the image folders straight under the root):

=============== ============================================ ============================ =========
class (key)     CoOp layout                                  TPT layout                   classes
=============== ============================================ ============================ =========
ImageNet        ``imagenet/images/val/<wnid>/``              ``ImageNet/val/<wnid>/``     1000
ImageNetA       ``imagenet-adversarial/imagenet-a/<wnid>/``  ``imagenet-a/<wnid>/``       200
ImageNetR       ``imagenet-rendition/imagenet-r/<wnid>/``    ``imagenet-r/<wnid>/``       200
ImageNetSketch  ``imagenet-sketch/images/<wnid>/``           ``ImageNet-Sketch/<wnid>/``  1000
ImageNetV2      ``imagenetv2/imagenetv2-matched-frequency-   ``imagenetv2-matched-        1000
                format-val/<0..999>/``                       frequency-format-val/``
=============== ============================================ ============================ =========

Class names are CLIP's ImageNet names from CoOp's ``classnames.txt`` (``<wnid> <name>`` per line,
in ImageNet's label order), looked up in the dataset folder, then in ``<root>/imagenet/``, then in
argtca's download cache (fetched on first use, see :mod:`argtca.fetch`).

ImageNet-A and -R cover 200 of the 1000 classes. The dataset exposes exactly those 200 classes
(names in ImageNet order, labels 0..199), so every method builds prompts for those classes only and
a prediction outside the subset cannot happen — the same as TPT's ``imagenet_a_mask`` /
``imagenet_r_mask`` applied to the 1000-way output (TPT issue #15 is a user who compared without
it). A tree with another number of class folders is an error, never a silently different task.

The test split is the whole set (ImageNet: its validation images, as CoOp and TPT evaluate).
Images are ordered image-index-major (the first image of every class, then the second, ...), so
``DATASET.NUM_IMAGES=N`` keeps a class-balanced prefix. AugMix is off (``fine_grained = False``),
as in TPT for these sets. Nothing is ever written into the data root.
"""
from __future__ import annotations

import os
import re
from collections import OrderedDict
from typing import List, Optional, Sequence, Tuple

from ..registry import DATASET_REGISTRY
from .base import DataError, DatasetBase, Datum
from .coop import resolve_root

__all__ = ["ImageNetFolderDataset", "ImageNet", "ImageNetA", "ImageNetR", "ImageNetSketch",
           "ImageNetV2", "IMAGENET_DATASETS", "read_classnames", "find_classnames"]

COOP_DATASETS_MD = "https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md#imagenet"
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff")
_WNID = re.compile(r"^n\d{8}$")
_DOCTOR = "check the layout with: python -m argtca.data check {key} --root {root}"


def read_classnames(path: str) -> "OrderedDict[str, str]":
    """CoOp's ``classnames.txt`` → ``{wnid: class name}`` in file (= label) order."""
    out: "OrderedDict[str, str]" = OrderedDict()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            wnid, _, name = line.partition(" ")
            if not _WNID.match(wnid) or not name.strip():
                raise DataError(f"{path} line {lineno}: {line[:60]!r} "
                                "is not '<wnid> <class name>'; "
                                f"re-download classnames.txt ({COOP_DATASETS_MD})")
            if wnid in out:
                raise DataError(f"{path} line {lineno}: {wnid} is listed twice; re-download it")
            out[wnid] = name.strip()
    if len(out) != 1000:
        raise DataError(f"{path} lists {len(out)} classes, not ImageNet's 1000; re-download "
                        f"classnames.txt ({COOP_DATASETS_MD})")
    return out


def find_classnames(root: str, dataset_path: str) -> str:
    """``classnames.txt`` of the dataset folder, else of ``<root>/imagenet``, else argtca's cached
    (fetched) copy."""
    for p in (os.path.join(dataset_path, "classnames.txt"),
              os.path.join(root, "imagenet", "classnames.txt")):
        if os.path.isfile(p):
            return p
    from ..fetch import FetchError, fetch
    try:
        return str(fetch("classnames.txt"))
    except FetchError as e:
        raise DataError(f"classnames.txt not found in {dataset_path} or "
                        f"{os.path.join(root, 'imagenet')}, and {e} (CoOp's DATASETS.md: "
                        f"{COOP_DATASETS_MD})") from e


def _subdirs(path: str) -> List[str]:
    return sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))


def _images(path: str) -> List[str]:
    return sorted(e.name for e in os.scandir(path)
                  if e.is_file() and not e.name.startswith(".")
                  and e.name.lower().endswith(IMAGE_EXTS))


class ImageNetFolderDataset(DatasetBase):
    """One folder per class under an image folder; subclasses set the layouts and class set."""

    fine_grained = False
    layouts: Tuple[Tuple[str, str], ...] = ()   # (dataset folder, image folder), CoOp's first
    expected_classes = 1000
    folder_names = "wnid"                       # "wnid" or "index" (ImageNetV2: 0..999)

    @classmethod
    def find_layout(cls, root: str) -> Optional[Tuple[str, str]]:
        """(dataset path, image path) of the first layout present under ``root``, else None."""
        for ddir, idir in cls.layouts:
            img = os.path.join(root, ddir, idir)
            if os.path.isdir(img):
                return os.path.join(root, ddir), img
        return None

    @classmethod
    def expected_paths(cls, root: str) -> List[str]:
        return [os.path.join(root, d, i).rstrip("/") + "/" for d, i in cls.layouts]

    def __init__(self, cfg, check_files: bool = True):
        root = resolve_root(cfg.DATASET.ROOT)
        split = str(cfg.DATASET.SPLIT)
        if split not in ("test", "val"):
            raise DataError(f"DATASET.SPLIT={split!r}: {type(self).__name__} is a test set (for "
                            f"ImageNet, its validation images); use DATASET.SPLIT test")
        self.split = "test"
        found = self.find_layout(root)
        if found is None:
            raise DataError(f"{type(self).__name__}: none of "
                            f"{', '.join(self.expected_paths(root))} "
                            f"exists under DATASET.ROOT={root}; lay the images out as CoOp's "
                            f"DATASETS.md ({COOP_DATASETS_MD}) or TPT's README describe "
                            f"({_DOCTOR.format(key=self.key, root=root)})")
        self.dataset_path, self.image_path = found
        self.class_source = self.image_path
        wnid_names = read_classnames(find_classnames(root, self.dataset_path))
        folders, classnames = self.class_folders(wnid_names)
        self.raw_classnames = list(classnames)
        items = self.read_items(folders, classnames)
        n = int(cfg.DATASET.NUM_IMAGES)
        if n > 0:
            items = items[:n]
        if check_files:  # the same load-time check as the CoOp sets (DATASET.CHECK_IMAGES)
            from .images import check_images
            check_images(items, f"{type(self).__name__} test",
                         cfg.DATASET.get("CHECK_IMAGES", "header"))
        super().__init__(items, classnames, root=root)

    def class_folders(self, wnid_names: "OrderedDict[str, str]") -> Tuple[List[str], List[str]]:
        """Class folders in label order and their names; DataError for a tree that is not this
        dataset's (unknown folders, wrong number of classes)."""
        present = _subdirs(self.image_path)
        wnids = list(wnid_names)
        if self.folder_names == "index":
            want = [str(i) for i in range(len(wnids))]
            unknown = sorted(set(present) - set(want), key=str)
            order = [f for f in want if f in set(present)]
            names = [wnid_names[wnids[int(f)]] for f in order]
            what = "folders named 0..999"
        else:
            unknown = [f for f in present if f not in wnid_names]
            order = [w for w in wnids if w in set(present)]   # ImageNet's label order
            names = [wnid_names[w] for w in order]
            what = "WordNet-id folders (n01440764, ...)"
        if unknown:
            raise DataError(f"{self.image_path}: {len(unknown)} folders are not {what} of "
                            f"ImageNet, e.g. {unknown[:3]}; this is not {type(self).__name__}'s "
                            f"image folder ({COOP_DATASETS_MD})")
        if len(order) != self.expected_classes:
            raise DataError(f"{self.image_path} holds {len(order)} class folders, "
                            f"{type(self).__name__} has {self.expected_classes}; the copy is "
                            f"incomplete or another dataset: re-extract it ({COOP_DATASETS_MD})")
        return order, names

    def read_items(self, folders: Sequence[str], classnames: Sequence[str]) -> List[Datum]:
        per_class: List[List[Datum]] = []
        empty = []
        for label, (folder, name) in enumerate(zip(folders, classnames)):
            d = os.path.join(self.image_path, folder)
            files = _images(d)
            if not files:
                empty.append(folder)
            per_class.append([Datum(os.path.join(d, f), label, name) for f in files])
        if empty:
            raise DataError(f"{self.image_path}: {len(empty)} class folders hold no images, e.g. "
                            f"{empty[:3]}; re-extract the dataset ({COOP_DATASETS_MD})")
        items: List[Datum] = []
        for i in range(max(len(c) for c in per_class)):   # image-index-major: balanced prefixes
            items.extend(c[i] for c in per_class if i < len(c))
        return items


@DATASET_REGISTRY.register()
class ImageNet(ImageNetFolderDataset):
    key = "imagenet"
    report_rank, shift_column, extended = 0, 0, True
    dataset_dir = "imagenet"
    layouts = (("imagenet", "images/val"), ("ImageNet", "val"))


@DATASET_REGISTRY.register()
class ImageNetA(ImageNetFolderDataset):
    key = "imagenet_a"
    report_rank, shift_column = 13, 1
    dataset_dir = "imagenet-adversarial"
    layouts = (("imagenet-adversarial", "imagenet-a"), ("imagenet-a", ""))
    expected_classes = 200


@DATASET_REGISTRY.register()
class ImageNetR(ImageNetFolderDataset):
    key = "imagenet_r"
    report_rank, shift_column = 14, 3
    dataset_dir = "imagenet-rendition"
    layouts = (("imagenet-rendition", "imagenet-r"), ("imagenet-r", ""))
    expected_classes = 200


@DATASET_REGISTRY.register()
class ImageNetSketch(ImageNetFolderDataset):
    key = "imagenet_sketch"
    aliases = ("sketch",)
    report_rank, shift_column = 12, 4
    dataset_dir = "imagenet-sketch"
    # CoOp's DATASETS.md; the published archive unpacks to sketch/; TPT's ImageNet-Sketch/
    layouts = (("imagenet-sketch", "images"), ("imagenet-sketch", "sketch"),
               ("ImageNet-Sketch", "images"), ("ImageNet-Sketch", "sketch"),
               ("ImageNet-Sketch", ""))


@DATASET_REGISTRY.register()
class ImageNetV2(ImageNetFolderDataset):
    key = "imagenetv2"
    aliases = ("imagenet_v2",)
    report_rank, shift_column = 11, 2
    dataset_dir = "imagenetv2"
    layouts = (("imagenetv2", "imagenetv2-matched-frequency-format-val"),
               ("imagenetv2-matched-frequency-format-val", ""))
    folder_names = "index"


IMAGENET_DATASETS: Tuple[type, ...] = (ImageNet, ImageNetA, ImageNetR, ImageNetSketch, ImageNetV2)
