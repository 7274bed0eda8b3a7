"""Parts of ``python -m argtca.bench`` that measure the GPU itself and the command line:

* :func:`tower_throughput` — the image tower alone: FLOPs per view counted by PyTorch's
  ``FlopCounterMode``, the card's measured dense fp16 matrix rate (an 8192³ product on random
  data) and the datasheet's, and TFLOP/s / % of peak of the tower as the fast engine runs it
  (fp32 weights under autocast, fp16-stored tower, compiled when asked).
* :func:`agreement` — the fast engine against the reference (one image at a time) on identical
  view tensors: identical predictions, |Δconf|, ECE of both, the top-2 margins of the flips.
* :func:`reference_noise` — the reference engine run twice on identical views with two valid
  attention kernels (PyTorch's default SDPA choice vs the math kernel): its own fp16 flip rate,
  the yardstick for the fast engine's flips.
* :func:`cli_scaling` — the whole command line as a user runs it (``python -m argtca.run`` with
  the defaults, then ``torchrun --nproc_per_node N``) on the same synthetic data: wall time,
  start-up (wall - loop) and loop img/s, records compared.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

import torch

DATASHEET_TFLOPS = {"H100": 989.4, "H200": 989.4}   # dense fp16/bf16, SXM (NVIDIA datasheet)


def _median_ms(fn, reps: int, dev) -> float:
    times = []
    for _ in range(reps):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t = time.perf_counter()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t)
    times.sort()
    return 1e3 * times[len(times) // 2]


def matmul_peak_tflops(dev, n: int = 8192, reps: int = 10) -> Optional[float]:
    if dev.type != "cuda":
        return None
    a = torch.randn(n, n, device=dev, dtype=torch.float16)
    b = torch.randn(n, n, device=dev, dtype=torch.float16)
    for _ in range(3):
        a @ b
    ms = _median_ms(lambda: a @ b, reps, dev)
    return round(2 * n ** 3 / (ms * 1e-3) / 1e12, 1)


def image_flops_per_view(model, size: int, dev) -> float:
    from torch.utils.flop_counter import FlopCounterMode
    # an input that requires grad keeps nn.MultiheadAttention off its fused inference path, whose
    # kernel FlopCounterMode does not count (it then misses the attention projections)
    x = torch.randn(1, 3, size, size, device=dev, requires_grad=True)
    with torch.enable_grad(), FlopCounterMode(display=False) as fc:
        model.encode_image(x)
    return float(fc.get_total_flops())


def tower_throughput(setup, compile_image: bool = False, reps: int = 5) -> Dict[str, object]:
    """ms/image, TFLOP/s and % of peak of the fast engine's image tower on [batch, views] inputs."""
    args, dev = setup.args, setup.device
    model = setup.trainer.model
    flops_view = image_flops_per_view(model, args.size, dev)
    peak = matmul_peak_tflops(dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    sheet = next((v for k, v in DATASHEET_TFLOPS.items() if k in name), None)
    g = torch.Generator().manual_seed(3)
    v = torch.randn(args.batch, args.views, 3, args.size, args.size, generator=g).to(dev)
    rows = []
    combos = [("fp32 weights + autocast", {"half_image": False}),
              ("fp16 tower + patch matmul", {"half_image": True})]
    combos.append(("fp16 tower + patch matmul + lean blocks", {"half_image": True,
                                                                "lean_image": True}))
    combos[1][1]["lean_image"] = False
    if compile_image:
        combos.append(("fp16 tower (open_clip blocks), compiled",
                       {"half_image": True, "compile_image": True, "lean_image": False}))
        combos.append(("fp16 tower + lean blocks, compiled", {"half_image": True,
                                                              "compile_image": True}))

    if dev.type != "cuda":   # fp32 on the CPU: one tower
        combos = [("fp32 (CPU)", {"half_image": False})]
    for label, kw in combos:
        try:
            eng = setup.engine("fast", **kw)
            for _ in range(2):
                eng.image_features(v)
            ms = _median_ms(lambda: eng.image_features(v), reps, dev)
            tflops = flops_view * args.views * args.batch / (ms * 1e-3) / 1e12
            row = {"tower": label, "ms_per_image": round(ms / args.batch, 3),
                   "tflops": round(tflops, 1),
                   "pct_of_measured_peak": round(100 * tflops / peak, 1) if peak else None,
                   "pct_of_datasheet": round(100 * tflops / sheet, 1) if sheet else None}
        except Exception as e:   # reported, not fatal
            row = {"tower": label, "error": f"{type(e).__name__}: {e}"[:300]}
        print(f"  image tower: {row}", flush=True)
        rows.append(row)
    return {"gflops_per_view": round(flops_view / 1e9, 3), "measured_matmul_peak_tflops": peak,
            "datasheet_tflops": sheet, "gpu": name, "rows": rows}


def agreement(setup, n_images: int, views: str = "gpu", **engine_kw) -> Dict[str, object]:
    """Reference (one image at a time) vs fast (batched) on the same view tensors (the timed
    passes' setting; ``setup``: an :class:`argtca.bench.Setup`)."""
    from argtca.bench.setup import bench_cfg, pass_threads
    from argtca.datasets import build_dataset
    from argtca.views.loader import build_views_loader
    from argtca.metrics import compute_metrics
    args, dev = setup.args, setup.device
    cfg = bench_cfg(args, setup.data, "fast", views, n_images)
    dataset = build_dataset(cfg)
    loader = build_views_loader(cfg, dataset, 1, list(range(len(dataset.test))), args.batch, dev,
                                args.workers)
    ref, fast = setup.engine("reference"), setup.engine("fast", **engine_kw)
    pr, pf, labels, kept = [], [], [], []
    with pass_threads(setup):   # the timed passes' thread count: their compiled code is reused
        for batch in loader:
            v = batch["views"]
            if dev.type == "cuda":
                kept.append((v, batch["path"]))
            pf.append(fast(v, batch["path"]).float().cpu())
            pr.append(torch.cat([ref(v[i:i + 1], batch["path"][i:i + 1]).float().cpu()
                                 for i in range(v.shape[0])]))
            labels.append(batch["label"])
    pr, pf, y = torch.cat(pr), torch.cat(pf), torch.cat(labels)
    cr, yr = pr.max(-1)
    cf, yf = pf.max(-1)
    mr = compute_metrics(cr, yr, y)
    mf = compute_metrics(cf, yf, y)
    top2 = pr.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1])
    dis = (yr != yf)
    row = {"K": setup.K, "n": int(len(y)), "views": views,
           "identical_predictions_pct": round(100.0 * float((~dis).float().mean()), 3),
           "max_conf_diff": float((cr - cf).abs().max()),
           "max_prob_diff": float((pr - pf).abs().max()),
           "ece_reference": round(mr["ece"], 4), "ece_fast": round(mf["ece"], 4),
           "ece_diff_points": round(abs(mr["ece"] - mf["ece"]), 4),
           "acc_reference": round(mr["accuracy"], 3), "acc_fast": round(mf["accuracy"], 3),
           "median_top2_margin": float(margin.median()),
           "disagreement_top2_margins": [float(x) for x in margin[dis]]}
    if kept:   # the reference's own fp16 noise: same views, another valid attention kernel
        row.update(reference_noise(setup, kept, pr))
        print(f"  reference vs itself (math attention): {row['reference_self_identical_pct']}% "
              f"identical, flips at margins {row['reference_self_flip_margins'][:10]}", flush=True)
    print(f"  agreement K={setup.K} n={row['n']}: identical {row['identical_predictions_pct']}%, "
          f"max |Δconf| {row['max_conf_diff']:.2e}, ECE ref {row['ece_reference']} fast "
          f"{row['ece_fast']}", flush=True)
    return row


