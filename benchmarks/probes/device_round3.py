"""Runs 1-2 of benchmarks/rounds/round-3.md, on one GPU: engine-only phase times of the text
tower's levers (prefix sharing, grad mode "jacobian"), the image tower's variants (lean blocks,
compile modes) and one end to end pass.
Usage: python benchmarks/probes/device_round3.py OUTDIR [parts...]; parts among
engine101 engine1000 tower autotune e2e (default: all but autotune). Prints one JSON line a row."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from argtca.bench import setup as bench  # noqa: E402
from argtca.bench.data import make_synthetic_coop  # noqa: E402
from argtca.bench.trials import _phase_times as phase_times  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "round3"
    parts = sys.argv[2:] or ["engine101", "engine1000", "tower", "e2e"]
    os.makedirs(out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    # BENCH_ARGS: extra argtca.bench arguments (a CPU smoke test: --device cpu --backbone ...)
    args = bench.parse_args(["--workers", str(int(os.environ.get("WORKERS", "15")))]
                            + os.environ.get("BENCH_ARGS", "").split())
    dev = torch.device(args.device)
    from argtca.models.clip import load_clip
    import math
    mcfg = bench.bench_cfg(args, {"root": "/tmp", "attributes": ""}, "fast", "cpu", -1)
    model, tok = load_clip(mcfg, dev)
    model.logit_scale.data.fill_(math.log(100.0))
    tmp = tempfile.mkdtemp(prefix="r3_")
    rows = []

    def emit(row):
        row["gpu"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(out, "round3.json"), "w") as f:
            json.dump(rows, f, indent=1)

    def setup_for(K, n):
        data = make_synthetic_coop(os.path.join(tmp, f"K{K}"), n, K, seed=K)
        return bench.Setup(args, data, model, tok, dev)

    def engine_rows(s, combos, reps):
        g = torch.Generator().manual_seed(1)
        v = torch.randn(args.batch, args.views, 3, args.size, args.size, generator=g).to(dev)
        for label, kw in combos:
            try:
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats(dev)
                eng = s.engine("fast", **kw)
                t = time.perf_counter()
                eng(v, None)
                bench._sync(dev)
                first = time.perf_counter() - t
                row = {"part": f"engine K={s.K}", "label": label, "grad_mode": eng.grad_mode,
                       "prefix": eng.prefix_share, **phase_times(eng, v, reps, dev),
                       "first_call_s": round(first, 2),
                       "jacobian_s": round(getattr(eng, "jacobian_seconds", 0.0), 2),
                       "peak_gib": (round(torch.cuda.max_memory_allocated(dev) / 2 ** 30, 2)
                                    if dev.type == "cuda" else None)}
            except Exception as e:
                row = {"part": f"engine K={s.K}", "label": label, "error": repr(e)[:400]}
            emit(row)

    base = {"compile_image": False, "text_attention": "math"}
    combos = [
        ("old default: vjp, no prefix, eager", dict(base, grad_mode="vjp", prefix_share=False,
                                                    lean_image=False)),
        ("vjp + prefix, eager", dict(base, grad_mode="vjp")),
        ("jacobian + prefix, eager", dict(base, grad_mode="jacobian")),
        ("jacobian + prefix, compiled text", dict(base, grad_mode="jacobian", compile_text=True)),
        ("jacobian + prefix, compiled text efficient", dict(
            base, grad_mode="jacobian", compile_text=True, text_attention="efficient")),
        ("recompute + prefix, compiled text fwd+bwd", dict(
            base, grad_mode="recompute", compile_text=True, compile_text_grad=True)),
    ]
    only = [x for x in os.environ.get("LABELS", "").split(",") if x]
    if only:   # LABELS=a,b: the combos whose label contains one of them
        combos = [c for c in combos if any(o in c[0] for o in only)]
    if "engine101" in parts:
        engine_rows(setup_for(101, 64), combos, 4)
    if "engine1000" in parts:
        engine_rows(setup_for(1000, 64), [c for c in combos if "efficient" not in c[0]], 2)
    if "tower" in parts or "autotune" in parts:
        s = setup_for(101, 64)
        from argtca.bench.gpu import image_flops_per_view, matmul_peak_tflops, _median_ms
        fl = image_flops_per_view(model, args.size, dev)
        peak = matmul_peak_tflops(dev) or float("nan")
        g = torch.Generator().manual_seed(3)
        v = torch.randn(args.batch, args.views, 3, args.size, args.size, generator=g).to(dev)
        tw = []
        if "tower" in parts:
            tw += [("open_clip blocks eager", dict(lean_image=False)),
                   ("lean eager", dict(lean_image=True)),
                   ("open_clip blocks compiled", dict(lean_image=False, compile_image=True)),
                   ("lean compiled", dict(lean_image=True, compile_image=True))]
        if "autotune" in parts:
            tw += [("lean compiled max-autotune-no-cudagraphs", dict(
                lean_image=True, compile_image=True, compile_mode="max-autotune-no-cudagraphs"))]
        for label, kw in tw:
            try:
                eng = s.engine("fast", **kw)
                t = time.perf_counter()
                for _ in range(2):
                    eng.image_features(v)
                bench._sync(dev)
                first = time.perf_counter() - t
                ms = _median_ms(lambda: eng.image_features(v), 7, dev)
                tf = fl * args.views * args.batch / (ms * 1e-3) / 1e12
                emit({"part": "tower", "label": label, "ms_per_image": round(ms / args.batch, 3),
                      "tflops": round(tf, 1), "pct_of_measured_peak": round(100 * tf / peak, 1),
                      "measured_peak": peak, "first_calls_s": round(first, 1)})
            except Exception as e:
                emit({"part": "tower", "label": label, "error": repr(e)[:400]})
    if "e2e" in parts:
        n = int(os.environ.get("E2E_N", "2048"))
        s = setup_for(101, n)
        kw = dict(compile_image=True, compile_text=True, text_attention="math", grad_mode="auto")
        bench.warmup(s, kinds=("fast",), **kw)
        r = bench.run_pass(s, "fast", "gpu", n, **kw)
        emit(dict(r, part="e2e"))


if __name__ == "__main__":
    main()
