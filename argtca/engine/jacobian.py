"""The fast engine's Jacobian at θ0 (grad mode ``jacobian``): when to use it, computing it (split
over the ranks of a multi-GPU run) and the per-batch product ``cot @ Jᵀ``.

With one AdamW step per image (TPT/TCA's setting) every image's gradient is taken at the initial
context θ0, so ``Jᵀ = (∂T/∂ctx)ᵀ`` at θ0, computed once per dataset by forward mode
(:func:`argtca.engine.text_tower.text_jacobian`), turns each batch's text backward into one matrix
product. :class:`JacobianAtTheta0` is the part of :class:`~argtca.engine.fast.FastEngine` that
holds it; the engine provides ``text_encoder``, ``num_prompts``, ``autocast``, ``steps`` and the
settings read here.
"""
from __future__ import annotations

import contextlib
import time
from typing import Optional

import torch

# grad_mode "auto" keeps the Jacobian at θ0 only where it takes at most this share of free memory
JACOBIAN_MEMORY_FRACTION = 0.25


def _all_gather_rows(part: torch.Tensor, rows: int, world: int) -> torch.Tensor:
    """Every rank's ``part`` [≤ rows, C] (padded to ``rows``) gathered in rank order:
    [world·rows, C] (NCCL: into one tensor; gloo: through a list)."""
    import torch.distributed as dist
    buf = part
    if part.shape[0] != rows:
        buf = part.new_zeros(rows, part.shape[1])
        buf[:part.shape[0]] = part
    if dist.get_backend() == "nccl":
        out = buf.new_empty(world * rows, buf.shape[1])
        dist.all_gather_into_tensor(out, buf.contiguous())
        return out
    parts = [torch.empty_like(buf) for _ in range(world)]
    dist.all_gather(parts, buf.contiguous())
    return torch.cat(parts)


class JacobianAtTheta0:
    """Mixin of :class:`~argtca.engine.fast.FastEngine`: Jᵀ at θ0 and the rule that picks it."""

    # (rank, world): the ranks of a multi-GPU run each compute 1/world of Jᵀ's rows and
    # all-gather them (set by argtca.engine.distributed.share_jacobian)
    jacobian_share: Optional[tuple] = None
    jacobian_rows = None   # the rows this process computed, (lo, hi)
    jacobian_seconds = 0.0

    def _text_out_dim(self) -> int:
        model = self.text_encoder.model
        proj = getattr(model, "text_projection", None)
        if isinstance(proj, torch.nn.Linear):
            return int(proj.out_features)
        if isinstance(proj, torch.Tensor):
            return int(proj.shape[-1])
        return int(self.text_encoder.ctx_init.shape[-1])

    def jacobian_bytes(self) -> int:
        n, W = self.text_encoder.ctx_init.shape
        return int(n) * int(W) * self.num_prompts * self._text_out_dim() * 4

    def _auto_grad_mode(self, n_images: Optional[int]):
        """``grad_mode="auto"``: "jacobian" on CUDA with one step (the gradient is always taken at
        θ0) when the test set is long enough to pay the Jacobian's n·W forward-mode tangents back
        (each costs about one image's backward pass, at K=101 as at K=1000; so ≥ n·W images, 2048
        for ViT-B/16's 4 x 512 context) and Jᵀ fits in JACOBIAN_MEMORY_FRACTION of the free GPU
        memory; else "recompute" with a compiled text tower, "vjp" eager: the fastest combination
        in each case (``benchmarks/README.md#fast-engine-knobs``). Returns (mode, reason)."""
        other = "recompute" if self.compile_text_grad else "vjp"
        if self.steps != 1 or self.device.type != "cuda" or not self.prefix_share:
            return other, ""
        n, W = self.text_encoder.ctx_init.shape
        need = int(n) * int(W)
        if n_images is not None and n_images < need:
            return other, (f"{n_images} images < {need}: the Jacobian would not pay back; "
                           f"grad mode {other}")
        free = torch.cuda.mem_get_info(self.device)[0]
        if self.jacobian_bytes() > JACOBIAN_MEMORY_FRACTION * free:
            return other, (f"the Jacobian needs {self.jacobian_bytes() / 2**30:.1f} GiB > "
                           f"{JACOBIAN_MEMORY_FRACTION:.0%} of {free / 2**30:.1f} GiB free; "
                           f"grad mode {other}")
        return "jacobian", (f"grad mode jacobian (Jᵀ at θ0: {self.jacobian_bytes() / 2**30:.2f} "
                            f"GiB, replaces the per-image text backward)")

    def needs_jacobian(self) -> bool:
        """Whether :meth:`prepare` will compute Jᵀ (grad mode "jacobian", a step, not yet
        done)."""
        return self.steps > 0 and self.grad_mode == "jacobian" and self._jt is None

    def jacobian_t(self) -> torch.Tensor:
        """Jᵀ of the text features at θ0, [n·W, P·E] fp32, computed once (forward mode)."""
        if self._jt is None:
            from argtca.engine.text_tower import PrefixSharedText, text_jacobian
            text = PrefixSharedText(self.text_encoder, attention="manual")
            n, W = self.text_encoder.ctx_init.shape
            per = self.num_prompts * int(self.text_encoder.seq_len)
            D = int(n) * int(W)
            chunk = max(1, min(D, 8 * self.text_tokens // max(1, per)))
            rank, world = self.jacobian_share or (0, 1)
            rows = -(-D // world)                      # rows per rank (the last may have fewer)
            lo, hi = min(D, rank * rows), min(D, (rank + 1) * rows)
            t = time.perf_counter()
            with self.autocast():
                jt = text_jacobian(text, self.text_encoder.ctx_init.detach().float(),
                                   chunk=chunk, compile=self.compile_jacobian, rows=(lo, hi))
            self.jacobian_rows = (lo, hi)
            if world > 1:
                jt = _all_gather_rows(jt, rows, world)[:D]
            self._jt = jt
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.jacobian_seconds = time.perf_counter() - t
        return self._jt

    @contextlib.contextmanager
    def _jacobian_precision(self):
        """TF32 tensor cores for ``cot @ Jᵀ`` on CUDA (``jacobian_tf32``): inputs rounded to 10
        mantissa bits (as fp16, the precision of the reference's own autocast backward), sums in
        fp32; ~10x faster than fp32 FFMA (K=1000: a 67 GFLOP product per batch of 16)."""
        if not self.jacobian_tf32:
            yield
            return
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
