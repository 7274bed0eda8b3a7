"""ImageNet, its shift sets and SUN397 on tiny generated trees in CoOp's and TPT's layouts."""
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from argtca.config import get_cfg_default
from argtca.datasets import DataError, build_dataset, resolve_dataset_class
from argtca.run import main

REPO = Path(__file__).resolve().parents[2]
WNIDS = [f"n{1440764 + 7 * i:08d}" for i in range(1000)]       # sorted, ImageNet-like ids
NAMES = [f"thing {i}" for i in range(1000)]
SUBSET = list(range(3, 1000, 5))                                  # 200 classes, not a prefix


def _jpeg(seed=None) -> bytes:
    arr = (np.full((8, 8, 3), 120, np.uint8) if seed is None else
           np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8))
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG")
    return buf.getvalue()


JPEG = _jpeg()


def write_classnames(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{w} {n}\n" for w, n in zip(WNIDS, NAMES)))
    return path


def make_tree(image_dir: Path, folders, per_class=1, distinct=False):
    for k, f in enumerate(folders):
        d = image_dir / f
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (d / f"img_{i}.JPEG").write_bytes(_jpeg(k * per_class + i) if distinct else JPEG)


def cfg_for(root, name, num=-1, split="test"):
    cfg = get_cfg_default()
    cfg.DATASET.ROOT = str(root)
    cfg.DATASET.NAME = name
    cfg.DATASET.NUM_IMAGES = num
    cfg.DATASET.SPLIT = split
    return cfg


def snapshot(root: Path):
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))


def test_imagenet_coop_layout(tmp_path):
    write_classnames(tmp_path / "imagenet" / "classnames.txt")
    make_tree(tmp_path / "imagenet" / "images" / "val", WNIDS, per_class=2)
    (tmp_path / "imagenet" / "images" / "val" / WNIDS[0] / "notes.txt").write_text("x")
    before = snapshot(tmp_path)
    ds = build_dataset(cfg_for(tmp_path, "imagenet"))
    assert type(ds).__name__ == "ImageNet" and ds.fine_grained is False
    assert ds.classnames == NAMES and len(ds.test) == 2000
    # image-index-major: first image of every class in label order, then the second ones
    assert [d.label for d in ds.test[:1000]] == list(range(1000))
    assert ds.test[1000].impath.endswith(f"{WNIDS[0]}/img_1.JPEG")
    assert all(d.classname == NAMES[d.label] and f"/{WNIDS[d.label]}/" in d.impath for d in ds.test)
    assert [d.label for d in build_dataset(cfg_for(tmp_path, "ImageNet", num=1000)).test] == \
        list(range(1000))
    assert snapshot(tmp_path) == before
    with pytest.raises(DataError, match="DATASET.SPLIT test"):
        build_dataset(cfg_for(tmp_path, "imagenet", split="train"))


@pytest.mark.parametrize("name, coop, tpt", [
    ("ImageNetA", "imagenet-adversarial/imagenet-a", "imagenet-a"),
    ("ImageNetR", "imagenet-rendition/imagenet-r", "imagenet-r"),
])
def test_200_class_subsets(tmp_path, name, coop, tpt):
    sub = [WNIDS[i] for i in SUBSET]
    for layout, root in (("coop", tmp_path / "c"), ("tpt", tmp_path / "t")):
        img = root / (coop if layout == "coop" else tpt)
        make_tree(img, sub[::-1])                              # creation order is irrelevant
        (img / "README.txt").write_text("ImageNet-A/R ship a README")
        if layout == "coop":
            write_classnames(img.parent / "classnames.txt")
        else:                                                 # TPT: names from <root>/imagenet
            write_classnames(root / "imagenet" / "classnames.txt")
        ds = build_dataset(cfg_for(root, name))
        assert ds.classnames == [NAMES[i] for i in SUBSET]   # the 200, in ImageNet order
        assert [d.label for d in ds.test] == list(range(200))
        assert all(f"/{WNIDS[SUBSET[d.label]]}/" in d.impath for d in ds.test)
    # a tree that is not the 200-class set is an error, never a different task
    (img / sub[0]).rename(img.parent / "moved")
    with pytest.raises(DataError, match="199 class folders"):
        build_dataset(cfg_for(tmp_path / "t", name))
    make_tree(img, [sub[0], "not_a_wnid"])
    with pytest.raises(DataError, match="not_a_wnid"):
        build_dataset(cfg_for(tmp_path / "t", name))


