"""Where a whole ``python -m argtca.run`` process spends its time, phase by phase.

Runs ``argtca.run.main(ARGS)`` in this process with timestamps around its phases (each wrapped
from outside, nothing changed): the imports, the configuration, the dataset, the trainer, the
fingerprint (the input files' hashes), the loader's start (its workers fork), the model build
(CLIP, the prompt encoder, the engine), the per-dataset work (``engine.prepare``), the first and
last batch's probabilities, the metrics. ``T_SHELL`` (``date +%s.%N`` just before ``python``)
adds the interpreter's start; the shell that starts it times the exit.

The official TPT script's clock (``benchmarks/peers/tpt_official.py``) runs from its DataLoader's
``iter()`` (its workers fork, after its model is built) to its last batch. The same clock here:
``workers_loop_s`` = from the views DataLoader's ``iter()`` (the workers' fork) to the last
batch's probabilities. argtca starts its workers before the model build, so that clock also
counts the build; ``LATE_WORKERS=1`` starts them where the official script does (at the loop's
``iter()``, the model built), which makes it the same definition on both sides: the fair loop.

Environment: ``ARGTCA_ROOT`` (another tree's ``argtca``, e.g. the code before a change; default
this repository); ``LATE_WORKERS=1``; ``TOWER=GFLOP_PER_VIEW`` (CUDA: the image tower's share of
the measured fp16 matmul peak at the end-to-end rate, ``N_VIEWS`` views an image);
``PROFILE=FILE`` (cProfile of the host thread; the workers are other processes).

    T_SHELL=$(date +%s.%N) python benchmarks/probes/e2e_timeline.py OUT.json -- ARGS...
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time

T_PY = time.time()
sys.path.insert(0, os.environ.get("ARGTCA_ROOT") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EVENTS = []


def mark(name: str, t0: float, t1: float) -> None:
    EVENTS.append((name, t0, t1))


def wrap(owner, attr: str, name: str) -> None:
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def timed(*a, **k):
        t0 = time.time()
        try:
            return fn(*a, **k)
        finally:
            mark(name, t0, time.time())
    setattr(owner, attr, timed)


def main() -> int:
    argv = sys.argv[1:]
    out = argv[0]
    args = argv[argv.index("--") + 1:]
    t0 = time.time()
    import torch
    mark("import torch", t0, time.time())
    t0 = time.time()
    import argtca.run as run
    import argtca.trainers  # noqa: F401  (what build_trainer imports)
    import argtca.engine.pipeline as pipeline
    import argtca.views.loader as loader
    from argtca.trainers.base import TestTimeTrainer
    from torch.utils.data import DataLoader
    mark("import argtca", t0, time.time())
    wrap(run, "setup_cfg", "config")
    wrap(run, "build_trainer", "trainer (dataset, checks)")
    import argtca.datasets as datasets
    wrap(datasets, "build_dataset", "dataset")
    wrap(TestTimeTrainer, "fingerprint", "fingerprint")
    wrap(loader, "build_views_loader", "views loader built")
    if os.environ.get("LATE_WORKERS") == "1":
        # the workers fork at the loop's iter(), once the model is built (the official's order)
        loader.ViewsLoader.start = lambda self: self
    forks = []
    real_iter = DataLoader.__iter__

    def dl_iter(self):
        t = time.time()
        it = real_iter(self)
        if getattr(self, "num_workers", 0) > 0:
            forks.append(t)
            mark("workers forked", t, time.time())
        return it
    DataLoader.__iter__ = dl_iter
    wrap(TestTimeTrainer, "build_model", "build_model")
    wrap(TestTimeTrainer, "finish", "metrics + summary")
    clock = {}
    real_predictions = pipeline.predictions

    def predictions(engine, ldr, seconds=None):
        seconds = seconds if seconds is not None else {}
        if getattr(engine, "prepare", None) is not None and not getattr(engine, "_timed", 0):
            wrap(engine, "prepare", "engine.prepare (in the loop)")
            engine._timed = True
        t = time.time()
        yield from real_predictions(engine, ldr, seconds)
        clock.update(seconds, start=t)
    pipeline.predictions = predictions
    prof = None
    if os.environ.get("PROFILE"):
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    cuda = torch.cuda.is_available()
    t0 = time.time()
    rc = run.main(args)
    t_end = time.time()
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.environ["PROFILE"])
    t_shell = float(os.environ.get("T_SHELL", T_PY))
    res = {"rc": rc, "late_workers": os.environ.get("LATE_WORKERS") == "1",
           "python_start_s": round(T_PY - t_shell, 3), "main_s": round(t_end - t0, 3),
           "to_main_end_s": round(t_end - t_shell, 3), "images": clock.get("images")}
    if "first_s" in clock:
        start, n = clock["start"], int(clock["images"])
        mark("loop: to first batch", start, start + clock["first_s"])
        mark("loop: first to last batch", start + clock["first_s"], start + clock["last_s"])
        last = start + clock["last_s"]
        fork = forks[0] if forks else start
        res.update(workers_loop_s=round(last - fork, 3),
                   workers_loop_img_s=round(n / (last - fork), 2),
                   loop_clock_img_s=round(n / clock["last_s"], 2),
                   first_batch_from_workers_s=round(start + clock["first_s"] - fork, 3),
                   steady_img_s=round((n - clock["images_first"])
                                      / (clock["last_s"] - clock["first_s"]), 2),
                   workers_fork_at_s=round(fork - t_shell, 3),
                   main_end_img_s=round(n / (t_end - t_shell), 2))
    if cuda:
        res["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
        res["gpu"] = torch.cuda.get_device_name()
        gflop = float(os.environ.get("TOWER", "0") or 0)
        if gflop > 0 and res.get("images"):
            from argtca.bench.gpu import matmul_peak_tflops
            peak = matmul_peak_tflops(torch.device("cuda"))
            views = int(os.environ.get("N_VIEWS", "64"))
            rate = res["images"] / (t_end - t_shell)          # the whole process but the exit
            steady = res["steady_img_s"]
            tf = rate * views * gflop / 1e3
            tf_steady = steady * views * gflop / 1e3
            res["tower"] = {"gflop_per_view": gflop, "views": views,
                            "measured_matmul_peak_tflops": peak,
                            "end_to_end_tflops": round(tf, 1),
                            "end_to_end_pct_of_peak": round(100 * tf / peak, 1),
                            "steady_tflops": round(tf_steady, 1),
                            "steady_pct_of_peak": round(100 * tf_steady / peak, 1)}
    rows = [{"phase": n, "start_s": round(a - t_shell, 3), "seconds": round(b - a, 3)}
            for n, a, b in sorted(EVENTS, key=lambda e: e[1])]
    res["phases"] = rows
    res["loop_clock"] = {k: round(v, 3) if isinstance(v, float) else v
                         for k, v in clock.items() if k != "start"}
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print("E2E " + json.dumps({k: v for k, v in res.items()
                               if k not in ("phases", "loop_clock")}), flush=True)
    for r in rows:
        print(f"  {r['start_s']:8.2f} +{r['seconds']:7.2f}  {r['phase']}", flush=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
