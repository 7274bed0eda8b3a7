"""The test loop's one pipeline: views batches in, probabilities out, with one batch in flight.

:func:`predictions` submits batch n+1 to the engine before it waits for batch n (engines whose
``submit`` queues work on a device: the fast engine on CUDA), so the device always has queued work
while the host copies a batch's probabilities back, checks them, writes its records and builds the
next views. The loader's workers start before the engine's once-per-dataset work (θ0 text, the
Jacobian at θ0), which then overlaps their start. Nothing is recorded for a batch before its checks
pass; should the next batch fail or be interrupted (Ctrl-C), the finished one is still handed out
(and recorded) first, so no finished work is lost. On the CPU batches run one after the other.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Tuple

import torch


def predictions(engine, loader: Iterable[Dict[str, Any]]
                ) -> Iterator[Tuple[Dict[str, Any], torch.Tensor]]:
    """Yield ``(batch, probs [B, K] on the CPU)`` in the loader's order."""
    it = iter(loader)                        # the loader's workers start here
    prepare = getattr(engine, "prepare", None)
    if prepare is not None:
        prepare()                            # overlaps the workers' start
    ahead = bool(getattr(engine, "asynchronous", False))
    pending = None
    while True:
        try:
            batch = next(it, None)
            job = None if batch is None else engine.submit(batch["views"], batch["path"])
        except BaseException:
            if pending is not None:          # hand out the finished batch, then fail
                done, pending = pending, None
                yield done[0], done[1].result()
            raise
        if pending is not None:
            done, pending = pending, None
            yield done[0], done[1].result()
        if batch is None:
            return
        if ahead:
            pending = (batch, job)
        else:
            yield batch, job.result()
