"""The nine CoOp fine-grained datasets, read from CoOp's folder layout under ``DATASET.ROOT``.

Each reader takes its evaluation split (``DATASET.SPLIT``, default "test") from CoOp's
``split_zhou_<Name>.json`` (FGVC-Aircraft: ``variants.txt`` + ``images_variant_<split>.txt``),
names classes from the split file (ordered by label; ``_`` replaced by a space as in CoOp's
prompts, TPT's ``cls_to_names`` and TCA's attribute files; raw names in ``raw_classnames``) and
checks at load time that every evaluated image exists and opens as an image (header read,
``DATASET.CHECK_IMAGES``; see :mod:`argtca.datasets.images`). Nothing is ever written into the data
root (unlike CoOp, which creates ``split_fewshot/`` and generates missing split files).
"""
from __future__ import annotations

import os
from typing import Dict, List, Sequence, Tuple

from ..registry import DATASET_REGISTRY
from .base import DataError, DatasetBase, Datum, read_json, refuse_single_class
from .images import check_images

__all__ = ["CoOpDataset", "JsonSplitDataset", "prompt_name", "resolve_root", "parse_split_json",
           "check_images_exist", "Caltech101", "OxfordPets", "StanfordCars", "OxfordFlowers",
           "Food101", "FGVCAircraft", "DescribableTextures", "EuroSAT", "UCF101"]

COOP_DATASETS_MD = "https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md"
SPLITS = ("train", "val", "test")


def prompt_name(name: str) -> str:
    """Class name as used in prompts and attribute files: ``_`` -> space, stripped."""
    return name.replace("_", " ").strip()


def resolve_root(root: str) -> str:
    """Absolute, user-expanded data root; DataError when empty or not a directory."""
    if not str(root or "").strip():
        raise DataError("DATASET.ROOT is empty: set $DATA (scripts), pass --root, or set "
                        "DATASET.ROOT to the folder holding the CoOp datasets")
    path = os.path.abspath(os.path.expanduser(str(root)))
    if not os.path.isdir(path):
        raise DataError(f"data root {path} (DATASET.ROOT={root!r}) does not exist or is not a "
                        f"directory: set $DATA / --root / DATASET.ROOT to the folder holding the "
                        f"CoOp datasets")
    return path


def _classnames(label_names: Dict[int, str], source: str) -> List[str]:
    """Names ordered by label; labels must be 0..K-1 and names unique."""
    if not label_names:
        raise DataError(f"{source}: no labelled entries; re-download the file")
    labels = sorted(label_names)
    if labels != list(range(len(labels))):
        missing = sorted(set(range(labels[-1] + 1)) - set(labels))
        raise DataError(f"{source}: labels are not contiguous 0..K-1 (found {len(labels)} labels "
                        f"from {labels[0]} to {labels[-1]}; missing {missing[:10]}); the file is "
                        f"corrupt or not a CoOp split file, re-download it")
    names = [label_names[i] for i in labels]
    seen: Dict[str, int] = {}
    for i, n in enumerate(names):
        if n in seen:
            raise DataError(f"{source}: class name {n!r} is used by labels {seen[n]} and {i}; "
                            f"fix or re-download the file")
        seen[n] = i
    return names


