"""TPT's exact AugMix views with less work: the same pixels and the same float32 numbers as
``ViewGenerator.random_view`` (and TPT's ``AugMixAugmenter``), bit for bit.

Where the time of the PIL path went (``benchmarks/probes/views_profile.py``): PIL's bilinear
``transform`` (rotations, shears and translations: ~0.85 ms each at 224 px, about half of a
view), four ``ToTensor + Normalize`` a view and the mix, each allocating fresh float32 tensors,
and torchvision's wrappers around PIL. What changes here, none of it a change of numbers:

* **translations** are crops of the image with a black border (``Image.crop`` outside the image
  fills with zeros): PIL's bilinear AFFINE ``(1, 0, t, 0, 1, 0)`` at an integer ``t`` samples
  every pixel at ``dx = dy = 0``, so it copies ``input(x + t, y)`` and writes black where
  ``x + t`` falls outside, which is what the crop does (~0.02 ms instead of ~0.85);
* the other ops call PIL directly with TPT's own arguments (``ImageOps``, ``Image.rotate``,
  ``Image.transform`` with ``(1, level, 0, 0, 1, 0)``), without torchvision's wrappers;
* ``ToTensor + Normalize`` and the mix run as the same torch operations in the same order
  (``to(float32)``, ``/ 255``, ``- mean``, ``/ std``; ``mix = 0``, ``mix += w_i * c_i``,
  ``m * x + (1 - m) * mix``), each element-wise and correctly rounded, in place on three
  preallocated float32 planes that stay in the cache: no allocation, no page fault.

tests/views/test_exact_views.py proves the identity against TPT's own ``augmix_ops.py`` and
``AugMixAugmenter`` (from the fetched repository) and against ``ViewGenerator.random_view``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from PIL import Image, ImageOps

from .augmix import AugMixPlan, OpCall

__all__ = ["apply_op_exact", "apply_chain_exact", "ExactMixer"]

_BILINEAR = Image.Resampling.BILINEAR if hasattr(Image, "Resampling") else Image.BILINEAR
_AFFINE = Image.Transform.AFFINE if hasattr(Image, "Transform") else Image.AFFINE


def apply_op_exact(img: Image.Image, op: OpCall) -> Image.Image:
    """:func:`argtca.views.augmix.apply_op` with TPT's PIL calls; translations as crops."""
    n, v = op.name, op.magnitude
    if n == "autocontrast":
        return ImageOps.autocontrast(img)
    if n == "equalize":
        return ImageOps.equalize(img)
    if n == "posterize":
        return ImageOps.posterize(img, int(v))
    if n == "solarize":
        return ImageOps.solarize(img, v)
    if n == "rotate":
        return img.rotate(v, resample=_BILINEAR)
    w, h = img.size
    if n == "translate_x":
        t = int(v)
        return img.crop((t, 0, t + w, h))
    if n == "translate_y":
        t = int(v)
        return img.crop((0, t, w, t + h))
    if n == "shear_x":
        return img.transform((w, h), _AFFINE, (1, v, 0, 0, 1, 0), resample=_BILINEAR)
    if n == "shear_y":
        return img.transform((w, h), _AFFINE, (1, 0, 0, v, 1, 0), resample=_BILINEAR)
    raise KeyError(f"unknown AugMix op {n!r}")


def apply_chain_exact(img: Image.Image, chain: Sequence[OpCall]) -> Image.Image:
    for op in chain:
        img = apply_op_exact(img, op)
    return img


def _pixels(img: Image.Image) -> torch.Tensor:
    """uint8 [H, W, 3] of an RGB image (numpy's copy of PIL's buffer, no second copy)."""
    return torch.from_numpy(np.array(img, dtype=np.uint8))


class ExactMixer:
    """``ToTensor + Normalize`` and TPT's AugMix mix of one view, written into a given float32
    (or float16: rounded once from the float32 result) tensor [3, S, S], with torchvision's and
    TPT's operations in their order on preallocated planes."""

    def __init__(self, size: int, mean: Sequence[float], std: Sequence[float]):
        # torchvision's Normalize: torch.as_tensor(mean, dtype=tensor.dtype).view(-1, 1, 1)
        self.mean = torch.as_tensor(list(mean), dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.as_tensor(list(std), dtype=torch.float32).view(-1, 1, 1)
        self.x = torch.empty(3, size, size)
        self.t = torch.empty(3, size, size)
        self.mix = torch.empty(3, size, size)

    def preprocess_into(self, dst: torch.Tensor, img: Image.Image) -> torch.Tensor:
        """``F.normalize(F.to_tensor(img), mean, std)`` into ``dst`` (float32 [3, S, S])."""
        dst.copy_(_pixels(img).permute(2, 0, 1))   # exact uint8 -> float32
        return dst.div_(255).sub_(self.mean).div_(self.std)

    def plain_into(self, out: torch.Tensor, img: Image.Image) -> torch.Tensor:
        if out.dtype == torch.float32:
            return self.preprocess_into(out, img)
        return out.copy_(self.preprocess_into(self.x, img))

    def augmix_into(self, out: torch.Tensor, crop: Image.Image, chains: Sequence[Image.Image],
                    plan: AugMixPlan) -> torch.Tensor:
        """TPT: ``mix = zeros; mix += w_i * pre(chain_i); m * pre(x) + (1 - m) * mix`` with
        ``w``, ``m`` float32 (numpy scalars times float32 tensors: float32 products)."""
        t, mix = self.t, self.mix
        x = out if out.dtype == torch.float32 else self.x
        mix.zero_()
        for w, c in zip(plan.weights, chains):
            self.preprocess_into(t, c)
            mix.add_(t.mul_(float(np.float32(w))))
        m32 = np.float32(plan.m)
        self.preprocess_into(x, crop)
        x.mul_(float(m32)).add_(mix.mul_(float(np.float32(1) - m32)))
        return out if x is out else out.copy_(x)
