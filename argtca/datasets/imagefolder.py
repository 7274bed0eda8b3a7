"""``DATASET.NAME ImageFolder``: your own images, one sub-folder per class under ``DATASET.ROOT``.

Layout (the same as torchvision's ``ImageFolder``)::

    DATASET.ROOT/
        golden_retriever/  img001.jpg  img002.png  more/img003.jpg ...
        tabby_cat/         ...

* Classes: the sub-folders of the root (hidden ones skipped), sorted by name; the class name is the
  folder name with ``_`` read as a space (``golden_retriever`` -> "golden retriever"), the form
  TCA's attribute files and CoOp's prompts use. ``DATASET.IMAGEFOLDER.CLASSNAMES`` names a file
  that gives the names instead: ``<folder> <class name>`` per line, or a JSON object
  ``{folder: name}``; its order is the label order, and it must name every class folder.
* Images: the files under a class folder (its sub-folders too, as torchvision reads them) whose
  extension is an image extension (:data:`IMAGE_EXTS`), sorted by relative path. Other files
  (``README.txt``, ``.DS_Store``, ``Thumbs.db``) are skipped, counted and named in one warning;
  files at the root itself are ignored (a class-name or split file may live there). A file with an
  image extension that does not open is an error at load time (``DATASET.CHECK_IMAGES``), as for
  the CoOp sets; an empty class folder is an error too (its class could never be predicted right).
* Order: image-index-major (the first image of every class, then the second, ...), so
  ``DATASET.NUM_IMAGES=N`` keeps a class-balanced prefix, as for the demo and ImageNet sets.
* Split: without ``DATASET.IMAGEFOLDER.SPLIT_FILE`` every image is a test image (``DATASET.SPLIT
  test``). With it, the file is read as CoOp's ``split_zhou_*.json`` (``{"train"|"val"|"test":
  [[relative path, label, class name], ...]}``, paths relative to the root; class names from the
  file) and ``DATASET.SPLIT`` picks the split, in the file's order.

AugMix: ``fine_grained = True`` (``TTA.AUGMIX auto`` turns TPT's AugMix views on, as for CoOp's
fine-grained sets and the demo); set ``TTA.AUGMIX off`` for ImageNet-like data. Nothing is ever
written into the root.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Dict, List, Optional, Tuple

from ..registry import DATASET_REGISTRY
from .base import DataError, DatasetBase, Datum
from .coop import check_images_exist, parse_split_json, prompt_name, resolve_root
from .imagenet import IMAGE_EXTS
from .images import check_images

__all__ = ["ImageFolder", "read_class_name_file", "scan_class_folders"]

_LOG = logging.getLogger(__name__)
_KEYS = "DATASET.IMAGEFOLDER"


def _walk_images(folder: str) -> Tuple[List[str], List[str]]:
    """(image paths, other files) under ``folder``, recursively, hidden entries skipped, sorted by
    path relative to ``folder``; symbolic links to folders are followed (as torchvision does)."""
    images, others = [], []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in filenames:
            p = os.path.join(dirpath, f)
            if f.startswith("."):
                others.append(p)
            elif f.lower().endswith(IMAGE_EXTS):
                images.append(p)
            else:
                others.append(p)
    key = lambda p: os.path.relpath(p, folder)  # noqa: E731
    return sorted(images, key=key), sorted(others, key=key)


def scan_class_folders(root: str) -> List[str]:
    """Class folder names under ``root`` (directories or links to them, not hidden), sorted."""
    try:
        entries = list(os.scandir(root))
    except OSError as e:
        raise DataError(f"cannot list the image folder {root} ({e}); check DATASET.ROOT") from e
    return sorted(e.name for e in entries if not e.name.startswith(".")
                  and os.path.isdir(os.path.join(root, e.name)))


def read_class_name_file(path: str) -> "Dict[str, str]":
    """``{folder: class name}`` in file order from ``<folder> <class name>`` lines or a JSON
    object; DataError naming the file and line for anything else."""
    if not os.path.isfile(path):
        raise DataError(f"{_KEYS}.CLASSNAMES={path!r}: file not found; give a file with one "
                        f"'<folder> <class name>' line per class folder, or leave it empty to "
                        f"name classes after their folders")
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path} is not valid JSON ({e}); fix the class-name file") from e
        for k, v in data.items():
            if not isinstance(v, str) or not v.strip():
                raise DataError(f"{path}: class name of folder {k!r} is {v!r}; every value must "
                                f"be a non-empty string")
            out[str(k)] = " ".join(v.split())
        return out
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        folder, _, name = line.partition(" ")
        if not name.strip():
            raise DataError(f"{path} line {lineno}: {line[:60]!r} is not '<folder> <class name>'; "
                            f"fix the class-name file")
        if folder in out:
            raise DataError(f"{path} line {lineno}: folder {folder!r} is listed twice; keep one "
                            f"line per class folder")
        out[folder] = " ".join(name.split())
    if not out:
        raise DataError(f"{path} names no class; give one '<folder> <class name>' line per class "
                        f"folder")
    return out


def _resolve(path: str, root: str) -> str:
    path = os.path.expanduser(str(path).strip())
    return path if os.path.isabs(path) else os.path.join(root, path)


@DATASET_REGISTRY.register()
class ImageFolder(DatasetBase):
    """Images in one sub-folder per class under ``DATASET.ROOT`` (see the module docstring)."""

    key = "imagefolder"
    dataset_dir = ""            # the root itself is the dataset folder
    fine_grained = True
    root_is_dataset = True      # the data doctor checks it only when named

    def __init__(self, cfg, check_files: bool = True):
        root = resolve_root(cfg.DATASET.ROOT)
        split = str(cfg.DATASET.SPLIT)
        self.split = split
        self.dataset_path = self.image_path = root
        node = cfg.DATASET.get("IMAGEFOLDER", None)
        names_file = str(node.get("CLASSNAMES", "") if node is not None else "").strip()
        split_file = str(node.get("SPLIT_FILE", "") if node is not None else "").strip()
        self.skipped: List[str] = []
        if split_file:
            if names_file:
                raise DataError(f"{_KEYS}.SPLIT_FILE and {_KEYS}.CLASSNAMES are both set: a CoOp "
                                f"split file names its classes itself; leave "
                                f"{_KEYS}.CLASSNAMES empty")
            path = _resolve(split_file, root)
            if not os.path.isfile(path):
                raise DataError(f"{_KEYS}.SPLIT_FILE={split_file!r}: {path} not found; give a "
                                f"split file in CoOp's format or leave the key empty (every "
                                f"image is then a test image)")
            items, raw = parse_split_json(path, root, split)
            classnames = [prompt_name(c) for c in raw]
            self._unique(classnames, path)
            items = [Datum(d.impath, d.label, classnames[d.label]) for d in items]
            what = f"ImageFolder split {split!r} of {path}"
        else:
            if split != "test":
                raise DataError(f"DATASET.SPLIT={split!r}: without {_KEYS}.SPLIT_FILE every image "
                                f"of {root} is a test image; use DATASET.SPLIT test or give a "
                                f"split file in CoOp's format")
            items, raw, classnames = self._scan(root, names_file)
            what = f"ImageFolder {root}"
        self.raw_classnames = list(raw)
        n = int(cfg.DATASET.NUM_IMAGES)
        if n > 0:
            items = items[:n]
        if check_files:
            check_images_exist(items, what)
            check_images(items, what, cfg.DATASET.get("CHECK_IMAGES", "header"))
        super().__init__(items, classnames, root=root)

    @staticmethod
    def _unique(classnames: List[str], source: str) -> None:
        if len(set(classnames)) != len(classnames):
            dup = sorted({c for c in classnames if classnames.count(c) > 1})
            raise DataError(f"{source}: class names {dup[:5]} are given to more than one class "
                            f"('_' is read as a space); rename the folders or fix the names")

    def _scan(self, root: str, names_file: str) -> Tuple[List[Datum], List[str], List[str]]:
        folders = scan_class_folders(root)
        if not folders:
            raise DataError(f"{root} (DATASET.ROOT) holds no class folders; put the images of "
                            f"each class in its own sub-folder (<root>/<class_name>/*.jpg)")
        if names_file:
            path = _resolve(names_file, root)
            named = read_class_name_file(path)
            unnamed = [f for f in folders if f not in named]
            absent = [f for f in named if f not in set(folders)]
            if unnamed or absent:
                parts = []
                if unnamed:
                    parts.append(f"folders without a name: {unnamed[:5]}")
                if absent:
                    parts.append(f"named folders that do not exist: {absent[:5]}")
                raise DataError(f"{path} does not match the class folders of {root} "
                                f"({'; '.join(parts)}); give exactly one line per class folder")
            folders = list(named)             # the file's order is the label order
            classnames = [named[f] for f in folders]
            source = path
        else:
            classnames = [" ".join(prompt_name(f).split()) for f in folders]  # "a__b" -> "a b"
            source = root
        if any(not c for c in classnames):
            raise DataError(f"{source}: a class folder name is empty once '_' is read as a space "
                            f"({folders[classnames.index('')]!r}); rename it")
        self._unique(classnames, source)
        per_class: List[List[Datum]] = []
        empty, skipped = [], []
        for label, (folder, name) in enumerate(zip(folders, classnames)):
            images, others = _walk_images(os.path.join(root, folder))
            skipped += others
            if not images:
                empty.append(folder)
            per_class.append([Datum(p, label, name) for p in images])
        if empty:
            raise DataError(f"{root}: {len(empty)} of {len(folders)} class folders hold no image "
                            f"files ({', '.join(IMAGE_EXTS)}): {empty[:5]}; add images or remove "
                            f"these folders")
        self.skipped = skipped
        if skipped:
            shown = ", ".join(os.path.relpath(p, root) for p in skipped[:3])
            _LOG.warning("ImageFolder %s: %d files are not images by their extension and are "
                         "skipped (e.g. %s)", root, len(skipped), shown)
        items: List[Datum] = []
        for i in range(max(len(c) for c in per_class)):   # image-index-major: balanced prefixes
            items.extend(c[i] for c in per_class if i < len(c))
        return items, folders, classnames

    @classmethod
    def find_layout(cls, root: str) -> Optional[Tuple[str, str]]:
        """(dataset path, image path) for the data doctor: the root when it has class folders."""
        return (root, root) if os.path.isdir(root) and scan_class_folders(root) else None
