"""Deterministic procedural image generator of the offline ``demo`` dataset.

Two domains:

* ``train`` (the CLIP's training images, and the ``train``/``val`` splits of the dataset): plain or
  gradient backgrounds of any colour, a few small clutter shapes, mild noise (sigma 3).  60% of
  the images carry one (sometimes two) *styles* with a strength t in [0.05, 1] that the training
  captions name: ``noisy`` (noise sigma 3+15t), ``dark`` (x(1-0.6t)), ``blurry`` (Gaussian radius
  0.15+1.05t), ``faded`` (contrast x(1-0.65t), lifted), ``textured`` (low-contrast texture
  background, contrast 50t), ``cluttered`` (2+9t clutter shapes).
* ``test`` (the ``test`` split, a distribution shift, parameters in ``TEST_SHIFT``): dark
  textured backgrounds (stripes / blotches / checks), clutter that sometimes occludes the object,
  objects 8% smaller, colour cast, saturation/contrast/brightness jitter, noise sigma 8, blur with
  probability 0.4.

Every image is drawn from its own random stream ``default_rng([salt, seed, stream, label, index])``
so any image can be re-rendered alone, in any order or process, and the result depends only on
the seed.  Images are drawn at 128 px and box-downsampled to 64 px.

The dataset is written in the CoOp layout: ``<root>/images/<class_dir>/<split>_<i>.png`` and
``<root>/split_zhou_Demo.json`` = ``{"train": [[relpath, label, classname], ...], "val": ...,
"test": ...}`` with ``relpath`` relative to ``<root>/images``.  Each split is ordered
image-index-major (image 0 of every class, then image 1 of every class, ...), so its first N items
are class-balanced (``DATASET.NUM_IMAGES``).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from .render import CLASSNAMES, DRAWERS, ROTATION, SIZE_RANGE, expand_synonyms, size_words

GENERATOR_VERSION = "v2"   # bump on any change of the rendered images
DEFAULT_SEED = 0
IMAGE_SIZE = 64
CANVAS = 128
SPLIT_FILE = "split_zhou_Demo.json"
IMAGE_DIR = "images"
SPLIT_COUNTS: Dict[str, int] = {"train": 16, "val": 10, "test": 20}   # images per class
STREAMS: Dict[str, int] = {"train": 0, "val": 1, "test": 2, "pool": 3}  # pool = CLIP training
STYLES: Tuple[str, ...] = ("noisy", "dark", "blurry", "faded", "textured", "cluttered")
_SALT = 0x5EED_DE30

# The shifted test domain (the knob that sets zero-shot difficulty; part of GENERATOR_VERSION).
TEST_SHIFT = {
    "bg_dark": (0.0, 80.0),       # first background colour, per channel (dark palette)
    "bg_light": (45.0, 135.0),    # second background colour (contrasting texture)
    "clutter_n": (3, 8),          # number of clutter shapes [lo, hi)
    "clutter_size": (8.0, 24.0),
    "occlude_p": 0.2,             # probability of one occluder over the object
    "size_scale": 0.92,           # objects 8% smaller
    "cast": 0.2,                  # per-channel gain in [1-cast, 1+cast]
    "saturation": (0.5, 1.2),
    "contrast": (0.6, 1.1),
    "brightness": (0.7, 1.1),
    "noise": 8.0,
    "blur_p": 0.4,
    "blur": (0.6, 1.1),
}

_YY, _XX = np.mgrid[0:CANVAS, 0:CANVAS].astype(np.float32)


@dataclass(frozen=True)
class Sample:
    image: np.ndarray            # uint8 [64, 64, 3]
    label: int
    attributes: FrozenSet[str]   # attribute words true for this instance (synonyms expanded)
    # train: (style, strength in [0,1]); test: (("shifted", 1.0),)
    styles: Tuple[Tuple[str, float], ...]


def class_dir(classname: str) -> str:
    return classname.replace(" ", "_")


def domain_of(stream: int) -> str:
    return "test" if stream == STREAMS["test"] else "train"


# ----------------------------------------------------------------------------- backgrounds
def _texture_mask(rng: np.random.Generator) -> np.ndarray:
    kind = int(rng.integers(3))
    if kind == 0:                                     # stripes
        a = rng.uniform(0, math.pi)
        period = rng.uniform(6, 20)
        t = (_XX * math.cos(a) + _YY * math.sin(a)) / period + rng.uniform(0, 1)
        return ((t % 1.0) < rng.uniform(0.3, 0.6)).astype(np.float32)
    if kind == 1:                                     # low-frequency blotches
        g = int(rng.integers(4, 9))
        small = Image.fromarray((rng.uniform(0, 255, (g, g))).astype(np.uint8))
        m = np.asarray(small.resize((CANVAS, CANVAS), Image.BICUBIC), dtype=np.float32) / 255.0
        return np.clip((m - 0.5) * rng.uniform(2.0, 5.0) + 0.5, 0, 1)
    p = rng.uniform(8, 24)                            # checks
    ox, oy = rng.uniform(0, p, 2)
    return (((np.floor((_XX + ox) / p) + np.floor((_YY + oy) / p)) % 2) > 0).astype(np.float32)


def _background(rng: np.random.Generator, domain: str, textured: float) -> np.ndarray:
    if domain == "test":
        c1 = rng.uniform(*TEST_SHIFT["bg_dark"], 3)
        c2 = rng.uniform(*TEST_SHIFT["bg_light"], 3)
        m = _texture_mask(rng)
    elif textured > 0:                                # the train "textured" style: low contrast
        c1 = rng.uniform(0, 255, 3)
        c2 = np.clip(c1 + rng.choice([-1, 1], 3) * rng.uniform(0.6, 1.0, 3) * 50 * textured, 0, 255)
        m = _texture_mask(rng)
    else:
        c1 = rng.uniform(0, 255, 3)
        if rng.random() < 0.5:
            return np.broadcast_to(c1, (CANVAS, CANVAS, 3)).astype(np.float32)
        c2 = rng.uniform(0, 255, 3)
        a = rng.uniform(0, 2 * math.pi)
        m = (_XX * math.cos(a) + _YY * math.sin(a)) / CANVAS
        m = (m - m.min()) / (m.max() - m.min() + 1e-6)
    m = m[..., None]
    return (c1 * (1 - m) + c2 * m).astype(np.float32)


def _clutter(d: ImageDraw.ImageDraw, rng: np.random.Generator, n: int, lo: float, hi: float,
             center: Optional[Tuple[float, float]] = None) -> None:
    for _ in range(n):
        s = rng.uniform(lo, hi)
        if center is None:
            x, y = rng.uniform(0, CANVAS, 2)
        else:
            x, y = center[0] + rng.uniform(-8, 8), center[1] + rng.uniform(-8, 8)
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(4))
        if kind == 0:
            d.ellipse([x - s / 2, y - s / 2 * rng.uniform(0.5, 1), x + s / 2, y + s / 2], fill=col)
        elif kind == 1:
            d.rectangle([x - s / 2, y - s / 3, x + s / 2, y + s / 3], fill=col)
        elif kind == 2:
            a = rng.uniform(0, math.pi)
            d.line([(x - s * math.cos(a), y - s * math.sin(a)),
                    (x + s * math.cos(a), y + s * math.sin(a))],
                   fill=col, width=int(rng.integers(2, 5)))
        else:
            a = rng.uniform(0, 2 * math.pi)
            d.polygon([(x + s / 2 * math.cos(a + k * 2.094), y + s / 2 * math.sin(a + k * 2.094))
                       for k in range(3)], fill=col)


# ----------------------------------------------------------------------------- one image
def render_sample(seed: int, stream: int, label: int, index: int) -> Sample:
    """Render image ``index`` of class ``label`` in ``stream`` (see STREAMS); deterministic."""
    rng = np.random.default_rng([_SALT, int(seed), int(stream), int(label), int(index)])
    domain = domain_of(stream)
    cname = CLASSNAMES[label]
    st: Dict[str, float] = {}                     # style -> strength t in [0, 1]
    if domain == "train":
        if rng.random() >= 0.4:
            st[STYLES[int(rng.integers(len(STYLES)))]] = float(rng.uniform(0.05, 1.0))
            if rng.random() < 0.2:
                st.setdefault(STYLES[int(rng.integers(len(STYLES)))], float(rng.uniform(0.05, 1.0)))
    else:
        st["shifted"] = 1.0
    styles = st

    bg = _background(rng, domain, st.get("textured", 0.0))
    scene = Image.fromarray(np.clip(bg + 0.5, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(scene)
    if domain == "test":
        _clutter(d, rng, int(rng.integers(*TEST_SHIFT["clutter_n"])), *TEST_SHIFT["clutter_size"])
    elif "cluttered" in styles:
        t = st["cluttered"]
        _clutter(d, rng, 2 + int(round(9 * t)) + int(rng.integers(0, 2)), 6 + 2 * t, 20 + 4 * t)
    else:
        _clutter(d, rng, int(rng.integers(2, 7)), 6, 20)

    lo, hi = SIZE_RANGE[cname]
    size = rng.uniform(lo, hi) * (TEST_SHIFT["size_scale"] if domain == "test" else 1.0)
    layer, attrs = DRAWERS[cname](rng, size)
    rot = ROTATION[cname]
    layer = layer.rotate(rng.uniform(-rot, rot), resample=Image.BICUBIC, expand=True)
    m = 0.38 * size
    cx, cy = rng.uniform(m, CANVAS - m, 2)
    scene.paste(layer, (int(round(cx - layer.width / 2)), int(round(cy - layer.height / 2))), layer)
    if domain == "test" and rng.random() < TEST_SHIFT["occlude_p"]:   # an occluder on the object
        _clutter(ImageDraw.Draw(scene), rng, 1, 10, 20, center=(cx + size * 0.3, cy + size * 0.3))

    img = scene.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BOX)
    if "blurry" in styles:
        img = img.filter(ImageFilter.GaussianBlur(0.15 + 1.05 * st["blurry"]))
    elif domain == "test" and rng.random() < TEST_SHIFT["blur_p"]:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(*TEST_SHIFT["blur"])))
    x = np.asarray(img, dtype=np.float32)

    if domain == "test":
        x = x * rng.uniform(1 - TEST_SHIFT["cast"], 1 + TEST_SHIFT["cast"], 3)   # colour cast
        lum = x.mean(-1, keepdims=True)
        x = lum + (x - lum) * rng.uniform(*TEST_SHIFT["saturation"])
        mu = x.mean()
        x = mu + (x - mu) * rng.uniform(*TEST_SHIFT["contrast"])
        x = x * rng.uniform(*TEST_SHIFT["brightness"])
        sigma = TEST_SHIFT["noise"]
    else:
        if "dark" in styles:
            x = x * (1.0 - 0.6 * st["dark"])
        if "faded" in styles:
            mu = x.mean()
            x = mu + (x - mu) * (1.0 - 0.65 * st["faded"]) + 40.0 * st["faded"]
        sigma = 3.0 + 15.0 * st.get("noisy", 0.0)
    x = x + rng.normal(0.0, sigma, x.shape)
    image = np.clip(np.round(x), 0, 255).astype(np.uint8)
    attrs = expand_synonyms(set(attrs) | set(size_words(size)))
    return Sample(image, label, attrs, tuple(sorted(st.items())))


def render_many(seed: int, stream: int, items: Sequence[Tuple[int, int]]) -> List[Sample]:
    return [render_sample(seed, stream, lab, idx) for lab, idx in items]


def _render_chunk(args):
    seed, stream, items = args
    out = render_many(seed, stream, items)
    return (np.stack([s.image for s in out]), [s.label for s in out],
            [tuple(sorted(s.attributes)) for s in out], [s.styles for s in out])


def render_pool(seed: int, n_per_class: int, workers: int = 1, stream: int = STREAMS["pool"],
                chunk: int = 512):
    """Render ``n_per_class`` images of every class (index-major order) as arrays.

    Returns ``(images uint8 [N,64,64,3], labels int64 [N], attributes list[tuple], styles list)``.
    ``workers > 1`` renders in a process pool; the result does not depend on ``workers``.
    """
    items = split_items(n_per_class)
    jobs = [(seed, stream, items[i:i + chunk]) for i in range(0, len(items), chunk)]
    if workers > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_render_chunk, jobs)
    else:
        parts = [_render_chunk(j) for j in jobs]
    images = np.concatenate([p[0] for p in parts])
    labels = np.asarray([l for p in parts for l in p[1]], dtype=np.int64)
    attrs = [a for p in parts for a in p[2]]
    styles = [s for p in parts for s in p[3]]
    return images, labels, attrs, styles


# ----------------------------------------------------------------------------- dataset on disk
def split_items(n_per_class: int, num_classes: int = len(CLASSNAMES)) -> List[Tuple[int, int]]:
    """(label, index) pairs in index-major order, so any prefix is class-balanced."""
    return [(lab, i) for i in range(n_per_class) for lab in range(num_classes)]


def relpath(split: str, label: int, index: int) -> str:
    return f"{class_dir(CLASSNAMES[label])}/{split}_{index:03d}.png"


def write_dataset(root: Path, seed: int = DEFAULT_SEED,
                  counts: Optional[Dict[str, int]] = None) -> Dict[str, list]:
    """Render every split into ``root`` (which must not exist yet or be empty) and write the
    split file; returns the split dict."""
    counts = dict(SPLIT_COUNTS if counts is None else counts)
    root = Path(root)
    img_root = root / IMAGE_DIR
    for c in CLASSNAMES:
        (img_root / class_dir(c)).mkdir(parents=True, exist_ok=True)
    split: Dict[str, list] = {}
    for name in ("train", "val", "test"):
        entries = []
        for lab, idx in split_items(counts[name]):
            s = render_sample(seed, STREAMS[name], lab, idx)
            rel = relpath(name, lab, idx)
            Image.fromarray(s.image).save(img_root / rel, format="PNG")
            entries.append([rel, lab, CLASSNAMES[lab]])
        split[name] = entries
    with open(root / SPLIT_FILE, "w") as f:
        json.dump(split, f)
    meta = {"generator_version": GENERATOR_VERSION, "seed": seed, "counts": counts,
            "classnames": list(CLASSNAMES), "image_size": IMAGE_SIZE}
    with open(root / "meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    return split


def cache_root() -> Path:
    return Path(os.path.expanduser(os.environ.get("ARGTCA_CACHE") or "~/.cache/argtca"))


def dataset_dir(seed: int = DEFAULT_SEED, root: Optional[os.PathLike] = None) -> Path:
    base = Path(root) if root is not None else cache_root()
    return base / f"demo-{GENERATOR_VERSION}-{seed}"


class DemoCacheError(ValueError):
    """The demo dataset cannot be found or made: one line naming the folder and the fix."""


def cache_problem(final: Path, seed: int = DEFAULT_SEED) -> Optional[str]:
    """Why ``final`` is not a complete demo dataset of ``seed`` (None when it is complete).

    Complete = ``meta.json`` (written last) names this generator version and seed, the split file
    lists exactly the expected images, and every listed image is a non-empty file.
    """
    if not final.is_dir():
        return "missing" if not final.exists() else "not a folder"
    for name in (SPLIT_FILE, "meta.json"):
        if not (final / name).is_file():
            return f"no {name}"
    try:
        meta = json.loads((final / "meta.json").read_text())
        split = json.loads((final / SPLIT_FILE).read_text())
    except (OSError, ValueError) as e:
        return f"unreadable meta.json or {SPLIT_FILE} ({e})"
    if not isinstance(meta, dict) or meta.get("generator_version") != GENERATOR_VERSION \
            or meta.get("seed") != seed:
        return f"meta.json is not that of generator {GENERATOR_VERSION}, seed {seed}"
    counts = SPLIT_COUNTS
    for name in ("train", "val", "test"):
        want = [[relpath(name, lab, idx), lab, CLASSNAMES[lab]]
                for lab, idx in split_items(counts[name])]
        if not isinstance(split, dict) or split.get(name) != want:
            return f"{SPLIT_FILE} does not list the expected {name} images"
    img_root = final / IMAGE_DIR
    missing = []
    for name in ("train", "val", "test"):
        for rel, _, _ in split[name]:
            try:
                if (img_root / rel).stat().st_size == 0:
                    missing.append(rel)
            except OSError:
                missing.append(rel)
    if missing:
        return f"{len(missing)} images missing or empty, e.g. {IMAGE_DIR}/{missing[0]}"
    return None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def _install(tmp: Path, final: Path, seed: int) -> None:
    """Rename the finished ``tmp`` into place; a half-made ``final`` is moved aside first (one
    rename each, so readers see the old folder or the complete new one, never a mix)."""
    for attempt in range(10):
        try:
            os.rename(tmp, final)
            return
        except OSError:
            if cache_problem(final, seed) is None:   # another process finished first
                return
            if not (final.exists() or final.is_symlink()):
                raise
            stale = final.parent / f".{final.name}.stale-{os.getpid()}-{attempt}"
            try:
                os.rename(final, stale)
            except FileNotFoundError:                 # another process moved it already
                continue
            _remove(stale)
    raise OSError(f"could not move {tmp} to {final} (other processes keep replacing it)")


def ensure_dataset(seed: int = DEFAULT_SEED, root: Optional[os.PathLike] = None) -> Path:
    """Return the dataset folder, generating it first if needed (about 5 s).

    A complete folder is only read (a read-only cache works). A missing or half-made one (see
    :func:`cache_problem`) is generated in a temporary sibling folder and renamed into place, so an
    interrupted run never leaves a half dataset and concurrent processes never see one. A cache
    that cannot be written raises :class:`DemoCacheError` naming the folder and the fix.
    """
    final = dataset_dir(seed, root)
    problem = cache_problem(final, seed)
    if problem is None:
        return final
    parent = final.parent
    hint = ("set ARGTCA_CACHE to a writable folder" if root is None
            else "choose a writable folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=parent))
    except OSError as e:
        why = e.strerror or str(e)
        if problem == "missing":
            raise DemoCacheError(f"cannot create the demo dataset in {final} ({why}); {hint} "
                                 f"(default ~/.cache/argtca)") from None
        raise DemoCacheError(f"the demo dataset in {final} is incomplete ({problem}) and cannot be "
                             f"regenerated there ({why}): delete that folder or make {parent} "
                             f"writable, or {hint}") from None
    try:
        write_dataset(tmp, seed)
        _install(tmp, final, seed)
    except OSError as e:
        why = f"{e.strerror}: {e.filename}" if e.strerror and e.filename else (e.strerror or str(e))
        raise DemoCacheError(f"cannot write the demo dataset to {parent} ({why}); free space or "
                             f"{hint}; nothing was left behind") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