def test_imagenet_a_prediction_outside_subset_impossible(tmp_path, monkeypatch):
    """End to end with the tiny CLIP: the classifier has exactly the 200 subset prompts, so
    every prediction is one of them."""
    root = tmp_path / "data"
    make_tree(root / "imagenet-adversarial" / "imagenet-a", [WNIDS[i] for i in SUBSET],
              distinct=True)
    write_classnames(root / "imagenet-adversarial" / "classnames.txt")
    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    rc = main(["--root", str(root), "--output-dir", str(out),
               "--dataset-config-file", "configs/datasets/imagenet_a.yaml",
               "--config-file", "configs/trainers/zeroshot.yaml",
               "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
               "INPUT.SIZE", "(32, 32)", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
               "VERBOSE", "False", "DATASET.NUM_IMAGES", "40"])
    assert rc == 0
    recs = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines() if l.strip()]
    assert len(recs) == 40 and all(0 <= r["pred"] < 200 for r in recs)
    assert len({r["pred"] for r in recs}) > 1                    # a real classifier, not a constant


@pytest.mark.parametrize("method", ["tpt", "argtca"])
def test_tuned_methods_run_on_the_200_class_subset(tmp_path, monkeypatch, method):
    root = tmp_path / "data"
    make_tree(root / "imagenet-rendition" / "imagenet-r", [WNIDS[i] for i in SUBSET], distinct=True)
    write_classnames(root / "imagenet" / "classnames.txt")
    attrs = tmp_path / "attrs.json"     # ImageNet_2_V.json has the real names; these are made up
    attrs.write_text(json.dumps({NAMES[i]: " ".join(f"a{i}x{j}" for j in range(10))
                                 for i in SUBSET}))
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    rc = main(["--root", str(root), "--output-dir", str(out),
               "--dataset-config-file", "configs/datasets/imagenet_r.yaml",
               "--config-file", f"configs/trainers/{method}.yaml",
               "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
               "INPUT.SIZE", "(32, 32)", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
               "VERBOSE", "False", "DATASET.NUM_IMAGES", "3", "TTA.N_VIEWS", "4",
               "DATASET.ATTRIBUTE_FILE", str(attrs), "TRAINER.ARGTCA.GAT.EPOCHS", "2"])
    assert rc == 0
    recs = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines() if l.strip()]
    assert [r["label"] for r in recs] == [0, 1, 2] and all(0 <= r["pred"] < 200 for r in recs)
    if method == "argtca":
        assert len(json.loads((out / "phase1.json").read_text())["selected"]) == 200


def test_imagenetv2_index_folders(tmp_path):
    base = tmp_path / "imagenetv2"
    write_classnames(base / "classnames.txt")
    make_tree(base / "imagenetv2-matched-frequency-format-val", [str(i) for i in range(1000)])
    ds = build_dataset(cfg_for(tmp_path, "imagenetv2"))
    assert ds.classnames == NAMES
    assert all(d.impath.split("/")[-2] == str(d.label) for d in ds.test)
    make_tree(base / "imagenetv2-matched-frequency-format-val", ["1000"])
    with pytest.raises(DataError, match="folders named 0..999"):
        build_dataset(cfg_for(tmp_path, "ImageNetV2"))


