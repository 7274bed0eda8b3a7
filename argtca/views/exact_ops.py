"""TPT's AugMix chains on uint8 tensors, on any device, with PIL's own arithmetic: the pixels
:func:`argtca.views.exact.apply_chain_exact` (Pillow) gives, bit for bit.

The loader workers of the exact views spend ~80 % of their time in PIL's AugMix ops (the
bilinear ``transform`` of shears and rotations, the histograms and look-up tables of the colour
ops: ``benchmarks/README.md``, "Exact CPU views and peers"). Under ``TTA.VIEWS_OPS engine`` they
stop after the crops and ship each view's plan encoded by :func:`encode_plan`;
:class:`ChainRunner` then runs all chains of an image at once on the engine's device:

* **geometry** (rotate, shear_x / shear_y, translate_x / translate_y): Pillow's
  ``ImagingGenericTransform`` with ``affine_transform`` and ``bilinear_filter32RGB``
  (``libImaging/Geometry.c``), in float64 with its operations in its order, each an element-wise
  torch kernel (correctly rounded, never fused into a multiply-add): the source point
  ``(a0 (x + .5) + a1 (y + .5)) + a2`` (and ``a3 .. a5``); black where it falls outside
  ``[0, W) x [0, H)``; else, minus half a pixel, ``x0 = floor``, ``dx = x - x0``, the
  neighbours clamped at the border (a one-pixel edge copy around the image holds them),
  ``v1 = p00 + (p01 - p00) dx``, ``v2 = p10 + (p11 - p10) dx``, ``v1 + (v2 - v1) dy``, truncated
  to uint8. The matrices are the ones Pillow builds (``Image.rotate``: cosines and sines rounded
  to 15 decimals about the centre; its fast paths 0 / 90 / 180 / 270 as exact copies);
* **colour ops** as PIL's look-up tables: ``ImageOps.posterize`` and ``solarize`` from their
  parameter (built on the host), ``autocontrast`` (``int(i * scale + offset)`` with
  ``scale = 255 / (hi - lo)`` in float64) and ``equalize`` (integer arithmetic on the histogram)
  from each image's channels on the device, then one gather.

The identity with Pillow (and TPT's ``AugMixAugmenter``) is tested on the CPU in
tests/views/test_exact_ops.py; ``benchmarks/probes/views_float_identity.py`` checks it on CUDA.
"""
from __future__ import annotations

import threading
from typing import List, Tuple, Union

import numpy as np
import torch

from . import exact_ops_triton as _triton
from .augmix import AugMixPlan, OpCall, _rotate_matrix

__all__ = ["OP_NONE", "OP_AFFINE", "OP_AUTOCONTRAST", "OP_EQUALIZE", "OP_LUT", "PLAN_WIDTH",
           "encode_op", "encode_plan", "ChainRunner", "rotate_matrix", "wait_for_warm_ups"]

# an encoded op: [code, p0 .. p5] (float64); p = the affine matrix, or a LUT op's parameter
OP_NONE, OP_AFFINE, OP_AUTOCONTRAST, OP_EQUALIZE, OP_LUT = 0, 1, 2, 3, 4
PLAN_WIDTH = 7
# OP_LUT's p0: which table (p1 its parameter)
_POSTERIZE, _SOLARIZE = 0, 1


def rotate_matrix(angle: float, width: int, height: int) -> Tuple[float, ...]:
    """``Image.rotate(angle, BILINEAR)`` as an affine matrix (no expand, centre, translation):
    Pillow's fast paths as the exact copies they are (0: identity; 180; 90 / 270 on a square
    image), otherwise the inverse matrix Pillow hands to ``transform`` (coefficients rounded to
    15 decimals, about (w / 2, h / 2)). ``None`` for the identity."""
    angle = float(angle) % 360.0
    if angle == 0:
        return None
    w, h = float(width), float(height)
    # a copy: out(x, y) = in(x', y') with x' + .5 = a0 (x + .5) + a1 (y + .5) + a2 exactly
    if angle == 180:
        return (-1.0, 0.0, w, 0.0, -1.0, h)
    if angle == 90 and width == height:     # counter-clockwise: out(x, y) = in(W - 1 - y, x)
        return (0.0, -1.0, w, 1.0, 0.0, 0.0)
    if angle == 270 and width == height:    # out(x, y) = in(y, H - 1 - x)
        return (0.0, 1.0, 0.0, -1.0, 0.0, h)
    return _rotate_matrix(angle, width, height)


