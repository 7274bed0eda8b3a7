"""TPT's AugMix (azshue/TPT ``data/augmix_ops.py`` + ``data/datautils.py::augmix``), re-written on
``torchvision.transforms.functional`` with explicit random generators.

Sampling and application are separate so that a mixed view can be recomputed by hand:

* ``sample_op(name, severity, rng, size) -> OpCall``: draws the op's magnitude exactly as TPT does
  (same draws, same order, same level mapping);
* ``apply_op(img, op)``: applies a fixed ``OpCall`` to a PIL image;
* ``sample_plan(rng, severity, size) -> AugMixPlan``: the chain weights ``w ~ Dir(1,1,1)``, the mix
  ``m ~ Beta(1,1)`` and 3 chains of 1-3 ops (TPT's draw order: dirichlet, beta, then per chain the
  depth and per op the op choice and its magnitude);
* ``augmix_view(x, plan, preprocess)``:
  ``m * preprocess(x) + (1 - m) * sum_i w_i * preprocess(chain_i(x))``
  (mixing after normalisation, float32 as in TPT), with ``mix_processed`` doing the arithmetic.

Level mapping (TPT/Google AugMix): ``level = U(0.1, severity)``; ``int_parameter(l, max) =
int(l * max / 10)``; ``float_parameter(l, max) = l * max / 10``. At severity 1 that gives
posterize 4 bits, rotation 0-3 degrees, solarize threshold 231-254, shear 0.003-0.03, translation
0-size/30 px.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence, Tuple

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode
try:   # the matrix F.affine hands to PIL (private; without it the fast path asks PIL itself)
    from torchvision.transforms.functional import (
        _get_inverse_affine_matrix as _inverse_affine_matrix)
except ImportError:  # pragma: no cover - depends on the torchvision version
    _inverse_affine_matrix = None

__all__ = ["OPS", "OpCall", "AugMixPlan", "int_parameter", "float_parameter", "sample_level",
           "sample_op", "apply_op", "apply_chain", "sample_plan", "mix_processed", "augmix_view",
           "apply_op_planes", "apply_op_fast", "apply_chain_planes", "normalise_into",
           "augmix_planes_into", "autocontrast_planes", "equalize_planes", "posterize_planes",
           "solarize_planes", "shift_planes", "shear_planes", "affine_planes"]

# TPT's ``augmentations`` list (the ImageNet-C-overlapping colour ops are excluded, as in TPT).
OPS: Tuple[str, ...] = ("autocontrast", "equalize", "posterize", "rotate", "solarize",
                        "shear_x", "shear_y", "translate_x", "translate_y")

_BILINEAR = InterpolationMode.BILINEAR


def int_parameter(level: float, maxval: float) -> int:
    return int(level * maxval / 10)


def float_parameter(level: float, maxval: float) -> float:
    return float(level) * maxval / 10.0


def sample_level(severity: float, rng: np.random.Generator) -> float:
    return float(rng.uniform(0.1, severity))


@dataclass(frozen=True)
class OpCall:
    """One AugMix op with its drawn magnitude.

    ``magnitude`` units: posterize = bits kept, rotate = degrees (counter-clockwise), solarize =
    threshold, shear_x / shear_y = shear coefficient, translate_x / translate_y = TPT's PIL affine
    offset in pixels (output(x) = input(x + offset), i.e. the content moves by ``-offset``);
    0 for autocontrast / equalize.
    """
    name: str
    magnitude: float = 0.0


@dataclass(frozen=True)
class AugMixPlan:
    m: float                                   # weight of the un-augmented crop
    weights: Tuple[float, ...]                 # chain weights (sum to 1)
    chains: Tuple[Tuple[OpCall, ...], ...]


def _signed(value: float, rng: np.random.Generator) -> float:
    # TPT: ``if np.random.uniform() > 0.5: value = -value``
    return -value if rng.uniform() > 0.5 else value


def sample_op(name: str, severity: float, rng: np.random.Generator, size: int) -> OpCall:
    """Draw the magnitude of op ``name`` the way TPT's op functions do (``size`` = crop side)."""
    if name in ("autocontrast", "equalize"):
        return OpCall(name, 0.0)               # TPT draws nothing for these two
    level = sample_level(severity, rng)
    if name == "posterize":
        return OpCall(name, 4 - int_parameter(level, 4))
    if name == "rotate":
        return OpCall(name, _signed(int_parameter(level, 30), rng))
    if name == "solarize":
        return OpCall(name, 256 - int_parameter(level, 256))
    if name in ("shear_x", "shear_y"):
        return OpCall(name, _signed(float_parameter(level, 0.3), rng))
    if name in ("translate_x", "translate_y"):
        return OpCall(name, _signed(int_parameter(level, size / 3), rng))
    raise KeyError(f"unknown AugMix op {name!r}; known: {', '.join(OPS)}")


