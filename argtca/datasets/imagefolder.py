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
* Symbolic links are followed only to files and folders inside the root (its real path), and not
  into another class's folder; a link back to a folder above it (``loop -> .``, ``up -> ..``) is
  not followed, and every real file is read once. Skipped links are named in one warning, so a
  link can neither count a class's images twice nor give one class's images another's label.
* Refused, with the reason: a single class (accuracy 100 and ECE 0 by construction), and two
  classes whose names CLIP cannot tell apart (its tokenizer lower-cases: ``Lemon`` / ``lemon``,
  ``golden_retriever`` / ``golden retriever``).
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
from .base import DataError, DatasetBase, Datum, refuse_single_class
from .coop import COOP_DATASETS_MD, parse_split_json, prompt_name
from .imagenet import IMAGE_EXTS
from .images import check_images

__all__ = ["ImageFolder", "read_class_name_file", "scan_class_folders"]

_LOG = logging.getLogger(__name__)
_KEYS = "DATASET.IMAGEFOLDER"


_OWN_FIX = ("set DATASET.ROOT (or $DATA in the scripts) to your image folder: one sub-folder of "
            "images per class (<root>/<class_name>/*.jpg)")


def _resolve_root(root: str) -> str:
    """Absolute, user-expanded root; DataError about one's own folder when empty or absent."""
    if not str(root or "").strip():
        raise DataError(f"DATASET.ROOT is empty; {_OWN_FIX}")
    path = os.path.abspath(os.path.expanduser(str(root)))
    if not os.path.isdir(path):
        raise DataError(f"image folder {path} (DATASET.ROOT={root!r}) does not exist or is not a "
                        f"directory; {_OWN_FIX}")
    return path


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class _Walk:
    """Reads the class folders of one root: each real file once, links kept inside the root and
    inside their own class; what was skipped is collected for one warning."""

    def __init__(self, root: str):
        self.root = root
        self.real_root = os.path.realpath(root)
        self.class_reals: Dict[str, str] = {}      # folder -> its real path
        self.seen_files: set = set()
        self.skipped_links: List[str] = []         # "rel/path -> target (why)"
        self.repeats = 0                           # real files reached a second time

    def _skip(self, path: str, why: str) -> None:
        rel = os.path.relpath(path, self.root)
        self.skipped_links.append(f"{rel} -> {os.readlink(path)} ({why})")

    def class_folders(self) -> List[str]:
        """Class folder names (directories or links to directories inside the root, not hidden),
        sorted; links that lead out of the root or to the root itself are skipped."""
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except OSError as e:
            raise DataError(f"cannot list the image folder {self.root} ({e}); "
                            f"{_OWN_FIX}") from e
        folders = []
        for e in entries:
            if e.name.startswith(".") or not os.path.isdir(e.path):
                continue
            real = os.path.realpath(e.path)
            if e.is_symlink():
                if not _inside(real, self.real_root):
                    self._skip(e.path, "outside the root")
                    continue
                if real == self.real_root:
                    self._skip(e.path, "the root itself")
                    continue
            same = next((f for f, r in self.class_reals.items() if r == real), None)
            if same is not None:
                raise DataError(f"{self.root}: class folders {same!r} and {e.name!r} are the same "
                                f"folder (a symbolic link), so their images would carry two "
                                f"labels; remove one of them")
            folders.append(e.name)
            self.class_reals[e.name] = real
        return folders

    def _other_class(self, real: str, own: str) -> Optional[str]:
        if _inside(real, self.class_reals.get(own, "")):
            return None
        for folder, creal in self.class_reals.items():
            if folder != own and _inside(real, creal):
                return folder
        return None

    def images(self, folder: str) -> Tuple[List[str], List[str]]:
        """(image paths, other files) under class ``folder``, recursively, hidden entries skipped,
        sorted by path relative to it. A real file reached twice is kept under its own path
        (not a link's), else under the first path in sorted order."""
        top = os.path.join(self.root, folder)
        real_top = self.class_reals.get(folder) or os.path.realpath(top)
        found: Dict[str, Tuple[bool, str]] = {}      # real file -> (reached via a link, path)
        linked_dirs: set = set()                     # each linked folder walked once
        stack = [(top, real_top, (real_top,), False)]
        while stack:
            path, real_dir, above, via = stack.pop()
            try:
                entries = sorted(os.scandir(path), key=lambda e: e.name)
            except OSError as e:
                raise DataError(f"cannot list {path} ({e}); check the permissions of your image "
                                f"folder {self.root}") from e
            for e in entries:
                real, link = os.path.join(real_dir, e.name), via
                if e.is_symlink():
                    real, link = os.path.realpath(e.path), True
                    if not os.path.exists(real):      # dangling: reported as a missing image
                        if not e.name.startswith(".") and e.name.lower().endswith(IMAGE_EXTS):
                            found[e.path] = (True, e.path)
                        continue
                    if not _inside(real, self.real_root):
                        self._skip(e.path, "outside the root")
                        continue
                    other = self._other_class(real, folder)
                    if other is not None:
                        self._skip(e.path, f"into class folder {other!r}")
                        continue
                    if e.is_dir():
                        if any(_inside(a, real) for a in above):
                            self._skip(e.path, "a loop")
                            continue
                        if real in linked_dirs:
                            self.repeats += 1
                            continue
                        linked_dirs.add(real)
                if e.name.startswith(".") and e.is_dir():
                    continue
                if e.is_dir():
                    stack.append((e.path, real, above + (real,), link))
                elif real not in found:
                    found[real] = (link, e.path)
                else:
                    self.repeats += 1
                    if found[real][0] and not link:
                        found[real] = (link, e.path)
        images, others = [], []
        for real, (_, p) in found.items():
            if real in self.seen_files:               # read already under another class folder
                self.repeats += 1
                continue
            self.seen_files.add(real)
            name = os.path.basename(p)
            ok = not name.startswith(".") and name.lower().endswith(IMAGE_EXTS)
            (images if ok else others).append(p)
        key = lambda p: os.path.relpath(p, top)  # noqa: E731
        return sorted(images, key=key), sorted(others, key=key)

    def warn(self) -> None:
        if not self.skipped_links and not self.repeats:
            return
        parts = []
        if self.skipped_links:
            shown = "; ".join(self.skipped_links[:3])
            more = f" and {len(self.skipped_links) - 3} more" if len(self.skipped_links) > 3 else ""
            parts.append(f"{len(self.skipped_links)} symbolic links not followed ({shown}{more})")
        if self.repeats:
            parts.append(f"{self.repeats} files or folders reached a second time through links "
                         f"read once")
        _LOG.warning("ImageFolder %s: %s; links are followed only inside the root and inside "
                     "their own class folder", self.root, "; ".join(parts))


