"""Procedural objects of the demo dataset: one drawing function per class.

Every drawing function takes a ``numpy.random.Generator`` and the object's size in pixels (on the
128-px drawing canvas) and returns ``(RGBA layer, attributes)``: the layer holds the object centred
on a transparent background and ``attributes`` is the set of attribute words that are TRUE for
this instance (a silver coin is not ``gold``, a tomato drawn without its stem has no
``green-stem``).  Near-synonyms are expanded by :func:`expand_synonyms`, so a caption may use
either word of a group.  The size words (``small``, ``medium-sized``, ``large``) are added by the
scene composer from the drawn size, which is why they are shared across classes.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, FrozenSet, List, Sequence, Set, Tuple

import numpy as np
from PIL import Image, ImageDraw

RGB = Tuple[int, int, int]

CLASSNAMES: Tuple[str, ...] = (
    "tomato", "strawberry", "lime", "lemon", "tennis ball", "basketball", "coin", "cookie",
    "donut", "brick", "stop sign", "yield sign", "dice", "checkerboard", "leaf", "starfish",
)

# Groups of interchangeable words. If one word of a group holds for an instance, all do.
SYNONYM_GROUPS: Tuple[Tuple[str, ...], ...] = (
    ("round", "circular"),
    ("glossy", "shiny"),
    ("dotted", "speckled", "spotted"),
    ("veins", "veined"),
    ("octagonal", "eight-sided"),
    ("triangular", "three-sided"),
    ("rough", "textured"),
    ("star-shaped", "five-armed"),
    ("black-seams", "black-lines"),
    ("yellow-green", "fluorescent"),
    ("inverted", "downward-pointing"),
)

# (min, max) object size in px on the 128-px canvas; the test domain draws objects 10% smaller.
SIZE_RANGE: Dict[str, Tuple[int, int]] = {
    "tomato": (38, 56), "strawberry": (30, 46), "lime": (30, 44), "lemon": (42, 60),
    "tennis ball": (30, 44), "basketball": (54, 72), "coin": (26, 40), "cookie": (38, 56),
    "donut": (40, 58), "brick": (46, 64), "stop sign": (46, 64), "yield sign": (46, 64),
    "dice": (28, 42), "checkerboard": (54, 74), "leaf": (42, 64), "starfish": (44, 64),
}
# rotation range in degrees (objects with a top / a pole are only tilted)
ROTATION: Dict[str, float] = {
    "tomato": 35, "strawberry": 35, "stop sign": 20, "yield sign": 20, "lemon": 180,
    "leaf": 180, "brick": 180, "dice": 180, "checkerboard": 180, "starfish": 180,
    "tennis ball": 180, "basketball": 180, "coin": 180, "cookie": 180, "donut": 180, "lime": 180,
}


def size_words(size: float) -> Tuple[str, ...]:
    if size < 38:
        return ("small",)
    if size < 54:
        return ("medium-sized",)
    return ("large",)


def expand_synonyms(words: Set[str]) -> FrozenSet[str]:
    out = set(words)
    for group in SYNONYM_GROUPS:
        if out.intersection(group):
            out.update(group)
    return frozenset(out)


# ----------------------------------------------------------------------------- helpers
def jitter(rng: np.random.Generator, rgb: Sequence[float], amount: float = 14) -> RGB:
    c = np.asarray(rgb, dtype=float) + rng.uniform(-amount, amount, size=3)
    return tuple(int(v) for v in np.clip(c, 0, 255))


def shade(rgb: RGB, f: float) -> RGB:
    return tuple(int(max(0, min(255, v * f))) for v in rgb)


def _layer(size: float, margin: float = 1.3) -> Tuple[Image.Image, ImageDraw.ImageDraw, float]:
    w = int(size * margin) + 6
    im = Image.new("RGBA", (w, w), (0, 0, 0, 0))
    return im, ImageDraw.Draw(im), w / 2.0


def _ell(d: ImageDraw.ImageDraw, cx: float, cy: float, rx: float, ry: float, **kw) -> None:
    d.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], **kw)


def _highlight(im: Image.Image, cx: float, cy: float, rx: float, ry: float,
               alpha: int = 150) -> None:
    hl = Image.new("RGBA", im.size, (0, 0, 0, 0))
    _ell(ImageDraw.Draw(hl), cx, cy, rx, ry, fill=(255, 255, 255, alpha))
    im.alpha_composite(hl)


def _points_in_disc(rng: np.random.Generator, n: int, cx: float, cy: float, r: float) -> np.ndarray:
    ang = rng.uniform(0, 2 * math.pi, n)
    rad = r * np.sqrt(rng.uniform(0, 1, n))
    return np.stack([cx + rad * np.cos(ang), cy + rad * np.sin(ang)], 1)


def _dots(d: ImageDraw.ImageDraw, pts: np.ndarray, r: float, color) -> None:
    for x, y in pts:
        _ell(d, x, y, r, r, fill=color)


def _star(cx: float, cy: float, r_out: float, r_in: float, n: int, phase: float = -math.pi / 2):
    pts = []
    for k in range(2 * n):
        r = r_out if k % 2 == 0 else r_in
        a = phase + k * math.pi / n
        pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return pts


def _polygon(cx: float, cy: float, r: float, n: int, phase: float) -> List[Tuple[float, float]]:
    return [(cx + r * math.cos(phase + 2 * math.pi * k / n),
             cy + r * math.sin(phase + 2 * math.pi * k / n))
            for k in range(n)]


def _leafy_top(d: ImageDraw.ImageDraw, rng, cx: float, cy: float, r: float, color: RGB) -> None:
    n = int(rng.integers(4, 7))
    for k in range(n):
        a = -math.pi / 2 + (k - (n - 1) / 2) * (math.pi / (n + 0.5)) * 1.6
        tip = (cx + r * math.cos(a), cy + r * 0.8 * math.sin(a) + r * 0.35)
        left = (cx + r * 0.25 * math.cos(a + 1.3), cy + r * 0.25 * math.sin(a + 1.3) + r * 0.35)
        right = (cx + r * 0.25 * math.cos(a - 1.3), cy + r * 0.25 * math.sin(a - 1.3) + r * 0.35)
        d.polygon([left, tip, right], fill=color)


# ----------------------------------------------------------------------------- classes
def draw_tomato(rng, s):
    im, d, c = _layer(s)
    red = jitter(rng, (215, 35, 25), 18)
    _ell(d, c, c + s * 0.03, s / 2, s * 0.44, fill=red, outline=shade(red, 0.7), width=2)
    _highlight(im, c - s * 0.16, c - s * 0.13, s * 0.10, s * 0.07)
    attrs = {"red", "round", "glossy", "smooth", "fruit"}
    if rng.random() < 0.85:
        d = ImageDraw.Draw(im)
        green = jitter(rng, (45, 140, 40), 15)
        _leafy_top(d, rng, c, c - s * 0.52, s * 0.22, green)
        d.rectangle([c - 1.5, c - s * 0.55, c + 1.5, c - s * 0.40], fill=shade(green, 0.8))
        attrs |= {"green-stem", "leafy-top"}
    return im, attrs


def draw_strawberry(rng, s):
    im, d, c = _layer(s)
    red = jitter(rng, (210, 30, 45), 18)
    w, h = s * 0.82, s
    top = c - h * 0.18
    pts = [(c + w / 2 * math.cos(a), top + h * 0.28 * math.sin(a))
           for a in np.linspace(math.pi * 0.95, math.pi * 2.05, 14)]
    pts += [(c + w * 0.38, c + h * 0.12), (c + w * 0.12, c + h * 0.42), (c, c + h * 0.5),
            (c - w * 0.12, c + h * 0.42), (c - w * 0.38, c + h * 0.12)]
    d.polygon(pts, fill=red, outline=shade(red, 0.7))
    seed_col = jitter(rng, (245, 220, 90), 12)
    n = int(rng.integers(14, 26))
    xs = rng.uniform(-0.34, 0.34, n)
    ys = rng.uniform(-0.1, 0.38, n)
    keep = np.abs(xs) < 0.36 * (1 - np.clip(ys - 0.05, 0, 1) / 0.45)
    for x, y in zip(xs[keep], ys[keep]):
        _ell(d, c + x * w * 1.05, c + y * h, 1.3, 1.6, fill=seed_col)
    green = jitter(rng, (40, 150, 50), 15)
    _leafy_top(d, rng, c, top - h * 0.3, s * 0.26, green)
    return im, {"red", "heart-shaped", "pointed", "seeds", "dotted", "leafy-top", "green-leaves",
                "fruit"}


def draw_lime(rng, s):
    im, d, c = _layer(s)
    green = jitter(rng, (90, 175, 50), 18)
    ry = s / 2 * rng.uniform(0.82, 0.95)
    _ell(d, c, c, s / 2, ry, fill=green, outline=shade(green, 0.7), width=2)
    _ell(d, c + s / 2 - 1, c, 2.5, 2.0, fill=shade(green, 0.75))
    _highlight(im, c - s * 0.15, c - ry * 0.35, s * 0.10, s * 0.07, 130)
    return im, {"green", "round", "citrus", "glossy", "smooth", "fruit", "oval"}


def draw_lemon(rng, s):
    im, d, c = _layer(s)
    yel = jitter(rng, (245, 215, 50), 14)
    rx, ry = s * 0.42, s * 0.30
    _ell(d, c, c, rx, ry, fill=yel, outline=shade(yel, 0.8), width=2)
    for sgn in (-1, 1):
        d.polygon([(c + sgn * rx * 0.92, c - ry * 0.35), (c + sgn * (rx + s * 0.09), c),
                   (c + sgn * rx * 0.92, c + ry * 0.35)], fill=yel)
    pts = _points_in_disc(rng, 22, c, c, ry * 0.85)
    pts[:, 0] = c + (pts[:, 0] - c) * rx / ry
    _dots(d, pts, 0.8, shade(yel, 0.88))
    attrs = {"yellow", "oval", "citrus", "pointed-ends", "elongated", "dimpled", "fruit", "bright"}
    if rng.random() < 0.7:
        _highlight(im, c - rx * 0.35, c - ry * 0.4, s * 0.08, s * 0.05, 120)
        attrs.add("glossy")
    return im, attrs


def draw_tennis_ball(rng, s):
    im, d, c = _layer(s)
    col = jitter(rng, (205, 230, 60), 14)
    _ell(d, c, c, s / 2, s / 2, fill=col)
    pts = _points_in_disc(rng, 70, c, c, s * 0.46)
    _dots(d, pts[:35], 1.0, shade(col, 0.85))
    _dots(d, pts[35:], 1.0, shade(col, 1.1))
    seam = jitter(rng, (245, 245, 240), 8)
    r = s * 0.42
    w = max(2, int(round(s / 16)))
    d.arc([c - s / 2 - r * 0.75, c - r, c - s / 2 + r * 0.75, c + r], -70, 70, fill=seam, width=w)
    d.arc([c + s / 2 - r * 0.75, c - r, c + s / 2 + r * 0.75, c + r], 110, 250, fill=seam, width=w)
    return im, {"yellow-green", "round", "fuzzy", "white-seams", "ball", "curved-lines", "felt"}


def draw_basketball(rng, s):
    im, d, c = _layer(s)
    col = jitter(rng, (225, 115, 35), 14)
    _ell(d, c, c, s / 2, s / 2, fill=col, outline=(25, 20, 20), width=2)
    pts = _points_in_disc(rng, 45, c, c, s * 0.46)
    _dots(d, pts, 0.9, shade(col, 0.8))
    blk = (25, 20, 20)
    w = max(2, int(round(s / 22)))
    d.line([(c, c - s / 2), (c, c + s / 2)], fill=blk, width=w)
    d.line([(c - s / 2, c), (c + s / 2, c)], fill=blk, width=w)
    r = s * 0.5
    d.arc([c - s / 2 - r * 0.55, c - r, c - s / 2 + r * 0.55, c + r], -80, 80, fill=blk, width=w)
    d.arc([c + s / 2 - r * 0.55, c - r, c + s / 2 + r * 0.55, c + r], 100, 260, fill=blk, width=w)
    return im, {"orange", "round", "black-seams", "ball", "pebbled", "curved-lines", "dotted"}


def draw_coin(rng, s):
    im, d, c = _layer(s)
    gold = rng.random() < 0.65
    base = jitter(rng, (225, 180, 55) if gold else (190, 192, 198), 12)
    _ell(d, c, c, s / 2, s / 2, fill=shade(base, 0.75))
    _ell(d, c, c, s * 0.42, s * 0.42, fill=base)
    _ell(d, c, c, s * 0.26, s * 0.26, outline=shade(base, 0.7), width=2)
    d.rectangle([c - s * 0.05, c - s * 0.14, c + s * 0.05, c + s * 0.14], fill=shade(base, 0.72))
    _highlight(im, c - s * 0.17, c - s * 0.17, s * 0.09, s * 0.06, 150)
    return im, {"gold" if gold else "silver", "round", "metallic", "glossy", "rim", "flat",
                "engraved"}


def draw_cookie(rng, s):
    im, d, c = _layer(s)
    col = jitter(rng, (200, 150, 90), 15)
    n = 18
    rad = s / 2 * (1 + rng.uniform(-0.08, 0.06, n))
    pts = [(c + r * math.cos(2 * math.pi * k / n), c + r * math.sin(2 * math.pi * k / n))
           for k, r in enumerate(rad)]
    d.polygon(pts, fill=col, outline=shade(col, 0.75))
    crumbs = _points_in_disc(rng, 40, c, c, s * 0.44)
    _dots(d, crumbs, 0.8, shade(col, 0.86))
    chips = _points_in_disc(rng, int(rng.integers(5, 10)), c, c, s * 0.36)
    chip = jitter(rng, (70, 40, 25), 10)
    for x, y in chips:
        rr = s * rng.uniform(0.045, 0.07)
        _ell(d, x, y, rr, rr * rng.uniform(0.7, 1.0), fill=chip)
    return im, {"brown", "round", "chocolate-chips", "baked", "dotted", "tan", "rough", "flat",
                "irregular-edge"}


def draw_donut(rng, s):
    im, d, c = _layer(s)
    dough = jitter(rng, (205, 155, 95), 12)
    _ell(d, c, c, s / 2, s / 2, fill=dough)
    kind = int(rng.integers(3))
    frost = [(240, 140, 180), (95, 55, 35), (245, 240, 235)][kind]
    frost = jitter(rng, frost, 10)
    n = 20
    rad = s * 0.43 * (1 + rng.uniform(-0.05, 0.05, n))
    pts = [(c + r * math.cos(2 * math.pi * k / n), c + r * math.sin(2 * math.pi * k / n))
           for k, r in enumerate(rad)]
    d.polygon(pts, fill=frost)
    attrs = {"ring-shaped", "hole", "round", "frosting", "glazed", "baked",
             ["pink", "brown", "white"][kind]}
    if rng.random() < 0.65:
        cols = [(230, 40, 40), (40, 120, 230), (250, 230, 40), (60, 200, 80), (250, 250, 250)]
        for x, y in _points_in_disc(rng, 18, c, c, s * 0.38):
            if (x - c) ** 2 + (y - c) ** 2 < (s * 0.2) ** 2:
                continue
            a = rng.uniform(0, math.pi)
            dx, dy = 2.2 * math.cos(a), 2.2 * math.sin(a)
            d.line([(x - dx, y - dy), (x + dx, y + dy)], fill=cols[int(rng.integers(len(cols)))],
                   width=2)
        attrs |= {"sprinkles", "colorful"}
    _ell(d, c, c, s * 0.16, s * 0.16, fill=(0, 0, 0, 0))
    return im, attrs


def draw_brick(rng, s):
    im, d, c = _layer(s)
    col = jitter(rng, (175, 70, 45), 16)
    w, h = s / 2, s * rng.uniform(0.24, 0.3)
    d.rectangle([c - w, c - h, c + w, c + h], fill=col, outline=shade(col, 0.7), width=2)
    pts = np.stack([rng.uniform(c - w + 2, c + w - 2, 70),
                    rng.uniform(c - h + 2, c + h - 2, 70)], 1)
    _dots(d, pts[:35], 0.8, shade(col, 0.78))
    _dots(d, pts[35:], 0.8, shade(col, 1.18))
    attrs = {"rectangular", "red", "rough", "block", "dotted", "flat", "brown"}
    if rng.random() < 0.5:
        for k in (-1, 0, 1):
            _ell(d, c + k * w * 0.55, c, h * 0.38, h * 0.38, fill=shade(col, 0.45))
        attrs.add("holes")
    return im, attrs


def _pole(d, c, s, top: float):
    grey = (150, 150, 155)
    d.rectangle([c - s * 0.04, top, c + s * 0.04, c + s * 0.62], fill=grey)


def draw_stop_sign(rng, s):
    im, d, c = _layer(s, 1.45)
    cy = c - s * 0.12
    _pole(d, c, s, cy)
    red = jitter(rng, (205, 25, 30), 14)
    ph = math.pi / 8
    d.polygon(_polygon(c, cy, s * 0.44, 8, ph), fill=(245, 245, 245))
    d.polygon(_polygon(c, cy, s * 0.39, 8, ph), fill=red)
    lw, lh = s * 0.11, s * 0.09
    for k in range(4):
        x0 = c - 2 * lw + k * lw
        d.rectangle([x0 + lw * 0.15, cy - lh, x0 + lw * 0.85, cy + lh], fill=(250, 250, 250))
    return im, {"red", "octagonal", "white-border", "white-text", "sign", "pole", "letters",
                "flat", "bold"}


def draw_yield_sign(rng, s):
    im, d, c = _layer(s, 1.45)
    cy = c - s * 0.14
    _pole(d, c, s, cy)
    red = jitter(rng, (210, 30, 35), 14)
    tri = _polygon(c, cy, s * 0.5, 3, math.pi / 2)
    d.polygon(tri, fill=red)
    d.polygon(_polygon(c, cy, s * 0.29, 3, math.pi / 2), fill=jitter(rng, (245, 245, 240), 6))
    return im, {"triangular", "inverted", "red-border", "white", "pointed", "sign", "pole", "flat"}


_PIPS = {1: [(0, 0)], 2: [(-1, -1), (1, 1)], 3: [(-1, -1), (0, 0), (1, 1)],
         4: [(-1, -1), (1, -1), (-1, 1), (1, 1)], 5: [(-1, -1), (1, -1), (0, 0), (-1, 1), (1, 1)],
         6: [(-1, -1), (1, -1), (-1, 0), (1, 0), (-1, 1), (1, 1)]}


def draw_dice(rng, s):
    im, d, c = _layer(s)
    red = rng.random() < 0.15
    body = jitter(rng, (200, 30, 35) if red else (240, 238, 230), 10)
    pip = (250, 250, 250) if red else (20, 20, 25)
    h = s / 2
    d.rounded_rectangle([c - h, c - h, c + h, c + h], radius=s * 0.16, fill=body,
                        outline=shade(body, 0.7), width=2)
    face = int(rng.integers(1, 7))
    for px, py in _PIPS[face]:
        _ell(d, c + px * s * 0.25, c + py * s * 0.25, s * 0.08, s * 0.08, fill=pip)
    attrs = {"square", "cube", "rounded-corners", "six-sided", "dotted"}
    attrs |= {"red", "white-pips"} if red else {"white", "black-pips"}
    return im, attrs


def draw_checkerboard(rng, s):
    im, d, c = _layer(s)
    red = rng.random() < 0.3
    a = jitter(rng, (200, 30, 30) if red else (240, 240, 235), 10)
    b = jitter(rng, (20, 20, 20), 8)
    n = int(rng.integers(4, 9))
    h = s / 2
    d.rectangle([c - h - 2, c - h - 2, c + h + 2, c + h + 2], fill=shade(b, 1.5))
    step = s / n
    for i in range(n):
        for j in range(n):
            d.rectangle([c - h + i * step, c - h + j * step, c - h + (i + 1) * step - 0.5,
                         c - h + (j + 1) * step - 0.5], fill=a if (i + j) % 2 == 0 else b)
    return im, {"checkered", "square", "black", "red" if red else "white", "grid", "squares",
                "pattern", "flat"}


def draw_leaf(rng, s):
    im, d, c = _layer(s)
    autumn = rng.random() < 0.3
    if autumn:
        k = int(rng.integers(3))
        col = jitter(rng, [(225, 120, 30), (230, 190, 40), (190, 45, 30)][k], 12)
        cname = ["orange", "yellow", "red"][k]
    else:
        col = jitter(rng, (70, 160, 55), 18)
        cname = "green"
    L, W = s / 2, s * rng.uniform(0.2, 0.27)
    n = 12
    upper = [(c - L + 2 * L * t, c - W * math.sin(math.pi * t) ** 0.8)
             for t in np.linspace(0, 1, n)]
    lower = [(c - L + 2 * L * t, c + W * math.sin(math.pi * t) ** 0.8)
             for t in np.linspace(1, 0, n)]
    d.polygon(upper + lower, fill=col, outline=shade(col, 0.7))
    vein = shade(col, 0.65) if not autumn else shade(col, 0.7)
    d.line([(c - L - s * 0.12, c), (c + L * 0.9, c)], fill=vein, width=2)
    for t in np.linspace(0.25, 0.75, 4):
        x = c - L + 2 * L * t
        yy = W * math.sin(math.pi * t) ** 0.8 * 0.8
        d.line([(x, c), (x + s * 0.1, c - yy)], fill=vein, width=1)
        d.line([(x, c), (x + s * 0.1, c + yy)], fill=vein, width=1)
    attrs = {cname, "pointed", "veins", "stem", "oval", "thin", "flat"}
    if autumn:
        attrs.add("autumn")
    return im, attrs


def draw_starfish(rng, s):
    im, d, c = _layer(s)
    k = int(rng.choice(3, p=[0.45, 0.35, 0.2]))
    col = jitter(rng, [(235, 120, 150), (235, 130, 50), (200, 50, 45)][k], 14)
    pts = _star(c, c, s / 2, s * rng.uniform(0.19, 0.24), 5, rng.uniform(0, 2 * math.pi))
    d.polygon(pts, fill=col, outline=shade(col, 0.7))
    for x, y in _points_in_disc(rng, 26, c, c, s * 0.3):
        _ell(d, x, y, 1.1, 1.1, fill=shade(col, 1.25))
    return im, {"star-shaped", ["pink", "orange", "red"][k], "pointed", "bumpy", "dotted", "rough"}


DRAWERS: Dict[str, Callable] = {
    "tomato": draw_tomato, "strawberry": draw_strawberry, "lime": draw_lime, "lemon": draw_lemon,
    "tennis ball": draw_tennis_ball, "basketball": draw_basketball, "coin": draw_coin,
    "cookie": draw_cookie, "donut": draw_donut, "brick": draw_brick, "stop sign": draw_stop_sign,
    "yield sign": draw_yield_sign, "dice": draw_dice, "checkerboard": draw_checkerboard,
    "leaf": draw_leaf, "starfish": draw_starfish,
}
assert tuple(DRAWERS) == CLASSNAMES

# Every attribute word an instance of the class can get from its drawer (before synonyms and
# the size words); tests check the drawers against it and the attribute file against this.
POSSIBLE_ATTRIBUTES: Dict[str, FrozenSet[str]] = {k: frozenset(v.split()) for k, v in {
    "tomato": "red round glossy smooth fruit green-stem leafy-top",
    "strawberry": "red heart-shaped pointed seeds dotted leafy-top green-leaves fruit",
    "lime": "green round citrus glossy smooth fruit oval",
    "lemon": "yellow oval citrus pointed-ends elongated dimpled fruit bright glossy",
    "tennis ball": "yellow-green round fuzzy white-seams ball curved-lines felt",
    "basketball": "orange round black-seams ball pebbled curved-lines dotted",
    "coin": "gold silver round metallic glossy rim flat engraved",
    "cookie": "brown round chocolate-chips baked dotted tan rough flat irregular-edge",
    "donut": "ring-shaped hole round frosting glazed baked pink brown white sprinkles colorful",
    "brick": "rectangular red rough block dotted flat brown holes",
    "stop sign": "red octagonal white-border white-text sign pole letters flat bold",
    "yield sign": "triangular inverted red-border white pointed sign pole flat",
    "dice": "square cube rounded-corners six-sided dotted red white-pips white black-pips",
    "checkerboard": "checkered square black red white grid squares pattern flat",
    "leaf": "orange yellow red green pointed veins stem oval thin flat autumn",
    "starfish": "star-shaped pink orange red pointed bumpy dotted rough",
}.items()}
SIZE_WORDS = ("small", "medium-sized", "large")
