"""CoOp dataset readers on generated CoOp layouts, their errors, and the real split files."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from argtca.config import get_cfg_default
from argtca.datasets import DataError, build_dataset, resolve_dataset_class
from argtca.datasets.coop import FGVCAircraft

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"

# CoOp layout (ecosystem.md §2.1), restated independently of the reader:
# class name, key, dataset folder, image folder, split file
JSON_LAYOUTS = [
    ("Caltech101", "caltech101", "caltech-101", "101_ObjectCategories",
     "split_zhou_Caltech101.json"),
    ("OxfordPets", "oxford_pets", "oxford_pets", "images", "split_zhou_OxfordPets.json"),
    ("StanfordCars", "stanford_cars", "stanford_cars", "", "split_zhou_StanfordCars.json"),
    ("OxfordFlowers", "oxford_flowers", "oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json"),
    ("Food101", "food101", "food-101", "images", "split_zhou_Food101.json"),
    ("DescribableTextures", "dtd", "dtd", "images", "split_zhou_DescribableTextures.json"),
    ("EuroSAT", "eurosat", "eurosat", "2750", "split_zhou_EuroSAT.json"),
    ("UCF101", "ucf101", "ucf101", "UCF-101-midframes", "split_zhou_UCF101.json"),
]
ALL_NAMES = [x[0] for x in JSON_LAYOUTS] + ["FGVCAircraft"]
LAYOUT = {x[0]: x for x in JSON_LAYOUTS}

# labels are deliberately not in file order; "only_train" (label 1) appears only in train
RAW_CLASSES = {0: "zebra_fish", 1: "only_train", 2: "apple"}


def _jpg(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.random.default_rng(seed).integers(0, 256, size=(30, 40, 3), dtype=np.uint8)
    Image.fromarray(arr).save(path, quality=90)


def make_json_layout(root: Path, name: str, write_images: bool = True):
    """CoOp layout with 3 classes; returns the split dict written."""
    _, _, ddir, idir, sfile = LAYOUT[name]
    base = root / ddir
    base.mkdir(parents=True, exist_ok=True)
    split = {"train": [], "val": [], "test": []}
    k = 0
    for s, labels in (("test", [2, 0, 2, 0, 0]), ("train", [0, 1, 2]), ("val", [2, 0])):
        for lab in labels:
            rel = f"{RAW_CLASSES[lab]}/{s}_{k}.jpg"
            split[s].append([rel, lab, RAW_CLASSES[lab]])
            if write_images:
                _jpg(base / idir / rel, k)
            k += 1
    (base / sfile).write_text(json.dumps(split))
    return split


AIRCRAFT_VARIANTS = ["Boeing 707-320", "A300B4", "Cessna 172"]
AIRCRAFT_TEST = [("1000001", "Cessna 172"), ("1000002", "Boeing 707-320"),
                 ("0999999", "Cessna 172"), ("1234567", "A300B4")]


def make_aircraft_layout(root: Path, write_images: bool = True):
    base = root / "fgvc_aircraft"
    (base / "images").mkdir(parents=True, exist_ok=True)
    (base / "variants.txt").write_text("\n".join(AIRCRAFT_VARIANTS) + "\n")
    (base / "images_variant_test.txt").write_text(
        "".join(f"{i} {v}\n" for i, v in AIRCRAFT_TEST))
    (base / "images_variant_val.txt").write_text("2000001 A300B4\n")
    if write_images:
        for k, (i, _) in enumerate(AIRCRAFT_TEST + [("2000001", "")]):
            _jpg(base / "images" / f"{i}.jpg", k)


def cfg_for(root, name, split="test", num=-1):
    cfg = get_cfg_default()
    cfg.DATASET.ROOT = str(root)
    cfg.DATASET.NAME = name
    cfg.DATASET.SPLIT = split
    cfg.DATASET.NUM_IMAGES = num
    return cfg


def snapshot(root: Path):
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*"))


# ----------------------------------------------------------------------------- readers
@pytest.mark.parametrize("name", [x[0] for x in JSON_LAYOUTS])
def test_json_reader_on_generated_layout(tmp_path, name):
    split = make_json_layout(tmp_path, name)
    _, key, ddir, idir, _ = LAYOUT[name]
    before = snapshot(tmp_path)
    ds = build_dataset(cfg_for(tmp_path, name))
    assert type(ds).__name__ == name and ds.key == key and ds.fine_grained is True
    # names by label from all splits, "_" -> " "; raw names kept
    assert ds.classnames == ["zebra fish", "only train", "apple"]
    assert ds.raw_classnames == ["zebra_fish", "only_train", "apple"]
    assert ds.num_classes == 3 and ds.lab2cname[2] == "apple"
    want = [(str(tmp_path / ddir / idir / rel), lab) for rel, lab, _ in split["test"]]
    assert [(d.impath, d.label) for d in ds.test] == want
    assert all(os.path.isfile(d.impath) for d in ds.test)
    assert [d.classname for d in ds.test] == [RAW_CLASSES[l].replace("_", " ") for _, l in want]
    # NUM_IMAGES keeps the first N in file order; SPLIT selects the split
    assert [d.impath for d in build_dataset(cfg_for(tmp_path, name, num=2)).test] == \
        [p for p, _ in want[:2]]
    val = build_dataset(cfg_for(tmp_path, name, split="val"))
    assert [d.label for d in val.test] == [2, 0] and val.classnames == ds.classnames
    # the key and any case work as DATASET.NAME; the shipped yaml names the class
    assert type(build_dataset(cfg_for(tmp_path, key.upper()))).__name__ == name
    cfg = cfg_for(tmp_path, "")
    cfg.merge_from_file(str(REPO / "configs" / "datasets" / f"{key}.yaml"))
    assert cfg.DATASET.NAME == name and type(build_dataset(cfg)).__name__ == name
    assert snapshot(tmp_path) == before, "the reader wrote into the data root"


def test_aircraft_reader(tmp_path):
    make_aircraft_layout(tmp_path)
    before = snapshot(tmp_path)
    ds = build_dataset(cfg_for(tmp_path, "fgvc_aircraft"))
    assert isinstance(ds, FGVCAircraft) and ds.key == "fgvc_aircraft" and ds.fine_grained
    assert ds.classnames == AIRCRAFT_VARIANTS
    assert [(Path(d.impath).name, d.label, d.classname) for d in ds.test] == [
        (f"{i}.jpg", AIRCRAFT_VARIANTS.index(v), v) for i, v in AIRCRAFT_TEST]
    assert all(Path(d.impath).parent == tmp_path / "fgvc_aircraft" / "images" for d in ds.test)
    assert len(build_dataset(cfg_for(tmp_path, "FGVCAircraft", num=3)).test) == 3
    val = build_dataset(cfg_for(tmp_path, "FGVCAircraft", split="val"))
    assert [(d.label, d.classname) for d in val.test] == [(1, "A300B4")]
    assert snapshot(tmp_path) == before


def test_registry_has_all_nine_and_configs():
    for name in ALL_NAMES:
        cls = resolve_dataset_class(name)
        assert cls.__name__ == name and cls.fine_grained is True
        text = (REPO / "configs" / "datasets" / f"{cls.key}.yaml").read_text()
        assert text.strip() == f'DATASET:\n  NAME: "{name}"'
    with pytest.raises(KeyError, match="oxford_pets"):
        resolve_dataset_class("ImageNet21k")


# ----------------------------------------------------------------------------- errors
def _raises(cfg, *needles):
    with pytest.raises(DataError) as ei:
        build_dataset(cfg)
    msg = str(ei.value)
    for n in needles:
        assert str(n) in msg, f"{n!r} not in: {msg}"
    return msg


def test_root_errors(tmp_path):
    _raises(cfg_for("", "Caltech101"), "DATASET.ROOT", "$DATA", "--root")
    missing = tmp_path / "nope"
    _raises(cfg_for(missing, "Caltech101"), str(missing), "$DATA")
    _raises(cfg_for(tmp_path, "OxfordPets"), str(tmp_path / "oxford_pets"), "DATASETS.md")
    _raises(cfg_for(tmp_path, "FGVCAircraft"), str(tmp_path / "fgvc_aircraft"), "DATASETS.md")


def test_split_file_missing(tmp_path):
    (tmp_path / "dtd" / "images").mkdir(parents=True)
    _raises(cfg_for(tmp_path, "dtd"),
            str(tmp_path / "dtd" / "split_zhou_DescribableTextures.json"), "DATASETS.md", "Google")
    (tmp_path / "food-101" / "images").mkdir(parents=True)
    _raises(cfg_for(tmp_path, "Food101"), str(tmp_path / "food-101" / "split_zhou_Food101.json"),
            "DATASETS.md", "4 MiB")


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"train": [], "val": [], "test": [["a.jpg", 0]]}', "entry 0 of split 'test'"),
    ('{"test": [["a.jpg", "0", "x"]]}', "entry 0"),
    ('{"test": [["a.jpg", true, "x"]]}', "entry 0"),
    ('{"test": {"a.jpg": 0}}', "must be a list"),
    ('{"test": [["a.jpg", 0, "x"], ["b.jpg", 2, "y"]]}', "not contiguous"),
    ('{"train": [["a.jpg", 0, "x"]], "test": [["b.jpg", 0, "y"]]}', "named both"),
    ('{"test": [["a.jpg", 0, "x"], ["b.jpg", 1, "x"]]}', "used by labels 0 and 1"),
    ('{"test": [["a.jpg", 0, "x_y"], ["b.jpg", 1, "x y"]]}', "collide"),
    ('{"train": [["a.jpg", 0, "x"]], "test": []}', "is empty"),
])
def test_malformed_split_json(tmp_path, content, needle):
    base = tmp_path / "eurosat"
    (base / "2750").mkdir(parents=True)
    (base / "split_zhou_EuroSAT.json").write_text(content)
    msg = _raises(cfg_for(tmp_path, "EuroSAT"), needle)
    if needle != "collide":
        assert str(base / "split_zhou_EuroSAT.json") in msg


def test_unknown_split(tmp_path):
    make_json_layout(tmp_path, "OxfordFlowers")
    _raises(cfg_for(tmp_path, "OxfordFlowers", split="trainval"), "'trainval'", "test")
    # a split name CoOp knows but the file lacks
    sfile = tmp_path / "oxford_flowers" / "split_zhou_OxfordFlowers.json"
    data = json.loads(sfile.read_text())
    del data["val"]
    sfile.write_text(json.dumps(data))
    _raises(cfg_for(tmp_path, "OxfordFlowers", split="val"), str(sfile), "'val'")
    make_aircraft_layout(tmp_path)
    _raises(cfg_for(tmp_path, "FGVCAircraft", split="bogus"), "'bogus'")
    _raises(cfg_for(tmp_path, "FGVCAircraft", split="train"),
            str(tmp_path / "fgvc_aircraft" / "images_variant_train.txt"))


def test_missing_images(tmp_path):
    split = make_json_layout(tmp_path, "UCF101")
    idir = tmp_path / "ucf101" / "UCF-101-midframes"
    gone = [idir / split["test"][k][0] for k in (1, 3)]
    for p in gone:
        p.unlink()
    msg = _raises(cfg_for(tmp_path, "UCF101"), "2 of 5 images", str(gone[0]), str(gone[1]))
    assert "DATASETS.md" in msg
    # NUM_IMAGES=1 only evaluates (and checks) the first image, which exists
    assert len(build_dataset(cfg_for(tmp_path, "UCF101", num=1)).test) == 1
    # check_files=False skips the check (used to inspect split files without images)
    ucf = resolve_dataset_class("UCF101")(cfg_for(tmp_path, "UCF101"), check_files=False)
    assert len(ucf.test) == 5
    # whole image folder missing
    make_json_layout(tmp_path, "Caltech101", write_images=False)
    _raises(cfg_for(tmp_path, "Caltech101"), str(tmp_path / "caltech-101" / "101_ObjectCategories"))
    # Stanford Cars has no image folder of its own: the missing files are named
    make_json_layout(tmp_path, "StanfordCars", write_images=False)
    _raises(cfg_for(tmp_path, "StanfordCars"), "5 of 5 images",
            str(tmp_path / "stanford_cars" / "apple" / "test_0.jpg"))


def test_aircraft_errors(tmp_path):
    make_aircraft_layout(tmp_path)
    base = tmp_path / "fgvc_aircraft"
    (base / "images" / "1234567.jpg").unlink()
    _raises(cfg_for(tmp_path, "FGVCAircraft"), "1 of 4 images",
            str(base / "images" / "1234567.jpg"))
    (base / "images_variant_test.txt").write_text("1000001 Cessna 172\n1000002 Airbus X\n")
    _raises(cfg_for(tmp_path, "FGVCAircraft"), str(base / "images_variant_test.txt"), "line 2",
            "'Airbus X'")
    (base / "images_variant_test.txt").write_text("1000001\n")
    _raises(cfg_for(tmp_path, "FGVCAircraft"), str(base / "images_variant_test.txt"), "line 1")
    (base / "variants.txt").write_text("A300B4\nCessna 172\nA300B4\n")
    _raises(cfg_for(tmp_path, "FGVCAircraft"), str(base / "variants.txt"), "twice")
    (base / "variants.txt").unlink()
    _raises(cfg_for(tmp_path, "FGVCAircraft"), str(base / "variants.txt"), "DATASETS.md")


# ----------------------------------------------------------------------------- real split files
# /work/shared/data/README.md: test-split sizes and class counts
REAL = {"Caltech101": (2465, 100), "DescribableTextures": (1692, 47), "EuroSAT": (8100, 10),
        "OxfordFlowers": (2463, 102), "OxfordPets": (3669, 37), "StanfordCars": (8041, 196),
        "UCF101": (3783, 101)}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_split_files(tmp_path, name):
    src = SHARED / "coop_splits" / f"split_zhou_{name}.json"
    if not src.is_file():
        pytest.skip(f"{src} absent")
    _, _, ddir, idir, sfile = LAYOUT[name]
    (tmp_path / ddir).mkdir()
    os.symlink(src, tmp_path / ddir / sfile)
    ds = resolve_dataset_class(name)(cfg_for(tmp_path, name), check_files=False)
    n_test, n_cls = REAL[name]
    assert len(ds.test) == n_test and ds.num_classes == n_cls
    assert {d.label for d in ds.test} <= set(range(n_cls))
    raw = json.loads(src.read_text())
    assert ds.test[0].impath == str(tmp_path / ddir / idir / raw["test"][0][0])
    # the (spaced) class names are exactly the keys of TCA's attribute file for that dataset
    attr = SHARED / "tca_attributes" / f"{name}_2_V.json"
    if attr.is_file():
        assert sorted(ds.classnames) == sorted(json.loads(attr.read_text()))
