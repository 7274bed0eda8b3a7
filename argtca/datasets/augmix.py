"""TPT's AugMix (azshue/TPT ``data/augmix_ops.py`` + ``data/datautils.py::augmix``), re-written on
``torchvision.transforms.functional`` with explicit random generators.

Sampling and application are separate so that a mixed view can be recomputed by hand:

* ``sample_op(name, severity, rng, size) -> OpCall``: draws the op's magnitude exactly as TPT does
  (same draws, same order, same level mapping);
* ``apply_op(img, op)``: applies a fixed ``OpCall`` to a PIL image;
* ``sample_plan(rng, severity, size) -> AugMixPlan``: the chain weights ``w ~ Dir(1,1,1)``, the mix
  ``m ~ Beta(1,1)`` and 3 chains of 1-3 ops (TPT's draw order: dirichlet, beta, then per chain the
  depth and per op the op choice and its magnitude);
* ``augmix_view(x, plan, preprocess)``: ``m * preprocess(x) + (1 - m) * sum_i w_i * preprocess(chain_i(x))``
  (mixing after normalisation, float32 as in TPT), with ``mix_processed`` doing the arithmetic.

Level mapping (TPT/Google AugMix): ``level = U(0.1, severity)``; ``int_parameter(l, max) =
int(l * max / 10)``; ``float_parameter(l, max) = l * max / 10``. At severity 1 that gives posterize
4 bits, rotation 0-3 degrees, solarize threshold 231-254, shear 0.003-0.03, translation 0-size/30 px.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, Tuple

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode

__all__ = ["OPS", "OpCall", "AugMixPlan", "int_parameter", "float_parameter", "sample_level",
           "sample_op", "apply_op", "apply_chain", "sample_plan", "mix_processed", "augmix_view",
           "apply_op_fast", "apply_chain_fast", "augmix_mixed_255"]

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
    # F.affine's inverse matrix is (1, tan(sx), 0, 0, 1, 0) for shear=[sx, 0], (1, 0, 0, tan(sy), 1, 0)
    # for shear=[0, sy], and (1, 0, -tx, 0, 1, -ty) for translate=[tx, ty].
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
def _shift(a: np.ndarray, t: int, axis: int) -> np.ndarray:
    """``out[x] = a[x + t]`` along ``axis`` (0 where x + t falls outside), uint8 [H, W, 3]."""
    out = np.zeros_like(a)
    n = a.shape[axis]
    if abs(t) >= n:
        return out
    src = [slice(None)] * a.ndim
    dst = [slice(None)] * a.ndim
    if t >= 0:
        src[axis], dst[axis] = slice(t, n), slice(0, n - t)
    else:
        src[axis], dst[axis] = slice(0, n + t), slice(-t, n)
    out[tuple(dst)] = a[tuple(src)]
    return out


def apply_op_fast(img: np.ndarray, op: OpCall) -> np.ndarray:
    """:func:`apply_op` on an RGB uint8 array [H, W, 3]. Integer translations are array shifts
    (PIL's bilinear sampling at integer offsets copies pixels, so this is bit-identical: tested);
    a 0-degree rotation is the identity (as PIL's ``rotate``); every other op is PIL's."""
    n, v = op.name, op.magnitude
    if n == "translate_x":
        return _shift(img, int(v), 1)
    if n == "translate_y":
        return _shift(img, int(v), 0)
    if n == "rotate" and float(v) % 360 == 0:
        return img
    return np.asarray(apply_op(Image.fromarray(img), op))


def apply_chain_fast(img: np.ndarray, chain: Sequence[OpCall]) -> np.ndarray:
    out = img
    for op in chain:
        out = apply_op_fast(out, op)
    return out


def augmix_mixed_255(img: np.ndarray, plan: AugMixPlan) -> np.ndarray:
    """``m * x + (1 - m) * sum_i w_i * chain_i(x)`` on the 0-255 scale (float32 [H, W, 3]):
    TPT's mix taken once before ``ToTensor + Normalize`` instead of after (both are affine, so
    only float rounding differs, ~1e-6)."""
    m = np.float32(plan.m)
    coeff = np.asarray([m] + [(np.float32(1) - m) * np.float32(w) for w in plan.weights],
                       dtype=np.float32)
    out = img.astype(np.float32)
    out *= coeff[0]
    for k, chain in enumerate(plan.chains):
        c = apply_chain_fast(img, chain).astype(np.float32)
        c *= coeff[k + 1]
        out += c
    return out