def parse_split_json(split_path: str, image_dir: str, split: str) -> Tuple[List[Datum], List[str]]:
    """Read a CoOp split file: ``(items of `split`, classnames by label)``.

    Class names are collected from every split of the file so that each label has a name; a label
    with two different names is an error. ``impath = join(image_dir, relpath)``.
    """
    data = read_json(split_path)
    if not isinstance(data, dict):
        raise DataError(f"{split_path}: expected a JSON object with keys train/val/test, got "
                        f"{type(data).__name__}; re-download the split file ({COOP_DATASETS_MD})")
    if split not in data:
        raise DataError(f"DATASET.SPLIT={split!r} is not in {split_path} (available: "
                        f"{', '.join(map(str, data))}); use one of them")
    label_names: Dict[int, str] = {}
    parsed: Dict[str, List[Tuple[str, int, str]]] = {}
    for name, entries in data.items():
        if not isinstance(entries, list):
            raise DataError(f"{split_path}: split {name!r} must be a list of "
                            f"[relpath, label, classname], got {type(entries).__name__}")
        rows = []
        for k, e in enumerate(entries):
            ok = (isinstance(e, (list, tuple)) and len(e) == 3 and isinstance(e[0], str)
                  and isinstance(e[1], int) and not isinstance(e[1], bool) and e[1] >= 0
                  and isinstance(e[2], str) and e[0].strip() and e[2].strip())
            if not ok:
                raise DataError(f"{split_path}: entry {k} of split {name!r} is {e!r}; expected "
                                f"[relative_image_path, label >= 0, classname]; re-download the "
                                f"split file ({COOP_DATASETS_MD})")
            relpath, label, cname = e
            old = label_names.setdefault(label, cname)
            if old != cname:
                raise DataError(f"{split_path}: label {label} is named both {old!r} and "
                                f"{cname!r} (entry {k} of split {name!r}); fix or re-download "
                                f"the file")
            rows.append((relpath, label, cname))
        parsed[name] = rows
    classnames = _classnames(label_names, split_path)
    items = [Datum(impath=os.path.join(image_dir, rel.lstrip("/")), label=lab, classname=c)
             for rel, lab, c in parsed[split]]
    if not items:
        raise DataError(f"{split_path}: split {split!r} is empty; choose another DATASET.SPLIT or "
                        f"re-download the file")
    refuse_single_class(classnames, split_path, "give a split file with every class of the task "
                        "(two at least)")
    return items, classnames


def check_images_exist(items: Sequence[Datum], what: str) -> None:
    missing = [d.impath for d in items if not os.path.isfile(d.impath)]
    if missing:
        shown = "\n  ".join(missing[:5])
        raise DataError(f"{len(missing)} of {len(items)} images of {what} are missing, e.g.\n  "
                        f"{shown}\nthe image folder is incomplete or laid out differently: follow "
                        f"CoOp's DATASETS.md ({COOP_DATASETS_MD})")


class CoOpDataset(DatasetBase):
    """Common constructor: ``cls(cfg, check_files=True)`` reading ``cfg.DATASET.{ROOT,SPLIT,
    NUM_IMAGES}``. Subclasses set ``dataset_dir``, ``image_dir`` and implement ``read_data``.

    ``check_files=False`` skips the image-existence check (for inspecting split files without the
    images; the evaluation always checks).
    """

    image_dir: str = ""          # relative to the dataset folder ("" = the dataset folder itself)
    fine_grained = True

    def __init__(self, cfg, check_files: bool = True):
        root = resolve_root(cfg.DATASET.ROOT)
        split = str(cfg.DATASET.SPLIT)
        self.split = split
        self.dataset_path = os.path.join(root, self.dataset_dir)
        if not os.path.isdir(self.dataset_path):
            raise DataError(f"{type(self).__name__}: dataset folder {self.dataset_path} not found "
                            f"under DATASET.ROOT={root}; expected CoOp's layout "
                            f"({self.dataset_dir}/...), see {COOP_DATASETS_MD}")
        self.image_path = os.path.join(self.dataset_path, self.image_dir)
        items, raw_classnames = self.read_data(root, split)
        # CoOp's split files spell some names with "_" (UCF101 "Apply_Eye_Makeup", Pets
        # "american_pit_bull_terrier"); CoOp's PromptLearner, TPT's cls_to_names and TCA's
        # attribute files use spaces, so the dataset exposes the spaced names.
        self.raw_classnames: List[str] = list(raw_classnames)
        classnames = [prompt_name(c) for c in raw_classnames]
        if len(set(classnames)) != len(classnames):
            dup = sorted({c for c in classnames if classnames.count(c) > 1})
            raise DataError(f"{type(self).__name__}: class names {dup[:5]} collide once '_' is "
                            f"replaced by ' '; fix the split file")
        items = [Datum(d.impath, d.label, classnames[d.label]) for d in items]
        n = int(cfg.DATASET.NUM_IMAGES)
        if n > 0:
            items = items[:n]
        if check_files:
            if not os.path.isdir(self.image_path):
                raise DataError(f"{type(self).__name__}: image folder {self.image_path} not "
                                f"found; expected CoOp's layout, see {COOP_DATASETS_MD}")
            check_images_exist(items, f"{type(self).__name__} split {split!r}")
            # DATASET.CHECK_IMAGES: "header" (default) opens every file's header in threads
            check_images(items, f"{type(self).__name__} split {split!r}",
                         cfg.DATASET.get("CHECK_IMAGES", "header"))
        super().__init__(items, classnames, root=root)

    def read_data(self, root: str, split: str) -> Tuple[List[Datum], List[str]]:
        raise NotImplementedError