def encode_op(op: OpCall, size: int) -> List[float]:
    """One op of :func:`argtca.views.exact.apply_op_exact` as ``[code, p0 .. p5]``."""
    n, v = op.name, op.magnitude
    if n == "autocontrast":
        return [OP_AUTOCONTRAST] + [0.0] * 6
    if n == "equalize":
        return [OP_EQUALIZE] + [0.0] * 6
    if n == "posterize":
        bits = int(v)
        if not 1 <= bits <= 8:
            raise ValueError(f"posterize bits={bits}: must be 1..8 (as PIL's ImageOps.posterize)")
        return [OP_LUT, _POSTERIZE, bits, 0.0, 0.0, 0.0, 0.0]
    if n == "solarize":
        return [OP_LUT, _SOLARIZE, float(v), 0.0, 0.0, 0.0, 0.0]
    if n == "rotate":
        m = rotate_matrix(v, size, size)
        return [OP_NONE] + [0.0] * 6 if m is None else [OP_AFFINE, *m]
    if n == "shear_x":
        return [OP_AFFINE, 1.0, float(v), 0.0, 0.0, 1.0, 0.0]
    if n == "shear_y":
        return [OP_AFFINE, 1.0, 0.0, 0.0, float(v), 1.0, 0.0]
    if n == "translate_x":
        return [OP_AFFINE, 1.0, 0.0, float(int(v)), 0.0, 1.0, 0.0]
    if n == "translate_y":
        return [OP_AFFINE, 1.0, 0.0, 0.0, 0.0, 1.0, float(int(v))]
    raise KeyError(f"unknown AugMix op {n!r}")


def encode_plan(plan: AugMixPlan, size: int, out: np.ndarray = None,
                max_depth: int = 3) -> np.ndarray:
    """float64 [chains, max_depth, PLAN_WIDTH]: ``plan``'s chains, each op encoded by
    :func:`encode_op`, steps beyond a chain's depth OP_NONE."""
    width = len(plan.chains)
    if out is None:
        out = np.zeros((width, max_depth, PLAN_WIDTH), dtype=np.float64)
    out[...] = 0.0
    for i, chain in enumerate(plan.chains):
        if len(chain) > max_depth:
            raise ValueError(f"AugMix chain of depth {len(chain)} > {max_depth}")
        for j, op in enumerate(chain):
            out[i, j] = encode_op(op, size)
    return out


def _lut_tables(rows: np.ndarray) -> np.ndarray:
    """uint8 [n, 256] of OP_LUT rows ``[code, kind, p, ...]``: ImageOps' lists, posterize
    ``i & ~(2 ** (8 - bits) - 1)`` or solarize ``i if i < threshold else 255 - i``."""
    i = np.arange(256, dtype=np.int64)
    kind, p = rows[:, 1:2], rows[:, 2:3]
    bits = np.where(kind == _POSTERIZE, p, 8).astype(np.int64)
    posterized = i & (~((1 << (8 - bits)) - 1) & 0xFF)
    solarized = np.where(i < p, i, 255 - i)
    return np.where(kind == _POSTERIZE, posterized, solarized).astype(np.uint8)


# the compile threads started by ChainRunner.warm_up (see wait_for_warm_ups)
_WARMING: set = set()


def wait_for_warm_ups() -> None:
    """Wait for every kernel warm-up thread still running: called before a loader forks its
    workers (another loader's thread may still compile)."""
    for t in list(_WARMING):
        t.join()
        _WARMING.discard(t)


