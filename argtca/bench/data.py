"""Synthetic data of ``python -m argtca.bench``: JPEGs drawn from a seeded RNG in CoOp's Caltech101
layout (split file included) and a TCA-format attribute file, so the benchmark needs no download.
"""
from __future__ import annotations

import io
import json
import os
import random
from typing import Dict, List

import numpy as np

__all__ = ["WORDS", "NOUNS", "class_names", "make_synthetic_coop"]

WORDS = ("red striped small furry metallic wooden spotted long round shiny feathered scaly "
         "glossy tiny giant curved pointed fluffy rusty smooth wrinkled translucent heart-shaped "
         "serrated delicate vibrant tropical aquatic ornamental nocturnal domestic wild antique "
         "portable folding electric leafy thorny spiral hollow woven close-up").split()
NOUNS = ("bird flower chair lamp guitar beetle camera motorbike crab anchor dolphin lotus "
         "helicopter scorpion umbrella wrench kangaroo laptop pagoda pizza saxophone starfish "
         "stapler sunflower trilobite watch wheelchair yin-yang cannon ceiling-fan").split()


# ------------------------------------------------------------------------------ synthetic data
def _jpeg_pool(n: int, size=(300, 225), seed: int = 0) -> List[bytes]:
    """``n`` distinct smooth synthetic photographs (gradients + blobs), JPEG-encoded."""
    from PIL import Image, ImageDraw, ImageFilter
    rng = np.random.default_rng(seed)
    w, h = size
    out = []
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for _ in range(n):
        a = rng.uniform(-0.03, 0.03, (3, 2))
        base = np.stack([128 + 90 * np.sin(a[c, 0] * xx + a[c, 1] * yy + rng.uniform(0, 6))
                         for c in range(3)], -1)
        img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
        d = ImageDraw.Draw(img)
        for _ in range(6):
            x0, y0 = rng.integers(0, w), rng.integers(0, h)
            r = rng.integers(10, 60)
            d.ellipse([x0 - r, y0 - r, x0 + r, y0 + r],
                      fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
        img = img.filter(ImageFilter.GaussianBlur(1.2))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def class_names(k: int, seed: int = 0) -> List[str]:
    rng = random.Random(seed)
    names, seen = [], set()
    while len(names) < k:
        n = f"{rng.choice(WORDS)} {rng.choice(NOUNS)}" if rng.random() < 0.6 else rng.choice(NOUNS)
        n = n if n not in seen else f"{n} {len(names)}"
        seen.add(n)
        names.append(n)
    return names


def make_synthetic_coop(root: str, n_images: int, n_classes: int, n_attributes: int = 5,
                        seed: int = 0, pool: int = 64, size=(300, 225)) -> Dict[str, str]:
    """A Caltech101-layout dataset under ``root``: ``caltech-101/101_ObjectCategories/<class>/
    <i>.jpg``, ``caltech-101/split_zhou_Caltech101.json`` (test = the ``n_images`` files, labels
    round-robin; train lists one entry per class so that every label has a name) and a TCA-format
    attribute file. Returns ``{"root", "attributes"}``."""
    names = class_names(n_classes, seed)
    base = os.path.join(root, "caltech-101")
    img_dir = os.path.join(base, "101_ObjectCategories")
    jpegs = _jpeg_pool(min(pool, n_images), size, seed)
    folder = [n.replace(" ", "_") for n in names]
    for f in folder:
        os.makedirs(os.path.join(img_dir, f), exist_ok=True)
    test = []
    for i in range(n_images):
        k = i % n_classes
        rel = f"{folder[k]}/image_{i:05d}.jpg"
        with open(os.path.join(img_dir, rel), "wb") as fh:
            fh.write(jpegs[i % len(jpegs)])
        test.append([rel, k, folder[k]])
    split = {"train": [[f"{folder[k]}/train.jpg", k, folder[k]] for k in range(n_classes)],
             "val": [], "test": test}
    with open(os.path.join(base, "split_zhou_Caltech101.json"), "w") as fh:
        json.dump(split, fh)
    rng = random.Random(seed + 1)
    attrs = {n: " ".join(rng.sample(WORDS, n_attributes)) for n in names}
    attr_path = os.path.join(root, f"attributes_{n_classes}.json")
    with open(attr_path, "w") as fh:
        json.dump(attrs, fh)
    return {"root": root, "attributes": attr_path}
