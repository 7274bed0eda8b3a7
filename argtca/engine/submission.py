"""The fast engine's asynchronous submission: :meth:`Submission.submit` queues one batch's work on
the device (eagerly, or as a replay of its CUDA graph, :mod:`argtca.engine.graphs`) and returns a
:class:`Pending` whose ``result()`` copies the probabilities back and runs the checks, so the loop
(:mod:`argtca.engine.pipeline`) keeps one batch in flight.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from argtca.engine.graphs import copy_out, graphed_outputs
from argtca.engine.reference import raise_if_non_finite_probs


class Submission:
    """Mixin of :class:`~argtca.engine.fast.FastEngine`: a batch queued without waiting. The
    engine provides ``image_features``, ``_tune_async``, ``final``, ``_check_finite``,
    ``objective``, ``steps`` and the graph settings read by :func:`graphs.graphed_outputs`."""

    def submit(self, views: torch.Tensor, paths: Optional[Sequence[str]] = None) -> "Pending":
        """Queue one batch on the device without waiting for it: the checks that need the host
        (non-finite losses and predictions) run in ``Pending.result()``, before any record of the
        batch is written. Same numbers as ``__call__`` (up to AdamW's rounding in a CUDA graph,
        ``TTA.FAST.CUDA_GRAPH``)."""
        out = graphed_outputs(self, views)
        if out is None:
            img, probs, first_bad, bad_seen = self._batch(views)
            return Pending(self, probs, paths, img, first_bad, bad_seen, self._inputs)
        img, probs, first_bad, bad_seen = out
        # the next replay overwrites the graph's outputs: keep what the checks may read (the
        # probabilities are copied out by Pending on CUDA)
        img, first_bad, bad_seen = copy_out((img, first_bad, bad_seen))
        if probs.device.type != "cuda":
            probs = probs.clone()
        return Pending(self, probs, paths, img, first_bad, bad_seen)

    def _batch(self, views: torch.Tensor):
        """One batch's device work: (view features [B, V, E], probabilities [B, K], first
        non-finite loss [B], seen [B]) — the last two None without steps."""
        img = self.image_features(views)
        inputs = self.objective.view_inputs(views) if self.steps > 0 else None
        # for the eager path's Pending (its non-finite check re-runs the loss with them); an
        # objective with per-view inputs never runs in a graph (graphs.objective_key)
        self._inputs = inputs
        ctx, first_bad, bad_seen = (self._tune_async(img, inputs) if self.steps > 0
                                    else (None, None, None))
        probs = self.final(img, ctx).float()
        return img, probs, first_bad, bad_seen

    def _graph_setup(self, on: bool) -> None:
        self._in_graph = bool(on)



class Pending:
    """One submitted batch: its probabilities are copied to pinned host memory behind the batch's
    work; ``result()`` waits for that copy only (never for work queued after it), then checks."""

    def __init__(self, engine, probs, paths, img, first_bad, bad_seen,
                 inputs=None):
        self.engine, self.paths, self.img, self.inputs = engine, paths, img, inputs
        self.first_bad, self.bad_seen = first_bad, bad_seen
        self.event = None
        if probs.device.type == "cuda":
            self.probs = torch.empty(probs.shape, dtype=probs.dtype, pin_memory=True)
            self.probs.copy_(probs, non_blocking=True)
            self.bad = None
            if bad_seen is not None:
                self.bad = torch.empty(bad_seen.shape, dtype=torch.bool, pin_memory=True)
                self.bad.copy_(bad_seen, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.probs, self.bad = probs, bad_seen

    def result(self) -> torch.Tensor:
        """Probabilities [B, K] on the CPU, after the reference's non-finite checks."""
        if self.event is not None:
            self.event.synchronize()   # this batch's copy only (pipeline.predictions times it)
        if self.bad is not None and bool(self.bad.any()):
            self.engine._check_finite(self.first_bad, self.bad_seen, self.paths, self.img,
                                      self.inputs)
        raise_if_non_finite_probs(self.probs, self.paths, self.engine.hint)
        return self.probs
