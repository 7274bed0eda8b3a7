"""The GPU view maker as it was before the fused rewrite (kept verbatim as the reference).

:class:`argtca.views.gpu.GpuViewMaker` must give the same views as this class: bit for
bit on the CPU in float32, and within float16 rounding of the warps on CUDA. Used by
``tests/views/test_gpu_views_fast.py`` and ``benchmarks/probes/bench_gpu_views.py``; nothing else
imports it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
import torch.nn.functional as TF
from torchvision.ops import roi_align

from argtca.views.cpu import ViewGenerator
from argtca.views.gpu_ops import (CHAINS, DEPTH, GEOMETRIC_OPS, MAG0, N_COLUMNS, OP0, OP_NAMES,
                                        affine_matrices)

__all__ = ["ReferenceGpuViewMaker"]


class ReferenceGpuViewMaker:
    """``maker(batch) -> views [B, V, 3, S, S]`` (fp32, normalised) on the batch's device.

    ``batch``: a :func:`collate_gpu_views` batch whose ``view0``/``canvas``/``hw``/``params`` may
    already be on the device; ``params`` is also read on the host (``params_cpu`` if present) to
    build the per-op index lists, so no host-device synchronisation happens here.
    """

    def __init__(self, view_gen: ViewGenerator, work_dtype: Optional[torch.dtype] = None):
        # None: float16 on CUDA (integers 0-255 are exact), else float32
        self.work_dtype = work_dtype
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
            crops = self.augment(crops, params.reshape(-1, N_COLUMNS),
                                 params_cpu.reshape(-1, N_COLUMNS))
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
        ops = params_cpu[:, OP0:MAG0].reshape(N * CHAINS, DEPTH).long()
        mags = params_cpu[:, MAG0:].reshape(N * CHAINS, DEPTH)
        for d in range(DEPTH):
            col = ops[:, d]
            geo = [k for k in range(len(OP_NAMES)) if OP_NAMES[k] in GEOMETRIC_OPS]
            gidx = torch.nonzero(torch.isin(col, torch.tensor(geo))).flatten()
            if gidx.numel():
                A = affine_matrices(col[gidx], mags[gidx, d], self.size)
                self._apply(chains, gidx, lambda x, A=A: self.warp(x, A.to(dev, non_blocking=True)))
            for name, fn in (("autocontrast", self.autocontrast), ("equalize", self.equalize)):
                idx = torch.nonzero(col == OP_NAMES.index(name)).flatten()
                if idx.numel():
                    self._apply(chains, idx, fn)
            for name, fn in (("posterize", self.posterize), ("solarize", self.solarize)):
                idx = torch.nonzero(col == OP_NAMES.index(name)).flatten()
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


def random_view_batch(B: int, V: int, size: int, canvas: int = 0, seed: int = 0,
                      augmix: bool = True, device="cpu") -> Dict[str, Any]:
    """A :func:`~argtca.views.gpu.collate_gpu_views`-shaped batch with random pixels and
    random view parameters covering every op (magnitudes wider than TPT's severity 1, so that
    rotations, shears and translations move pixels visibly), chains of depth 1-3, flips and
    crops of every scale. ``params_cpu`` is the host copy of ``params``, as the loader gives."""
    from argtca.views.augmix import OPS
    g = torch.Generator().manual_seed(seed)
    C = canvas or 2 * size
    n = V - 1
    hw = torch.stack([torch.randint(C // 2, C + 1, (B,), generator=g),
                      torch.randint(C // 2, C + 1, (B,), generator=g)], 1)
    # smooth-ish images (real histograms, flat channels occasionally)
    lo = torch.rand(B, 3, C // 8, C // 8, generator=g) * 255
    img = TF.interpolate(lo, size=(C, C), mode="bilinear", align_corners=False)
    img = (img + torch.randn(B, 3, C, C, generator=g) * 8).round().clamp(0, 255)
    img[0, 2] = 91.0
    canvas_t = torch.zeros(B, 3, C, C, dtype=torch.uint8)
    for b in range(B):
        h, w = hw[b].tolist()
        canvas_t[b, :, :h, :w] = img[b, :, :h, :w].to(torch.uint8)
    view0 = img[:, :, :size, :size].to(torch.uint8)
    p = torch.zeros(B, max(n, 0), N_COLUMNS)
    if n > 0:
        s = torch.rand(B, n, generator=g) * 0.9 + 0.08
        r = torch.exp(torch.rand(B, n, generator=g) * 0.58 - 0.29)
        bw, bh = (s * r).sqrt().clamp(max=1), (s / r).sqrt().clamp(max=1)
        x0 = torch.rand(B, n, generator=g) * (1 - bw)
        y0 = torch.rand(B, n, generator=g) * (1 - bh)
        p[..., 0], p[..., 1], p[..., 2], p[..., 3] = x0, y0, x0 + bw, y0 + bh
        p[..., 4] = (torch.rand(B, n, generator=g) < 0.5).float()
        p[..., OP0:MAG0] = -1
        if augmix:
            p[..., 5] = torch.rand(B, n, generator=g)
            w = -torch.log(torch.rand(B, n, CHAINS, generator=g))
            p[..., 6:6 + CHAINS] = w / w.sum(-1, keepdim=True)
            depth = torch.randint(1, DEPTH + 1, (B, n, CHAINS), generator=g)
            ops = torch.randint(0, len(OPS), (B, n, CHAINS, DEPTH), generator=g)
            u = torch.rand(B, n, CHAINS, DEPTH, generator=g)
            sign = torch.where(torch.rand(B, n, CHAINS, DEPTH, generator=g) < 0.5, -1.0, 1.0)
            mag = torch.zeros(B, n, CHAINS, DEPTH)
            name = lambda k: OPS[k]
            for k in range(len(OPS)):
                sel = ops == k
                if name(k) == "posterize":
                    v = torch.floor(u * 5)                      # bits kept 0..4
                elif name(k) == "solarize":
                    v = torch.floor(u * 257)                    # threshold 0..256
                elif name(k) == "rotate":
                    v = sign * u * 30
                elif name(k) in ("shear_x", "shear_y"):
                    v = sign * u * 0.3
                elif name(k) in ("translate_x", "translate_y"):
                    v = sign * torch.floor(u * size / 3)
                else:
                    v = torch.zeros_like(u)
                mag[sel] = v[sel]
            keep = torch.arange(DEPTH).view(1, 1, 1, DEPTH) < depth.unsqueeze(-1)
            p[..., OP0:MAG0] = torch.where(keep, ops.float(), -1.0).reshape(B, n, -1)
            p[..., MAG0:] = torch.where(keep, mag, 0.0).reshape(B, n, -1)
        else:
            p[..., 5] = 1.0
    batch = {"index": torch.arange(B), "label": torch.zeros(B, dtype=torch.long),
             "path": [f"{i}.jpg" for i in range(B)], "view0": view0, "canvas": canvas_t,
             "hw": hw.long(), "params": p}
    dev = torch.device(device)
    out = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    out["params_cpu"] = p
    return out
