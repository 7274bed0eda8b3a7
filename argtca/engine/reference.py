"""The reference episodic test-time tuning engine (TPT's protocol, one or more images at a time).

Per test image: image features of all views once (frozen encoder, no grad); context reset to its
initial value; for TTA.STEPS steps: keep the ρ lowest-entropy views (chosen at the first step, as
TPT caches them), compute the objective, one AdamW step on the context only; finally predict on
view 0 re-using its features. Inputs are batch-first, and every image owns its context and its
AdamW moments (AdamW is element-wise), so tuning B images together equals tuning each alone.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from argtca.utils.precision import autocast_ctx  # noqa: F401  (engines import it here)
from argtca.engine.objectives import Objective, objective_loss, select_confident
from argtca.registry import ENGINE_REGISTRY


class NonFiniteLossError(RuntimeError):
    """A test-time loss or prediction that is NaN/inf: raised before anything is recorded."""


def _name(paths: Optional[Sequence[str]], i: int) -> str:
    return str(paths[i]) if paths is not None else f"batch item {i}"


def raise_if_non_finite(loss: torch.Tensor, bad: torch.Tensor,
                        paths: Optional[Sequence[str]] = None,
                        entropy: Optional[torch.Tensor] = None,
                        hint: str = "", step: Optional[int] = None) -> None:
    """``loss`` [B] and ``bad`` [B] (bool): raise for the first bad image, naming its file, the
    loss terms (``entropy`` [B]: the entropy term; the rest is the objective's regulariser) and
    the settings to change (``hint``)."""
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        total = float(loss[i])
        terms = ""
        if entropy is not None:
            h = float(entropy[i])
            terms = f" = entropy term {h} + regulariser {total - h}"
        at = f" at tuning step {step + 1}" if step is not None else ""
        raise NonFiniteLossError(
            f"non-finite test-time loss{at} on image {_name(paths, i)}: loss {total}{terms}; "
            f"check that image file, or change {hint or 'the objective weights or TTA.LR'}")


def raise_if_non_finite_probs(probs: torch.Tensor, paths: Optional[Sequence[str]] = None,
                              hint: str = "") -> None:
    """``probs`` [B, K]: raise for the first image whose class probabilities are not all finite
    (checked before the records are written)."""
    bad = ~torch.isfinite(probs.detach()).all(-1)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        n = int((~torch.isfinite(probs[i])).sum())
        raise NonFiniteLossError(
            f"non-finite prediction on image {_name(paths, i)} ({n} of {probs.shape[-1]} class "
            f"probabilities are NaN/inf; nothing was recorded for it): the tuned prompt diverged "
            f"or the image is broken; check that image file, or change "
            f"{hint or 'the objective weights or TTA.LR'}")


def settings_hint(objective, lr: float, steps: int, prec: str) -> str:
    """The settings that can make a loss or prediction non-finite, with their values."""
    node = getattr(objective, "node", None)
    weights = [f"{k}={getattr(node, k)}" for k in ("LAMBDA", "ALPHA", "BETA", "TAU")
               if node is not None and isinstance(getattr(node, k, None), (int, float))]
    w = f"the objective weights TRAINER.*.{{{', '.join(weights)}}}, " if weights else ""
    return f"{w}TTA.LR={lr}, TTA.STEPS={steps} or TTA.PREC={prec} (fp32 is the safest)"


class TunableText:
    """What an adapter that tunes prompts (``needs_text_tower``) is given of an engine: the text
    tower (``ctx_init``, the initial context; ``tower(ctx) -> [m, P, E]`` class features for
    ``m`` contexts), whether the engine runs under AMP (``amp``: the adapter's GradScaler) and
    its ``autocast()``. The adapter reaches nothing else of the engine (its image tower, its
    loop, its objective), so an engine's internals can change without the adapter."""

    def __init__(self, encoder, amp: bool, autocast):
        self.encoder = encoder
        self.amp = bool(amp)
        self._autocast = autocast

    @property
    def ctx_init(self) -> torch.Tensor:
        return self.encoder.ctx_init

    def autocast(self):
        return self._autocast()

    def __call__(self, ctx: torch.Tensor) -> torch.Tensor:
        return self.encoder(ctx)


@ENGINE_REGISTRY.register(name="reference")
class ReferenceEngine:
    """``engine(views [B, V, 3, S, S], paths) -> probs [B, K]``; the trainer feeds it one image
    at a time (``batched``). ``n_images`` (the test images it will see) is the registry's common
    constructor argument; the reference needs none."""

    batched = False

    def __init__(self, model, text_encoder, objective: Objective, cfg, device,
                 n_images: Optional[int] = None):
        self.model = model
        self.text_encoder = text_encoder
        self.objective = objective
        self.device = torch.device(device)
        self.steps = int(cfg.TTA.STEPS)
        self.selection_p = float(cfg.TTA.SELECTION_P)
        self.lr = float(cfg.TTA.LR)
        self.wd = float(cfg.TTA.WEIGHT_DECAY)
        self.prec = str(cfg.TTA.PREC)
        self.amp = self.device.type == "cuda" and self.prec == "amp"
        self.loss_scale = float(cfg.TTA.LOSS_SCALE) if self.amp else 1.0
        self.logit_scale = model.logit_scale.exp().detach().float()
        self.hint = settings_hint(objective, self.lr, self.steps, self.prec)

    def autocast(self):
        return autocast_ctx(self.device, self.prec)

    def tunable_text(self) -> "TunableText":
        """The text tower an online adapter tunes prompts through (``needs_text_tower``:
        DynaPrompt), with this engine's precision, and nothing else of the engine."""
        return TunableText(self.text_encoder, self.amp, self.autocast)

    @torch.no_grad()
    def image_features(self, views: torch.Tensor) -> torch.Tensor:
        """[B, V, 3, S, S] → normalised features [B, V, E] (fp32)."""
        B, V = views.shape[:2]
        with self.autocast():
            f = self.model.encode_image(views.flatten(0, 1).to(self.device, non_blocking=True))
        return F.normalize(f.float(), dim=-1).reshape(B, V, -1)

    def logits(self, img: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """img [B, V, E], text [B, P, E] → [B, V, P]."""
        return self.logit_scale * torch.einsum("bve,bpe->bvp", img.to(text.dtype), text)

    def initial_context(self, B: int) -> torch.Tensor:
        return self.text_encoder.ctx_init.detach().unsqueeze(0).repeat(B, 1, 1).float()

    def tune(self, img: torch.Tensor, paths: Optional[Sequence[str]] = None,
             inputs: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Run TTA.STEPS AdamW steps from the initial context; returns the tuned context [B,n,W].
        ``inputs``: the objective's per-view inputs [B, V, ...] (:meth:`Objective.view_inputs`)."""
        B = img.shape[0]
        ctx = self.initial_context(B).requires_grad_(True)
        if self.steps <= 0:
            return ctx.detach()
        opt = torch.optim.AdamW([ctx], lr=self.lr, weight_decay=self.wd)
        sel_idx = None
        for step in range(self.steps):
            with torch.enable_grad():
                with self.autocast():
                    text = self.text_encoder(ctx)
                    logits = self.logits(img, text)
                scores = self.objective.scores(logits.float())
                if sel_idx is None:
                    sel_idx = select_confident(scores.detach(), self.selection_p)
                sel = torch.gather(scores, 1,
                                   sel_idx.unsqueeze(-1).expand(-1, -1, scores.shape[-1]))
                loss = objective_loss(self.objective, sel, text.float(), inputs, sel_idx)
                bad = ~torch.isfinite(loss.detach())
                if bool(bad.any()):
                    raise_if_non_finite(loss.detach(), bad, paths,
                                        self.objective.entropy_term(sel.detach()),
                                        self.hint, step)
                opt.zero_grad(set_to_none=True)
                (loss.sum() * self.loss_scale).backward()
            before = ctx.detach().clone()
            g = ctx.grad
            if self.loss_scale != 1.0:
                g.div_(self.loss_scale)
            ok = torch.isfinite(g).flatten(1).all(-1)  # fp16 overflow: skip that image's step
            g[~ok] = 0
            opt.step()
            with torch.no_grad():
                ctx[~ok] = before[~ok]
        return ctx.detach()

    @torch.no_grad()
    def predict(self, img0: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """img0 [B, E] (view-0 features), ctx [B, n, W] → class probabilities [B, K]."""
        with self.autocast():
            text = self.text_encoder(ctx)
            logits = self.logits(img0.unsqueeze(1), text)
        return self.objective.probs(logits.float())[:, 0]

    @torch.no_grad()
    def final(self, img: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """The prediction after tuning: view 0's (TPT and its family), or the objective's rule
        over every view's logits (``objective.all_views``: R-TPT's reliability-weighted
        ensemble). img [B, V, E], ctx [B, n, W] → [B, K]."""
        if not getattr(self.objective, "all_views", False):
            return self.predict(img[:, 0], ctx)
        with self.autocast():
            text = self.text_encoder(ctx)
            logits = self.logits(img, text)
        return self.objective.final(logits.float(), img)

    def __call__(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None) -> torch.Tensor:
        img = self.image_features(views)
        ctx = self.tune(img, paths, self.objective.view_inputs(views) if self.steps > 0 else None)
        probs = self.final(img, ctx)
        raise_if_non_finite_probs(probs, paths, self.hint)
        return probs

    def submit(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None) -> "Done":
        """The batch, computed now (the reference engine never runs ahead of its records)."""
        return Done(self(views, paths).float().cpu())


class Done:
    """A finished batch with the API of :class:`argtca.engine.submission.Pending`."""

    def __init__(self, probs: torch.Tensor):
        self.probs = probs

    def result(self) -> torch.Tensor:
        return self.probs
