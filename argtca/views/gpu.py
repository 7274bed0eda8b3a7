"""Test-time views made on the device (``TTA.VIEWS_DEVICE gpu``), and the views loader of both
paths.

**Not bit-identical to the CPU path.** The CPU path (:mod:`argtca.views.cpu`) crops, flips and
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

How the batch is computed (:class:`GpuViewMaker`, its pieces in :mod:`argtca.views.gpu_ops`):
uint8 crops and chains, per AugMix depth one LUT pass for every colour op and one ``grid_sample``
for every geometric op, then one mixing + normalising pass (timings:
``benchmarks/README.md#gpu-views``).
What the loader workers ship (view 0, canvas, parameters) is made in :mod:`argtca.views.gpu_host`;
the loader that feeds the test loop is :mod:`argtca.views.loader`.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn.functional as TF
from torchvision.ops import roi_align

from argtca.views.cpu import ViewGenerator
from argtca.views.gpu_ops import (CHAINS, DEPTH, ChainPlan, lut_autocontrast, lut_equalize,
                                  lut_full_pass, lut_index, lut_posterize_solarize, mix_views,
                                  put_rows, row_histograms, take_rows, to_device_pinned,
                                  views_eager, views_fused, warp_rows)


__all__ = ["GpuViewMaker"]



# ------------------------------------------------------------------------------ device side
class GpuViewMaker:
    """``maker(batch) -> views [B, V, 3, S, S]`` (fp32, normalised) on the batch's device.

    ``batch``: a :func:`collate_gpu_views` batch whose ``view0``/``canvas``/``hw``/``params`` may
    already be on the device; ``params`` is also read on the host (``params_cpu`` if present) to
    build the per-op row lists, the affine maps and the posterize/solarize LUTs, sent in three
    copies, so no host-device synchronisation happens here.

    Work per batch (eager, the default): crops and chains are kept in uint8 (every op's output
    is an integer 0-255); depth 0 reads the crops directly (no copy of the chains); per AugMix
    depth, ONE LUT pass for all colour ops (a uint8 LUT per (row, channel): equalize from int32
    histograms, autocontrast from min/max, posterize/solarize from the host; one gather through
    an int32 ``row * 256 + value`` address) and ONE ``grid_sample`` for all geometric ops (in
    ``work_dtype``: float16 on CUDA; on CUDA its grid is one broadcast sum, see :meth:`grid`);
    rows move between the two as 8-byte words; then one mixing + normalising pass written into
    the output (folded into per-(view, channel) coefficients on CUDA, see
    :func:`~argtca.views.gpu_ops._views_eager`). Same views as the per-op oracle
    :mod:`tests.oracles.gpu_views_reference`: bit for bit in float32 on the CPU; on CUDA in
    float16 the grid's rounding differs in rare places (2.7e-6 of the values differ by more than
    0.01).

    ``compile=True`` (CUDA only; the test loop turns it on with the towers' ``TTA.COMPILE``,
    see :func:`build_views_loader`): three stages go through
    ``torch.compile`` -- the mixing (fixed shape, one kernel), the LUT pass as one gather of every
    row through a full table (identity where the op is no colour op; fixed shape) and the warp
    (gather + grid + sampling + rounding, dynamic row count; it samples in float32 like Inductor's
    ``grid_sample``, so it differs from the float16 reference by rounding in ~1% of values by
    more than 0.01). Each falls back to eager, with one line, if compilation fails. Compiling
    takes seconds and saves a fraction of a millisecond of GPU time per image, so it pays only
    for long runs (``benchmarks/README.md#gpu-views``).
    """

    fold_mix = None    # eager mixing folded with the normalisation: "out" / "tmp" / "" (exact);
                       # None: "out" on CUDA, exact elsewhere (see views_eager)
    exact_grid = None  # the reference's grid arithmetic (see grid()); None: on the CPU only

    def __init__(self, view_gen: ViewGenerator, work_dtype: Optional[torch.dtype] = None,
                 compile: bool = False):
        # None: float16 on CUDA (integers 0-255 are exact), else float32
        self.work_dtype = work_dtype
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
        self._mean_std_on = {}   # device -> (mean, std): copied once, see _mean_std

    def _mean_std(self, dev: torch.device):
        """mean/std on ``dev``, copied once: a per-batch host→device copy of pageable memory
        would wait for all the work queued on the stream (no batch could run ahead)."""
        key = str(dev)
        if key not in self._mean_std_on:
            self._mean_std_on[key] = (self.mean.to(dev), self.std.to(dev))
        return self._mean_std_on[key]

    def normalize(self, x255: torch.Tensor) -> torch.Tensor:
        """uint8-valued [N, 3, S, S] → ToTensor + Normalize (the CPU path's arithmetic)."""
        mean, std = self._mean_std(x255.device)
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
        mean, std = self._mean_std(dev)
        chains = m = k = None
        if self.augmix:
            plan = ChainPlan(params_cpu, S, dev)
            chains = self.chains(crops, plan)
            m, k = plan.mix_weights()
            if self._compiled is not False and self._compile_here(dev):
                try:
                    if self._compiled is None:
                        self._compiled = torch.compile(views_fused, dynamic=False)
                    return self._compiled(view0, crops, chains, m.clone(), k.clone(), mean, std)
                except Exception as e:   # no compiler / Triton here: eager, same arithmetic
                    self._compile_failed("mixing", e)
                    self._compiled = False
        out = torch.empty(B, V, 3, S, S, device=dev)
        fold = self.fold_mix if self.fold_mix is not None else ("out" if dev.type == "cuda" else "")
        return views_eager(out, view0, crops, chains, m, k, mean, std, fold=fold)

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
            fi = to_device_pinned(flip, x.device)
            put_rows(x, fi, take_rows(x, fi).flip(-1))
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

    def chains(self, crops: torch.Tensor, plan: "ChainPlan") -> torch.Tensor:
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
                put_rows(chains, plan.rows(0, "keep"), take_rows(crops, plan.rows(0, "skeep")))
            counts = plan.depths[d]["counts"]
            y_geo = self._warp_compiled(src, sgeo, plan.affine(d), wd) if geo.numel() else None
            if geo.numel() and y_geo is None:
                y_geo = (self.warp(take_rows(src, sgeo).to(wd), plan.affine(d), exact=exact)
                         .to(torch.uint8))
            lut_full = self._lut_full_fn(crops.device) if lut.numel() else None
            nxt = None
            if lut_full is not None:
                # every row through one (row, channel) LUT, identity where the op is no colour
                # op: one fixed-shape compiled gather writes the whole next chains tensor
                ne_na = counts[0] + counts[1]
                x = take_rows(src, slut[:ne_na]) if ne_na else None
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
                x = take_rows(src, slut)
                table, idx = self._lut_tables(x, counts, plan.ps_luts(d))
                put_rows(chains, lut, table.view(-1).index_select(0, idx.view(-1)).view_as(x))
            if y_geo is not None:
                put_rows(chains, geo, y_geo)
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
            idx = lut_index(flat if all_idx else flat[:ne])
        parts = []
        if ne:
            parts.append(lut_equalize(row_histograms(idx[:ne], ne)))
        if na:
            parts.append(lut_autocontrast(flat[ne:ne + na]))
        if ps_luts.numel():
            parts.append(ps_luts)
        return (torch.cat(parts) if len(parts) > 1 else parts[0]), idx

    def _warp_compiled(self, src: torch.Tensor, rows: torch.Tensor, A: torch.Tensor, wd):
        """:func:`warp_rows` compiled (CUDA, ``compile=True``; one compilation for every row
        count), or None: the eager warp is used."""
        if self._compiled_warp is False or not self._compile_here(src.device):
            return None
        try:
            if self._compiled_warp is None:
                self._compiled_warp = torch.compile(warp_rows)
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
        """The compiled :func:`lut_full_pass` on CUDA with ``compile=True`` (None otherwise, or once
        compilation failed: the per-subset eager gather is used)."""
        if self._compiled_lut is False or not self._compile_here(dev):
            return None
        if self._compiled_lut is None:
            try:
                self._compiled_lut = torch.compile(lut_full_pass, dynamic=False)
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
        plan = ChainPlan(params_cpu, self.size, crops.device)
        chains = self.chains(crops, plan)
        m, k = plan.mix_weights()
        return mix_views(crops, chains, m, k)

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
            # ax: [n, S(x), 2], by: [n, S(y), 2]
            ax = An[:, :, 0].unsqueeze(1) * c.view(1, S, 1) + An[:, :, 2].unsqueeze(1)
            by = An[:, :, 1].unsqueeze(1) * c.view(1, S, 1)
            grid = torch.empty(A.shape[0], S, S, 2, device=A.device, dtype=dtype)
            return torch.add(ax.unsqueeze(1), by.unsqueeze(2), out=grid)
        src = self._base_grid(A.device) @ A.transpose(1, 2).unsqueeze(1)     # [n, S, S, 2]
        return (src * (2.0 / S) - 1.0).to(dtype)

    @staticmethod
    def _lut_op(x: torch.Tensor, lut_fn) -> torch.Tensor:
        n, c = x.shape[:2]
        flat = x.reshape(n * c, -1).to(torch.uint8)
        idx = lut_index(flat)
        return lut_fn(flat, idx).view(-1).index_select(0, idx.view(-1)).to(x.dtype).view(x.shape)

    @staticmethod
    def autocontrast(x: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_autocontrast(flat))

    @staticmethod
    def equalize(x: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_equalize(
            row_histograms(idx, flat.shape[0])))

    @staticmethod
    def posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_posterize_solarize(
            ["posterize"] * x.shape[0], bits.reshape(-1).cpu()
        ).to(x.device).repeat_interleave(3, 0))

    @staticmethod
    def solarize(x: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
        return GpuViewMaker._lut_op(x, lambda flat, idx: lut_posterize_solarize(
            ["solarize"] * x.shape[0], thr.reshape(-1).cpu()).to(x.device).repeat_interleave(3, 0))