class JsonSplitDataset(CoOpDataset):
    """Datasets whose split comes from CoOp's ``split_zhou_<Name>.json`` in the dataset folder."""

    split_file: str = ""

    def split_missing_hint(self) -> str:
        return (f"download {self.split_file} from the Google-Drive link in CoOp's DATASETS.md "
                f"({COOP_DATASETS_MD}) and put it in {self.dataset_path}")

    def read_data(self, root: str, split: str) -> Tuple[List[Datum], List[str]]:
        if split not in SPLITS:
            raise DataError(f"DATASET.SPLIT={split!r} is not a CoOp split; use one of "
                            f"{', '.join(SPLITS)}")
        split_path = os.path.join(root, self.dataset_dir, self.split_file)
        if not os.path.isfile(split_path):  # not in the data root: the cached (fetched) copy
            from .splits import fetch_split_file
            split_path = fetch_split_file(self.split_file, split_path, self.split_missing_hint())
        self.split_path = split_path   # hashed into the run's fingerprint (trainers/base.py)
        self.class_source = split_path
        return parse_split_json(split_path, self.image_path, split)


@DATASET_REGISTRY.register()
class Caltech101(JsonSplitDataset):
    key = "caltech101"
    report_rank, paper_column, ablation = 1, 0, True
    dataset_dir = "caltech-101"
    image_dir = "101_ObjectCategories"
    split_file = "split_zhou_Caltech101.json"


@DATASET_REGISTRY.register()
class OxfordPets(JsonSplitDataset):
    key = "oxford_pets"
    aliases = ("pets", "oxfordpets", "oxford_iiit_pet")
    report_rank, paper_column, ablation = 2, 1, True
    dataset_dir = "oxford_pets"
    image_dir = "images"
    split_file = "split_zhou_OxfordPets.json"


@DATASET_REGISTRY.register()
class StanfordCars(JsonSplitDataset):
    key = "stanford_cars"
    aliases = ("cars", "stanfordcars")
    report_rank, paper_column = 3, 2
    dataset_dir = "stanford_cars"
    image_dir = ""               # split paths are relative to the dataset folder (cars_test/...)
    split_file = "split_zhou_StanfordCars.json"


@DATASET_REGISTRY.register()
class OxfordFlowers(JsonSplitDataset):
    key = "oxford_flowers"
    aliases = ("flowers", "flower102", "flowers102", "oxfordflowers", "oxfordflowers102")
    report_rank, paper_column = 4, 3
    dataset_dir = "oxford_flowers"
    image_dir = "jpg"
    split_file = "split_zhou_OxfordFlowers.json"


@DATASET_REGISTRY.register()
class Food101(JsonSplitDataset):
    key = "food101"
    aliases = ("food",)
    report_rank, paper_column = 5, 4
    dataset_dir = "food-101"
    image_dir = "images"
    split_file = "split_zhou_Food101.json"

    def split_missing_hint(self) -> str:
        return (super().split_missing_hint() + " (this file is over 4 MiB, so copies of CoOp's "
                "splits in other repositories, e.g. TCA's data_splits, lack it; Google Drive "
                "id 1QK0tGi096I0Ba6kggatX1ee6dJFIcEJl)")