def scan_class_folders(root: str) -> List[str]:
    """Class folder names under ``root`` (directories or links to directories inside the root,
    not hidden), sorted."""
    return _Walk(root).class_folders()


def _clip_key(name: str) -> str:
    """What CLIP's tokenizer sees of a class name: lower-cased, whitespace collapsed."""
    return " ".join(name.lower().split())


def read_class_name_file(path: str) -> "Dict[str, str]":
    """``{folder: class name}`` in file order from ``<folder> <class name>`` lines or a JSON
    object; DataError naming the file and line for anything else."""
    if not os.path.isfile(path):
        raise DataError(f"{_KEYS}.CLASSNAMES={path!r}: file not found; give a file with one "
                        f"'<folder> <class name>' line per class folder, or leave it empty to "
                        f"name classes after their folders")
    out: Dict[str, str] = {}
    from ..utils.hashing import read_input   # the bytes used, noted for the run's check
    text = read_input(path, log=True).decode("utf-8")
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
        root = _resolve_root(cfg.DATASET.ROOT)
        split = str(cfg.DATASET.SPLIT)
        self.split = split
        self.dataset_path = self.image_path = root
        node = cfg.DATASET.get("IMAGEFOLDER", None)
        names_file = str(node.get("CLASSNAMES", "") if node is not None else "").strip()
        split_file = str(node.get("SPLIT_FILE", "") if node is not None else "").strip()
        self.skipped: List[str] = []
        self.skipped_links: List[str] = []
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
            try:
                items, raw = parse_split_json(path, root, split)
            except DataError as e:     # the file is the user's own: fix it, not re-download it
                raise DataError(str(e).replace(f"re-download the split file ({COOP_DATASETS_MD})",
                                               f"fix {_KEYS}.SPLIT_FILE (CoOp's split format)")
                                .replace("fix or re-download the file", "fix the file")
                                .replace("re-download the file", f"fix {_KEYS}.SPLIT_FILE")
                                ) from e
            classnames = [prompt_name(c) for c in raw]
            self._not_single(classnames, path)
            self._unique(classnames, path, raw)
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
            missing = [d.impath for d in items if not os.path.isfile(d.impath)]
            if missing:
                shown = ", ".join(os.path.relpath(p, root) for p in missing[:5])
                raise DataError(f"{len(missing)} of {len(items)} images of {what} are missing "
                                f"(e.g. {shown}; a file moved or a broken symbolic link); restore "
                                f"them or remove them from your folder or split file")
            check_images(items, what, cfg.DATASET.get("CHECK_IMAGES", "header"))
        super().__init__(items, classnames, root=root)

    @staticmethod
    def _unique(classnames: List[str], source: str, folders: Optional[List[str]] = None) -> None:
        """Two classes whose names CLIP reads as one text (equal once '_' is a space, case and
        repeated spaces ignored) could never be told apart: refused, naming both."""
        first: Dict[str, int] = {}
        for i, c in enumerate(classnames):
            j = first.setdefault(_clip_key(c), i)
            if j == i:
                continue
            what = (f"folders {folders[j]!r} and {folders[i]!r}" if folders
                    else f"classes {j} and {i}")
            raise DataError(f"{source}: {what} have class names {classnames[j]!r} and "
                            f"{classnames[i]!r}, which CLIP cannot tell apart (its tokenizer "
                            f"lower-cases text and '_' is read as a space); rename one of the "
                            f"folders or give distinct names ({_KEYS}.CLASSNAMES)")

    @staticmethod
    def _not_single(classnames: List[str], source: str) -> None:
        refuse_single_class(classnames, source, "add a sub-folder of images for each other class")

    def _scan(self, root: str, names_file: str) -> Tuple[List[Datum], List[str], List[str]]:
        walk = _Walk(root)
        folders = walk.class_folders()
        if not folders:
            skipped = (f" ({len(walk.skipped_links)} links not followed: "
                       f"{'; '.join(walk.skipped_links[:3])})" if walk.skipped_links else "")
            raise DataError(f"{root} (DATASET.ROOT) holds no class folders{skipped}; put the "
                            f"images of each class in its own sub-folder "
                            f"(<root>/<class_name>/*.jpg)")
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
        self._not_single(classnames, source)
        self._unique(classnames, source, folders)
        per_class: List[List[Datum]] = []
        empty, skipped = [], []
        for label, (folder, name) in enumerate(zip(folders, classnames)):
            images, others = walk.images(folder)
            skipped += others
            if not images:
                empty.append(folder)
            per_class.append([Datum(p, label, name) for p in images])
        walk.warn()
        self.skipped_links = walk.skipped_links
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
