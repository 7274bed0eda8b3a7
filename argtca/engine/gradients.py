"""The fast engine's per-image gradients of a batch's steps: step 1 at θ0 (the cotangents of the
loss at the cached ``T0`` and one vector-Jacobian product on the kept θ0 graph, or the product with
Jᵀ of grad mode ``jacobian``), every later step (or step 1 under ``recompute``) by a fresh
forward/backward through the text tower, and the non-finite-loss bookkeeping that keeps the batch
free of host synchronisation (:class:`StepGradients`).

Why each grad mode exists and what it buys: :mod:`argtca.engine.fast`.
"""
from __future__ import annotations

from typing import Optional

import torch

from argtca.engine.objectives import avg_entropy, objective_loss, select_confident
from argtca.engine.reference import ReferenceEngine, raise_if_non_finite, _name


class StepGradients:
    """Mixin of :class:`~argtca.engine.fast.FastEngine`: the gradients of its AdamW steps and the
    checks of their losses. The engine provides ``theta0``, ``regularizer0``,
    ``_uses_cached_regularizer``, ``autocast``, ``logits``, ``text``/``_encode_text_grad``,
    ``text_ctx``, ``_text_backward_ctx``, ``_images_per_text_call``, ``_pad_rows``, ``jacobian_t``/
    ``_jacobian_precision`` (:class:`~argtca.engine.jacobian.JacobianAtTheta0`) and the settings
    (``grad_mode``, ``loss_scale``, ``selection_p``, ``compile_text_grad``, ``hint``)."""

    # ------------------------------------------------------------------ non-finite losses
    def _check_finite(self, first_bad: torch.Tensor, bad_seen: torch.Tensor, paths,
                      img: Optional[torch.Tensor] = None, inputs=None) -> None:
        """One host sync per batch. For the first bad image the reference episode is re-run alone
        (only on this error path) to name the step and the loss terms; should it not reproduce
        (float reordering), the error names the image and the loss."""
        if not bool(bad_seen.any()):
            return
        i = int(bad_seen.nonzero()[0])
        if img is not None:
            ReferenceEngine.tune(self, img[i:i + 1], [_name(paths, i)],
                                 None if inputs is None else inputs[i:i + 1])
        raise_if_non_finite(first_bad, bad_seen, paths, hint=self.hint)

    @staticmethod
    def _record_bad(loss, first_bad, bad_seen):
        bad = ~torch.isfinite(loss.detach())
        first_bad = torch.where(bad & ~bad_seen, loss.detach(), first_bad)
        return first_bad, bad_seen | bad

    # ------------------------------------------------------------------ step 1 at θ0
    def _step1_cotangent(self, img: torch.Tensor, sel_p: float, inputs=None):
        """Per-image loss at θ0 and its cotangent loss_scale·∂L_b/∂T ([B, P, E]); the selection."""
        B = img.shape[0]
        t0 = self.theta0()[1].detach()
        t = t0.unsqueeze(0).repeat(B, 1, 1).requires_grad_(True)
        with torch.enable_grad():
            with self.autocast():
                logits = self.logits(img, t)
            scores = self.objective.scores(logits.float())
            sel_idx = select_confident(scores.detach(), sel_p)
            sel = torch.gather(scores, 1, sel_idx.unsqueeze(-1).expand(-1, -1, scores.shape[-1]))
            if self._uses_cached_regularizer():
                reg0, reg_grad = self.regularizer0()
                ent = avg_entropy(sel)
                loss = ent + reg0
                g, = torch.autograd.grad(ent.sum() * self.loss_scale, t)
                g = g + reg_grad
            else:
                loss = objective_loss(self.objective, sel, t.float(), inputs, sel_idx)
                g, = torch.autograd.grad(loss.sum() * self.loss_scale, t)
        return loss.detach(), g, sel_idx

    def _vjp_theta0(self, cot: torch.Tensor) -> torch.Tensor:
        """Jᵀ(θ0)·cot for B cotangents [B, P, E] → [B, n, W] on the kept θ0 graph."""
        ctx0, t0 = self.theta0()
        with self._text_backward_ctx():
            return self._vjp(ctx0, t0, cot)

    def _vjp(self, ctx0, t0, cot):
        if self.grad_mode == "jacobian":
            jt = self.jacobian_t()
            with self._jacobian_precision():
                return (cot.flatten(1).float() @ jt.T).view(cot.shape[0], *ctx0.shape)
        if self.grad_mode == "vjp":
            g, = torch.autograd.grad(t0, ctx0, grad_outputs=cot, retain_graph=True,
                                     is_grads_batched=True)
            return g
        return torch.stack([torch.autograd.grad(t0, ctx0, grad_outputs=cot[b],
                                                retain_graph=True)[0]
                            for b in range(cot.shape[0])])

    def _grad_recompute(self, ctx: torch.Tensor, img: torch.Tensor, sel_idx, inputs=None):
        """Loss and (scaled) gradient by a fresh forward/backward at ``ctx``, in image chunks.
        Returns (loss [B], grad [B, n, W], sel_idx)."""
        step = self._images_per_text_call()
        losses, grads, sels = [], [], []
        for i in range(0, ctx.shape[0], step):
            x = ctx[i:i + step].detach().requires_grad_(True)
            n = x.shape[0]
            with torch.enable_grad():
                with self.text_ctx():
                    # a graphed pass is differentiated below, before the next chunk's forward
                    graphed = self.graphed_text(self.compile_text_grad)
                    if graphed is not None:
                        text = graphed(x)
                    elif self.compile_text_grad:
                        text = self._encode_text_grad(self._pad_rows(x, step))[:n]
                    else:
                        text = self.text(x)
                    logits = self.logits(img[i:i + step], text)
                scores = self.objective.scores(logits.float())
                s_idx = (select_confident(scores.detach(), self.selection_p) if sel_idx is None
                         else sel_idx[i:i + step])
                sel = torch.gather(scores, 1, s_idx.unsqueeze(-1).expand(-1, -1, scores.shape[-1]))
                loss = objective_loss(self.objective, sel, text.float(),
                                      None if inputs is None else inputs[i:i + step], s_idx)
                with self._text_backward_ctx():
                    g, = torch.autograd.grad(loss.sum() * self.loss_scale, x)
            losses.append(loss.detach())
            grads.append(g)
            sels.append(s_idx)
        # the views chosen at the first step are returned as they came (the same tensor), so that
        # per-view inputs made for them (RLCF's SelectedViewInputs) are found without a host sync
        if sel_idx is None:
            sel_idx = sels[0] if len(sels) == 1 else torch.cat(sels)
        return torch.cat(losses), torch.cat(grads), sel_idx