def apply_op(img: Image.Image, op: OpCall) -> Image.Image:
    """Apply one op to a PIL image (output has the input's size; empty areas are black)."""
    n, v = op.name, op.magnitude
    if n == "autocontrast":
        return F.autocontrast(img)
    if n == "equalize":
        return F.equalize(img)
    if n == "posterize":
        return F.posterize(img, int(v))
    if n == "rotate":
        return F.rotate(img, float(v), interpolation=_BILINEAR)
    if n == "solarize":
        return F.solarize(img, float(v))
    # TPT's affine ops are PIL AFFINE transforms about the top-left corner: with center=[0, 0],
    # F.affine's inverse matrix is (1, tan(sx), 0, 0, 1, 0) for shear=[sx, 0],
    # (1, 0, 0, tan(sy), 1, 0) for shear=[0, sy], and (1, 0, -tx, 0, 1, -ty) for translate=[tx, ty].
    if n == "shear_x":
        return F.affine(img, angle=0.0, translate=[0, 0], scale=1.0,
                        shear=[math.degrees(math.atan(v)), 0.0], interpolation=_BILINEAR,
                        center=[0, 0])
    if n == "shear_y":
        return F.affine(img, angle=0.0, translate=[0, 0], scale=1.0,
                        shear=[0.0, math.degrees(math.atan(v))], interpolation=_BILINEAR,
                        center=[0, 0])
    if n == "translate_x":
        return F.affine(img, angle=0.0, translate=[-int(v), 0], scale=1.0, shear=[0.0, 0.0],
                        interpolation=_BILINEAR, center=[0, 0])
    if n == "translate_y":
        return F.affine(img, angle=0.0, translate=[0, -int(v)], scale=1.0, shear=[0.0, 0.0],
                        interpolation=_BILINEAR, center=[0, 0])
    raise KeyError(f"unknown AugMix op {n!r}; known: {', '.join(OPS)}")


def apply_chain(img: Image.Image, chain: Sequence[OpCall]) -> Image.Image:
    out = img.copy()
    for op in chain:
        out = apply_op(out, op)
    return out


def sample_plan(rng: np.random.Generator, severity: float, size: int, ops: Sequence[str] = OPS,
                width: int = 3, max_depth: int = 3) -> AugMixPlan:
    """Draw TPT's AugMix parameters: w ~ Dir(1,..,1), m ~ Beta(1,1), ``width`` chains of
    1..``max_depth`` ops chosen uniformly (with replacement) from ``ops``."""
    w = np.float32(rng.dirichlet([1.0] * width))
    m = np.float32(rng.beta(1.0, 1.0))
    chains = []
    for _ in range(width):
        depth = int(rng.integers(1, max_depth + 1))
        chains.append(tuple(sample_op(ops[int(rng.integers(len(ops)))], severity, rng, size)
                            for _ in range(depth)))
    return AugMixPlan(m=float(m), weights=tuple(float(x) for x in w), chains=tuple(chains))


