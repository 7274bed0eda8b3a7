"""Test-time views made on the device (``TTA.VIEWS_DEVICE gpu``), and the views loader of both paths.

**Not bit-identical to the CPU path.** The CPU path (:mod:`argtca.datasets.views`) crops, flips and
AugMixes every view with PIL on the full-resolution image. Here the DataLoader workers only decode
the JPEG and ship (a) view 0, computed exactly as on the CPU (``Resize + CenterCrop``, uint8), (b)
the image resized so its long side is at most ``canvas`` pixels (uint8, zero-padded to a square),
and (c) the random parameters of every view. The parameters are drawn from the *same* generators,
in the *same* order, as the CPU path (``item_rngs(seed, index)``: crop box and flip from the
torch generator, the AugMix plan from the numpy one), so a view's crop box, flip, chain ops and
magnitudes, and mixing weights are those the CPU path draws. The pixels are then computed
on the device for the whole batch: ``roi_align`` for the resized crop (box filter when shrinking,
bilinear when enlarging; PIL uses an antialiased bilinear filter), ``grid_sample`` for rotate /
shear / translate, and tensor code for autocontrast / equalize / posterize / solarize (PIL's LUT
formulas). Resampling arithmetic differs from PIL's, and crops come from the resized canvas rather
than the original file, so **the random views differ from the CPU path's pixel by pixel, and results
agree statistically, not bit for bit.** View 0 (the one the final prediction uses) is identical.

Entry point for the trainer loop: :func:`build_views_loader` returns an iterable of batches
``{"index", "label", "path", "views"}`` for either path, with ``views`` already on the device
(copied one batch ahead on a side stream when the device is CUDA).
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as TF
import torchvision.transforms.functional as F
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.ops import roi_align

from argtca.datasets.augmix import OPS, sample_plan
from argtca.datasets.base import Datum
from argtca.datasets.views import (FastViewGenerator, ViewGenerator, build_test_loader,
                                   build_view_generator,
                                   item_rngs, make_loader, random_resized_crop_params,
                                   TestTimeDataset)

__all__ = ["VIEW_PARAM_COLUMNS", "sample_view_params", "GpuViewDataset", "collate_gpu_views",
           "GpuViewMaker", "build_views_loader", "ViewsLoader", "views_device"]

# columns of the per-view parameter rows (views 1..V-1)
_OPS = tuple(OPS)
_GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
CHAINS, DEPTH = 3, 3
VIEW_PARAM_COLUMNS = (["x0", "y0", "x1", "y1", "flip", "m"] + [f"w{i}" for i in range(CHAINS)]
                      + [f"op{c}{d}" for c in range(CHAINS) for d in range(DEPTH)]
                      + [f"mag{c}{d}" for c in range(CHAINS) for d in range(DEPTH)])
_NCOL = len(VIEW_PARAM_COLUMNS)
_OP0 = 6 + CHAINS
_MAG0 = _OP0 + CHAINS * DEPTH


def views_device(cfg) -> str:
    v = str(cfg.TTA.VIEWS_DEVICE).strip().lower()
    if v not in ("cpu", "cpu-fast", "gpu"):
        raise ValueError(f"TTA.VIEWS_DEVICE={cfg.TTA.VIEWS_DEVICE!r}: use 'cpu' (TPT's PIL "
                         f"pipeline, exact), 'cpu-fast' (tensor views in the loader workers, "
                         f"statistical) or 'gpu' (batched on the device, statistical)")
    return v


def sample_view_params(view_gen: ViewGenerator, width: int, height: int, seed: int,
                       index: int) -> torch.Tensor:
    """Parameters [V-1, len(VIEW_PARAM_COLUMNS)] of the random views of item ``index``: the draws
    :meth:`ViewGenerator.__call__` makes, in its order (crop box, flip, then the AugMix plan)."""
    n = view_gen.n_views - 1
    out = np.zeros((max(n, 0), _NCOL), dtype=np.float32)
    if n <= 0:
        return torch.from_numpy(out)
    tg, rng = item_rngs(seed, index)
    out[:, _OP0:_MAG0] = -1
    for v in range(n):
        i, j, h, w = random_resized_crop_params(width, height, view_gen.scale, view_gen.ratio, tg)
        flip = torch.rand(1, generator=tg).item() < 0.5
        out[v, :5] = (j / width, i / height, (j + w) / width, (i + h) / height, float(flip))
        if view_gen.augmix:
            plan = sample_plan(rng, view_gen.severity, view_gen.size, OPS)
            out[v, 5] = plan.m
            out[v, 6:6 + CHAINS] = plan.weights
            for c, chain in enumerate(plan.chains):
                for d, op in enumerate(chain):
                    out[v, _OP0 + c * DEPTH + d] = _OPS.index(op.name)
                    out[v, _MAG0 + c * DEPTH + d] = op.magnitude
        else:
            out[v, 5] = 1.0
    return torch.from_numpy(out)


def _to_uint8(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()


class GpuViewDataset(TestTimeDataset):
    """Items → ``dict(index, label, path, view0 u8[3,S,S], canvas u8[3,C,C], hw i64[2], params)``.

    ``canvas``: the image resized (aspect kept, bilinear with antialias) so that its long side is
    at most ``canvas`` pixels, top-left in a zero square; ``hw`` its valid height and width.
    """

    __test__ = False

    def __init__(self, items: Sequence[Datum], view_gen: ViewGenerator, seed: int,
                 indices: Optional[Sequence[int]] = None, canvas: Optional[int] = None):
        super().__init__(items, view_gen, seed, indices=indices)
        self.canvas = int(canvas or 2 * view_gen.size)
        if self.canvas < view_gen.size:
            raise ValueError(f"canvas={self.canvas} must be >= INPUT.SIZE={view_gen.size}")

    def __getitem__(self, k: int) -> Dict[str, Any]:
        index, datum, img = self.load(k)
        vg, S, C = self.view_gen, self.view_gen.size, self.canvas
        view0 = F.center_crop(F.resize(img, S, interpolation=vg.interpolation), [S, S])
        W, H = img.size
        scale = min(1.0, C / max(W, H))
        w, h = max(1, round(W * scale)), max(1, round(H * scale))
        small = img if (w, h) == (W, H) else img.resize((w, h), Image.BILINEAR, reducing_gap=None)
        canvas = torch.zeros(3, C, C, dtype=torch.uint8)
        canvas[:, :h, :w] = _to_uint8(small)
        return {"index": index, "label": int(datum.label), "path": datum.impath,
                "view0": _to_uint8(view0), "canvas": canvas,
                "hw": torch.tensor([h, w], dtype=torch.long),
                "params": sample_view_params(vg, W, H, self.seed, index)}


def collate_gpu_views(batch: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"index": torch.tensor([b["index"] for b in batch], dtype=torch.long),
            "label": torch.tensor([b["label"] for b in batch], dtype=torch.long),
            "path": [b["path"] for b in batch],
            "view0": torch.stack([b["view0"] for b in batch]),
            "canvas": torch.stack([b["canvas"] for b in batch]),
            "hw": torch.stack([b["hw"] for b in batch]),
            "params": torch.stack([b["params"] for b in batch])}


# ------------------------------------------------------------------------------ device side
def _affine_rows(name: str, v: float, size: int) -> List[float]:
    """Input pixel-centre coords = A @ (x, y, 1) for an output pixel centre (x, y) (PIL's maps)."""
    if name == "rotate":  # PIL Image.rotate: about the centre, counter-clockwise for v > 0
        a = math.radians(v)
        c, s = math.cos(a), math.sin(a)
        cx = cy = size / 2.0
        return [c, -s, cx - c * cx + s * cy, s, c, cy - s * cx - c * cy]
    if name == "shear_x":
        return [1.0, v, 0.0, 0.0, 1.0, 0.0]
    if name == "shear_y":
        return [1.0, 0.0, 0.0, v, 1.0, 0.0]
    if name == "translate_x":
        return [1.0, 0.0, float(int(v)), 0.0, 1.0, 0.0]
    if name == "translate_y":
        return [1.0, 0.0, 0.0, 0.0, 1.0, float(int(v))]
    raise KeyError(name)


def affine_matrices(op_ids: torch.Tensor, mags: torch.Tensor, size: int) -> torch.Tensor:
    """Vectorised :func:`_affine_rows` for geometric op ids → [n, 2, 3] (float32, host)."""
    op_ids = op_ids.long()
    v = mags.double()
    n = op_ids.numel()
    A = torch.zeros(n, 6, dtype=torch.float64)
    A[:, 0] = 1.0
    A[:, 4] = 1.0
    is_ = {name: op_ids == _OPS.index(name) for name in _GEOMETRIC}
    a = torch.deg2rad(v)
    c, s_ = torch.cos(a), torch.sin(a)
    cx = size / 2.0
    r = is_["rotate"]
    A[r, 0], A[r, 1], A[r, 2] = c[r], -s_[r], cx - c[r] * cx + s_[r] * cx
    A[r, 3], A[r, 4], A[r, 5] = s_[r], c[r], cx - s_[r] * cx - c[r] * cx
    A[is_["shear_x"], 1] = v[is_["shear_x"]]
    A[is_["shear_y"], 3] = v[is_["shear_y"]]
    A[is_["translate_x"], 2] = torch.trunc(v[is_["translate_x"]])
    A[is_["translate_y"], 5] = torch.trunc(v[is_["translate_y"]])
    return A.float().view(n, 2, 3)


class GpuViewMaker:
    """``maker(batch) -> views [B, V, 3, S, S]`` (fp32, normalised) on the batch's device.

    ``batch``: a :func:`collate_gpu_views` batch whose ``view0``/``canvas``/``hw``/``params`` may
    already be on the device; ``params`` is also read on the host (``params_cpu`` if present) to
    build the per-op index lists, so no host-device synchronisation happens here.
    """

    def __init__(self, view_gen: ViewGenerator, work_dtype: Optional[torch.dtype] = None):
        self.work_dtype = work_dtype   # None: float16 on CUDA (integers 0-255 are exact), else float32
        self.size = view_gen.size
        self.n_views = view_gen.n_views
        self.augmix = view_gen.augmix
        self.mean = torch.tensor(view_gen.mean).view(1, 3, 1, 1)
        self.std = torch.tensor(view_gen.std).view(1, 3, 1, 1)
        self._grid = {}

    def normalize(self, x255: torch.Tensor) -> torch.Tensor:
        """uint8-valued [N, 3, S, S] → ToTensor + Normalize (the CPU path's arithmetic)."""
        mean, std = self.mean.to(x255.device), self.std.to(x255.device)
        return x255.float().div(255).sub(mean).div(std)

    def __call__(self, batch: Dict[str, Any]) -> torch.Tensor:
        view0 = batch["view0"]
        dev = view0.device
        B, S, V = view0.shape[0], self.size, self.n_views
        out = torch.empty(B, V, 3, S, S, device=dev)
        out[:, 0] = self.normalize(view0)
        if V == 1:
            return out
        params_cpu = batch.get("params_cpu", batch["params"]).cpu()
        params = batch["params"].to(dev, non_blocking=True)
        hw = batch["hw"].to(dev, non_blocking=True).float()
        wd = self.work_dtype or (torch.float16 if dev.type == "cuda" else torch.float32)
        crops = self.crops(batch["canvas"].to(dev, non_blocking=True), hw, params, params_cpu)
        crops = crops.to(wd)
        if self.augmix:
            crops = self.augment(crops, params.reshape(-1, _NCOL), params_cpu.reshape(-1, _NCOL))
        out[:, 1:] = self.normalize_float(crops).reshape(B, V - 1, 3, S, S)
        return out

    def normalize_float(self, x255: torch.Tensor) -> torch.Tensor:
        mean, std = self.mean.to(x255.device), self.std.to(x255.device)
        return x255.float().div_(255).sub_(mean).div_(std)

    # -- resized crop + flip ------------------------------------------------------------------
    def crops(self, canvas: torch.Tensor, hw: torch.Tensor, params: torch.Tensor,
              params_cpu: torch.Tensor) -> torch.Tensor:
        B, n = params.shape[:2]
        S = self.size
        h, w = hw[:, 0:1], hw[:, 1:2]
        box = torch.stack([params[..., 0] * w, params[..., 1] * h, params[..., 2] * w,
                           params[..., 3] * h], dim=-1)                       # [B, n, 4]
        bidx = torch.arange(B, device=canvas.device, dtype=box.dtype).view(B, 1, 1).expand(B, n, 1)
        rois = torch.cat([bidx, box], dim=-1).reshape(-1, 5)
        x = roi_align(canvas.float(), rois, output_size=(S, S), spatial_scale=1.0,
                      sampling_ratio=-1, aligned=True).round_().clamp_(0, 255)
        flip = torch.nonzero(params_cpu[..., 4].reshape(-1) > 0.5).flatten()
        if flip.numel():
            fi = flip.to(x.device, non_blocking=True)
            x.index_copy_(0, fi, x.index_select(0, fi).flip(-1))
        return x

    # -- AugMix ------------------------------------------------------------------------------
    def _base_grid(self, device) -> torch.Tensor:
        key = str(device)
        if key not in self._grid:
            S = self.size
            c = torch.arange(S, device=device, dtype=torch.float32) + 0.5
            yy, xx = torch.meshgrid(c, c, indexing="ij")
            self._grid[key] = torch.stack([xx, yy, torch.ones_like(xx)], -1)   # [S, S, 3]
        return self._grid[key]

    def augment(self, crops: torch.Tensor, params: torch.Tensor,
                params_cpu: torch.Tensor) -> torch.Tensor:
        """m·crop + (1−m)·Σ_i w_i·chain_i(crop) on the uint8 value grid, [N, 3, S, S]."""
        N = crops.shape[0]
        dev = crops.device
        chains = crops.unsqueeze(1).repeat(1, CHAINS, 1, 1, 1).reshape(N * CHAINS, *crops.shape[1:])
        ops = params_cpu[:, _OP0:_MAG0].reshape(N * CHAINS, DEPTH).long()
        mags = params_cpu[:, _MAG0:].reshape(N * CHAINS, DEPTH)
        for d in range(DEPTH):
            col = ops[:, d]
            geo = [k for k in range(len(_OPS)) if _OPS[k] in _GEOMETRIC]
            gidx = torch.nonzero(torch.isin(col, torch.tensor(geo))).flatten()
            if gidx.numel():
                A = affine_matrices(col[gidx], mags[gidx, d], self.size)
                self._apply(chains, gidx, lambda x, A=A: self.warp(x, A.to(dev, non_blocking=True)))
            for name, fn in (("autocontrast", self.autocontrast), ("equalize", self.equalize)):
                idx = torch.nonzero(col == _OPS.index(name)).flatten()
                if idx.numel():
                    self._apply(chains, idx, fn)
            for name, fn in (("posterize", self.posterize), ("solarize", self.solarize)):
                idx = torch.nonzero(col == _OPS.index(name)).flatten()
                if idx.numel():
                    v = mags[idx, d].to(dev, chains.dtype, non_blocking=True).view(-1, 1, 1, 1)
                    self._apply(chains, idx, lambda x, v=v, fn=fn: fn(x, v))
        w = params[:, 6:6 + CHAINS].to(dev)                                     # [N, 3] fp32
        m = params[:, 5].to(dev).view(N, 1, 1, 1)
        c = chains.view(N, CHAINS, *crops.shape[1:])
        mix = m * crops.float()
        for i in range(CHAINS):   # fp32 accumulation
            mix += (1 - m) * w[:, i].view(N, 1, 1, 1) * c[:, i].float()
        return mix

    @staticmethod
    def _apply(x: torch.Tensor, idx: torch.Tensor, fn) -> None:
        i = idx.to(x.device, non_blocking=True)
        x.index_copy_(0, i, fn(x.index_select(0, i)).to(x.dtype))

    def warp(self, x: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        S = self.size
        src = self._base_grid(x.device) @ A.transpose(1, 2).unsqueeze(1)         # [n, S, S, 2]
        grid = (src * (2.0 / S) - 1.0).to(x.dtype)
        return TF.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                              align_corners=False).round_().clamp_(0, 255)

    @staticmethod
    def autocontrast(x: torch.Tensor) -> torch.Tensor:
        # PIL's LUT per channel: lut[i] = int(i * scale + offset), scale = 255 / (hi - lo),
        # offset = -lo * scale (float64, as Python computes it); identity when hi <= lo
        n, c = x.shape[:2]
        flat = x.reshape(n * c, -1)
        lo = flat.amin(1, keepdim=True).double()
        hi = flat.amax(1, keepdim=True).double()
        scale = 255.0 / (hi - lo).clamp(min=1)
        i = torch.arange(256, device=x.device, dtype=torch.float64)
        lut = torch.trunc(i * scale + (-lo * scale)).clamp_(0, 255)
        lut = torch.where(hi > lo, lut, i.expand_as(lut)).to(x.dtype)
        return lut.gather(1, flat.long()).reshape(x.shape)

    @staticmethod
    def equalize(x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        v = x.reshape(n * c, -1).long()
        hist = torch.zeros(n * c, 256, dtype=torch.long, device=x.device)
        hist.scatter_add_(1, v, torch.ones_like(v))
        total = hist.sum(1, keepdim=True)
        last = torch.arange(256, device=x.device).expand_as(hist).masked_fill(hist == 0, -1)
        last_count = hist.gather(1, last.amax(1, keepdim=True).clamp(min=0))
        step = (total - last_count) // 255
        nonzero_bins = (hist > 0).sum(1, keepdim=True)
        before = torch.cumsum(hist, 1) - hist
        lut = ((step // 2 + before) // step.clamp(min=1)).clamp_(0, 255)
        ident = torch.arange(256, device=x.device).expand_as(hist)
        lut = torch.where((step > 0) & (nonzero_bins > 1), lut, ident)
        return lut.gather(1, v).to(x.dtype).reshape(x.shape)

    @staticmethod
    def posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
        q = torch.pow(2.0, 8 - bits)
        return torch.floor(x / q) * q

    @staticmethod
    def solarize(x: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
        return torch.where(x >= thr, 255 - x, x)


# ------------------------------------------------------------------------------ the loader
class ViewsLoader:
    """Iterable of ``{"index", "label", "path", "views"}`` batches with ``views`` on ``device``.

    On CUDA the next batch is copied (pinned memory, non-blocking, side stream) while the current
    one is processed. GPU views are made on the compute stream; ``overlap``
    (``ARGTCA_VIEWS_OVERLAP=1``) makes them on the copy stream instead, so the views of batch n+1
    are computed while batch n is tuned (same kernels, same numbers). Off by default: it gained
    nothing on an H200 (64.4 vs 63.3 img/s, +0.6 GiB; the loop is bound by the host thread that
    launches both), BENCHMARKS.md.
    """

    def __init__(self, loader: DataLoader, device, maker: Optional[GpuViewMaker] = None,
                 overlap: Optional[bool] = None):
        self.loader = loader
        self.device = torch.device(device)
        self.maker = maker
        if overlap is None:   # ARGTCA_VIEWS_OVERLAP=1: make GPU views on the copy stream
            overlap = os.environ.get("ARGTCA_VIEWS_OVERLAP", "0").strip().lower() in (
                "1", "true", "yes", "on")
        self.overlap = bool(overlap) and maker is not None

    def __len__(self) -> int:
        return len(self.loader)

    def _to_device(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        out = dict(batch)
        keys = ("view0", "canvas", "hw", "params") if self.maker is not None else ("views",)
        if self.maker is not None:
            out["params_cpu"] = batch["params"]
        for k in keys:
            out[k] = batch[k].to(self.device, non_blocking=True)
        return out

    def _finish(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if self.maker is not None:
            batch = {"index": batch["index"], "label": batch["label"], "path": batch["path"],
                     "views": self.maker(batch)}
        return batch

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        if self.device.type != "cuda":
            for b in self.loader:
                yield self._finish(self._to_device(b))
            return
        stream = torch.cuda.Stream(self.device)
        it = iter(self.loader)

        def fetch():
            try:
                b = next(it)
            except StopIteration:
                return None, None
            with torch.cuda.stream(stream):
                b = self._to_device(b)
                if self.overlap:   # GPU views of batch n+1 made while batch n is tuned
                    b = self._finish(b)
                ev = torch.cuda.Event()
                ev.record(stream)
            return b, ev

        nxt, ev = fetch()
        while nxt is not None:
            cur, cur_ev = nxt, ev
            torch.cuda.current_stream(self.device).wait_event(cur_ev)
            for k, v in cur.items():
                if isinstance(v, torch.Tensor) and v.device.type == "cuda":
                    v.record_stream(torch.cuda.current_stream(self.device))
            nxt, ev = fetch()
            yield cur if self.overlap else self._finish(cur)


def build_views_loader(cfg, dataset, seed: int, indices: Sequence[int], batch_images: int,
                       device, num_workers: int, prefetch: int = 4,
                       canvas: Optional[int] = None) -> ViewsLoader:
    """The loader of the test loop for ``cfg.TTA.VIEWS_DEVICE`` "cpu" (the exact PIL views of
    :mod:`argtca.datasets.views`) or "gpu" (this module). ``cfg`` is the run configuration the
    engine sees (zero-shot: one view)."""
    device = torch.device(device)
    view_gen = build_view_generator(cfg, dataset)
    pin = device.type == "cuda"
    where = views_device(cfg)
    if where in ("cpu", "cpu-fast"):
        if where == "cpu-fast":   # same parameters, exact PIL ops where cheap, mixing once
            view_gen = FastViewGenerator.like(view_gen)
        ds = TestTimeDataset(dataset.test, view_gen, int(seed), indices=indices)
        if pin and str(cfg.TTA.PREC) == "amp":
            # under fp16 autocast the image tower's first layer (autocast conv / the fp16 tower)
            # rounds its input to fp16: rounding in the worker instead gives identical features
            # and halves the bytes collated, pinned and copied (38.5 -> 19 MB per image)
            ds.out_dtype = torch.float16
        loader = build_test_loader(ds, int(num_workers), batch_images=batch_images,
                                   pin_memory=pin, prefetch=prefetch)
        return ViewsLoader(loader, device)
    ds = GpuViewDataset(dataset.test, view_gen, int(seed), indices=indices, canvas=canvas)
    # an unreadable file raises its one-line DataError here too, also from worker processes
    loader = make_loader(ds, collate_gpu_views, int(num_workers), batch_images=batch_images,
                         pin_memory=pin, prefetch=prefetch)
    return ViewsLoader(loader, device, GpuViewMaker(view_gen))