def reference_noise(setup, batches, pr_default: torch.Tensor) -> Dict[str, object]:
    """Reference engine again with the math attention kernel on the same views (``batches``: the
    view tensors the default-kernel probabilities ``pr_default`` [N, K] were computed from)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    ref = setup.engine("reference")
    out = []
    with sdpa_kernel([SDPBackend.MATH]):
        for v, paths in batches:
            out.append(torch.cat([ref(v[i:i + 1], paths[i:i + 1]).float().cpu()
                                  for i in range(v.shape[0])]))
    pm = torch.cat(out)
    c1, y1 = pr_default.max(-1)
    c2, y2 = pm.max(-1)
    top2 = pr_default.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    flips = y1 != y2
    return {"reference_self_identical_pct": round(100.0 * float((~flips).float().mean()), 3),
            "reference_self_flips": int(flips.sum()),
            "reference_self_flip_margins": [float(x) for x in margin[flips]],
            "reference_self_max_conf_diff": float((c1 - c2).abs().max()),
            "reference_self_p99_conf_diff": float((c1 - c2).abs().quantile(0.99))}


def _run(cmd: List[str], env) -> Dict[str, object]:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exit {p.returncode}: {p.stderr[-800:]}")
    return {"wall_s": round(wall, 2), "log": (p.stdout + p.stderr)[-1500:]}


def cli_scaling(data: Dict[str, str], out_root: str, gpus: List[int], backbone: str,
                views: str = "gpu", extra: Optional[List[str]] = None) -> List[Dict[str, object]]:
    """``python -m argtca.run`` (1 GPU) and ``torchrun --nproc_per_node N -m argtca.run`` with the
    defaults (TTA.ENGINE auto, DATALOADER.NUM_WORKERS auto, TTA.COMPILE auto) on ``data``."""
    from argtca.run_folder import load_records
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]),
               PYTHONUNBUFFERED="1")
    from argtca.config.paths import configs_dir
    args = ["--root", data["root"], "--dataset-config-file",
            str(configs_dir() / "datasets" / "caltech101.yaml"),
            "--config-file", str(configs_dir() / "trainers" / "tca.yaml"),
            "--backbone", backbone, "MODEL.PRETRAINED", "random",
            "DATASET.ATTRIBUTE_FILE", data["attributes"], "TTA.VIEWS_DEVICE", views,
            "TTA.AUGMIX", "on"] + list(extra or [])
    rows, first = [], None
    for n in gpus:
        out = os.path.join(out_root, f"gpus{n}")
        run_env = dict(env)
        if n == 1:   # one GPU of the host, as on a one-GPU machine
            cmd = [sys.executable, "-m", "argtca.run", "--output-dir", out] + args
            if torch.cuda.is_available():
                run_env["CUDA_VISIBLE_DEVICES"] = (
                    run_env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={n}", "-m", "argtca.run", "--output-dir", out] + args
        r = _run(cmd, run_env)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        recs = load_records(os.path.join(out, "records.jsonl"))
        loop = float(s["seconds_this_session"])
        row = {"gpus": n, "n": s["n"], "wall_s": r["wall_s"], "loop_s": round(loop, 2),
               "startup_s": round(r["wall_s"] - loop, 2),
               "loop_img_per_s": round(s["n"] / loop, 2),
               "end_to_end_img_per_s": round(s["n"] / r["wall_s"], 2),
               "accuracy": s["accuracy"], "ece": s["ece"], "engine": s["engine"],
               "timing": s.get("timing"),
               "log_tail": [ln for ln in r["log"].splitlines() if "argtca:" in ln][:6]}
        if first is None:
            first = (row, recs)
        else:
            b = {x["index"]: x for x in first[1]}
            row["identical_predictions_vs_1gpu_pct"] = round(
                100.0 * sum(b[x["index"]]["pred"] == x["pred"] for x in recs) / len(recs), 3)
            row["max_conf_diff_vs_1gpu"] = max(abs(b[x["index"]]["conf"] - x["conf"]) for x in recs)
            row["loop_speedup_vs_1gpu"] = round(first[0]["loop_s"] / loop, 2)
        print(f"  CLI {n} GPU(s): {json.dumps({k: v for k, v in row.items() if k != 'log_tail'})}",
              flush=True)
        print("   " + "\n   ".join(row["log_tail"]), flush=True)
        rows.append(row)
    return rows


def views_per_core(n_images: int = 12, views: int = 64, size: int = 224) -> Dict[str, float]:
    """ms of one core per image for TPT's PIL views and the cpu-fast views (AugMix on, the
    benchmark's 300x225 JPEGs)."""
    import io
    from PIL import Image
    from argtca.bench.data import _jpeg_pool
    from argtca.views.cpu import FastViewGenerator, ViewGenerator
    torch.set_num_threads(1)
    imgs = [Image.open(io.BytesIO(b)).convert("RGB") for b in _jpeg_pool(n_images + 1)]
    vg = ViewGenerator(size, views, augmix=True)
    out = {}
    for name, gen in (("cpu", vg), ("cpu-fast", FastViewGenerator.like(vg))):
        gen(imgs[0], 1, 0)
        t = time.perf_counter()
        for i, im in enumerate(imgs[1:]):
            gen(im, 1, i)
        out[name] = round((time.perf_counter() - t) / n_images * 1e3, 1)
    return out


if __name__ == "__main__":   # python -m argtca.bench.gpu percore
    if sys.argv[1:2] == ["percore"]:
        print("ms of one core per image:", views_per_core())
