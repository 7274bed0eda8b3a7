"""The two per-pixel passes of :class:`argtca.views.exact_ops.ChainRunner` as Triton kernels on
CUDA: Pillow's bilinear affine and the look-up of the colour ops, each one kernel for all the
images of a step (the torch version takes ~60 element-wise kernels a step, each a trip through
memory, and as many launches from the host thread the test loop runs on).

The affine kernel evaluates Geometry.c's expressions in their order in float64 and is compiled
with ``enable_fp_fusion=False`` (ptxas ``--fmad=false``): no multiply-add is fused, so every
product and sum is rounded as Pillow's C rounds it, and the pixels are Pillow's, bit for bit
(``benchmarks/probes/views_float_identity.py`` checks them against PIL on the device). Without
Triton (the CPU, or a build without it) ChainRunner runs its torch version: the same pixels.
"""
from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:   # pragma: no cover - depends on the installation
    triton = None

__all__ = ["available", "affine", "lookup", "tables"]

BLOCK = 1024


def available() -> bool:
    return triton is not None


if triton is not None:
    # buffers are passed whole with integer offsets into them (never specialised): a slice's
    # pointer would change Triton's alignment specialisation, i.e. compile the kernel again
    @triton.jit(do_not_specialize=["at"])
    def _affine_kernel(src, dst, meta, at, H, W, BLOCK: tl.constexpr):
        # meta[at:] [n, 7] float64: the image's row in src / dst, then Pillow's matrix a0 .. a5
        meta = meta + at
        g = tl.program_id(1)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        hw = H * W
        mask = offs < hw
        row = tl.load(meta + g * 7).to(tl.int64)
        a0 = tl.load(meta + g * 7 + 1)
        a1 = tl.load(meta + g * 7 + 2)
        a2 = tl.load(meta + g * 7 + 3)
        a3 = tl.load(meta + g * 7 + 4)
        a4 = tl.load(meta + g * 7 + 5)
        a5 = tl.load(meta + g * 7 + 6)
        y = offs // W
        x = offs - y * W
        xo = x.to(tl.float64) + 0.5
        yo = y.to(tl.float64) + 0.5
        xin = a0 * xo + a1 * yo + a2                  # affine_transform
        yin = a3 * xo + a4 * yo + a5
        inside = (xin >= 0.0) & (xin < W) & (yin >= 0.0) & (yin < H)
        xin = xin - 0.5                                # BILINEAR_HEAD
        yin = yin - 0.5
        xf = tl.floor(xin)
        yf = tl.floor(yin)
        dx = xin - xf
        dy = yin - yf
        xi = tl.where(inside, xf, 0.0).to(tl.int32)
        yi = tl.where(inside, yf, 0.0).to(tl.int32)
        x0 = tl.minimum(tl.maximum(xi, 0), W - 1)     # XCLIP, YCLIP; a second row past the
        x1 = tl.minimum(tl.maximum(xi + 1, 0), W - 1)  # last is the first again: v2 = v1
        y0 = tl.minimum(tl.maximum(yi, 0), H - 1)
        y1 = tl.minimum(tl.maximum(yi + 1, 0), H - 1)
        base = row * hw * 3
        load = mask & inside
        for c in tl.static_range(3):                   # BILINEAR_BODY, band by band
            p00 = tl.load(src + base + (y0 * W + x0) * 3 + c, mask=load, other=0).to(tl.float64)
            p01 = tl.load(src + base + (y0 * W + x1) * 3 + c, mask=load, other=0).to(tl.float64)
            p10 = tl.load(src + base + (y1 * W + x0) * 3 + c, mask=load, other=0).to(tl.float64)
            p11 = tl.load(src + base + (y1 * W + x1) * 3 + c, mask=load, other=0).to(tl.float64)
            v1 = p00 + (p01 - p00) * dx
            v2 = p10 + (p11 - p10) * dx
            v = v1 + (v2 - v1) * dy
            out = tl.where(inside, v.to(tl.int32), 0).to(tl.uint8)   # (UINT8) v: truncation
            tl.store(dst + base + offs * 3 + c, out, mask=mask)

    @triton.jit(do_not_specialize=["at", "lut_at"])
    def _lookup_kernel(src, dst, meta, at, luts, lut_at, HW3, BLOCK: tl.constexpr):
        # meta[at:] [n] float64: the image's row; luts[lut_at:] [n, 3, 256] uint8
        meta = meta + at
        luts = luts + lut_at * 768
        g = tl.program_id(1)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < HW3
        base = tl.load(meta + g).to(tl.int64) * HW3
        v = tl.load(src + base + offs, mask=mask, other=0).to(tl.int32)
        c = offs % 3
        out = tl.load(luts + g * 768 + c * 256 + v, mask=mask, other=0)
        tl.store(dst + base + offs, out, mask=mask)


    @triton.jit(do_not_specialize=["at"])
    def _histogram_kernel(src, hist, meta, at, HW, BLOCK: tl.constexpr):
        # hist [n, 3, 256] int32 (zeroed): per image ``meta[at + k]`` and channel, its levels'
        # counts
        meta = meta + at
        p = tl.program_id(1)                           # image k, channel c
        g = p // 3
        c = p - g * 3
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < HW
        base = tl.load(meta + g).to(tl.int64) * HW * 3
        v = tl.load(src + base + offs * 3 + c, mask=mask, other=0).to(tl.int32)
        h = tl.histogram(v, 256)
        # the masked tail was counted at level 0
        bins = tl.arange(0, 256)
        h = h - tl.where(bins == 0, BLOCK - tl.sum(mask.to(tl.int32)), 0)
        tl.atomic_add(hist + p * 256 + bins, h)

    @triton.jit(do_not_specialize=["lut_at", "n_auto"])
    def _tables_kernel(hist, luts, lut_at, n_auto):
        # ImageOps.autocontrast (images k < n_auto) or equalize tables from the histograms, one
        # program an image and channel, written into luts[lut_at:] [n, 3, 256] uint8
        luts = luts + lut_at * 768
        p = tl.program_id(0)
        i = tl.arange(0, 256)
        h = tl.load(hist + p * 256 + i).to(tl.int64)
        used = h > 0
        lo = tl.min(tl.where(used, i, 256))
        hi = tl.max(tl.where(used, i, -1))
        if p // 3 < n_auto:
            # scale = 255.0 / (hi - lo); offset = -lo * scale; int(ix * scale + offset)
            # float64 division is IEEE's (div.rn.f64; only float32's is approximate)
            scale = tl.full([], 255.0, tl.float64) / tl.maximum(hi - lo, 1).to(tl.float64)
            offset = (-lo).to(tl.float64) * scale
            v = (i.to(tl.float64) * scale + offset).to(tl.int32)    # int(): toward zero
            lut = tl.minimum(tl.maximum(v, 0), 255)
            lut = tl.where(hi <= lo, i, lut)
        else:
            # step = (count - count of the last used level) // 255; (step // 2 + below) // step
            total = tl.sum(h)
            step = (total - tl.sum(tl.where(i == hi, h, 0))) // 255
            below = tl.cumsum(h, 0) - h
            lut64 = tl.minimum((step // 2 + below) // tl.maximum(step, 1), 255)
            same = (tl.sum(used.to(tl.int32)) <= 1) | (step == 0)
            lut = tl.where(same, i, lut64.to(tl.int32))
        tl.store(luts + p * 256 + i, lut.to(tl.uint8))


def tables(src, meta, at: int, n: int, luts, lut_at: int, n_auto: int) -> None:
    """The autocontrast (the first ``n_auto``) and equalize tables of the ``n`` images
    ``meta[at:at + n]`` (float64 row numbers, on the device) of ``src`` uint8 [N, H, W, 3],
    written into ``luts[lut_at:lut_at + n]`` (uint8 [., 3, 256]): a histogram kernel, then one
    program per image and channel."""
    import torch
    hw = src.shape[1] * src.shape[2]
    hist = torch.zeros((n, 3, 256), dtype=torch.int32, device=src.device)
    _histogram_kernel[(triton.cdiv(hw, BLOCK), n * 3)](src, hist, meta, at, hw, BLOCK=BLOCK)
    _tables_kernel[(n * 3,)](hist, luts, lut_at, n_auto, enable_fp_fusion=False)


def affine(src, dst, meta, at: int, n: int) -> None:
    """Pillow's bilinear affine of ``n`` images of ``src`` uint8 [N, H, W, 3] into the same rows
    of ``dst``: ``meta[at:at + 7 n]`` (float64, on the device) holds per image its row, then
    its matrix."""
    h, w = src.shape[1:3]
    _affine_kernel[(triton.cdiv(h * w, BLOCK), n)](src, dst, meta, at, h, w, BLOCK=BLOCK,
                                                   enable_fp_fusion=False)


def lookup(src, dst, meta, at: int, n: int, luts, lut_at: int) -> None:
    """``dst[r] = luts[lut_at + k][channel][src[r]]`` for the ``n`` rows ``r = meta[at + k]``
    (float64, on the device; luts uint8 [., 3, 256])."""
    hw3 = src[0].numel()
    _lookup_kernel[(triton.cdiv(hw3, BLOCK), n)](src, dst, meta, at, luts, lut_at, hw3,
                                                 BLOCK=BLOCK)
