"""The fast engine's per-batch work as one CUDA graph (``TTA.FAST.CUDA_GRAPH``, off by default).

In the eager loop the host thread queues every kernel of a batch one by one: the image tower's
blocks, step 1 (scores, selection, the cotangent, ``cot @ Jᵀ``, AdamW) and the final text-tower
pass, a few thousand launches through Python and the dispatcher per batch. A batch of a fixed
shape does the same work on the same buffers every time, so it is captured once and replayed: one
launch per batch.

Measured (``benchmarks/README.md#known-limits-and-missed-targets``, one H200): the host's time
in ``submit`` falls from ~117 ms to ~0.6 ms a batch, but the eager loop is bound by the GPU, not
by the host (the host was waiting on a full launch queue), so the rate moves by < 1 %: hence off
by default.

What stays correct, and why:

* **Static input.** The batch's views are copied into one static buffer (in the image tower's
  dtype: the fp16 copy replaces the tower's own cast, so no pass over the views is added).
* **Per-image reset.** Everything an image starts from (ctx = θ0, AdamW's zero moments and step
  count, the non-finite flags) is *created inside* the captured function, so every replay
  recomputes it; θ0's text features, the cached regulariser and Jᵀ are computed before the
  capture (``prepare``) and read in place.
* **Outputs alias.** A replay overwrites the previous batch's outputs, so the caller copies out
  what it keeps (:meth:`FastEngine.submit`).
* **Host-side constants** are baked in at capture: the engine's hyper-parameters (fixed) and the
  objective's plain attributes (a temperature, say); a batch whose objective attributes differ
  from the captured ones gets its own graph (:func:`objective_key`), and an objective that
  collects tensors on the host (``capture``) runs eagerly.
* The capture is ``thread_local``: other threads (the loader's pin-memory thread) keep
  working while the main thread captures.
* AdamW runs with ``capturable=True`` in the graph (its step count on the device; the same
  update up to fp32 rounding of the bias corrections), and autocast without its cast cache, as
  capture requires.

``GraphedBatch(..., emulate=True)`` runs the same protocol without CUDA (the function re-run on
the static buffers, its results copied into the first call's outputs): the tests check the
static-buffer refresh and the per-image reset on the CPU with it.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import torch

from argtca.engine.objectives import Objective

Outputs = Tuple[Optional[torch.Tensor], ...]


def objective_key(objective) -> Optional[tuple]:
    """The objective's plain attributes (numbers, strings, flags), which a captured graph bakes
    in; None where the objective collects tensors on the host (it must run eagerly)."""
    if getattr(objective, "capture", None) is not None:
        return None
    # per-view inputs made on the host side of the batch (RLCF's reward features) run eagerly
    if type(objective).view_inputs is not Objective.view_inputs:
        return None
    items = []
    for k, v in sorted(vars(objective).items()):
        if isinstance(v, (bool, int, float, str, type(None))):
            items.append((k, v))
    return tuple(items)


class GraphedBatch:
    """``run(x) -> fn(static x)``: ``fn`` (tensor → tuple of tensors or None) captured once as a
    CUDA graph on a static copy of ``x`` and replayed for every later ``x`` of the same shape.

    ``dtype``: the static input's dtype (the copy casts into it). ``setup``/``teardown``: called
    around the warm-up and the capture (the engine switches AdamW to ``capturable`` there).
    ``emulate``: no CUDA; the same protocol on any device (see the module docstring)."""

    def __init__(self, fn: Callable[[torch.Tensor], Outputs], x: torch.Tensor,
                 dtype: Optional[torch.dtype] = None, emulate: bool = False,
                 setup: Optional[Callable[[bool], None]] = None):
        self.fn = fn
        self.emulate = bool(emulate)
        self.static = torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)
        self.static.copy_(x)
        self.replays = 0
        self._setup = setup or (lambda on: None)
        if self.emulate:
            self.graph = None
            self.out = self._call()
            return
        # warm-up on a side stream (lazy initialisations must not land in the graph), then capture
        side = torch.cuda.Stream(device=x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            self._call()
        torch.cuda.current_stream(x.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self._setup(True)
        try:
            # thread_local: the DataLoader's pin-memory thread allocates pinned memory while
            # the main thread captures; under the default ("global") that call fails and
            # invalidates the capture (seen on an H200 through the CLI)
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.out = self.fn(self.static)
        finally:
            self._setup(False)

    def _call(self) -> Outputs:
        self._setup(True)
        try:
            return self.fn(self.static)
        finally:
            self._setup(False)

    def __call__(self, x: torch.Tensor) -> Outputs:
        self.static.copy_(x, non_blocking=True)
        self.replays += 1
        if self.graph is not None:
            self.graph.replay()
            return self.out
        for o, n in zip(self.out, self._call()):
            if o is not None:
                o.copy_(n)
        return self.out


def graphed_outputs(engine, views: torch.Tensor) -> Optional[Outputs]:
    """The :class:`~argtca.engine.fast.FastEngine` ``engine``'s outputs for the batch ``views``
    from the batch shape's graph (captured at the second batch of that shape), or None: the
    engine runs it eagerly (graphs off, the first batch of a shape, an objective that must run
    eagerly, or a capture that failed: then graphs stay off, with one line)."""
    # by type: the engine's device may read "cuda" where the views' reads "cuda:0"
    if not engine.cuda_graph or views.device.type != engine.device.type:
        return None
    okey = objective_key(engine.objective)
    if okey is None:
        return None
    key = (tuple(views.shape), views.dtype, okey)
    g = engine._graphs.get(key)
    if g is None:
        if key not in engine._graph_seen:
            engine._graph_seen.add(key)
            return None
        try:
            g = GraphedBatch(engine._batch, views, emulate=engine.graph_emulate,
                             dtype=torch.float16 if engine.half_image else None,
                             setup=engine._graph_setup)
        except Exception as e:   # an op that cannot be captured: eager from now on
            print(f"argtca: fast engine: CUDA graph capture failed ({type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}); running eagerly "
                  f"(TTA.FAST.CUDA_GRAPH off)")
            engine.cuda_graph = False
            engine._graphs.clear()
            if engine.device.type == "cuda":
                torch.cuda.synchronize(engine.device)
            return None
        engine._graphs[key] = g
        if engine.device.type == "cuda" and not engine.graph_emulate:
            torch.cuda.empty_cache()   # the eager batches' blocks: the graph has its own
    return g(views)


def copy_out(out: Sequence[Optional[torch.Tensor]]) -> Outputs:
    """Clones of a graph's outputs that the next replay would overwrite."""
    return tuple(None if t is None else t.clone() for t in out)