def mix_processed(x_processed: torch.Tensor, chains_processed: Sequence[torch.Tensor],
                  weights: Sequence[float], m: float) -> torch.Tensor:
    """``m * x + (1 - m) * sum_i w_i * chain_i`` in float32 (TPT's arithmetic order)."""
    mix = torch.zeros_like(x_processed)
    for w, c in zip(weights, chains_processed):
        mix += float(np.float32(w)) * c
    m32 = np.float32(m)
    return float(m32) * x_processed + float(np.float32(1) - m32) * mix


def augmix_view(img: Image.Image, plan: AugMixPlan,
                 preprocess: Callable[[Image.Image], torch.Tensor]) -> torch.Tensor:
    """The AugMix view of an (already cropped/flipped) PIL image for a fixed plan."""
    x = preprocess(img)
    chains = [preprocess(apply_chain(img, chain)) for chain in plan.chains]
    return mix_processed(x, chains, plan.weights, plan.m)


# ------------------------------------------------------------------------ TTA.VIEWS_DEVICE cpu-fast
# The same ops on planar uint8 arrays [3, H, W] (one contiguous plane per channel). The colour ops
# build PIL's own look-up tables (ImageOps formulas) and apply them with numpy, translations are
# array shifts: PIL's pixels. Shears and rotations redo Pillow's bilinear ``transform``
# (Geometry.c: the source point of pixel (x, y) is ``M (x + .5, y + .5)``, sampled at minus half a
# pixel, neighbours clamped at the border, outside the image black, the result truncated) with
# PIL's float64 geometry (source points, inside test) but the blend ``a + (b - a) d`` in float32
# instead of float64 (``torch.lerp``: one pass, ``b - (b - a)(1 - d)`` for d >= 0.5): a truncation
# tips by one level where the blend lies within ~1e-5 of an integer (measured ~1e-5 of the values
# at TPT's magnitudes). A shear moves every row (column) by
# one constant, so it is two shifted copies and one blend with one offset per line, where PIL
# rounds (x + .5) + offset per pixel; round coefficients such as 0.1 can tip a few more values
# (at most 1 level: tests/views/test_cpu_fast_views.py).

_RAMP = np.arange(256, dtype=np.float64)


