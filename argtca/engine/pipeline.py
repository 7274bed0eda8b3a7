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

import time
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

import torch


def predictions(engine, loader: Iterable[Dict[str, Any]],
                seconds: Optional[Dict[str, float]] = None
                ) -> Iterator[Tuple[Dict[str, Any], torch.Tensor]]:
    """Yield ``(batch, probs [B, K] on the CPU)`` in the loader's order.

    ``seconds`` (optional dict) accumulates where the host thread spent the loop: ``prepare``
    (per-dataset work), ``loader`` (next batch: waiting for workers, copies, GPU views queued),
    ``submit`` (queueing the engine's work) and ``result`` (waiting for and checking a batch);
    what the caller does with each yielded batch (records) is the rest. It also gets the
    timeline that :func:`loop_timing` summarises: ``first_s`` / ``last_s`` (seconds from the
    start to the first / last batch's probabilities), ``images_first``, ``images`` and ``marks``
    (``(seconds, images so far)`` after each batch)."""
    clock = seconds if seconds is not None else {}
    for k in ("prepare", "loader", "submit", "result"):
        clock.setdefault(k, 0.0)
    clock.setdefault("images", 0)
    now = time.perf_counter
    start = now()
    it = iter(loader)                        # the loader's workers start here
    prepare = getattr(engine, "prepare", None)
    if prepare is not None:
        t = now()
        prepare()                            # overlaps the workers' start
        clock["prepare"] += now() - t
    ahead = bool(getattr(engine, "asynchronous", False))
    clock["asynchronous"] = ahead            # result() then waits for the device, not computes
    pending = None

    def finish(job):
        t = now()
        probs = job.result()
        t1 = now()
        clock["result"] += t1 - t
        n = int(probs.shape[0])
        if "first_s" not in clock:
            clock["first_s"], clock["images_first"] = t1 - start, n
        clock["last_s"] = t1 - start
        clock["images"] += n
        clock.setdefault("marks", []).append((t1 - start, clock["images"]))
        return probs

    while True:
        try:
            t0 = now()
            batch = next(it, None)
            t1 = now()
            job = None if batch is None else engine.submit(batch["views"], batch["path"])
            clock["loader"] += t1 - t0
            clock["submit"] += now() - t1
        except BaseException:
            if pending is not None:          # hand out the finished batch, then fail
                done, pending = pending, None
                yield done[0], finish(done[1])
            raise
        if pending is not None:
            done, pending = pending, None
            yield done[0], finish(done[1])
        if batch is None:
            return
        if ahead:
            pending = (batch, job)
        else:
            yield batch, finish(job)


def loop_timing(seconds: Dict[str, float],
                loader_seconds: Optional[Dict[str, float]] = None) -> Dict[str, float]:
    """A test loop's timeline from :func:`predictions`' ``seconds``: the once-per-dataset work
    (``prepare_s``), when the first batch was done (``first_batch_s``: loader start, preparation,
    the first batch's views and tuning) and the rate after it (``steady_img_per_s``), rounded.

    Two rates a long run's pace is read from (``argtca.experiments.rates``): ``late_img_per_s``,
    the later half's images over their seconds (from the batch that passed half the images to the
    last; none with fewer than 3 batches), and ``workers_img_per_s``, what the views workers can
    make: workers x items / the seconds they spent making them (``loader_seconds["made"]``,
    ``["items"]``, ``["n_workers"]``). The steady rate of a short run can be neither: while the
    first batch is tuned (θ0's Jacobian, seconds) the workers make views ahead, up to their
    prefetch depth (hundreds of images), and the batches after it use those up at the engine's
    pace, however slowly the workers make views.

    Where the host thread waited, for :func:`loop_bound`: ``wait_workers_s`` (blocked on the
    views loader's workers, ``loader_seconds["workers"]`` of :class:`argtca.views.loader.
    ViewsLoader`), ``engine_s`` (the engine's own time: waiting for the device's results when it
    runs ahead, else its whole ``submit``), ``views_s`` (the main process making views on the
    device side) and ``launch_s`` (queueing an asynchronous engine's work)."""
    out = {"prepare_s": round(float(seconds.get("prepare", 0.0)), 2)}
    if "first_s" in seconds:
        out["first_batch_s"] = round(float(seconds["first_s"]), 2)
        rest = int(seconds["images"]) - int(seconds["images_first"])
        span = float(seconds["last_s"]) - float(seconds["first_s"])
        if rest > 0 and span > 0:
            out["steady_img_per_s"] = round(rest / span, 2)
    marks = seconds.get("marks") or []
    if len(marks) >= 3:
        total = marks[-1][1]
        t_half, n_half = next(m for m in marks if 2 * m[1] >= total)
        if n_half < total and marks[-1][0] > t_half:
            out["late_img_per_s"] = round((total - n_half) / (marks[-1][0] - t_half), 2)
    if "result" in seconds:   # a clock of predictions()
        ahead = bool(seconds.get("asynchronous", False))
        result, submit = float(seconds["result"]), float(seconds.get("submit", 0.0))
        out["engine_s"] = round(result if ahead else result + submit, 3)
        out["launch_s"] = round(submit if ahead else 0.0, 3)
    if loader_seconds:
        out["wait_workers_s"] = round(float(loader_seconds.get("workers", 0.0)), 3)
        out["views_s"] = round(float(loader_seconds.get("views", 0.0)), 3)
        made, items = float(loader_seconds.get("made", 0.0)), int(loader_seconds.get("items", 0))
        workers = int(loader_seconds.get("n_workers", 0))
        if workers > 0 and items > 0 and made > 0:
            out["workers_img_per_s"] = round(workers * items / made, 2)
    return out


# what bounds a loop, by where its host thread spent the time (loop_bound)
BOUNDS = ("views workers", "main process", "engine")


def loop_bound(timing: Dict[str, float], device: str = "cuda") -> Dict[str, object]:
    """What bounded a loop, from its ``timing`` (:func:`loop_timing` plus ``loop_s``): the
    share of the loop's seconds after the per-dataset work that the host thread spent waiting
    for the views workers, in the engine (waiting for the device's results, or computing them
    when the engine does not run ahead) and doing everything else itself (the main process:
    taking items from the workers, making the views' device side, queueing work, records), and
    the largest of the three (``bound``; the engine is named "GPU" on CUDA, "engine (CPU)"
    elsewhere). Taking an item from the workers (its shared memory mapped) counts as waiting
    for them: the DataLoader does not tell the two apart."""
    loop = float(timing.get("loop_s", 0.0)) - float(timing.get("prepare_s", 0.0))
    if loop <= 0 or "engine_s" not in timing:
        return {}
    workers = float(timing.get("wait_workers_s", 0.0))
    engine = float(timing["engine_s"])
    main = max(0.0, loop - workers - engine)
    # the two waits are clocked apart from the loop (and stored to the millisecond): where they
    # add up to more than the loop, they are shares of their own sum, so the three make 1
    total = max(loop, workers + engine)
    shares = {"views workers": workers / total, "engine": engine / total,
              "main process": main / total}
    top = max(BOUNDS, key=lambda k: shares[k])
    name = {"engine": "GPU" if str(device).startswith("cuda") else "engine (CPU)"}.get(top, top)
    return {"bound": name, "shares": {k: round(v, 3) for k, v in shares.items()}}
