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


_LUT_ORDER = ("equalize", "autocontrast", "posterize", "solarize")   # row blocks of a depth's LUT
_GEO_IDS = torch.tensor([_OPS.index(n) for n in _GEOMETRIC])


def _pinned(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """Host tensor → ``dev`` without blocking the host (pinned staging on CUDA)."""
    if dev.type != "cuda":
        return t.to(dev)
    return t.pin_memory().to(dev, non_blocking=True)


def lut_posterize_solarize(names: Sequence[str], mags: torch.Tensor) -> torch.Tensor:
    """Host LUTs [n, 256] (uint8) of posterize (bits kept) / solarize (threshold): PIL's maps,
    computed with the float formulas of the reference (``floor(i / q) * q``, ``i >= thr``)."""
    i = torch.arange(256, dtype=torch.float32)
    v = mags.float().view(-1, 1)
    post = torch.tensor([n == "posterize" for n in names], dtype=torch.bool).view(-1, 1)
    q = torch.pow(2.0, 8 - v)
    lut = torch.where(post, torch.floor(i / q) * q, torch.where(i >= v, 255 - i, i))
    return lut.to(torch.uint8)


def lut_autocontrast(flat: torch.Tensor) -> torch.Tensor:
    """PIL's autocontrast LUT [R, 256] (uint8) of every row of ``flat`` [R, P] (uint8 values):
    ``lut[i] = int(i * scale + offset)``, ``scale = 255 / (hi - lo)``, ``offset = -lo * scale``
    (float64, as Python computes it); identity where ``hi <= lo``."""
    lo, hi = torch.aminmax(flat, dim=1, keepdim=True)
    lo, hi = lo.double(), hi.double()
    scale = 255.0 / (hi - lo).clamp(min=1)
    i = torch.arange(256, device=flat.device, dtype=torch.float64)
    lut = torch.trunc(i * scale + (-lo * scale)).clamp_(0, 255)
    return torch.where(hi > lo, lut, i.expand_as(lut)).to(torch.uint8)


def lut_equalize(hist: torch.Tensor) -> torch.Tensor:
    """PIL's equalize LUT [R, 256] (uint8) from per-row histograms [R, 256] (integer counts)."""
    hist = hist.long()
    ident = torch.arange(256, device=hist.device).expand_as(hist)
    total = hist.sum(1, keepdim=True)
    last = ident.masked_fill(hist == 0, -1).amax(1, keepdim=True).clamp(min=0)
    step = (total - hist.gather(1, last)) // 255
    nonzero_bins = (hist > 0).sum(1, keepdim=True)
    before = torch.cumsum(hist, 1) - hist
    lut = ((step // 2 + before) // step.clamp(min=1)).clamp_(0, 255)
    return torch.where((step > 0) & (nonzero_bins > 1), lut, ident).to(torch.uint8)


def _lut_index(flat: torch.Tensor) -> torch.Tensor:
    """``row * 256 + value`` (int32) for uint8 rows [R, P]: the flat LUT address of every pixel,
    also its histogram bin. One kernel; 4 bytes a pixel instead of the 8 of an int64 gather."""
    off = torch.arange(0, flat.shape[0] * 256, 256, device=flat.device, dtype=torch.int32)
    return torch.add(off.view(-1, 1), flat)


def _histograms(idx: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row 256-bin histograms [rows, 256] (int32 counts, int32 atomics on CUDA) from
    ``_lut_index`` addresses [rows, P]. (Spreading each row over 16 sub-histograms to cut
    colliding atomics gained nothing on an H200.)"""
    ones = torch.ones(1, device=idx.device, dtype=torch.int32).expand(idx.numel())
    hist = torch.zeros(rows * 256, device=idx.device, dtype=torch.int32)
    hist.index_add_(0, idx.reshape(-1), ones)
    return hist.view(rows, 256)


def _flat_rows(x: torch.Tensor) -> torch.Tensor:
    """Contiguous uint8 [R, ...] as [R, bytes / w] of the widest integer type w that divides a
    row: row gathers and scatters then move 8 bytes per element instead of 1."""
    nb = x[0].numel() if x.shape[0] else 0
    for dt, w in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if nb % w == 0:
            return x.view(x.shape[0], -1).view(dt)
    return x.view(x.shape[0], -1)


def _take_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x.index_select(0, rows)`` for contiguous uint8 ``x``, moved as wide words."""
    return _flat_rows(x).index_select(0, rows).view(torch.uint8).view(-1, *x.shape[1:])


def _put_rows(x: torch.Tensor, rows: torch.Tensor, y: torch.Tensor) -> None:
    """``x.index_copy_(0, rows, y)`` for contiguous uint8 ``x`` and ``y``, moved as wide words."""
    _flat_rows(x).index_copy_(0, rows, _flat_rows(y.contiguous()))


def _mix(crops: torch.Tensor, chains: torch.Tensor, m: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``m·crop + Σ_i k_i·chain_i`` in float32 with the reference's roundings (``k_i = (1 − m)·w_i``,
    accumulated chain by chain). crops u8 [N,3,S,S], chains u8 [N,3,3,S,S], m [N,1,1,1],
    k [N,3,1,1,1]."""
    mix = torch.mul(crops, m)
    for i in range(CHAINS):
        mix += torch.mul(chains[:, i], k[:, i])
    return mix


def _views_eager(out: torch.Tensor, view0: torch.Tensor, crops: torch.Tensor,
                 chains: Optional[torch.Tensor], m, k, mean, std,
                 fold: str = "") -> torch.Tensor:
    """All views normalised into ``out`` [B, V, 3, S, S] (ToTensor + Normalize arithmetic: /255,
    −mean, /std): view 0, then the crops (AugMix off) or their mixes.

    ``fold`` ("out": the CUDA default; "tmp"): the mix and the normalisation folded into
    per-(view, channel) coefficients, ``out = a_0·crop + Σ_i a_i·chain_i + b`` with
    ``a = weight / (255·std)`` and ``b = −mean/std``, accumulated by ``addcmul`` straight into
    ``out`` ("out") or into a contiguous buffer copied into ``out`` ("tmp"): 4 passes instead of
    12, the same numbers up to float32 rounding (~1e-7), not bit for bit. "": exact order."""
    B, V = out.shape[:2]
    out[:, 0] = view0.float().div(255).sub(mean).div(std)
    if fold and chains is not None:
        N, S = crops.shape[0], crops.shape[-1]
        scale = 1.0 / (255.0 * std.view(1, 3, 1, 1))                       # [1, 3, 1, 1]
        shape = (B, V - 1, 3, S, S)
        dst = out[:, 1:] if fold == "out" else torch.empty(shape, device=out.device)
        a0 = (m * scale).view(B, V - 1, 3, 1, 1)
        torch.addcmul((-mean / std).view(1, 1, 3, 1, 1), crops.view(shape), a0, out=dst)
        for i in range(CHAINS):
            ai = (k[:, i] * scale).view(B, V - 1, 3, 1, 1)
            dst.addcmul_(chains[:, i].view(shape), ai)
        if fold != "out":
            out[:, 1:] = dst
        return out
    x = crops.float() if chains is None else _mix(crops, chains, m, k)
    torch.div(x.div_(255).sub_(mean).view(B, V - 1, *x.shape[1:]), std, out=out[:, 1:])
    return out


def _views_fused(view0: torch.Tensor, crops: torch.Tensor, chains: torch.Tensor, m, k, mean,
                 std) -> torch.Tensor:
    """:func:`_views_eager` as one expression (for ``torch.compile``: one fused kernel writes
    the output; same arithmetic)."""
    B = view0.shape[0]
    first = view0.float().div(255).sub(mean).div(std)
    mix = _mix(crops, chains, m, k).div(255).sub(mean).div(std)
    return torch.cat([first.unsqueeze(1), mix.view(B, -1, *mix.shape[1:])], 1)


def _lut_full(src: torch.Tensor, table: torch.Tensor, rep: int) -> torch.Tensor:
    """Row ``r`` of the result = row ``r // rep`` of ``src`` (uint8 [R, 3, S, S]) through LUT
    rows ``3r + c`` of ``table`` ([R·rep·3, 256] uint8). Meant for ``torch.compile`` (the address
    is computed inside the one kernel); eager it costs an int64 address per pixel."""
    R, C = src.shape[0] * rep, src.shape[1]
    x = src.unsqueeze(1).expand(src.shape[0], rep, *src.shape[1:]).reshape(R, C, -1)
    off = torch.arange(R * C, device=src.device).view(R, C, 1) * 256
    return table.view(-1)[x.long() + off].view(R, *src.shape[1:])


def _warp_rows(src: torch.Tensor, rows: torch.Tensor, A: torch.Tensor,
               wd: torch.dtype) -> torch.Tensor:
    """Rows ``rows`` of ``src`` (uint8 [R, 3, S, S]) warped by pixel-centre maps ``A`` [n, 2, 3]:
    bilinear, zero fill, rounded, uint8 [n, 3, S, S]. The grid is :meth:`GpuViewMaker.grid`'s
    (normalised maps, ``(a·x + c) + b·y``) and grid and samples are rounded to the work dtype
    ``wd`` before the rounding to integers, as the eager path's ``grid_sample`` in ``wd`` does.
    Meant for ``torch.compile`` (dynamic row count): gather, grid, sampling, rounding and the
    cast to uint8 become one kernel."""
    S = src.shape[-1]
    An = A * (2.0 / S) - torch.tensor([0.0, 0.0, 1.0], device=A.device)
    c = torch.arange(S, device=A.device, dtype=torch.float32) + 0.5
    ax = An[:, :, 0].unsqueeze(1) * c.view(1, S, 1) + An[:, :, 2].unsqueeze(1)
    by = An[:, :, 1].unsqueeze(1) * c.view(1, S, 1)
    grid = (ax.unsqueeze(1) + by.unsqueeze(2)).to(wd).float()
    x = src[rows].float()
    y = TF.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return y.to(wd).round().to(torch.uint8)


class _Plan:
    """Everything the device work of one batch needs from ``params_cpu``, built on the host and
    sent in three copies: per depth the rows of the geometric ops with their affine maps, the
    rows of the LUT ops (blocks in ``_LUT_ORDER``) with the posterize/solarize LUTs, and the
    mixing weights."""

    def __init__(self, params_cpu: torch.Tensor, size: int, dev: torch.device):
        p = params_cpu.reshape(-1, _NCOL).float()
        N = p.shape[0]
        ops = p[:, _OP0:_MAG0].reshape(N * CHAINS, DEPTH).long()
        mags = p[:, _MAG0:].reshape(N * CHAINS, DEPTH)
        ints, mats, luts, self.depths = [], [], [], []
        n_int = n_mat = n_lut = 0
        for d in range(DEPTH):
            col = ops[:, d]
            geo = torch.nonzero(torch.isin(col, _GEO_IDS)).flatten()
            blocks = [torch.nonzero(col == _OPS.index(n)).flatten() for n in _LUT_ORDER]
            lut_rows = torch.cat(blocks)
            counts = [int(b.numel()) for b in blocks]
            ps = lut_rows[counts[0] + counts[1]:]
            names = ["posterize"] * counts[2] + ["solarize"] * counts[3]
            A = affine_matrices(col[geo], mags[geo, d], size)
            lists = {"geo": geo, "lut": lut_rows}
            if d == 0:   # depth 0 reads the crops: chain c of crop n is row 3n + c
                lists.update(sgeo=geo // CHAINS, slut=lut_rows // CHAINS,
                             keep=torch.nonzero(col < 0).flatten())   # no op at all (hand-made)
                lists["skeep"] = lists["keep"] // CHAINS
            at = {}
            for key, rows in lists.items():
                ints.append(rows)
                at[key] = (n_int, rows.numel())
                n_int += rows.numel()
            mats.append(A.reshape(-1))
            luts.append(lut_posterize_solarize(names, mags[ps, d]).repeat_interleave(3, 0))
            self.depths.append(dict(at, A=(n_mat, A.numel()), ps=(n_lut, luts[-1].shape[0]),
                                    counts=counts))
            n_mat += A.numel()
            n_lut += luts[-1].shape[0]
        m = p[:, 5].view(N, 1)
        k = (1 - m) * p[:, 6:6 + CHAINS]                     # the reference's (1 - m) * w_i
        self.m_at, self.k_at = n_mat, n_mat + N
        mats += [m.reshape(-1), k.reshape(-1)]
        self.N = N
        self.ints = _pinned(torch.cat(ints).long(), dev)
        self.mats = _pinned(torch.cat(mats), dev)
        self.luts = _pinned(torch.cat(luts), dev)

    def rows(self, d: int, key: str) -> torch.Tensor:
        at = self.depths[d]
        a, n = at[key] if key in at else at[key[1:]]   # "sgeo" at depth > 0 is "geo"
        return self.ints[a:a + n]

    def affine(self, d: int) -> torch.Tensor:
        a, n = self.depths[d]["A"]
        return self.mats[a:a + n].view(-1, 2, 3)

    def ps_luts(self, d: int) -> torch.Tensor:
        a, n = self.depths[d]["ps"]
        return self.luts[a:a + n]

    def mix_weights(self):
        N = self.N
        m = self.mats[self.m_at:self.m_at + N].view(N, 1, 1, 1)
        k = self.mats[self.k_at:self.k_at + N * CHAINS].view(N, CHAINS, 1, 1, 1)
        return m, k


class GpuViewMaker:
    """``maker(batch) -> views [B, V, 3, S, S]`` (fp32, normalised) on the batch's device.

    ``batch``: a :func:`collate_gpu_views` batch whose ``view0``/``canvas``/``hw``/``params`` may
    already be on the device; ``params`` is also read on the host (``params_cpu`` if present) to
    build the per-op row lists, the affine maps and the posterize/solarize LUTs, sent in three
    copies, so no host-device synchronisation happens here.

    Work per batch: crops and chains are kept in uint8 (every op's output is an integer 0-255);
    per AugMix depth, ONE LUT pass for all colour ops (equalize histograms with int32 counts,
    autocontrast min/max, posterize/solarize tables from the host; one gather through an int32
    ``row * 256 + value`` address) and ONE ``grid_sample`` for all geometric ops (in
    ``work_dtype``: float16 on CUDA, whose grid comes from one float16 matrix product with float32
    accumulation); depth 0 reads the crops directly (no copy of the chains); then one mixing +
    normalising expression written into the output. ``compile=True`` (CUDA only) compiles that
    fixed-shape mixing into one kernel with ``torch.compile(dynamic=False)``; it falls back to
    eager if compilation fails. Same views as the previous implementation (kept as
    :mod:`argtca.engine._gpu_views_reference`): bit for bit in float32 on the CPU.
    """

    fold_mix = None    # eager mixing folded with the normalisation: "out" / "tmp" / "" (exact);
                       # None: "out" on CUDA, exact elsewhere (see _views_eager)
    exact_grid = None  # the reference's grid arithmetic (see grid()); None: on the CPU only

    def __init__(self, view_gen: ViewGenerator, work_dtype: Optional[torch.dtype] = None,
                 compile: bool = False):
        self.work_dtype = work_dtype   # None: float16 on CUDA (integers 0-255 are exact), else float32
        self.size = view_gen.size
        self.n_views = view_gen.n_views
        self.augmix = view_gen.augmix
        self.mean = torch.tensor(view_gen.mean).view(1, 3, 1, 1)
        self.std = torch.tensor(view_gen.std).view(1, 3, 1, 1)
        self.compile = bool(compile)
        self._compiled = None          # the compiled mixing, once built (False: it failed)
        self._compiled_lut = None      # the compiled full LUT gather (likewise)
        self._compiled_warp = None     # the compiled warp (likewise)
        self._grid = {}

    def normalize(self, x255: torch.Tensor) -> torch.Tensor:
        """uint8-valued [N, 3, S, S] → ToTensor + Normalize (the CPU path's arithmetic)."""
        mean, std = self.mean.to(x255.device), self.std.to(x255.device)
        return x255.float().div(255).sub(mean).div(std)

    def _compile_here(self, dev: torch.device) -> bool:
        return self.compile and dev.type == "cuda"

    def _wd(self, dev: torch.device) -> torch.dtype:
        return self.work_dtype or (torch.float16 if dev.type == "cuda" else torch.float32)

    def __call__(self, batch: Dict[str, Any]) -> torch.Tensor:
        view0 = batch["view0"]
        dev = view0.device
        B, S, V = view0.shape[0], self.size, self.n_views
        if V == 1:
            out = torch.empty(B, V, 3, S, S, device=dev)
            out[:, 0] = self.normalize(view0)
            return out
        params_cpu = batch.get("params_cpu", batch["params"]).cpu()
        params = batch["params"].to(dev, non_blocking=True)
        hw = batch["hw"].to(dev, non_blocking=True).float()
        crops = self.crops(batch["canvas"].to(dev, non_blocking=True), hw, params, params_cpu)
        mean, std = self.mean.to(dev), self.std.to(dev)
        chains = m = k = None
        if self.augmix:
            plan = _Plan(params_cpu, S, dev)
            chains = self.chains(crops, plan)
            m, k = plan.mix_weights()
            if self._compiled is not False and self._compile_here(dev):
                try:
                    if self._compiled is None:
                        self._compiled = torch.compile(_views_fused, dynamic=False)
                    return self._compiled(view0, crops, chains, m.clone(), k.clone(), mean, std)
                except Exception as e:   # no compiler / Triton here: eager, same arithmetic
                    self._compile_failed("mixing", e)
                    self._compiled = False
        out = torch.empty(B, V, 3, S, S, device=dev)
        fold = self.fold_mix if self.fold_mix is not None else ("out" if dev.type == "cuda" else "")
        return _views_eager(out, view0, crops, chains, m, k, mean, std, fold=fold)

    # -- resized crop + flip ------------------------------------------------------------------
    def crops(self, canvas: torch.Tensor, hw: torch.Tensor, params: torch.Tensor,
              params_cpu: torch.Tensor) -> torch.Tensor:
        """Resized crops (flipped where drawn) [B·n, 3, S, S], uint8."""
        B, n = params.shape[:2]
        S = self.size
        h, w = hw[:, 0:1], hw[:, 1:2]
        box = torch.stack([params[..., 0] * w, params[..., 1] * h, params[..., 2] * w,
                           params[..., 3] * h], dim=-1)                       # [B, n, 4]
        bidx = torch.arange(B, device=canvas.device, dtype=box.dtype).view(B, 1, 1).expand(B, n, 1)
        rois = torch.cat([bidx, box], dim=-1).reshape(-1, 5)
        # roi_align averages bilinear samples of 0-255 values with non-negative weights summing
        # to one: after rounding the values are in 0..255 (no clamp needed) and fit uint8
        x = roi_align(canvas.float(), rois, output_size=(S, S), spatial_scale=1.0,
                      sampling_ratio=-1, aligned=True).round_().to(torch.uint8)
        flip = torch.nonzero(params_cpu[..., 4].reshape(-1) > 0.5).flatten()
        if flip.numel():
            fi = _pinned(flip, x.device)
            _put_rows(x, fi, _take_rows(x, fi).flip(-1))
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

    def chains(self, crops: torch.Tensor, plan: "_Plan") -> torch.Tensor:
        """The three AugMix chains of every crop, [N, 3, 3, S, S] uint8. Per depth: one LUT pass
        for every colour op, one warp for every geometric op; rows whose chain has ended keep
        their values. Depth 0 (every chain has one) reads the crops directly."""
        N = crops.shape[0]
        wd = self._wd(crops.device)
        exact = self.exact_grid if self.exact_grid is not None else crops.device.type == "cpu"
        chains = torch.empty(N * CHAINS, *crops.shape[1:], dtype=torch.uint8, device=crops.device)
        for d in range(DEPTH):
            src = crops if d == 0 else chains
            geo, lut = plan.rows(d, "geo"), plan.rows(d, "lut")
            sgeo, slut = plan.rows(d, "sgeo"), plan.rows(d, "slut")   # their rows in ``src``
            if d == 0 and plan.depths[0]["keep"][1]:
                _put_rows(chains, plan.rows(0, "keep"), _take_rows(crops, plan.rows(0, "skeep")))
            counts = plan.depths[d]["counts"]
            y_geo = self._warp_compiled(src, sgeo, plan.affine(d), wd) if geo.numel() else None
            if geo.numel() and y_geo is None:
                y_geo = (self.warp(_take_rows(src, sgeo).to(wd), plan.affine(d), exact=exact)
                         .to(torch.uint8))
            lut_full = self._lut_full_fn(crops.device) if lut.numel() else None
            nxt = None
            if lut_full is not None:
                # every row through one (row, channel) LUT, identity where the op is no colour
                # op: one fixed-shape compiled gather writes the whole next chains tensor
                ne_na = counts[0] + counts[1]
                x = _take_rows(src, slut[:ne_na]) if ne_na else None
                table, _ = self._lut_tables(x, counts, plan.ps_luts(d), all_idx=False)
                full = torch.arange(256, device=crops.device, dtype=torch.uint8).repeat(
                    N * CHAINS * 3, 1)
                rows3 = (lut.view(-1, 1) * 3 + torch.arange(3, device=lut.device)).view(-1)
                full.index_copy_(0, rows3, table)
                try:
                    nxt = lut_full(src, full, CHAINS if d == 0 else 1)
                except Exception as e:   # Inductor/Triton failed here: eager, same numbers
                    self._compile_failed("LUT pass", e)
                    self._compiled_lut = False
            if nxt is not None:
                chains = nxt
            elif lut.numel():
                x = _take_rows(src, slut)
                table, idx = self._lut_tables(x, counts, plan.ps_luts(d))
                _put_rows(chains, lut, table.view(-1).index_select(0, idx.view(-1)).view_as(x))
            if y_geo is not None:
                _put_rows(chains, geo, y_geo)
        return chains.view(N, CHAINS, *crops.shape[1:])

    def _lut_tables(self, x: Optional[torch.Tensor], counts: Sequence[int],
                    ps_luts: torch.Tensor, all_idx: bool = True):
        """The LUTs [n·3, 256] (uint8) of one depth's colour-op rows ``x`` [n', 3, S, S] (rows in
        blocks of ``_LUT_ORDER`` with ``counts``; the posterize/solarize LUTs come from the host,
        so ``x`` may stop after the autocontrast block, or be None without such rows) and the
        int32 LUT addresses of ``x`` (``all_idx``) or of its equalize rows only."""
        ne, na = counts[0] * 3, counts[1] * 3
        flat = x.view(x.shape[0] * 3, -1) if x is not None else None
        idx = None
        if flat is not None and (all_idx or ne):
            idx = _lut_index(flat if all_idx else flat[:ne])
        parts = []
        if ne:
            parts.append(lut_equalize(_histograms(idx[:ne], ne)))
        if na:
            parts.append(lut_autocontrast(flat[ne:ne + na]))
        if ps_luts.numel():
            parts.append(ps_luts)
        return (torch.cat(parts) if len(parts) > 1 else parts[0]), idx

    def _warp_compiled(self, src: torch.Tensor, rows: torch.Tensor, A: torch.Tensor, wd):
        """:func:`_warp_rows` compiled (CUDA, ``compile=True``; one compilation for every row
        count), or None: the eager warp is used."""
        if self._compiled_warp is False or not self._compile_here(src.device):
            return None
        try:
            if self._compiled_warp is None:
                self._compiled_warp = torch.compile(_warp_rows)
            mark = getattr(getattr(torch, "_dynamo", None), "maybe_mark_dynamic", None)
            if mark is not None:   # the row count changes with every batch and depth
                mark(rows, 0)
                mark(A, 0)
            return self._compiled_warp(src, rows, A, wd)
        except Exception as e:
            self._compile_failed("warp", e)
            self._compiled_warp = False
            return None

    def _lut_full_fn(self, dev: torch.device):
        """The compiled :func:`_lut_full` on CUDA with ``compile=True`` (None otherwise, or once
        compilation failed: the per-subset eager gather is used)."""
        if self._compiled_lut is False or not self._compile_here(dev):
            return None
        if self._compiled_lut is None:
            try:
                self._compiled_lut = torch.compile(_lut_full, dynamic=False)
            except Exception as e:
                self._compile_failed("LUT pass", e)
                self._compiled_lut = False
                return None
        return self._compiled_lut

    @staticmethod
    def _compile_failed(what: str, e: Exception) -> None:
        print(f"argtca: GPU views: torch.compile of the {what} failed ({type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}); running it eagerly (same views)")

    def augment(self, crops: torch.Tensor, params: torch.Tensor,
                params_cpu: torch.Tensor) -> torch.Tensor:
        """m·crop + (1−m)·Σ_i w_i·chain_i(crop) on the uint8 value grid, [N, 3, S, S] float32
        (``crops``: 0-255 integer values, any dtype; ``params`` [N, ncol])."""
        crops = crops.round().clamp(0, 255).to(torch.uint8)
        plan = _Plan(params_cpu, self.size, crops.device)
        chains = self.chains(crops, plan)
        m, k = plan.mix_weights()
        return _mix(crops, chains, m, k)

    def warp(self, x: torch.Tensor, A: torch.Tensor, exact: bool = True) -> torch.Tensor:
        """Bilinear warp of ``x`` [n, 3, S, S] (float, 0-255) by pixel-centre affine maps ``A``
        [n, 2, 3], rounded (grid: see :meth:`grid`)."""
        grid = self.grid(A.to(x.device), x.dtype, exact)
        # bilinear weights are non-negative and sum to one: rounded values stay in 0..255
        return TF.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                              align_corners=False).round_()

    def grid(self, A: torch.Tensor, dtype: torch.dtype, exact: bool = True) -> torch.Tensor:
        """``grid_sample``'s normalised grid [n, S, S, 2] in ``dtype`` for pixel-centre maps ``A``.

        ``exact``: the reference's arithmetic (a float32 matrix product with the pixel centres,
        then ``· 2/S − 1``), bit for bit. Otherwise (the CUDA path; a batched product with
        3-long rows is a slow GEMM there): the maps are normalised first and the grid is one
        broadcast sum ``(a·x + c) + b·y`` of two small tensors, written in ``dtype``: the same
        float32 values up to rounding, so after the cast to float16 a grid entry differs from
        the reference's in ~0.05% of places, by one float16 step."""
        S = self.size
        if not exact:
            An = A.float() * (2.0 / S)
            An[:, :, 2] -= 1.0
            c = torch.arange(S, device=A.device, dtype=torch.float32) + 0.5
            ax = An[:, :, 0].unsqueeze(1) * c.view(1, S, 1) + An[:, :, 2].unsqueeze(1)  # [n, S(x), 2]
            by = An[:, :, 1].unsqueeze(1) * c.view(1, S, 1)                             # [n, S(y), 2]
            grid = torch.empty(A.shape[0], S, S, 2, device=A.device, dtype=dtype)
            return torch.add(ax.unsqueeze(1), by.unsqueeze(2), out=grid)
        src = self._base_grid(A.device) @ A.transpose(1, 2).unsqueeze(1)     # [n, S, S, 2]
        return (src * (2.0 / S) - 1.0).to(dtype)

    @staticmethod
    def _lut_op(x: torch.Tensor, lut_fn) -> torch.Tensor:
        n, c = x.shape[:2]
        flat = x.reshape(n * c, -1).to(torch.uint8)
        idx = _lut_index(flat)
        return lut_fn(flat, idx).view(-1).index_select(0, idx.view(-1)).to(x.dtype).view(x.shape)

    @staticmethod
    def autocontrast(x: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_autocontrast(flat))

    @staticmethod
    def equalize(x: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_equalize(
            _histograms(idx, flat.shape[0])))

    @staticmethod
    def posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_posterize_solarize(
            ["posterize"] * x.shape[0], bits.reshape(-1).cpu()).to(x.device).repeat_interleave(3, 0))

    @staticmethod
    def solarize(x: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_posterize_solarize(
            ["solarize"] * x.shape[0], thr.reshape(-1).cpu()).to(x.device).repeat_interleave(3, 0))


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
