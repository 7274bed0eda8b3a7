"""Runs 1 and 6-7 of benchmarks/rounds/round-4.md, on one GPU: where the loop's host time goes
(DataLoader wait, GPU views queued, engine queued, results waited for), for the settings under
test. Usage: python benchmarks/probes/device_round4.py OUTDIR [parts...]; parts: base workers
graphs k1000 attn101 attn1000 profile101 profile1000.
Each part is one timed pass from JPEG files (bench.run_pass); one JSON line a row."""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from argtca.bench import setup as bench  # noqa: E402
from argtca.bench.data import make_synthetic_coop  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "round4"
    parts = sys.argv[2:] or ["base", "workers", "graphs"]
    os.makedirs(out, exist_ok=True)
    n = int(os.environ.get("N_IMAGES", "4096"))
    args = bench.parse_args(["--workers", os.environ.get("WORKERS", "15")]
                            + os.environ.get("BENCH_ARGS", "").split())
    dev = torch.device(args.device)
    from argtca.models.clip import load_clip
    model, tok = load_clip(bench.bench_cfg(args, {"root": "/tmp", "attributes": ""}, "fast",
                                           "cpu", -1), dev)
    model.logit_scale.data.fill_(math.log(100.0))
    tmp = tempfile.mkdtemp(prefix="r4_")
    rows = []
    on = dev.type == "cuda"
    base = dict(compile_image=on, compile_text=on, text_attention="math", grad_mode="jacobian")
    setups = {}

    def setup(K):
        if K not in setups:
            data = make_synthetic_coop(os.path.join(tmp, f"K{K}"), n, K, seed=K)
            setups[K] = bench.Setup(args, data, model, tok, dev)
        return setups[K]

    def timed(label, K, workers=None, views="gpu", **kw):
        s = setup(K)
        s.args.workers = int(workers or os.environ.get("WORKERS", "15"))
        kw = dict(base, **kw)
        t = time.perf_counter()
        bench.warmup(s, kinds=("fast",), **kw)
        warm = time.perf_counter() - t
        row = bench.run_pass(s, "fast", views, n, **kw)
        row.update(label=label, warmup_s=round(warm, 1),
                   gpu=torch.cuda.get_device_name(dev) if on else "cpu")
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(out, "round4.json"), "w") as f:
            json.dump(rows, f, indent=1)

    for p in parts:
        if p == "base":
            timed("K101 compiled, 15 workers", 101)
        elif p == "workers":
            timed("K101 compiled, 5 workers", 101, workers=5)
        elif p == "graphs":
            timed("K101 compiled reduce-overhead (image tower)", 101,
                  compile_mode="reduce-overhead")
        elif p == "k1000":
            timed("K1000 compiled, 15 workers", 1000)
        elif p.startswith("attn"):   # attn101 / attn1000: engine-only ms per image by phase
            from argtca.bench.trials import _phase_times
            K = int(p[len("attn"):])
            s = setup(K)
            g = torch.Generator().manual_seed(1)
            v = torch.randn(args.batch, args.views, 3, args.size, args.size, generator=g).to(dev)
            for ta, tf32 in (("math", False), ("math", True), ("efficient", True),
                             ("cudnn", True), ("split", True)):
                kw = dict(base, text_attention=ta)
                try:
                    eng = s.engine("fast", **kw)
                    eng.jacobian_tf32 = tf32 and on
                    eng(v, None)
                    eng(v, None)
                    row = _phase_times(eng, v, 3, dev)
                except Exception as e:   # a kernel that refuses the shapes/mask
                    row = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                row.update(label=f"engine K={K} text_attention={ta} jacobian_tf32={tf32}",
                           gpu=torch.cuda.get_device_name(dev) if on else "cpu")
                rows.append(row)
                print(json.dumps(row), flush=True)
        elif p.startswith("profile"):   # profile101 / profile1000: one engine batch by kernel
            from argtca.bench.trials import profile_batch
            K = int(p[len("profile"):])
            s = setup(K)
            bench.warmup(s, kinds=("fast",), **base)
            row = profile_batch(s, **base)
            row.update(label=f"profile K={K}", gpu=torch.cuda.get_device_name(dev) if on else "cpu")
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(os.path.join(out, "round4.json"), "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