def _as_tensor(a: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` (shared memory) of a writable array with non-negative strides, else
    of a copy."""
    if not a.flags.writeable or min(a.strides, default=0) < 0:
        a = np.array(a)
    return torch.from_numpy(a)


def _apply_luts(x: np.ndarray, luts) -> np.ndarray:
    """Channel c through ``luts[c]`` (uint8[256]; None = identity); a new array."""
    out = np.empty_like(x)
    for c, lut in enumerate(luts):
        if lut is None:
            out[c] = x[c]
        else:
            np.take(lut, x[c], out=out[c], mode="clip")
    return out


def autocontrast_planes(x: np.ndarray) -> np.ndarray:
    """``ImageOps.autocontrast`` (cutoff 0): channel range [lo, hi] stretched to [0, 255] with
    ``int(i * scale + offset)``, ``scale = 255 / (hi - lo)``, ``offset = -lo * scale``."""
    flat = x.reshape(x.shape[0], -1)
    lo, hi = flat.min(axis=1), flat.max(axis=1)
    luts = []
    for lo_c, hi_c in zip(lo.tolist(), hi.tolist()):
        if hi_c <= lo_c:
            luts.append(None)
            continue
        scale = 255.0 / (hi_c - lo_c)
        luts.append(np.clip(np.trunc(_RAMP * scale + (-lo_c * scale)), 0, 255).astype(np.uint8))
    return _apply_luts(x, luts)


def _histogram(plane: np.ndarray) -> np.ndarray:
    h, w = plane.shape   # PIL's histogram of a zero-copy "L" view: ~3x faster than np.bincount
    return np.asarray(Image.frombuffer("L", (w, h), plane, "raw", "L", 0, 1).histogram(),
                      dtype=np.int64)


def equalize_planes(x: np.ndarray) -> np.ndarray:
    """``ImageOps.equalize``: ``step = (n - count of the last used value) // 255``,
    ``lut[i] = (step // 2 + #pixels below i) // step`` (clipped to 255 as PIL's ``point``);
    identity for a channel with one value or ``step == 0``."""
    x = np.ascontiguousarray(x)
    h = np.stack([_histogram(plane) for plane in x])                    # [3, 256]
    used = h > 0
    last = 255 - np.argmax(used[:, ::-1], axis=1)
    step = (h.sum(axis=1) - h[np.arange(len(h)), last]) // 255
    step[used.sum(axis=1) <= 1] = 0
    below = np.cumsum(h, axis=1) - h
    luts = np.minimum((step[:, None] // 2 + below) // np.maximum(step, 1)[:, None], 255)
    luts = luts.astype(np.uint8)
    return _apply_luts(x, [lut if s else None for lut, s in zip(luts, step.tolist())])


def posterize_planes(x: np.ndarray, bits: int) -> np.ndarray:
    if not 1 <= int(bits) <= 8:
        raise ValueError(f"posterize bits={bits}: must be 1..8 (as PIL's ImageOps.posterize)")
    return x & np.uint8(~(2 ** (8 - int(bits)) - 1) & 0xFF)


def solarize_planes(x: np.ndarray, threshold: float) -> np.ndarray:
    """``ImageOps.solarize``: values >= threshold become ``255 - v`` (= ``v ^ 255`` on uint8)."""
    t = math.ceil(float(threshold))      # v < threshold <=> v < ceil(threshold) for integers v
    if t > 255:
        return x.copy()
    if t <= 0:
        return x ^ np.uint8(255)
    return x ^ np.negative((x >= np.uint8(t)).view(np.uint8))


def shift_planes(x: np.ndarray, t: int, axis: int) -> np.ndarray:
    """``out[..., i, ...] = x[..., i + t, ...]`` along ``axis``, 0 outside (PIL's bilinear
    affine at an integer offset copies pixels: TPT's translations)."""
    out = np.zeros_like(x)
    n = x.shape[axis]
    if abs(t) >= n:
        return out
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    if t >= 0:
        src[axis], dst[axis] = slice(t, n), slice(0, n - t)
    else:
        src[axis], dst[axis] = slice(0, n + t), slice(-t, n)
    out[tuple(dst)] = x[tuple(src)]
    return out


def _runs(*keys: np.ndarray):
    """``(start, stop)`` of the runs of lines along which every array in ``keys`` is constant."""
    change = np.zeros(len(keys[0]) - 1, dtype=bool)
    for key in keys:
        change |= np.diff(key) != 0
    cut = np.flatnonzero(change) + 1
    return zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [len(keys[0])])).tolist())


def shear_planes(x: np.ndarray, coeff: float, axis: int) -> np.ndarray:
    """PIL's bilinear AFFINE ``(1, c, 0, 0, 1, 0)`` (``axis=2``, shear_x: row y samples
    ``x + c (y + .5)``) or ``(1, 0, 0, c, 1, 0)`` (``axis=1``, shear_y: column x samples
    ``y + c (x + .5)``) on planes [3, H, W]: along each line a constant shift ``t``, so the
    output is ``a + (b - a) * frac(t)`` (float32 ``torch.lerp``, truncated) of two shifted copies
    (``a = x[clamp(i + floor(t))]``, ``b`` its right neighbour), black where ``(i + .5) + t``
    (float64, as PIL) falls outside ``[0, n)``."""
    other = 3 - axis                       # the axis along which the shift changes
    n, m = x.shape[axis], x.shape[other]
    t = float(coeff) * (np.arange(m, dtype=np.float64) + 0.5)   # PIL: c * (y + .5)
    u = (t + 0.5) - 0.5                    # PIL: ((i + .5) + t) - .5, less i
    k = np.floor(u)
    frac = u - k
    k = k.astype(np.int64)

    def at(line, pos):                     # index tuple of [channels, line, pos] on ``axis``
        idx = [slice(None)] * 3
        idx[other], idx[axis] = line, pos
        return tuple(idx)

    shape = list(x.shape)
    shape[axis] = n + 1
    g = np.empty(shape, dtype=np.float32)  # g[.., i] = x[.., clamp(i + k)], i = 0..n (PIL clamps)
    for a, b in _runs(k):                  # straight from x: no padded copy
        lines, s = slice(a, b), int(k[a])
        first = min(max(-s, 0), n + 1)                 # i < first: i + s < 0 -> x[0]
        stop = max(min(n - s, n + 1), first)           # i >= stop: i + s >= n -> x[n - 1]
        if first > 0:
            g[at(lines, slice(0, first))] = x[at(lines, slice(0, 1))]
        if stop > first:
            g[at(lines, slice(first, stop))] = x[at(lines, slice(first + s, stop + s))]
        if stop < n + 1:
            g[at(lines, slice(stop, n + 1))] = x[at(lines, slice(n - 1, n))]
    fshape = [1, 1, 1]
    fshape[other] = m
    lo, hi = g[at(slice(None), slice(0, n))], g[at(slice(None), slice(1, n + 1))]
    v = torch.lerp(torch.from_numpy(lo), torch.from_numpy(hi),
                   torch.from_numpy(frac.astype(np.float32).reshape(fshape))).numpy()
    out = v.astype(np.uint8)              # a + (b - a) dx in float32; v >= 0: truncated
    # inside iff 0 <= (i + .5) + t < n in float64, as PIL tests its source coordinate
    pos = np.arange(n, dtype=np.float64) + 0.5
    pos = pos[None, :] + t[:, None] if axis == 2 else pos[:, None] + t[None, :]
    out *= (pos >= 0) & (pos < n)
    return out


def _rotate_matrix(angle: float, width: int, height: int) -> Tuple[float, ...]:
    """The inverse matrix ``Image.rotate(angle)`` hands to ``transform`` (centre (w/2, h/2),
    coefficients rounded to 15 decimals, as Pillow does)."""
    a = -math.radians(angle % 360.0)
    m = [round(math.cos(a), 15), round(math.sin(a), 15), 0.0,
         round(-math.sin(a), 15), round(math.cos(a), 15), 0.0]
    cx, cy = width / 2, height / 2
    m[2] = m[0] * -cx + m[1] * -cy + m[2] + cx
    m[5] = m[3] * -cx + m[4] * -cy + m[5] + cy
    return tuple(m)


@lru_cache(maxsize=16)
def _affine_taps(matrix: Tuple[float, ...], height: int, width: int):
    """Per output pixel (float64 geometry, as PIL): the flat indices of its 4 bilinear
    neighbours in the edge-padded plane [H + 2, W + 2] (0 outside), dx and dy as float32, and
    whether it is inside (~2 MB at 224 x 224; TPT's severity 1 draws 4 angles: +-1, +-2)."""
    a0, a1, a2, a3, a4, a5 = matrix
    xo = np.arange(width, dtype=np.float64)[None, :] + 0.5
    yo = np.arange(height, dtype=np.float64)[:, None] + 0.5
    xin = a0 * xo + a1 * yo + a2
    yin = a3 * xo + a4 * yo + a5
    inside = ((xin >= 0) & (xin < width) & (yin >= 0) & (yin < height)).ravel()
    xin, yin = (xin - 0.5).ravel(), (yin - 0.5).ravel()
    xf, yf = np.floor(xin), np.floor(yin)
    dx, dy = (xin - xf).astype(np.float32), (yin - yf).astype(np.float32)
    # inside: xf in [-1, W - 1], yf in [-1, H - 1]; padded, the neighbours PIL clamps to the
    # border are the padding's copies of it
    row = width + 2
    top_left = np.where(inside, (yf.astype(np.intp) + 1) * row + (xf.astype(np.intp) + 1), 0)
    return (top_left, top_left + 1, top_left + row, top_left + (row + 1)), dx, dy, inside


def _padded_float(x: np.ndarray) -> np.ndarray:
    """float32 [C, (H + 2) (W + 2)]: the planes with a one-pixel copy of their border around."""
    c, h, w = x.shape
    p = np.empty((c, h + 2, w + 2), dtype=np.float32)
    p[:, 1:-1, 1:-1] = x
    p[:, 0, 1:-1], p[:, -1, 1:-1] = x[:, 0], x[:, -1]
    p[:, :, 0], p[:, :, -1] = p[:, :, 1], p[:, :, -2]
    return p.reshape(c, -1)


def affine_planes(x: np.ndarray, matrix: Sequence[float]) -> np.ndarray:
    """PIL's bilinear ``transform(AFFINE, matrix)`` (black outside) on planes [3, H, W], with
    PIL's geometry (float64, cached per matrix: TPT's rotations take a handful of integer angles)
    and PIL's blend ``v1 = p00 + (p01 - p00) dx``, ``v2 = p10 + (p11 - p10) dx``,
    ``v1 + (v2 - v1) dy`` computed in float32 (``torch.lerp``) instead of float64, truncated:
    within one level of PIL (tests/views/test_cpu_fast_views.py)."""
    c, h, w = x.shape
    (i00, i01, i10, i11), dx, dy, inside = _affine_taps(tuple(float(v) for v in matrix), h, w)
    flat = _padded_float(x)
    p00, p10 = flat.take(i00, axis=1), flat.take(i10, axis=1)
    v1, v2 = flat.take(i01, axis=1), flat.take(i11, axis=1)
    t1, t2, tdx = torch.from_numpy(v1), torch.from_numpy(v2), torch.from_numpy(dx)
    torch.lerp(torch.from_numpy(p00), t1, tdx, out=t1)
    torch.lerp(torch.from_numpy(p10), t2, tdx, out=t2)
    torch.lerp(t1, t2, torch.from_numpy(dy), out=t2)
    out = v2.astype(np.uint8)             # v >= 0: truncated as PIL's (UINT8) cast
    out *= inside
    return out.reshape(c, h, w)


def apply_op_planes(x: np.ndarray, op: OpCall) -> np.ndarray:
    """:func:`apply_op` on planes uint8 [3, H, W]: the same pixels for the colour ops and
    translations, within one level for shears and rotations (see the section comment); never
    writes into ``x`` (it may return ``x`` itself for an identity)."""
    n, v = op.name, op.magnitude
    if n == "autocontrast":
        return autocontrast_planes(x)
    if n == "equalize":
        return equalize_planes(x)
    if n == "posterize":
        return posterize_planes(x, int(v))
    if n == "solarize":
        return solarize_planes(x, float(v))
    if n == "translate_x":
        return shift_planes(x, int(v), 2)
    if n == "translate_y":
        return shift_planes(x, int(v), 1)
    if n == "rotate":
        angle = float(v) % 360.0
        if angle == 0:
            return x
        if angle == 180:
            return np.ascontiguousarray(x[:, ::-1, ::-1])
        if angle in (90.0, 270.0) and x.shape[1] == x.shape[2]:
            return np.ascontiguousarray(np.rot90(x, 1 if angle == 90 else -1, axes=(1, 2)))
        return affine_planes(x, _rotate_matrix(angle, x.shape[2], x.shape[1]))
    if n in ("shear_x", "shear_y"):
        if _inverse_affine_matrix is None:
            return np.ascontiguousarray(np.asarray(apply_op(Image.fromarray(
                np.ascontiguousarray(x.transpose(1, 2, 0))), op)).transpose(2, 0, 1))
        # the matrix F.affine builds (tan(radians(degrees(atan(v)))), not v itself)
        shear = [math.degrees(math.atan(v)), 0.0] if n == "shear_x" else \
            [0.0, math.degrees(math.atan(v))]
        m = _inverse_affine_matrix([0.0, 0.0], 0.0, [0.0, 0.0], 1.0, shear)
        if n == "shear_x" and (m[0], m[2], m[3], m[4], m[5]) == (1, 0, 0, 1, 0):
            return shear_planes(x, m[1], 2)
        if n == "shear_y" and (m[0], m[1], m[2], m[4], m[5]) == (1, 0, 0, 1, 0):
            return shear_planes(x, m[3], 1)
        return affine_planes(x, m)
    raise KeyError(f"unknown AugMix op {n!r}; known: {', '.join(OPS)}")


def apply_op_fast(img: np.ndarray, op: OpCall) -> np.ndarray:
    """:func:`apply_op_planes` on an RGB uint8 array [H, W, 3] (returns [H, W, 3])."""
    planes = np.ascontiguousarray(np.moveaxis(img, 2, 0))
    return np.ascontiguousarray(np.moveaxis(apply_op_planes(planes, op), 0, 2))


def apply_chain_planes(x: np.ndarray, chain: Sequence[OpCall]) -> np.ndarray:
    for op in chain:
        x = apply_op_planes(x, op)
    return x


@lru_cache(maxsize=8)
def _norm_consts(mean: Tuple[float, ...], std: Tuple[float, ...]):
    m = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)
    return m, s, np.float32(1) / (np.float32(255) * s), m / s


def normalise_into(out: np.ndarray, x: np.ndarray, mean: Sequence[float],
                   std: Sequence[float]) -> np.ndarray:
    """``Normalize(ToTensor(x))`` of planes uint8 [3, H, W] written into float32 ``out``, in
    torchvision's float32 order (``/ 255``, ``- mean``, ``/ std``): bit-identical."""
    m, s, _, _ = _norm_consts(tuple(mean), tuple(std))
    np.divide(x, np.float32(255), out=out, dtype=np.float32)
    out -= m
    out /= s
    return out


def augmix_planes_into(out: np.ndarray, x: np.ndarray, plan: AugMixPlan,
                       mean: Sequence[float], std: Sequence[float],
                       tmp: np.ndarray = None) -> np.ndarray:
    """TPT's AugMix view of planes uint8 [3, H, W] written into float32 ``out`` [3, H, W]:
    ``(sum_k c_k x_k) / (255 std) - mean / std`` with ``c = (m, (1-m) w_1, (1-m) w_2, (1-m) w_3)``
    and ``x_k`` the chains: TPT's ``m * pre(x) + (1 - m) * sum_i w_i pre(chain_i(x))`` with the
    affine ``pre = Normalize . ToTensor`` taken once (sum c_k = 1), so only float rounding
    differs (~1e-6). ``tmp``: optional float32 scratch of ``out``'s shape.

    Each uint8 source is cast into ``tmp`` by a plain copy and added with its coefficient (torch's
    vectorised same-dtype kernels, ~1.5x faster single-threaded than numpy's mixed-dtype
    multiplies with a broadcast per-channel factor)."""
    _, _, inv, shift = _norm_consts(tuple(mean), tuple(std))
    tmp = np.empty(out.shape, dtype=np.float32) if tmp is None else tmp
    acc, t = torch.from_numpy(out), torch.from_numpy(tmp)
    m = np.float32(plan.m)
    chains = [apply_chain_planes(x, chain) for chain in plan.chains]
    acc.copy_(_as_tensor(x))
    acc.mul_(float(m))
    for w, c in zip(plan.weights, chains):
        t.copy_(_as_tensor(c))
        acc.add_(t, alpha=float((np.float32(1) - m) * np.float32(w)))
    acc.mul_(torch.from_numpy(inv)).sub_(torch.from_numpy(shift))
    return out
