"""Does the host block on the GPU inside the loop? Queues a long GPU sleep, then times (and
cProfiles) the GPU view maker and FastEngine.submit on the host; with torch's sync debug mode on,
every synchronising call prints its stack.
Usage: python benchmarks/probes/sync_probe.py [compiled]"""
from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from argtca.bench import setup as bench  # noqa: E402


def main():
    compiled = "compiled" in sys.argv[1:]
    args, dev, s = bench.script_setup(64, workers="2")
    data = s.data
    kw = dict(compile_image=compiled, compile_text=compiled, grad_mode="jacobian")
    eng = s.engine("fast", **kw)
    from argtca.datasets import build_dataset
    from argtca.views.loader import build_views_loader
    cfg = bench.bench_cfg(args, data, "fast", "gpu", 64)
    ds = build_dataset(cfg)
    loader = build_views_loader(cfg, ds, 1, list(range(64)), args.batch, dev, 2)
    it = iter(loader.loader)
    raw = [next(it) for _ in range(3)]
    maker = loader.maker
    eng.prepare()

    def one(b):
        b = loader._to_device(b)
        return eng.submit(maker(b), b["path"]).result()

    one(raw[0])   # warm (compiles)
    torch.cuda.synchronize()
    for label, b in (("plain", raw[1]), ("debug", raw[2])):
        if label == "debug":
            torch.cuda.set_sync_debug_mode("warn")
        torch.cuda._sleep(int(2e9))      # ~1 s of GPU time queued ahead
        t0 = time.perf_counter()
        prof = cProfile.Profile()
        prof.enable()
        bd = loader._to_device(b)
        t1 = time.perf_counter()
        views = maker(bd)
        t2 = time.perf_counter()
        job = eng.submit(views, bd["path"])
        t3 = time.perf_counter()
        prof.disable()
        torch.cuda.set_sync_debug_mode(0)
        job.result()
        t4 = time.perf_counter()
        print(f"[{label}] host ms: to_device {1e3*(t1-t0):.1f} maker {1e3*(t2-t1):.1f} "
              f"submit {1e3*(t3-t2):.1f} | result wait {1e3*(t4-t3):.1f}", flush=True)
        if label == "plain":
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
