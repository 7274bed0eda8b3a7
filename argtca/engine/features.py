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

import copy
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


class EpisodicState:
    """What an episodic adapter was when built, given back to it after every batch: its
    attributes (one reassigned or added in a batch is undone), the contents of its tensors (an
    in-place edit of ``self.text`` is undone) and of its lists, dicts and sets. So no batch can
    see another's leftovers, and a resumed run equals an uninterrupted one whatever a plug-in's
    adapter does to itself; state that should carry from image to image belongs to an
    ``OnlineAdapter``, whose ``state_dict`` is checkpointed and restored on resume
    (docs/own-method.md). Restoring is device copies only (no host sync); whether anything had
    changed is kept on the device (:attr:`changed`) and read once, at the end of the run."""

    def __init__(self, adapter):
        self.attrs = dict(vars(adapter))
        self.tensors = {k: v.detach().clone() for k, v in self.attrs.items()
                        if torch.is_tensor(v)}
        self.containers = {k: copy.copy(v) for k, v in self.attrs.items()
                           if isinstance(v, (list, dict, set))}
        self._changed = {}   # tensor attribute -> a device flag: edited in some batch
        self.reassigned = set()

    def restore(self, adapter) -> None:
        d = vars(adapter)
        for k in [k for k in d if k not in self.attrs]:
            self.reassigned.add(k)
            del d[k]
        for k, v in self.attrs.items():
            if d.get(k, _MISSING) is not v:
                self.reassigned.add(k)
                d[k] = v
        for k, v in self.tensors.items():
            t = self.attrs[k]
            differs = (t.detach() != v).any() if t.shape == v.shape else torch.ones(
                (), dtype=torch.bool, device=v.device)
            self._changed[k] = differs if k not in self._changed else self._changed[k] | differs
            with torch.no_grad():
                t.copy_(v)
        for k, v in self.containers.items():
            if not _same_items(self.attrs[k], v):
                self.reassigned.add(k)
            d[k] = self.attrs[k] = copy.copy(v)

    def changed(self) -> list:
        """The attributes a batch had changed (read once: a host sync)."""
        edited = {k for k, flag in self._changed.items() if bool(flag)}
        return sorted(self.reassigned | edited)


_MISSING = object()


def _same_items(a, b) -> bool:
    """Whether a list, dict or set holds the same objects as its copy ``b`` (by identity: ``==``
    on a list of tensors would compare the tensors, and raise)."""
    if len(a) != len(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(a[k] is b[k] for k in a)
    if isinstance(a, set):
        return all(any(x is y for y in b) for x in a)
    return all(x is y for x, y in zip(a, b))


@ENGINE_REGISTRY.register(name="features")
class FeatureEngine(FastEngine):
    """``engine(views [B, V, 3, S, S], paths) -> probs [B, K]`` for an adapter method.
    ``adapter``: a callable ``text [K, E] -> Adapter``, called once the class features exist
    (:meth:`prepare`; an adapter method's trainer passes it, argtca/config/settle.py
    :func:`settle_engine` keeps the other methods off this engine); ``n_classes``: K (the text
    encoder may hold several prompts a class)."""

    batched = True
    # TTA.FAST.TEXT_GRAPH "auto" = on on CUDA: the same records, DynaPrompt 1.29x on an H100
    # (benchmarks/README.md)
    text_graph_auto = True

    def __init__(self, model, text_encoder, objective, cfg, device, *,
                 adapter: Callable[[torch.Tensor], object],
                 n_images: Optional[int] = None,
                 n_classes: Optional[int] = None, text_graph: Optional[str] = None):
        c = cfg.clone()
        c.defrost()
        c.TTA.STEPS = 0          # no prompt step: the fast engine keeps no graph, builds no Jᵀ
        c.freeze()
        super().__init__(model, text_encoder, objective, c, device, n_images=n_images,
                         grad_mode="recompute", text_graph=text_graph)
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
            if not self.online:
                self.pristine = EpisodicState(self.adapter)

    def tunable_text(self):
        """The text tower an adapter that tunes prompts is given; on CUDA (or ``emulate``) its
        calls replay CUDA graphs (``TTA.FAST.TEXT_GRAPH``, argtca/engine/text_graph.py)."""
        tower = super().tunable_text()
        if self.text_graph:   # steps 0: the fast engine's own passes never use its graphs
            from argtca.engine.text_graph import GraphedText
            return GraphedText(tower, emulate=self.text_graph_emulate)
        return tower

    @property
    def online(self) -> bool:
        return bool(getattr(self.adapter, "online", False))

    @torch.no_grad()
    def _probs(self, views: torch.Tensor):
        """(view features [B, V, E], the adapter's probabilities [B, K] on the device)."""
        self.prepare()
        img = self.image_features(views)
        probs = self.adapter(img).float()
        if not self.online:   # every batch of an episodic method sees the adapter as built
            self.pristine.restore(self.adapter)
        return img, probs

    def __call__(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None) -> torch.Tensor:
        probs = self._probs(views)[1]
        raise_if_non_finite_probs(probs, paths, self.hint)
        return probs

    def submit(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None):
        if not self.asynchronous:
            return Done(self(views, paths).cpu())
        img, probs = self._probs(views)   # checked in Pending.result(), before any record
        return Pending(self, probs, paths, img, None, None)
