"""Device-side pieces of the GPU views (:mod:`argtca.views.gpu`): the layout of the
per-view parameter rows, PIL's affine maps, the colour-op LUTs (built per (row, channel) from
int32 histograms / min-max / host formulas), wide-word row gathers and scatters, the mixing +
normalising expressions, the functions the optional ``torch.compile`` path compiles, and the
host-side plan of one batch. Everything here runs on the CPU too (bit for bit in float32)."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as TF

from argtca.views.augmix import OPS

# columns of the per-view parameter rows (views 1..V-1)
OP_NAMES = tuple(OPS)
GEOMETRIC_OPS = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
CHAINS, DEPTH = 3, 3
VIEW_PARAM_COLUMNS = (["x0", "y0", "x1", "y1", "flip", "m"] + [f"w{i}" for i in range(CHAINS)]
                      + [f"op{c}{d}" for c in range(CHAINS) for d in range(DEPTH)]
                      + [f"mag{c}{d}" for c in range(CHAINS) for d in range(DEPTH)])
N_COLUMNS = len(VIEW_PARAM_COLUMNS)
OP0 = 6 + CHAINS
MAG0 = OP0 + CHAINS * DEPTH


# ------------------------------------------------------------------------------ device side
def affine_rows(name: str, v: float, size: int) -> List[float]:
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
    """Vectorised :func:`affine_rows` for geometric op ids → [n, 2, 3] (float32, host)."""
    op_ids = op_ids.long()
    v = mags.double()
    n = op_ids.numel()
    A = torch.zeros(n, 6, dtype=torch.float64)
    A[:, 0] = 1.0
    A[:, 4] = 1.0
    is_ = {name: op_ids == OP_NAMES.index(name) for name in GEOMETRIC_OPS}
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
_GEO_IDS = torch.tensor([OP_NAMES.index(n) for n in GEOMETRIC_OPS])


def to_device_pinned(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
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


def lut_index(flat: torch.Tensor) -> torch.Tensor:
    """``row * 256 + value`` (int32) for uint8 rows [R, P]: the flat LUT address of every pixel,
    also its histogram bin. One kernel; 4 bytes a pixel instead of the 8 of an int64 gather."""
    off = torch.arange(0, flat.shape[0] * 256, 256, device=flat.device, dtype=torch.int32)
    return torch.add(off.view(-1, 1), flat)


def row_histograms(idx: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-row 256-bin histograms [rows, 256] (int32 counts, int32 atomics on CUDA) from
    ``lut_index`` addresses [rows, P]. (Spreading each row over 16 sub-histograms to cut
    colliding atomics gained nothing: ``benchmarks/README.md#gpu-views``.)"""
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


def take_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x.index_select(0, rows)`` for contiguous uint8 ``x``, moved as wide words."""
    return _flat_rows(x).index_select(0, rows).view(torch.uint8).view(-1, *x.shape[1:])


def put_rows(x: torch.Tensor, rows: torch.Tensor, y: torch.Tensor) -> None:
    """``x.index_copy_(0, rows, y)`` for contiguous uint8 ``x`` and ``y``, moved as wide words."""
    _flat_rows(x).index_copy_(0, rows, _flat_rows(y.contiguous()))


def mix_views(crops: torch.Tensor, chains: torch.Tensor, m: torch.Tensor,
              k: torch.Tensor) -> torch.Tensor:
    """``m·crop + Σ_i k_i·chain_i`` in float32 with the reference's roundings
    (``k_i = (1 − m)·w_i``, accumulated chain by chain). crops u8 [N,3,S,S], chains u8
    [N,3,3,S,S], m [N,1,1,1], k [N,3,1,1,1]."""
    mix = torch.mul(crops, m)
    for i in range(CHAINS):
        mix += torch.mul(chains[:, i], k[:, i])
    return mix


def views_eager(out: torch.Tensor, view0: torch.Tensor, crops: torch.Tensor,
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
        S = crops.shape[-1]
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
    x = crops.float() if chains is None else mix_views(crops, chains, m, k)
    torch.div(x.div_(255).sub_(mean).view(B, V - 1, *x.shape[1:]), std, out=out[:, 1:])
    return out


def views_fused(view0: torch.Tensor, crops: torch.Tensor, chains: torch.Tensor, m, k, mean,
                 std) -> torch.Tensor:
    """:func:`views_eager` as one expression (for ``torch.compile``: one fused kernel writes
    the output; same arithmetic)."""
    B = view0.shape[0]
    first = view0.float().div(255).sub(mean).div(std)
    mix = mix_views(crops, chains, m, k).div(255).sub(mean).div(std)
    return torch.cat([first.unsqueeze(1), mix.view(B, -1, *mix.shape[1:])], 1)


def lut_full_pass(src: torch.Tensor, table: torch.Tensor, rep: int) -> torch.Tensor:
    """Row ``r`` of the result = row ``r // rep`` of ``src`` (uint8 [R, 3, S, S]) through LUT
    rows ``3r + c`` of ``table`` ([R·rep·3, 256] uint8). Meant for ``torch.compile`` (the address
    is computed inside the one kernel); eager it costs an int64 address per pixel."""
    R, C = src.shape[0] * rep, src.shape[1]
    x = src.unsqueeze(1).expand(src.shape[0], rep, *src.shape[1:]).reshape(R, C, -1)
    off = torch.arange(R * C, device=src.device).view(R, C, 1) * 256
    return table.view(-1)[x.long() + off].view(R, *src.shape[1:])


def warp_rows(src: torch.Tensor, rows: torch.Tensor, A: torch.Tensor,
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


class ChainPlan:
    """Everything the device work of one batch needs from ``params_cpu``, built on the host and
    sent in three copies: per depth the rows of the geometric ops with their affine maps, the
    rows of the LUT ops (blocks in ``_LUT_ORDER``) with the posterize/solarize LUTs, and the
    mixing weights."""

    def __init__(self, params_cpu: torch.Tensor, size: int, dev: torch.device):
        p = params_cpu.reshape(-1, N_COLUMNS).float()
        N = p.shape[0]
        ops = p[:, OP0:MAG0].reshape(N * CHAINS, DEPTH).long()
        mags = p[:, MAG0:].reshape(N * CHAINS, DEPTH)
        ints, mats, luts, self.depths = [], [], [], []
        n_int = n_mat = n_lut = 0
        for d in range(DEPTH):
            col = ops[:, d]
            geo = torch.nonzero(torch.isin(col, _GEO_IDS)).flatten()
            blocks = [torch.nonzero(col == OP_NAMES.index(n)).flatten() for n in _LUT_ORDER]
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
        self.ints = to_device_pinned(torch.cat(ints).long(), dev)
        self.mats = to_device_pinned(torch.cat(mats), dev)
        self.luts = to_device_pinned(torch.cat(luts), dev)

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
