"""TPT's test-time view generator, a test-time dataset and its loader.

View 0 is the deterministic ``Resize(SIZE, bicubic, short side) + CenterCrop(SIZE)``; views
1..N_VIEWS-1 are ``RandomResizedCrop(SIZE) + RandomHorizontalFlip`` (+ AugMix when on), all followed
by ``ToTensor + Normalize`` (``azshue/TPT data/datautils.py::AugMixAugmenter``).

Reproducibility: the random views of item ``index`` are drawn from generators seeded by
``(seed, index)`` only (``item_rngs``), never from the global RNGs, so they do not depend on the
processing order, on the number of DataLoader workers or on the other images. Crop and flip use a
``torch.Generator`` with torchvision's own sampling algorithm; AugMix uses a ``numpy`` Generator.
"""
from __future__ import annotations

import math
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode

from .augmix import (OPS, AugMixPlan, augmix_planes_into, augmix_view, normalise_into,
                     sample_plan)
from .exact import MIX_COLUMNS, ExactMixer, PixelMixer, apply_chain_exact, mix_row
from .exact_ops import PLAN_WIDTH, encode_plan
from argtca.datasets.images import to_rgb

__all__ = ["CLIP_MEAN", "CLIP_STD", "item_rngs", "random_resized_crop_params", "ViewGenerator",
           "FastViewGenerator",
           "augmix_enabled", "build_view_generator"]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

_INTERP = {"bicubic": InterpolationMode.BICUBIC, "bilinear": InterpolationMode.BILINEAR,
           "nearest": InterpolationMode.NEAREST}


def item_rngs(seed: int, index: int) -> Tuple[torch.Generator, np.random.Generator]:
    """Independent (torch, numpy) generators for item ``index`` under run seed ``seed``.

    Both are derived from ``numpy.random.SeedSequence([seed mod 2**64, index])`` (a hash of the
    pair), so different indices or seeds give unrelated streams.
    """
    if int(index) < 0:
        raise ValueError(f"item index must be >= 0, got {index}")
    ss = np.random.SeedSequence([int(seed) % (1 << 64), int(index)])
    torch_ss, np_ss = ss.spawn(2)
    tg = torch.Generator()
    tg.manual_seed(int(torch_ss.generate_state(1, np.uint64)[0]))
    return tg, np.random.Generator(np.random.PCG64(np_ss))


