"""GPU timeline of the steady test loop (GPU views, fast engine, compiled): torch.profiler over
batches [A, B) of one pass; prints the wall time, the GPU's busy time (union of kernel intervals)
and the kernels by GPU time.
Usage: [EAGER=1] python benchmarks/probes/profile_gpu_loop.py [N_IMAGES] [A] [B]"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from argtca.bench import setup as bench  # noqa: E402


def busy_ms(prof) -> float:
    iv = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA)
    tot, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot / 1e3


def main():
    if os.environ.get("TORCH_THREADS"):   # the main process's intra-op threads
        torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
    if os.environ.get("PIN") == "0":      # no pin-memory thread in the DataLoader
        import argtca.views.loader as vl   # the loader module's own name: patch it there
        orig = vl.make_loader
        vl.make_loader = lambda *a, **k: orig(*a, **dict(k, pin_memory=False))
    print(f"torch threads {torch.get_num_threads()}, pin {os.environ.get('PIN', '1')}")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    a = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    b = int(sys.argv[3]) if len(sys.argv) > 3 else 45
    args, dev, s = bench.script_setup(n)
    data = s.data
    on = dev.type == "cuda"
    comp = on and os.environ.get("EAGER", "0") != "1"   # EAGER=1: the CLI's default engine
    kw = dict(compile_image=comp, compile_text=comp, grad_mode="jacobian")
    bench.warmup(s, kinds=("fast",), **kw)
    eng = s.engine("fast", **kw)
    from argtca.datasets import build_dataset
    from argtca.views.loader import build_views_loader
    from argtca.engine.pipeline import predictions
    cfg = bench.bench_cfg(args, data, "fast", "gpu", n)
    ds = build_dataset(cfg)
    loader = build_views_loader(cfg, ds, 1, list(range(len(ds.test))), args.batch, dev,
                                args.workers)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on else [])
    prof = profile(activities=acts)
    host = {}
    t0 = None
    from argtca.run_folder import RecordWriter
    writer = RecordWriter(os.path.join(tempfile.mkdtemp(), "records.jsonl"))
    tick = time.perf_counter()
    for i, (batch, probs) in enumerate(predictions(eng, loader, host)):
        writer.write(s.trainer.make_records(batch, probs))   # as the trainer's loop
        if i % 16 == 15:   # the rate over the last 16 batches: does the loop slow down?
            t = time.perf_counter()
            print(f"  batches {i - 15}..{i}: {16 * args.batch / (t - tick):.1f} img/s", flush=True)
            tick = t
        if i == a:
            if on:
                torch.cuda.synchronize()
            prof.start()
            t0, h0, l0 = time.perf_counter(), dict(host), dict(loader.seconds)
        if i == b:
            if on:
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            prof.stop()
    writer.close()
    imgs = (b - a) * args.batch
    print(f"batches {a}..{b}: wall {wall * 1e3:.0f} ms = {wall * 1e3 / imgs:.2f} ms/image; "
          f"GPU busy {busy_ms(prof):.0f} ms = {busy_ms(prof) / imgs:.2f} ms/image", flush=True)
    print("host s:", {k: round(host[k] - h0.get(k, 0), 3) for k in host},
          {k: round(v - l0[k], 3) for k, v in loader.seconds.items()})
    print(prof.key_averages().table(sort_by="cuda_time_total" if on else "cpu_time_total",
                                    row_limit=int(os.environ.get("ROWS", "30")),
                                    max_name_column_width=70))


if __name__ == "__main__":
    main()