class ChainRunner:
    """Runs encoded AugMix chains (:func:`encode_plan`) on uint8 images [N, S, S, 3] (PIL's
    layout) on ``device``, step by step: at each step the images whose op is geometric go
    through one batched affine pass, those with a colour op through one batched look-up, the
    others stay as they are. The grouping is read from the plans on the host (they come with the
    item), so the device never waits for the host."""

    def __init__(self, device: Union[str, torch.device] = "cpu", kernels: str = "auto",
                 size: int = 0):
        self.device = torch.device(device)
        # "auto": the Triton kernels on CUDA where Triton is installed, else torch's ops
        if kernels not in ("auto", "torch", "triton"):
            raise ValueError(f"ChainRunner kernels={kernels!r}: use 'auto', 'torch' or 'triton'")
        if kernels == "auto":
            kernels = "triton" if self.device.type == "cuda" and _triton.available() else "torch"
        if kernels == "triton" and not _triton.available():
            raise RuntimeError("ChainRunner kernels='triton': Triton is not installed")
        self.kernels = kernels
        self.size = int(size)
        self._warming = None

    def warm_up(self) -> None:
        """Triton compiles its kernels on their first call (seconds; then cached on disk): with
        the image size known, start that now in a thread, beside the model's build, not in the
        loop. Call it after the loader's workers have forked: a fork while the thread holds a
        lock (an import's, say) would leave the child waiting on it for ever."""
        if self.kernels == "triton" and self.size and self._warming is None:
            self._warming = threading.Thread(target=self._warm, args=(self.size,), daemon=True,
                                             name="argtca-chain-kernels")
            _WARMING.add(self._warming)
            self._warming.start()

    def _warm(self, size: int) -> None:
        ops = [OpCall("shear_x", 0.01), OpCall("autocontrast"), OpCall("equalize"),
               OpCall("posterize", 4)]
        plans = np.zeros((len(ops), 3, PLAN_WIDTH))
        for k, op in enumerate(ops):
            plans[k, 0] = encode_op(op, size)
        stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(stream):
            self._triton(torch.zeros((len(ops), size, size, 3), dtype=torch.uint8,
                                     device=self.device), plans)
        stream.synchronize()

    def __call__(self, images: torch.Tensor, plans: np.ndarray) -> torch.Tensor:
        """``images`` uint8 [N, S, S, 3] on the device (not modified), ``plans`` float64
        [N, D, PLAN_WIDTH] on the host: the chains' results, uint8 [N, S, S, 3]."""
        plans = np.asarray(plans, dtype=np.float64)
        if plans.ndim != 3 or plans.shape[0] != images.shape[0] or plans.shape[2] != PLAN_WIDTH:
            raise ValueError(f"ChainRunner: plans {list(plans.shape)} do not encode "
                             f"{images.shape[0]} chains of [depth, {PLAN_WIDTH}]")
        if self.kernels == "triton":
            if self._warming is not None:
                self._warming.join()
                self._warming = None
            return self._triton(images.contiguous(), plans)
        x = images
        for d in range(plans.shape[1]):
            step = plans[:, d]
            codes = step[:, 0].astype(np.int64)
            if not codes.any():
                continue
            x = x.clone() if x is images else x
            geo = np.flatnonzero(codes == OP_AFFINE)
            if len(geo):
                idx = self._rows(geo)
                x.index_copy_(0, idx, self.affine(x.index_select(0, idx), step[geo, 1:]))
            col = np.flatnonzero(codes >= OP_AUTOCONTRAST)
            if len(col):
                idx = self._rows(col)
                x.index_copy_(0, idx, self.colour(x.index_select(0, idx), step[col]))
        return x

    def _triton(self, images: torch.Tensor, plans: np.ndarray) -> torch.Tensor:
        """:meth:`__call__` with one Triton kernel a step for the geometry and one for the
        colour look-ups (exact_ops_triton.py). Everything the steps read from the host goes up
        in one copy: per step its affine rows ``[row, a0 .. a5]``, then its colour rows (the
        autocontrast ones, then equalize, then posterize / solarize, whose tables are built
        here on the host); the two data-dependent kinds get theirs on the device."""
        steps, meta, fixed, at = [], [], [], 0
        for d in range(plans.shape[1]):
            step = plans[:, d]
            codes = step[:, 0].astype(np.int64)
            geo = np.flatnonzero(codes == OP_AFFINE)
            kinds = [np.flatnonzero(codes == k) for k in (OP_AUTOCONTRAST, OP_EQUALIZE, OP_LUT)]
            col = np.concatenate(kinds)
            meta.append(np.concatenate([geo[:, None].astype(np.float64), step[geo, 1:]], 1)
                        .ravel())
            meta.append(col.astype(np.float64))
            tables = np.zeros((len(col), 3, 256), dtype=np.uint8)
            if len(kinds[2]):
                tables[len(col) - len(kinds[2]):] = _lut_tables(step[kinds[2]])[:, None]
            fixed.append(tables)
            steps.append((at, len(geo), at + 7 * len(geo), len(kinds[0]), len(kinds[1]),
                          len(col)))
            at += 7 * len(geo) + len(col)
        meta_d = torch.from_numpy(np.concatenate(meta)).to(self.device, non_blocking=True)
        luts_d = torch.from_numpy(np.concatenate(fixed)).to(self.device, non_blocking=True)
        src, dst, spare, lut_at = images, None, None, 0
        for g0, n_geo, c0, n_auto, n_eq, n_col in steps:
            if not n_geo + n_col:
                continue
            if dst is None:
                dst = torch.empty_like(images)
            dst.copy_(src)
            if n_geo:
                _triton.affine(src, dst, meta_d, g0, n_geo)
            if n_col:
                if n_auto + n_eq:
                    _triton.tables(src, meta_d, c0, n_auto + n_eq, luts_d, lut_at, n_auto)
                _triton.lookup(src, dst, meta_d, c0, n_col, luts_d, lut_at)
                lut_at += n_col
            # the next step reads this one's result and writes the other buffer
            spare = src if src is not images else spare
            src, dst = dst, spare
        return images.clone() if src is images else src

    def _rows(self, rows: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(rows, dtype=torch.long).to(self.device, non_blocking=True)

    def _f64(self, a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64).to(
            self.device, non_blocking=True)

    def affine(self, x: torch.Tensor, matrices: np.ndarray) -> torch.Tensor:
        """Pillow's bilinear ``transform(AFFINE)`` (black outside) of each image of ``x`` uint8
        [n, H, W, 3] with its matrix (float64 [n, 6], on the host)."""
        n, h, w, c = x.shape
        dev = x.device
        a = self._f64(matrices).view(n, 6, 1, 1).unbind(1)
        xo = torch.arange(w, dtype=torch.float64, device=dev).add_(0.5).view(1, 1, w)
        yo = torch.arange(h, dtype=torch.float64, device=dev).add_(0.5).view(1, h, 1)
        xin = (a[0] * xo + a[1] * yo) + a[2]          # Geometry.c affine_transform, in its order
        yin = (a[3] * xo + a[4] * yo) + a[5]
        inside = (xin >= 0) & (xin < w) & (yin >= 0) & (yin < h)
        xin, yin = xin - 0.5, yin - 0.5                # bilinear_filter: BILINEAR_HEAD
        xf, yf = torch.floor(xin), torch.floor(yin)
        dx, dy = (xin - xf).unsqueeze(-1), (yin - yf).unsqueeze(-1)
        # inside: xf in [-1, W - 1], yf in [-1, H - 1]; the padded image's (xf + 1, yf + 1) is the
        # top-left neighbour, its edge copies the neighbours Pillow clamps to the border
        row = w + 2
        top_left = ((yf + 1) * row + (xf + 1)).to(torch.long)
        top_left = torch.where(inside, top_left, torch.zeros_like(top_left)).view(n, h * w, 1)
        flat = _edge_pad(x).view(n, (h + 2) * row, c)

        def tap(offset: int) -> torch.Tensor:
            idx = (top_left + offset).expand(n, h * w, c)
            return flat.gather(1, idx).view(n, h, w, c).to(torch.float64)

        p00, p01, p10, p11 = tap(0), tap(1), tap(row), tap(row + 1)
        v1 = p00 + (p01 - p00) * dx
        v2 = p10 + (p11 - p10) * dx
        v = v1 + (v2 - v1) * dy
        out = v.to(torch.uint8)                        # (UINT8) v1: truncation, v >= 0
        return out.mul_(inside.unsqueeze(-1))

    def colour(self, x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """The colour ops of ``rows`` (encoded, on the host) on ``x`` uint8 [n, H, W, 3]: each
        image's three look-up tables (PIL's ``point``), then one gather."""
        n, h, w, c = x.shape
        dev = x.device
        codes = rows[:, 0].astype(np.int64)
        lut = torch.empty((n, c, 256), dtype=torch.uint8, device=dev)
        fixed = np.flatnonzero(codes == OP_LUT)
        if len(fixed):
            tables = torch.as_tensor(_lut_tables(rows[fixed])).to(dev, non_blocking=True)
            lut[self._rows(fixed)] = tables.unsqueeze(1).expand(len(fixed), c, 256)
        planes = x.permute(0, 3, 1, 2).reshape(n, c, h * w)
        auto = np.flatnonzero(codes == OP_AUTOCONTRAST)
        if len(auto):
            idx = self._rows(auto)
            lut[idx] = _autocontrast_luts(planes.index_select(0, idx))
        eq = np.flatnonzero(codes == OP_EQUALIZE)
        if len(eq):
            idx = self._rows(eq)
            lut[idx] = _equalize_luts(planes.index_select(0, idx))
        base = torch.arange(n * c, device=dev).mul_(256).view(n, 1, 1, c)
        return lut.view(-1)[x.to(torch.long) + base]


def _edge_pad(x: torch.Tensor) -> torch.Tensor:
    """uint8 [n, H + 2, W + 2, c]: ``x`` with a one-pixel copy of its border around."""
    n, h, w, c = x.shape
    p = x.new_empty((n, h + 2, w + 2, c))
    p[:, 1:-1, 1:-1] = x
    p[:, 0, 1:-1], p[:, -1, 1:-1] = x[:, 0], x[:, -1]
    p[:, :, 0], p[:, :, -1] = p[:, :, 1], p[:, :, -2]
    return p


_LEVELS = {}


def _levels(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    key = (device, dtype)
    if key not in _LEVELS:
        _LEVELS[key] = torch.arange(256, dtype=dtype, device=device)
    return _LEVELS[key]


def _autocontrast_luts(planes: torch.Tensor) -> torch.Tensor:
    """``ImageOps.autocontrast`` (cutoff 0) tables of planes uint8 [n, c, P]: uint8 [n, c, 256];
    per channel ``lo``/``hi`` its extremes, ``scale = 255.0 / (hi - lo)``, ``offset = -lo *
    scale``, ``lut[i] = int(i * scale + offset)`` clipped to [0, 255] (float64, Python's
    operations in its order); the identity where ``hi <= lo``."""
    lo = planes.amin(dim=2).to(torch.float64).unsqueeze(-1)
    hi = planes.amax(dim=2).to(torch.float64).unsqueeze(-1)
    flat = hi <= lo
    # a tensor by a tensor: ``255.0 / t`` is torch's ``t.reciprocal() * 255.0`` (rounded twice)
    scale = torch.full_like(hi, 255.0).div_(torch.where(flat, torch.ones_like(hi), hi - lo))
    offset = (-lo) * scale
    i = _levels(planes.device, torch.float64)
    lut = torch.trunc(i * scale + offset).clamp_(0, 255)
    lut = torch.where(flat, i.expand_as(lut), lut)
    return lut.to(torch.uint8)


def _equalize_luts(planes: torch.Tensor) -> torch.Tensor:
    """``ImageOps.equalize`` tables of planes uint8 [n, c, P]: uint8 [n, c, 256]; per channel
    ``step = (count - count of the last used level) // 255``, ``lut[i] = (step // 2 + #pixels
    below i) // step`` clipped to 255 (PIL's ``point``), the identity for one used level or
    ``step == 0`` (integer arithmetic)."""
    n, c, p = planes.shape
    dev = planes.device
    base = torch.arange(n * c, device=dev).mul_(256).view(n, c, 1)
    h = torch.bincount((planes.to(torch.long) + base).reshape(-1), minlength=n * c * 256)
    h = h.view(n, c, 256)
    used = h > 0
    last = 255 - used.flip(-1).to(torch.uint8).argmax(dim=-1, keepdim=True)
    step = (h.sum(dim=-1, keepdim=True) - h.gather(-1, last)) // 255
    step = torch.where(used.sum(dim=-1, keepdim=True) <= 1, torch.zeros_like(step), step)
    below = h.cumsum(dim=-1) - h
    lut = torch.minimum((step // 2 + below) // step.clamp(min=1), torch.full_like(below, 255))
    i = _levels(dev, torch.long)
    return torch.where(step == 0, i.expand_as(lut), lut).to(torch.uint8)
