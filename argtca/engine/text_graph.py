"""The text tower of a prompt-tuning online adapter as CUDA graphs (``TTA.FAST.TEXT_GRAPH``).

DynaPrompt (argtca/adapters/dynaprompt.py) runs CLIP's text tower on its whole buffer of prompts
(``NUM_PROMPTS`` x K prompts) without a graph for autograd to pick prompts, on the picked ones
with a graph for the loss, differentiates that, and runs the picked ones again without a graph
for the prediction, once an image. Each pass is a few hundred small kernels
queued one by one by the host (the casts of autocast, the 12 blocks' matrix products, the
attention, the norms), and the backward as many again: on an H100 the GPU waited for the host
(benchmarks/README.md, "the slow methods"). A pass of one input shape does the same work on the
same buffers every time, so it is captured once and replayed: one launch a pass.

:class:`GraphedText` wraps a :class:`~argtca.engine.reference.TunableText` with the same contract
(``tower(ctx) -> [m, P, E]``, ``ctx_init``, ``amp``, ``autocast()``):

* a call with gradient (``ctx`` requires grad) replays the forward graph and, in the backward
  pass, the backward graph to the context, both captured at the first call of that shape after
  eager warm-ups (what :func:`torch.cuda.make_graphed_callables` does, here in thread-local
  capture mode: the loader's threads keep using CUDA during a capture);
* a call without gradient replays a forward-only graph of that shape;
* the same kernels on the same inputs as the eager tower: autocast runs without its cast cache
  inside the captured function (capture requires it; the casts themselves are the same).

What the caller must know: a replay's outputs are the graph's static buffers, overwritten by the
next replay of that shape, and the backward graph reads the activations the forward replay left:
a forward with gradient must be differentiated (or dropped) before the next forward of that
shape. DynaPrompt does that (selection, loss forward, backward, step; then the prediction, of
another graph). Shapes are few (the buffer's one without gradient; 1 to ``NUM_PROMPTS`` picked
prompts with and without), each captured once per run; each shape with gradient keeps its own
memory pool of activations, so the pools grow with the distinct counts of picked prompts a run
meets: mostly 1 to 3 (together less than the whole buffer's one pool), up to 6 on the
demo's stream (together 1.75x it). A shape whose capture raises (out of memory among others)
runs eager, with a warning.

``emulate=True`` (tests, any device): the protocol without CUDA: a forward-only call's result is
copied into the first call's output buffer, which is returned (so a caller that kept a previous
output sees it overwritten, as on CUDA).
"""
from __future__ import annotations

import warnings
from typing import Callable, Dict, Tuple

import torch

from argtca.utils.precision import autocast_ctx

__all__ = ["GraphedText"]


class GraphedText:
    """A :class:`~argtca.engine.reference.TunableText` whose calls replay CUDA graphs, one per
    input shape and grad mode (module docstring)."""

    def __init__(self, tunable, emulate: bool = False):
        self.inner = tunable
        self.emulate = bool(emulate)
        self._graphs: Dict[Tuple, Callable[[torch.Tensor], torch.Tensor]] = {}

    # the TunableText contract
    @property
    def ctx_init(self) -> torch.Tensor:
        return self.inner.ctx_init

    @property
    def amp(self) -> bool:
        return self.inner.amp

    def autocast(self):
        return self.inner.autocast()

    @property
    def captured(self) -> int:
        """Graphs captured so far (one per input shape and grad mode)."""
        return len(self._graphs)

    def _run(self, ctx: torch.Tensor) -> torch.Tensor:
        """The eager tower under autocast without its cast cache (as inside a capture)."""
        with autocast_ctx(ctx.device, "amp" if self.amp else "fp32", cache=False):
            return self.inner(ctx)

    def __call__(self, ctx: torch.Tensor) -> torch.Tensor:
        grad = torch.is_grad_enabled() and ctx.requires_grad
        key = (tuple(ctx.shape), ctx.dtype, str(ctx.device), grad)
        fn = self._graphs.get(key)
        if fn is None:
            fn = self._capture(ctx, grad)
            self._graphs[key] = fn
        return fn(ctx)

    def _capture(self, ctx: torch.Tensor, grad: bool):
        if self.emulate:
            return _Emulated(self._run, grad)
        sample = torch.zeros_like(ctx, requires_grad=grad)
        # the caller's autocast (with its cast cache) is off around the capture: the captured
        # function enters its own, without the cache (a cached cast would outlive the capture)
        try:
            with torch.autocast("cuda", enabled=False), warnings.catch_warnings():
                # the capture's own backward meets the sample's gradient node of the warm-up
                # stream: a one-time note from autograd, not a fault of the captured graph
                warnings.filterwarnings("ignore", message="The AccumulateGrad node's stream")
                return self._capture_cuda(sample, grad)
        except RuntimeError as e:   # a tower with an operation a graph cannot hold: eager
            warnings.warn(f"TTA.FAST.TEXT_GRAPH: the text tower of shape {list(ctx.shape)} "
                          f"could not be captured ({str(e).splitlines()[0]}); it runs eagerly "
                          f"(the same numbers; TTA.FAST.TEXT_GRAPH off silences this)")
            return self.inner

    def _capture_cuda(self, sample: torch.Tensor, grad: bool):
        """The graphs of one shape: forward (and, with ``grad``, the backward to the context),
        captured after two eager warm-ups on a side stream (cuBLAS handles, workspaces), in
        thread-local capture mode, so that other threads (the loader's pin-memory thread) keep
        using CUDA meanwhile; the backward shares the forward's memory pool, as
        :func:`torch.cuda.make_graphed_callables` does (which captures in global mode)."""
        dev = sample.device
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream), torch.set_grad_enabled(grad):
            for _ in range(2):
                y = self._run(sample)
                if grad:
                    torch.autograd.grad(y, sample, torch.ones_like(y))
        torch.cuda.current_stream(dev).wait_stream(stream)
        fwd = torch.cuda.CUDAGraph()
        with torch.set_grad_enabled(grad), torch.cuda.graph(fwd, capture_error_mode="thread_local"):
            out = self._run(sample)
        if not grad:
            def replay(x: torch.Tensor) -> torch.Tensor:
                sample.copy_(x)
                fwd.replay()
                return out
            return replay
        grad_out = torch.zeros_like(out)
        bwd = torch.cuda.CUDAGraph()
        with torch.cuda.graph(bwd, pool=fwd.pool(), capture_error_mode="thread_local"):
            grad_in = torch.autograd.grad(out, sample, grad_out)[0]

        class Replayed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                sample.copy_(x)
                fwd.replay()
                return out.detach()

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx, g):
                grad_out.copy_(g)
                bwd.replay()
                return grad_in.detach()

        return Replayed.apply


class _Emulated:
    """The graph protocol without CUDA (``emulate``): a forward-only call's output is the first
    call's buffer, overwritten by every later call. A call with gradient runs eagerly (its
    output's aliasing is the CUDA test's to check)."""

    def __init__(self, run, grad: bool):
        self.run = run
        self.grad = grad
        self.out = None

    def __call__(self, ctx: torch.Tensor) -> torch.Tensor:
        if self.grad:
            return self.run(ctx)
        with torch.no_grad():
            y = self.run(ctx)
            if self.out is None:
                self.out = torch.empty_like(y)
            self.out.copy_(y)
        return self.out

