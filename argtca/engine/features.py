"""The engine of the training-free and online methods: frozen features in, an adapter's rule out.

No prompt is tuned, so nothing runs backward through CLIP: per batch the image tower encodes every
view once (the fast engine's image path: fp16 tower copy, lean blocks, optional compilation, on the
CPU plain fp32) and the method's :class:`~argtca.adapters.base.Adapter` turns the view features and
the classes' text features (computed once per dataset) into probabilities. An episodic adapter
sees ``TTA.BATCH_IMAGES`` images at once; an online one walks them in the stream's order and keeps
its state between batches, so a batch is finished (its records written, the state checkpointed)
before the next one starts.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from argtca.engine.fast import FastEngine
from argtca.engine.reference import Done, raise_if_non_finite_probs
from argtca.engine.submission import Pending
from argtca.registry import ENGINE_REGISTRY


def class_text(t0: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Prompt features [P, E] ordered class-major (P = K·M prompts) -> class features [K, E]: the
    mean of each class's M prompt features, re-normalised (CLIP's prompt ensembling)."""
    t0 = t0.detach().float()
    if t0.shape[0] == n_classes:
        return t0
    if t0.shape[0] % n_classes:
        raise ValueError(f"{t0.shape[0]} prompts for {n_classes} classes: not a whole number of "
                         f"prompts per class")
    return F.normalize(t0.reshape(n_classes, -1, t0.shape[-1]).mean(1), dim=-1)


@ENGINE_REGISTRY.register(name="features")
class FeatureEngine(FastEngine):
    """``engine(views [B, V, 3, S, S], paths) -> probs [B, K]`` for an adapter method.
    ``adapter``: a callable ``text [K, E] -> Adapter``, called once the class features exist
    (:meth:`prepare`; an adapter method's trainer passes it, argtca/engine/auto.py
    :func:`settle_engine` keeps the other methods off this engine); ``n_classes``: K (the text
    encoder may hold several prompts a class)."""

    batched = True

    def __init__(self, model, text_encoder, objective, cfg, device, *,
                 adapter: Callable[[torch.Tensor], object],
                 n_images: Optional[int] = None,
                 n_classes: Optional[int] = None):
        c = cfg.clone()
        c.defrost()
        c.TTA.STEPS = 0          # no prompt step: the fast engine keeps no graph, builds no Jᵀ
        c.freeze()
        super().__init__(model, text_encoder, objective, c, device, n_images=n_images,
                         grad_mode="recompute")
        self.make_adapter = adapter
        self.n_classes = int(n_classes or text_encoder.num_prompts)
        self.adapter = None
        # an online adapter's state must be final (and saved) before the next batch starts
        self.asynchronous = False

    def prepare(self) -> None:
        super().prepare()
        if self.adapter is None:
            text = class_text(self.theta0()[1], self.n_classes)
            self.adapter = self.make_adapter(text)
            # an episodic batch may be queued on the device behind the last one
            self.asynchronous = self.device.type == "cuda" and not self.online

    @property
    def online(self) -> bool:
        return bool(getattr(self.adapter, "online", False))

    @torch.no_grad()
    def _probs(self, views: torch.Tensor):
        """(view features [B, V, E], the adapter's probabilities [B, K] on the device)."""
        self.prepare()
        img = self.image_features(views)
        return img, self.adapter(img).float()

    def __call__(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None) -> torch.Tensor:
        probs = self._probs(views)[1]
        raise_if_non_finite_probs(probs, paths, self.hint)
        return probs

    def submit(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None):
        if not self.asynchronous:
            return Done(self(views, paths).cpu())
        img, probs = self._probs(views)   # checked in Pending.result(), before any record
        return Pending(self, probs, paths, img, None, None)
