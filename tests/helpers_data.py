"""Small CoOp-layout datasets generated on the fly for end-to-end tests."""
import json
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ["red apple", "blue car", "green leaf"]
ATTRS = {
    "red apple": "red round shiny stem sweet fruit glossy small smooth juicy crisp",
    "blue car": "blue metallic wheels shiny windows doors fast round headlights bumper",
    "green leaf": "green veined flat thin pointed stem smooth natural serrated fresh",
}


def make_caltech(root: Path, per_class: int = 2, size=(40, 30), seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    img_dir = root / "caltech-101" / "101_ObjectCategories"
    test = []
    for label, cname in enumerate(CLASSES):
        d = img_dir / cname.replace(" ", "_")
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            arr = rng.integers(0, 255, size=(size[1], size[0], 3), dtype=np.uint8)
            arr[..., label] = 200  # a class-dependent colour
            Image.fromarray(arr).save(d / f"image_{i:04d}.jpg")
            test.append([f"{d.name}/image_{i:04d}.jpg", label, cname])
    split = {"train": test[:1], "val": test[:1], "test": test}
    (root / "caltech-101" / "split_zhou_Caltech101.json").write_text(json.dumps(split))
    return root


def write_attributes(path: Path, attrs=None) -> Path:
    path.write_text(json.dumps(attrs or ATTRS))
    return path


def make_tree(root: Path, counts=None, seed=0) -> Path:
    """One's own ImageFolder: a folder per class of small PNG/JPEG images."""
    counts = counts or {"golden_retriever": 3, "tabby_cat": 2, "red_fox": 3}
    rng = np.random.default_rng(seed)
    for k, (folder, n) in enumerate(counts.items()):
        d = root / folder
        d.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            arr = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
            arr[..., k % 3] = 220
            Image.fromarray(arr).save(d / f"img_{i:02d}.{'png' if i % 2 else 'jpg'}")
    return root


def make_caltech_with_val(root: Path) -> Path:
    """:func:`make_caltech` with 4 images per class, split in two: images 0-1 are the test split,
    2-3 the validation split (what temperature scaling fits on)."""
    root = make_caltech(root, per_class=4)
    p = root / "caltech-101" / "split_zhou_Caltech101.json"
    split = json.loads(p.read_text())
    items = split["test"]
    split["val"] = [e for e in items if e[0].endswith(("0002.jpg", "0003.jpg"))]
    split["test"] = [e for e in items if e[0].endswith(("0000.jpg", "0001.jpg"))]
    p.write_text(json.dumps(split))
    return root