@pytest.mark.parametrize("sub", ["imagenet-sketch/images", "imagenet-sketch/sketch",
                                 "ImageNet-Sketch"])
def test_sketch_layouts(tmp_path, sub):
    make_tree(tmp_path / sub, WNIDS)
    write_classnames(tmp_path / "imagenet" / "classnames.txt")
    ds = build_dataset(cfg_for(tmp_path, "imagenet_sketch"))
    assert ds.num_classes == 1000 and len(ds.test) == 1000


def test_missing_layout_and_classnames_errors(tmp_path):
    with pytest.raises(DataError) as e:
        build_dataset(cfg_for(tmp_path, "imagenet_r"))
    msg = str(e.value)
    for part in (str(tmp_path / "imagenet-rendition" / "imagenet-r") + "/",
                 str(tmp_path / "imagenet-r") + "/", "DATASETS.md", "python -m argtca.data check"):
        assert part in msg, part
    make_tree(tmp_path / "imagenet-r", WNIDS[:200])
    with pytest.raises(DataError) as e:          # no classnames.txt anywhere, tests are offline
        build_dataset(cfg_for(tmp_path, "imagenet_r"))
    msg = str(e.value)
    assert "classnames.txt" in msg and "ARGTCA_OFFLINE" in msg and "imagenet" in msg
    write_classnames(tmp_path / "imagenet" / "classnames.txt").write_text("n0 x\n")
    with pytest.raises(DataError, match="line 1"):
        build_dataset(cfg_for(tmp_path, "imagenet_r"))


def test_sun397_coop_layout(tmp_path):
    base = tmp_path / "sun397"
    rows = [["a/abbey/sun_1.jpg", 0, "abbey"], ["b/bus_interior/sun_2.jpg", 1, "bus_interior"],
            ["a/abbey/sun_3.jpg", 0, "abbey"]]
    for rel, _, _ in rows:
        (base / "SUN397" / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / "SUN397" / rel).write_bytes(JPEG)
    (base / "split_zhou_SUN397.json").write_text(json.dumps({"train": [], "val": [], "test": rows}))
    ds = build_dataset(cfg_for(tmp_path, "sun397"))
    assert type(ds).__name__ == "SUN397" and ds.classnames == ["abbey", "bus interior"]
    assert [(d.impath, d.label) for d in ds.test] == [(str(base / "SUN397" / r), l)
                                                      for r, l, _ in rows]


def test_configs_name_the_classes():
    for key, cls in (("sun397", "SUN397"), ("imagenet", "ImageNet"), ("imagenet_a", "ImageNetA"),
                     ("imagenet_r", "ImageNetR"), ("imagenet_sketch", "ImageNetSketch"),
                     ("imagenetv2", "ImageNetV2")):
        text = (REPO / "configs" / "datasets" / f"{key}.yaml").read_text()
        assert text.strip() == f'DATASET:\n  NAME: "{cls}"'
        assert resolve_dataset_class(key).__name__ == cls


def test_tca_files_cover_the_new_datasets(shared_data):
    d = shared_data / "tca_attributes"
    assert len(json.loads((d / "SUN397_2_V.json").read_text())) == 397
    # TCA's ImageNet file is keyed by CLIP's class names and holds 998 keys (for 1000 classes)
    inet = json.loads((d / "ImageNet_2_V.json").read_text())
    assert len(inet) == 998 and {"tench", "crane bird", "construction crane"} <= set(inet)


def test_unreadable_image_fails_at_load(tmp_path):
    base = tmp_path / "imagenet-rendition"
    make_tree(base / "imagenet-r", [WNIDS[i] for i in SUBSET])
    write_classnames(base / "classnames.txt")
    bad = base / "imagenet-r" / WNIDS[SUBSET[7]] / "img_0.JPEG"
    bad.write_text("not an image")
    with pytest.raises(DataError, match="img_0.JPEG"):
        build_dataset(cfg_for(tmp_path, "imagenet_r"))