def random_resized_crop_params(width: int, height: int, scale: Sequence[float],
                               ratio: Sequence[float], generator: torch.Generator
                               ) -> Tuple[int, int, int, int]:
    """``(top, left, h, w)`` of ``torchvision.transforms.RandomResizedCrop.get_params``, drawing the
    same numbers in the same order but from ``generator`` instead of the global torch RNG."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        aspect = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1],
                                                   generator=generator)).item()
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = torch.randint(0, height - h + 1, size=(1,), generator=generator).item()
            j = torch.randint(0, width - w + 1, size=(1,), generator=generator).item()
            return int(i), int(j), h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _as_size(size: Any) -> int:
    if isinstance(size, (list, tuple)):
        if len(size) == 2 and int(size[0]) == int(size[1]):
            size = size[0]
        else:
            raise ValueError(f"INPUT.SIZE={list(size)}: test-time views are square; give one int "
                             f"(e.g. 224) or a pair of equal values")
    size = int(size)
    if size <= 0:
        raise ValueError(f"INPUT.SIZE={size}: must be > 0")
    return size


class ViewGenerator:
    """Callable ``(PIL image, seed, index) -> FloatTensor[n_views, 3, size, size]``.

    ``augmix``: mix 3 AugMix chains into every random view (TPT's fine-grained setting).
    ``scale``/``ratio``/bilinear crop resampling are torchvision's ``RandomResizedCrop`` defaults,
    which TPT uses (``transforms.RandomResizedCrop(224)``).
    """

    def __init__(self, size: int = 224, n_views: int = 64, augmix: bool = False,
                 severity: float = 1, mean: Sequence[float] = CLIP_MEAN,
                 std: Sequence[float] = CLIP_STD, interpolation: str = "bicubic",
                 scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0)):
        self.size = _as_size(size)
        if int(n_views) < 1:
            raise ValueError(f"TTA.N_VIEWS={n_views}: need at least 1 view (view 0 = center crop)")
        self.n_views = int(n_views)
        self.augmix = bool(augmix)
        if self.augmix and not float(severity) > 0.1:
            raise ValueError(f"TTA.AUGMIX_SEVERITY={severity}: must be > 0.1 (levels are "
                             f"drawn from U(0.1, severity)); TPT uses 1")
        self.severity = float(severity)
        if str(interpolation).lower() not in _INTERP:
            raise ValueError(f"INPUT.INTERPOLATION={interpolation!r}: use one of "
                             f"{', '.join(_INTERP)}")
        self.interpolation = _INTERP[str(interpolation).lower()]
        self.mean = [float(x) for x in mean]
        self.std = [float(x) for x in std]
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"INPUT.PIXEL_MEAN={self.mean} / PIXEL_STD={self.std}: need 3 values "
                             f"each, std > 0")
        self.scale = tuple(float(x) for x in scale)
        self.ratio = tuple(float(x) for x in ratio)

    # -- pieces (public so that tests and the batched engine can recompute them) --
    def preprocess(self, img: Image.Image) -> torch.Tensor:
        return F.normalize(F.to_tensor(img), self.mean, self.std)

    def base_crop(self, img: Image.Image) -> Image.Image:
        return F.center_crop(F.resize(img, self.size, interpolation=self.interpolation),
                             [self.size, self.size])

    def base_view(self, img: Image.Image) -> torch.Tensor:
        return self.preprocess(self.base_crop(img))

    def preaugment(self, img: Image.Image, generator: torch.Generator) -> Image.Image:
        """RandomResizedCrop(size) (bilinear, torchvision defaults as in TPT) +
        RandomHorizontalFlip."""
        width, height = img.size
        i, j, h, w = random_resized_crop_params(width, height, self.scale, self.ratio, generator)
        out = F.resized_crop(img, i, j, h, w, [self.size, self.size],
                             interpolation=InterpolationMode.BILINEAR, antialias=True)
        if torch.rand(1, generator=generator).item() < 0.5:
            out = F.hflip(out)
        return out

    def random_view(self, img: Image.Image, generator: torch.Generator,
                    rng: np.random.Generator) -> torch.Tensor:
        crop = self.preaugment(img, generator)
        if not self.augmix:
            return self.preprocess(crop)
        plan = sample_plan(rng, self.severity, self.size, OPS)
        return augmix_view(crop, plan, self.preprocess)

    DTYPES = (torch.float32, torch.float16)   # the dtypes __call__ writes directly

    def __call__(self, img: Image.Image, seed: int, index: int,
                 dtype: torch.dtype = torch.float32,
                 out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The views, bit-identical to :meth:`random_view` view by view (TPT's pipeline), made
        with less work (:mod:`argtca.views.exact`); ``dtype`` float16 rounds each float32 view
        once, the same values as ``.to(float16)`` of the float32 views. ``out``: a tensor
        [n_views, 3, size, size] of ``dtype`` to write them into (a loader worker's shared
        memory), else a new one."""
        views = self._out(dtype, out)
        if img.mode != "RGB":
            img = to_rgb(img)   # 16-bit, float and transparent images scaled/composited correctly
        mixer = self._mixer()
        mixer.plain_into(views[0], self.base_crop(img))
        for v, (crop, plan, chains) in enumerate(self.random_images(img, seed, index), 1):
            if plan is None:
                mixer.plain_into(views[v], crop)
            else:
                mixer.augmix_into(views[v], crop, chains, plan)
        return views

    def random_images(self, img: Image.Image, seed: int, index: int
                      ) -> Iterator[Tuple[Image.Image, Optional[AugMixPlan], List[Image.Image]]]:
        """``(crop, AugMix plan, chain results)`` of views 1..n_views-1 of an RGB image, in the
        order their draws are taken (the plan None and no chains without AugMix): the exact
        uint8 images :meth:`__call__` converts and mixes."""
        for crop, plan in self.random_crops(img, seed, index):
            yield crop, plan, [] if plan is None else [apply_chain_exact(crop, chain)
                                                       for chain in plan.chains]

    def random_crops(self, img: Image.Image, seed: int, index: int
                     ) -> Iterator[Tuple[Image.Image, Optional[AugMixPlan]]]:
        """``(crop, AugMix plan)`` of views 1..n_views-1 (the plan None without AugMix): what
        :meth:`random_images` draws, before the chains are applied."""
        if self.n_views == 1:
            return
        tg, rng = item_rngs(seed, index)
        for _ in range(1, self.n_views):
            crop = self.preaugment(img, tg)
            yield crop, sample_plan(rng, self.severity, self.size, OPS) if self.augmix else None

    def pixels(self, img: Image.Image, seed: int, index: int,
               out: Optional[Tuple[torch.Tensor, ...]] = None, ops: bool = False
               ) -> Tuple[torch.Tensor, ...]:
        """The exact uint8 images of the views, before any float work (``TTA.VIEWS_FLOAT
        engine``): ``(pixels uint8 [n, S, S, 3], mix float32 [n_views - 1, 5])``, ``pixels``
        holding view 0, then per random view its crop and (AugMix) its three chain results,
        ``mix`` each AugMix view's :data:`argtca.views.exact.MIX_COLUMNS`.
        :class:`argtca.views.exact.PixelMixer` turns them into :meth:`__call__`'s views, bit for
        bit. ``ops`` (``TTA.VIEWS_OPS engine``): the chains are not applied here; ``pixels``
        holds view 0 and the crops only, and a third tensor, float64 [n_views - 1, 3, 3,
        PLAN_WIDTH], each view's chains encoded for :class:`argtca.views.exact_ops.ChainRunner`.
        ``out``: the tensors to write into (a loader worker's shared memory)."""
        layout = self.pixels_layout(ops)
        if out is None:
            out = tuple(torch.zeros(s, dtype=d) for s, d in layout)
        if tuple((tuple(t.shape), t.dtype) for t in out) != layout:
            raise ValueError(f"{type(self).__name__}.pixels: out must be "
                             + " and ".join(f"{str(d)[6:]} {list(s)}" for s, d in layout))
        px, mix = out[0], out[1]
        if img.mode != "RGB":
            img = to_rgb(img)
        dst = px.numpy()
        dst[0] = np.asarray(self.base_crop(img))
        if ops:
            plans = out[2].numpy()
            for v, (crop, plan) in enumerate(self.random_crops(img, seed, index)):
                dst[v + 1] = np.asarray(crop)
                if plan is not None:
                    mix[v] = torch.tensor(mix_row(plan), dtype=torch.float32)
                    encode_plan(plan, self.size, out=plans[v])
            return out
        k = 1
        for v, (crop, plan, chains) in enumerate(self.random_images(img, seed, index)):
            for im in [crop, *chains]:
                dst[k] = np.asarray(im)
                k += 1
            if plan is not None:
                mix[v] = torch.tensor(mix_row(plan), dtype=torch.float32)
        return out

    def pixels_layout(self, ops: bool = False
                      ) -> Tuple[Tuple[Tuple[int, ...], torch.dtype], ...]:
        """``(shape, dtype)`` of each of :meth:`pixels`' tensors."""
        n = PixelMixer.n_images(self.n_views, self.augmix and not ops)
        layout = (((n, self.size, self.size, 3), torch.uint8),
                  ((self.n_views - 1, len(MIX_COLUMNS)), torch.float32))
        if ops:
            layout += (((self.n_views - 1, 3, 3, PLAN_WIDTH), torch.float64),)
        return layout

    def _out(self, dtype: torch.dtype, out: Optional[torch.Tensor]) -> torch.Tensor:
        if dtype not in self.DTYPES:
            raise ValueError(f"{type(self).__name__}: dtype {dtype} not supported; use "
                             f"torch.float32 or torch.float16")
        shape = (self.n_views, 3, self.size, self.size)
        if out is None:
            return torch.empty(shape, dtype=dtype)
        if tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
            raise ValueError(f"{type(self).__name__}: out must be a contiguous {dtype} tensor "
                             f"{list(shape)}, got {out.dtype} {list(out.shape)}")
        return out

    def _mixer(self) -> ExactMixer:
        # per generator and process (a DataLoader worker builds its own on first use)
        mixer = self.__dict__.get("_exact_mixer")
        if mixer is None:
            mixer = self.__dict__["_exact_mixer"] = ExactMixer(self.size, self.mean, self.std)
        return mixer

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_exact_mixer", None)   # scratch planes: not sent to the workers
        return state

    def __repr__(self) -> str:
        return (f"ViewGenerator(size={self.size}, n_views={self.n_views}, augmix={self.augmix}, "
                f"severity={self.severity}, interpolation={self.interpolation.value})")


class FastViewGenerator(ViewGenerator):
    """``TTA.VIEWS_DEVICE cpu-fast``: the PIL path's views with the same random draws (crop box
    and flip from the item's torch generator, the AugMix plan from its numpy generator, in the
    same order), computed with less work per view. What differs from the PIL path, each bounded
    by a test in tests/views/test_cpu_fast_views.py:

    * the crop is resized by torch's uint8 antialiased bilinear kernel, not PIL's (the same
      filter at another fixed-point precision): identical where the box is only enlarged,
      within one level on ~0.02 % of the values of reduced boxes (the benchmark's photos);
    * AugMix runs on planar uint8 numpy arrays [3, S, S] (``augmix.apply_op_planes``): colour
      ops as PIL's look-up tables and translations as shifts (identical), shears and rotations
      as PIL's bilinear affine with its float64 geometry but the blend in float32 (within one
      level on ~1e-5 of the values);
    * the mix and ``ToTensor + Normalize`` are taken once per view straight into the output
      (float32 rounding, ~1e-6).

    A value off by one level can move an AugMix view by more (posterize or solarize at a
    threshold, autocontrast / equalize tables), so the views agree statistically: at 224 px on
    the benchmark's photos a mean of ~0.0004 levels, ~0.1 % of the values off by more than float
    rounding. Not bit-identical, documented as such; view 0 is bit-identical."""

    @classmethod
    def like(cls, vg: ViewGenerator) -> "FastViewGenerator":
        out = cls.__new__(cls)
        out.__dict__.update(vg.__dict__)
        return out

    def crop_planes(self, img: Image.Image, generator: torch.Generator,
                    pixels: Optional[torch.Tensor] = None) -> np.ndarray:
        """:meth:`preaugment` as planes uint8 [3, S, S]: the same draws (crop box, then flip),
        the crop resized by torch's uint8 antialiased bilinear kernel instead of PIL's (the same
        filter and fixed-point scheme at another precision: equal where the crop is enlarged,
        within one level on a few values where it is reduced; see the tests). ``pixels``: the
        image as a uint8 tensor [H, W, 3] (made from ``img`` if not given)."""
        width, height = img.size
        i, j, h, w = random_resized_crop_params(width, height, self.scale, self.ratio, generator)
        if pixels is None:
            pixels = torch.from_numpy(np.array(img))
        box = pixels[i:i + h, j:j + w].permute(2, 0, 1).unsqueeze(0)
        if (h, w) != (self.size, self.size):   # PIL returns a copy at the same size
            box = torch.nn.functional.interpolate(
                box.contiguous(memory_format=torch.channels_last), size=(self.size, self.size),
                mode="bilinear", align_corners=False, antialias=True)
        a = box[0].numpy()
        out = np.empty((3, self.size, self.size), dtype=np.uint8)
        flip = torch.rand(1, generator=generator).item() < 0.5
        np.copyto(out, a[:, :, ::-1] if flip else a)
        return out

    def __call__(self, img: Image.Image, seed: int, index: int,
                 dtype: torch.dtype = torch.float32,
                 out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The views in ``dtype`` (float32, or float16 as the loader sends them under amp: each
        view computed in float32 and rounded once, the same values as ``.to(float16)``), written
        into ``out`` when given (as :meth:`ViewGenerator.__call__`)."""
        if out is None:
            self._out(dtype, None)   # checks the dtype
            # numpy asks the kernel for transparent huge pages on large arrays, torch.empty does
            # not (dev box: 727 -> 216 first-touch page faults per image of 64 fp32 views)
            views = torch.from_numpy(np.empty((self.n_views, 3, self.size, self.size),
                                              dtype=np.float32 if dtype == torch.float32
                                              else np.float16))
        else:
            views = self._out(dtype, out)
        out = views.numpy()   # shares memory: every view is written in place
        if img.mode != "RGB":
            img = to_rgb(img)
        views[0] = self.base_view(img)
        if self.n_views == 1:
            return views
        tg, rng = item_rngs(seed, index)
        tmp = np.empty(out.shape[1:], dtype=np.float32)
        acc = None if out.dtype == np.float32 else np.empty(out.shape[1:], dtype=np.float32)
        # all crops (torch generator), then all plans (numpy generator), then the views: each
        # generator draws what and in the order the PIL path draws it, and each phase keeps its
        # own code and data warm (in one loop, a crop took ~2x its time alone)
        pixels = torch.from_numpy(np.array(img))
        crops = [self.crop_planes(img, tg, pixels) for _ in range(1, self.n_views)]
        plans = [sample_plan(rng, self.severity, self.size, OPS)
                 for _ in range(1, self.n_views)] if self.augmix else None
        for v in range(1, self.n_views):
            x = crops[v - 1]
            f32 = out[v] if acc is None else acc
            if self.augmix:
                augmix_planes_into(f32, x, plans[v - 1], self.mean, self.std, tmp)
            else:
                normalise_into(f32, x, self.mean, self.std)
            if acc is not None:   # rounded while the view is still in cache
                views[v].copy_(torch.from_numpy(acc))
        return views


def augmix_enabled(policy: Any, dataset: Any) -> bool:
    """``TTA.AUGMIX``: "auto" -> ``dataset.fine_grained``; "on"/"off" (or a bool) force it."""
    if isinstance(policy, bool):
        return policy
    p = str(policy).strip().lower()
    if p == "auto":
        return bool(getattr(dataset, "fine_grained", False))
    if p in ("on", "true", "1"):
        return True
    if p in ("off", "false", "0"):
        return False
    raise ValueError(f"TTA.AUGMIX={policy!r}: use 'auto' (the dataset decides), 'on' or 'off'")


def build_view_generator(cfg, dataset) -> ViewGenerator:
    """A ``ViewGenerator`` from ``cfg.INPUT.{SIZE,INTERPOLATION,PIXEL_MEAN,PIXEL_STD}`` and
    ``cfg.TTA.{N_VIEWS,AUGMIX,AUGMIX_SEVERITY}``; AugMix "auto" follows ``dataset.fine_grained``."""
    return ViewGenerator(size=cfg.INPUT.SIZE, n_views=cfg.TTA.N_VIEWS,
                         augmix=augmix_enabled(cfg.TTA.AUGMIX, dataset),
                         severity=cfg.TTA.AUGMIX_SEVERITY, mean=cfg.INPUT.PIXEL_MEAN,
                         std=cfg.INPUT.PIXEL_STD, interpolation=cfg.INPUT.INTERPOLATION)
