"""The engine of a method that tunes the image tower: LoRA in its attention, per image (TTL).

The other episodic engines tune text-side parameters on frozen image features; here the image
tower is in the backward pass. Per batch of B images (each alone, as the reference protocol):

* the frozen part of the tower (stem and the blocks before the first adapted one) runs once on
  every view, without a graph (:meth:`LoRATower.prefix`): every step starts from the same tokens;
  under fp16 autocast it runs from a copy stored in fp16, as the fast engine's image tower
  (``TTA.FAST.HALF_IMAGE``, ``LEAN_IMAGE``, ``FOLD_QUICKGELU``: :mod:`argtca.engine.towers`;
  fp16 rounding apart, the same function; the official code's CLIP holds its weights in fp16);
* the adapters of every image are set to their saved initial values (A as drawn once per run from
  ``SEED``, B = 0: the frozen tower), one set per image (:mod:`argtca.models.lora`);
* ``TTA.STEPS`` AdamW steps (``TTA.LR``, ``TTA.WEIGHT_DECAY``) on the objective over every view's
  logits against the class text features (computed once, at the initial prompt);
* the prediction: view 0 through the tuned tower, the objective's probabilities.

One AdamW over the ``[B, ...]`` adapter tensors updates each image as if it were alone (AdamW is
element-wise, image b's loss reads only its own adapters), so a batch equals its images one by
one. Precision and overflow as the reference engine: fp16 autocast on CUDA (``TTA.PREC amp``)
with fp32 adapters and the static ``TTA.LOSS_SCALE``; an image whose gradient is not finite, or
whose loss kept no view, skips its step alone.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from argtca.engine.objectives import Objective
from argtca.engine.reference import (ReferenceEngine, raise_if_non_finite,
                                      raise_if_non_finite_probs)
from argtca.engine.towers import fast_image_tower
from argtca.models.lora import LoRATower
from argtca.registry import ENGINE_REGISTRY


@ENGINE_REGISTRY.register(name="lora")
class LoRAEngine(ReferenceEngine):
    """``engine(views [B, V, 3, S, S], paths) -> probs [B, K]``. ``layers``, ``rank``,
    ``alpha``, ``targets``: the adapters (:class:`~argtca.models.lora.LoRATower`); ``seed``
    draws their initial A. Of the reference engine it keeps the hyper-parameters, precision,
    loss scale, checks and ``submit``. Only a method that names this engine runs on it
    (:func:`argtca.config.settle.settle_engine`)."""

    batched = True
    method_only = True

    def __init__(self, model, text_encoder, objective: Objective, cfg, device, *,
                 n_images: Optional[int] = None, layers: Sequence[int] = (-3, -2, -1),
                 rank: int = 16, alpha: float = 32.0, targets: Sequence[str] = ("q", "v"),
                 seed: int = 0):
        super().__init__(model, text_encoder, objective, cfg, device)
        self.tower = LoRATower(model.visual, layers, rank, alpha, targets, seed=seed)
        knobs = cfg.TTA.FAST
        self.half_prefix = self.amp and bool(knobs.HALF_IMAGE)
        if self.half_prefix:
            self.tower.use_frozen_copy(fast_image_tower(
                model.visual, torch.float16, lean_blocks=bool(knobs.LEAN_IMAGE),
                fold_gelu=bool(knobs.FOLD_QUICKGELU)))
        self.tower.to(self.device)
        self.text = None

    def prepare(self) -> None:
        """The class text features [K, E] at the initial prompt, once per dataset."""
        if self.text is None:
            with torch.no_grad(), self.autocast():
                self.text = self.text_encoder(self.text_encoder.ctx_init).float()

    def class_logits(self, tokens: torch.Tensor, B: int) -> torch.Tensor:
        """Tokens entering the adapted blocks [B·V, L, D] -> logits [B, V, K]."""
        with self.autocast():
            f = self.tower.suffix(tokens)
        f = F.normalize(f.float(), dim=-1)
        return self.logit_scale * (f @ self.text.t()).reshape(B, -1, self.text.shape[0])

    def adapt(self, tokens: torch.Tensor, B: int,
             paths: Optional[Sequence[str]] = None) -> None:
        """``TTA.STEPS`` steps of every image's adapters (reset first) on its views' tokens."""
        self.tower.reset(B)
        params = self.tower.parameters_to_tune()
        if self.steps <= 0:
            return
        opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.wd)
        for step in range(self.steps):
            with torch.enable_grad():
                logits = self.class_logits(tokens, B)
                loss = self.objective.loss(logits)
                bad = ~torch.isfinite(loss.detach())
                if bool(bad.any()):
                    raise_if_non_finite(loss.detach(), bad, paths, None, self.hint, step)
                opt.zero_grad(set_to_none=True)
                (loss.sum() * self.loss_scale).backward()
            before = [p.detach().clone() for p in params]
            ok = self.objective.kept(logits).any(-1)
            for p in params:
                if self.loss_scale != 1.0:
                    p.grad.div_(self.loss_scale)
                ok &= torch.isfinite(p.grad).flatten(1).all(-1)
            # where() rather than masked assignment: no host sync on the device
            keep = [ok.view(-1, *[1] * (p.dim() - 1)) for p in params]
            for p, k in zip(params, keep):
                p.grad.copy_(torch.where(k, p.grad, torch.zeros_like(p.grad)))
            opt.step()
            with torch.no_grad():
                for p, b, k in zip(params, before, keep):
                    p.copy_(torch.where(k, p, b))

    @torch.no_grad()
    def __call__(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None) -> torch.Tensor:
        self.prepare()
        B, V = views.shape[:2]
        x = views.flatten(0, 1).to(self.device, non_blocking=True)
        if self.half_prefix:   # fp16 copy, fp16 input, no autocast
            tokens = self.tower.prefix(x.half())
        else:
            with self.autocast():
                tokens = self.tower.prefix(x)
        self.adapt(tokens, B, paths)
        view0 = tokens.reshape(B, V, *tokens.shape[1:])[:, 0]
        probs = self.objective.probs(self.class_logits(view0, B))[:, 0]
        raise_if_non_finite_probs(probs, paths, self.hint)
        return probs
