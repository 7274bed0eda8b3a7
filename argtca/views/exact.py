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

With ``TTA.VIEWS_FLOAT engine`` (the default on CUDA) the loader workers stop before the float
stage and ship the exact uint8 images; :class:`PixelMixer` does ExactMixer's float work on the
engine's device, with the same numbers. With ``TTA.VIEWS_OPS engine`` too (also the default on
CUDA) they stop after the crops, and the mixer first runs the AugMix chains there
(:class:`argtca.views.exact_ops.ChainRunner`: Pillow's arithmetic, the same pixels).

tests/views/test_exact_views.py proves the identity against TPT's own ``augmix_ops.py`` and
``AugMixAugmenter`` (from the fetched repository) and against ``ViewGenerator.random_view``.
"""
from __future__ import annotations

from typing import Sequence, Tuple, Union

import numpy as np
import torch
from PIL import Image, ImageOps

from .augmix import AugMixPlan, OpCall
from .exact_ops import ChainRunner

__all__ = ["apply_op_exact", "apply_chain_exact", "ExactMixer", "preprocess_lut", "PixelMixer",
           "MIX_COLUMNS"]

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


def preprocess_lut(mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """float32 [3, 256]: ``ToTensor + Normalize`` of every uint8 level of every channel, computed
    on the CPU with :meth:`ExactMixer.preprocess_into`'s very operations (``to(float32)``,
    ``/ 255``, ``- mean``, ``/ std``, element-wise and correctly rounded), so a look-up in it gives
    the same float32 as the conversion of a pixel, on any device: a gather does no arithmetic."""
    mixer = ExactMixer(1, mean, std)
    levels = torch.arange(256, dtype=torch.uint8).expand(3, 1, 256)
    dst = torch.empty(3, 1, 256)
    dst.copy_(levels)
    return dst.div_(255).sub_(mixer.mean).div_(mixer.std).view(3, 256)


# the per-view float32 numbers the loader workers ship with the pixels of an AugMix view: the
# three chain weights, m and 1 - m, each as ExactMixer.augmix_into computes it (numpy float32)
MIX_COLUMNS = ("w1", "w2", "w3", "m", "1-m")


def mix_row(plan: AugMixPlan) -> Tuple[float, ...]:
    """:data:`MIX_COLUMNS` of ``plan`` (float32 values) in ExactMixer's arithmetic."""
    m32 = np.float32(plan.m)
    return tuple(float(np.float32(w)) for w in plan.weights) + (float(m32),
                                                                 float(np.float32(1) - m32))


class PixelMixer:
    """:class:`ExactMixer`'s float stage on a batch of views at once, on any device (the engine's:
    ``TTA.VIEWS_FLOAT engine``), from the exact uint8 pixels the loader workers ship: view 0 and
    each plain view as one image, each AugMix view as four (the crop, then its three chain
    results) with its :data:`MIX_COLUMNS`.

    The same float32 numbers, bit for bit: ``ToTensor + Normalize`` is a gather from
    :func:`preprocess_lut` (no division on the device: CUDA divides a tensor by a Python number
    as a multiplication by its reciprocal), then ExactMixer's operations in its order, each a
    separate element-wise kernel (no fused multiply-add): ``mix = 0``, ``mix += w_i * c_i``
    three times, ``m * x + (1 - m) * mix``, then one rounding to the output dtype (float16:
    round to nearest even on either device). The weights are float32 tensors broadcast over a
    view ([V, 1, 1, 1]): an element-wise float32 product is the one a float32 scalar gives."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], augmix: bool,
                 device: Union[str, torch.device] = "cpu", ops: bool = False, size: int = 0):
        self.augmix = bool(augmix)
        self.device = torch.device(device)
        # TTA.VIEWS_OPS engine: the items hold the crops and their encoded chains, run here
        # (``size``, the views' side: the chains' kernels are compiled ahead)
        self.chains = ChainRunner(self.device, size=size) if ops and self.augmix else None
        self.lut = preprocess_lut(mean, std).reshape(-1).to(self.device)   # [768]
        # channel c's levels start at 256 c in the flat table
        self.offsets = torch.tensor([0, 256, 512], dtype=torch.int32, device=self.device)
        if self.device.type == "cuda":
            # used on the loader's copy stream, which does not wait for the stream that wrote them
            torch.cuda.current_stream(self.device).synchronize()

    def warm_up(self) -> None:
        """:meth:`ChainRunner.warm_up` (after the loader's workers forked)."""
        if self.chains is not None:
            self.chains.warm_up()

    @staticmethod
    def n_images(n_views: int, augmix: bool) -> int:
        """uint8 images an item of ``n_views`` views ships: view 0, then 4 (AugMix) or 1 a view."""
        return 1 + (int(n_views) - 1) * (4 if augmix else 1)

    def normalise(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 [N, S, S, 3] (PIL's layout) -> float32 [N, 3, S, S] (a channels-last view)."""
        idx = pixels + self.offsets   # uint8 + int32: int32, one kernel
        return self.lut[idx].permute(0, 3, 1, 2)

    def __call__(self, pixels: torch.Tensor, mix: torch.Tensor, out: torch.Tensor,
                 plans: np.ndarray = None) -> torch.Tensor:
        """Views of one item into ``out`` [V, 3, S, S] (float32 or float16) from ``pixels``
        uint8 [n_images(V), S, S, 3] and ``mix`` float32 [V - 1, len(MIX_COLUMNS)] (unused
        without AugMix), all on this mixer's device. With a :class:`ChainRunner` (``ops``):
        ``pixels`` [V, S, S, 3] holds view 0 and the crops, ``plans`` (float64 [V - 1, 3, depth,
        PLAN_WIDTH], on the host) their chains, run here first."""
        n = out.shape[0]
        ops = self.chains is not None
        if tuple(pixels.shape) != (self.n_images(n, self.augmix and not ops), *out.shape[2:], 3):
            raise ValueError(f"PixelMixer: pixels {list(pixels.shape)} do not hold {n} views of "
                             f"{list(out.shape[1:])} (AugMix {'on' if self.augmix else 'off'})")
        if not self.augmix:
            return out.copy_(self.normalise(pixels))
        out[0].copy_(self.normalise(pixels[:1])[0])
        if n == 1:
            return out
        if ops:
            if plans is None:
                raise ValueError("PixelMixer: the AugMix ops run here (ops=True) but the item "
                                 "holds no plans: build its dataset with ops=True as well")
            crops = pixels[1:]
            runs = crops.unsqueeze(1).expand(n - 1, 3, *crops.shape[1:]).flatten(0, 1)
            chains = self.chains(runs, np.asarray(plans).reshape(3 * (n - 1),
                                                                 *np.shape(plans)[2:]))
            crop, chain = self.normalise(crops), self.normalise(chains).unflatten(0, (n - 1, 3))
            chain = chain.unbind(1)
        else:
            views = self.normalise(pixels[1:]).unflatten(0, (n - 1, 4))   # [V-1, 4, 3, S, S]
            crop, chain = views[:, 0], [views[:, 1 + i] for i in range(3)]
        col = mix.to(torch.float32).view(n - 1, len(MIX_COLUMNS), 1, 1, 1).unbind(1)
        acc = torch.zeros_like(crop)
        for i in range(3):
            acc.add_(chain[i] * col[i])                      # mix += w_i * pre(chain_i)
        x = crop * col[3]                                    # m * pre(x)
        x.add_(acc.mul_(col[4]))                             # + (1 - m) * mix
        out[1:].copy_(x)
        return out
