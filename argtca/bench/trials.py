"""Parts of ``python -m argtca.bench`` that time pieces rather than whole passes:

* :func:`variants` — engine-only time per image of the fast engine's knobs (views already on the
  device), split into image tower / tuning / final prediction.
* :func:`input_pipeline` — images/s of the views loaders alone and of the GPU view maker alone.
* :func:`profile_batch` — where the GPU time of one fast batch goes (kernel families, top kernels).
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Dict, List

import torch

if TYPE_CHECKING:
    from argtca.bench.setup import Setup


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _bench_cfg(*a, **kw):
    from argtca.bench.setup import bench_cfg
    return bench_cfg(*a, **kw)


def _phase_times(eng, x, reps, dev):
    """ms per image of image_features / tune / predict (synchronised per phase) and in total."""
    t_img = t_tune = t_pred = 0.0
    n = x.shape[0]
    for _ in range(reps):
        _sync(dev)
        t = time.perf_counter()
        img = eng.image_features(x)
        _sync(dev)
        t_img += time.perf_counter() - t
        t = time.perf_counter()
        ctx = eng.tune(img)
        _sync(dev)
        t_tune += time.perf_counter() - t
        t = time.perf_counter()
        eng.predict(img[:, 0], ctx)
        _sync(dev)
        t_pred += time.perf_counter() - t
    k = 1e3 / (reps * n)
    return {"image_ms": round(t_img * k, 3), "tune_ms": round(t_tune * k, 3),
            "predict_ms": round(t_pred * k, 3),
            "ms_per_image": round((t_img + t_tune + t_pred) * k, 3)}


VARIANTS = [
    ("reference", {}),
    ("fast", {"grad_mode": "vjp", "text_attention": "default"}),
    ("fast", {"grad_mode": "vjp", "text_attention": "math", "compile_text": True}),
    ("fast", {"grad_mode": "vjp", "text_attention": "efficient", "compile_text": True}),
    ("fast", {"grad_mode": "recompute", "text_attention": "math", "compile_text": True,
              "compile_text_grad": True}),
    ("fast", {"grad_mode": "recompute", "text_attention": "efficient", "compile_text": True,
              "compile_text_grad": True}),
    ("fast", {"grad_mode": "loop", "text_attention": "math", "compile_text": True,
              "compile_text_grad": True}),
    ("fast", {"grad_mode": "jacobian", "text_attention": "math"}),
    ("fast", {"grad_mode": "jacobian", "text_attention": "math", "compile_text": True}),
    ("fast", {"grad_mode": "jacobian", "text_attention": "efficient", "compile_text": True}),
    ("fast", {"grad_mode": "jacobian", "text_attention": "split", "compile_text": True}),
    ("fast", {"grad_mode": "vjp", "text_attention": "math", "compile_text": True,
              "prefix_share": False}),
]


def variants(setup: Setup, n_batches: int = 3,
             compile_image: bool = False) -> List[Dict[str, object]]:
    """Engine-only time per image (views already on the device) for the fast engine's knobs, split
    into image tower / tuning / final prediction. The image tower is timed eager and compiled."""
    args, dev = setup.args, setup.device
    g = torch.Generator().manual_seed(1)
    v = torch.randn(args.batch, args.views, 3, args.size, args.size, generator=g).to(dev)
    rows = []
    combos = list(VARIANTS)
    if dev.type != "cuda":
        combos = [c for c in combos
                  if c[0] == "reference" or c[1].get("text_attention") == "default"]
    for kind, kw in combos:
        kw = dict(kw)
        if kind == "fast":
            kw["compile_image"] = compile_image
            kw.setdefault("compile_text", False)
            kw.setdefault("compile_text_grad", False)
        try:
            eng = setup.engine(kind, **kw)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            x = v[:1] if kind == "reference" else v
            t_c = time.perf_counter()
            eng(x, None)                          # θ0 cache / compile
            _sync(dev)
            t_c = time.perf_counter() - t_c
            reps = max(2, n_batches // 2) if kind == "reference" else n_batches
            row = {"engine": kind, **kw, "K": setup.K, **_phase_times(eng, x, reps, dev),
                   "first_call_s": round(t_c, 2),
                   "peak_gib": (round(torch.cuda.max_memory_allocated(dev) / 2 ** 30, 2)
                                if dev.type == "cuda" else None)}
        except Exception as e:  # a knob that fails on this platform is reported, not fatal
            row = {"engine": kind, **kw, "K": setup.K, "error": f"{type(e).__name__}: {e}"[:300]}
        print(f"  variant {row}", flush=True)
        rows.append(row)
    return rows


def input_pipeline(setup: Setup, n_images: int) -> List[Dict[str, object]]:
    """Images/s of the views loaders alone (no engine) and of the GPU view maker alone."""
    from argtca.datasets import build_dataset
    from argtca.views.loader import build_views_loader
    args, dev = setup.args, setup.device
    rows = []
    for views in ("cpu", "cpu-fast", "gpu"):
        cfg = _bench_cfg(args, setup.data, "fast", views, n_images)
        dataset = build_dataset(cfg)
        _sync(dev)
        t0 = time.perf_counter()
        loader = build_views_loader(cfg, dataset, 1, list(range(len(dataset.test))), args.batch,
                                    dev, args.workers)
        n, t_first, n_first = 0, None, 0
        for b in loader:
            _sync(dev)
            n += len(b["index"])
            if t_first is None:
                t_first, n_first = time.perf_counter(), n
        t1 = time.perf_counter()
        rows.append({"views": views, "n": n, "workers": args.workers,
                     "img_per_s": round(n / (t1 - t0), 2),
                     "img_per_s_after_first_batch":
                         round((n - n_first) / max(1e-9, t1 - t_first), 2)})
        print(f"  input pipeline {rows[-1]}", flush=True)
    # the GPU maker alone on batches already on the device
    cfg = _bench_cfg(args, setup.data, "fast", "gpu", args.batch)
    dataset = build_dataset(cfg)
    loader = build_views_loader(cfg, dataset, 1, list(range(len(dataset.test))), args.batch, dev, 0)
    maker = loader.maker
    raw = next(iter(loader.loader))
    batch = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in raw.items()}
    batch["params_cpu"] = raw["params"]
    maker(batch)
    _sync(dev)
    t = time.perf_counter()
    reps = 5
    for _ in range(reps):
        maker(batch)
    _sync(dev)
    ms = 1e3 * (time.perf_counter() - t) / (reps * len(batch["index"]))
    rows.append({"views": "gpu maker only", "ms_per_image": round(ms, 3)})
    print(f"  gpu view maker: {ms:.3f} ms/image", flush=True)
    return rows


def profile_batch(setup: Setup, **engine_kw) -> Dict[str, object]:
    """Where the time of one fast batch goes (CUDA time by kernel family, top kernels)."""
    from torch.profiler import ProfilerActivity, profile
    args, dev = setup.args, setup.device
    g = torch.Generator().manual_seed(2)
    v = torch.randn(args.batch, args.views, 3, args.size, args.size, generator=g).to(dev)
    eng = setup.engine("fast", **engine_kw)
    eng(v, None)
    _sync(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        with torch.profiler.record_function("image_features"):
            img = eng.image_features(v)
            _sync(dev)
        with torch.profiler.record_function("tune"):
            ctx = eng.tune(img)
            _sync(dev)
        with torch.profiler.record_function("predict"):
            eng.predict(img[:, 0], ctx)
            _sync(dev)
    from torch.autograd import DeviceType
    ev = prof.key_averages()
    phases = {e.key: round(getattr(e, "cpu_time_total") / 1e3, 2) for e in ev
              if e.key in ("image_features", "tune", "predict")}
    if dev.type == "cuda":   # kernels only (CPU-side ops would count their kernels twice)
        attr = "device_time_total"
        phases.update({f"{e.key} (device)": round(e.device_time_total / 1e3, 2) for e in ev
                       if e.key in ("image_features", "tune", "predict")
                       and getattr(e, "device_type", None) == DeviceType.CUDA})
        kernels = [e for e in ev if getattr(e, "device_type", None) == DeviceType.CUDA
                   and getattr(e, attr, 0) > 0
                   and e.key not in ("image_features", "tune", "predict")]
    else:
        attr = "self_cpu_time_total"
        kernels = [e for e in ev if e.key.startswith("aten::") and getattr(e, attr, 0) > 0]
    kernels.sort(key=lambda e: -getattr(e, attr))
    total = sum(getattr(e, attr) for e in kernels) or 1.0
    top = [{"kernel": e.key[:90], "ms": round(getattr(e, attr) / 1e3, 3),
            "pct": round(100 * getattr(e, attr) / total, 1), "calls": e.count}
           for e in kernels[:15]]
    fam = {}
    for e in kernels:
        k = e.key.lower()
        f = ("attention" if any(s in k for s in ("flash", "fmha", "attention", "efficient", "sdpa"))
             else "gemm" if any(s in k for s in ("gemm", "sm90", "cutlass", "matmul", "xmma",
                                                 "nvjet"))
             else "copy/cast" if any(s in k for s in ("copy", "cast", "memcpy", "memset"))
             else "norm" if "norm" in k else "elementwise/other")
        fam[f] = fam.get(f, 0.0) + getattr(e, attr) / 1e3
    out = {"batch_images": args.batch, "phases_wall_ms": phases,
           "device_ms_total": round(total / 1e3, 2),
           "families_ms": {k: round(v, 2) for k, v in sorted(fam.items(), key=lambda x: -x[1])},
           "top_kernels": top}
    print(f"  profile: {json.dumps({k: out[k] for k in ('phases_wall_ms', 'families_ms')})}",
          flush=True)
    return out