@DATASET_REGISTRY.register()
class DescribableTextures(JsonSplitDataset):
    key = "dtd"
    aliases = ("describabletextures", "describable_textures", "textures")
    report_rank, paper_column, ablation = 8, 6, True
    dataset_dir = "dtd"
    image_dir = "images"
    split_file = "split_zhou_DescribableTextures.json"


@DATASET_REGISTRY.register()
class EuroSAT(JsonSplitDataset):
    key = "eurosat"
    report_rank, paper_column = 9, 7
    dataset_dir = "eurosat"
    image_dir = "2750"
    split_file = "split_zhou_EuroSAT.json"


@DATASET_REGISTRY.register()
class UCF101(JsonSplitDataset):
    key = "ucf101"
    aliases = ("ucf",)
    report_rank, paper_column = 10, 8
    dataset_dir = "ucf101"
    image_dir = "UCF-101-midframes"
    split_file = "split_zhou_UCF101.json"


@DATASET_REGISTRY.register()
class FGVCAircraft(CoOpDataset):
    """``variants.txt`` (class names, label = line order) and ``images_variant_<split>.txt``
    (lines ``<imageid> <variant name>``; image ``images/<imageid>.jpg``)."""

    key = "fgvc_aircraft"
    aliases = ("aircraft", "fgvcaircraft")
    report_rank, paper_column = 6, 5
    dataset_dir = "fgvc_aircraft"
    image_dir = "images"

    def _missing(self, path: str) -> DataError:
        return DataError(f"{path} not found: download fgvc-aircraft-2013b and copy its data/ "
                         f"folder to {self.dataset_path} as described in CoOp's DATASETS.md "
                         f"({COOP_DATASETS_MD})")

    def read_data(self, root: str, split: str) -> Tuple[List[Datum], List[str]]:
        if split not in SPLITS:
            raise DataError(f"DATASET.SPLIT={split!r} is not a CoOp split; use one of "
                            f"{', '.join(SPLITS)}")
        variants_path = os.path.join(self.dataset_path, "variants.txt")
        split_path = os.path.join(self.dataset_path, f"images_variant_{split}.txt")
        for p in (variants_path, split_path):
            if not os.path.isfile(p):
                raise self._missing(p)
        with open(variants_path) as f:
            classnames = [ln.strip() for ln in f if ln.strip()]
        label_of: Dict[str, int] = {}
        for i, c in enumerate(classnames):
            if c in label_of:
                raise DataError(f"{variants_path}: variant {c!r} listed twice (lines "
                                f"{label_of[c] + 1} and {i + 1}); re-download the dataset")
            label_of[c] = i
        if not classnames:
            raise DataError(f"{variants_path} is empty; re-download the dataset")
        self.class_source = variants_path
        refuse_single_class(classnames, variants_path, "re-download the dataset")
        items: List[Datum] = []
        with open(split_path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                parts = line.split(" ", 1)
                if len(parts) != 2 or not parts[1].strip():
                    raise DataError(f"{split_path} line {lineno}: {line!r} is not "
                                    f"'<imageid> <variant name>'; re-download the dataset")
                imid, variant = parts[0], parts[1].strip()
                if variant not in label_of:
                    raise DataError(f"{split_path} line {lineno}: variant {variant!r} is not in "
                                    f"{variants_path}; re-download the dataset")
                items.append(Datum(impath=os.path.join(self.image_path, imid + ".jpg"),
                                   label=label_of[variant], classname=variant))
        if not items:
            raise DataError(f"{split_path} lists no images; re-download the dataset")
        return items, classnames


COOP_DATASETS: Tuple[type, ...] = (Caltech101, OxfordPets, StanfordCars, OxfordFlowers, Food101,
                                   FGVCAircraft, DescribableTextures, EuroSAT, UCF101)
