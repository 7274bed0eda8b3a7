"""Throughput benchmark of episodic test-time tuning: ``python -m argtca.bench [--out bench.json]``
(every method over the whole table: ``python -m argtca.bench table1``, argtca/bench/table1.py).

One run builds a synthetic JPEG dataset in CoOp's Caltech101 layout (generated split file and
attribute file, in a temporary folder), loads CLIP with **random weights** (``MODEL.PRETRAINED
random``: the same FLOPs as the real model; accuracy numbers are meaningless) and measures, with
the TCA objective (M' attribute prompts per class):

* images/s end to end — from the JPEG files to the final metrics, through the same pieces as
  ``TestTimeTrainer.test`` (dataset reader, views loader, engine, per-image records written to a
  JSONL file, ``compute_metrics``) — for the reference and the fast engine, CPU views (TPT's PIL
  pipeline in DataLoader workers) and GPU views, K=101 and K=1000 classes;
* agreement of the fast engine with the reference engine *on identical views* (the reference tunes
  one image at a time): identical predictions, the largest confidence difference, ECE of both;
* peak GPU memory of each pass; with ``--variants`` the engine-only speed of the fast engine's
  knobs (gradient mode, ``torch.compile`` of the image tower) on views already on the device;
  with ``--profile`` where the time of one fast batch goes.

Model loading, CUDA initialisation and (if on) compilation happen in a warm-up on random views
before the timed passes; the θ0 text cache is built inside the timed pass (it is a per-dataset
cost).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import tempfile
import time
from typing import Dict

import torch

from argtca.bench.data import make_synthetic_coop
from argtca.bench.setup import Setup, bench_cfg, parse_args, run_pass, warm_views, warmup
from argtca.bench.trials import input_pipeline, profile_batch, variants



def device_info(dev: torch.device) -> Dict[str, object]:
    info = {"torch": torch.__version__, "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "date": datetime.date.today().isoformat()}
    try:
        import open_clip
        info["open_clip"] = open_clip.__version__
    except Exception:
        pass
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(gpu=p.name, gpu_mem_gib=round(p.total_memory / 2 ** 30, 1),
                    sms=p.multi_processor_count)
    return info


def print_table(res: Dict[str, object]) -> None:
    info = res["device"]
    print("\n=== argtca.bench ===")
    print(f"device: {info.get('gpu', 'cpu')}  torch {info['torch']}  cores {info['cpu_count']}  "
          f"date {info['date']}")
    hdr = f"{'engine':10s} {'views':5s} {'K':>5s} {'P':>5s} {'L':>3s} {'n':>5s} {'img/s':>9s} " \
          f"{'steady':>9s} {'peak GiB':>9s}"
    print(hdr)
    print("-" * len(hdr))
    for r in res["passes"]:
        print(f"{r['engine']:10s} {r['views']:5s} {r['K']:5d} {r['prompts']:5d} {r['tokens']:3d} "
              f"{r['n']:5d} {r['img_per_s']:9.2f} {r['img_per_s_after_first_batch']:9.2f} "
              f"{str(r['peak_gib']):>9s}")
    for a in res.get("agreement", []):
        print(f"agreement K={a['K']} n={a['n']} ({a['views']} views, identical tensors): "
              f"{a['identical_predictions_pct']}% identical predictions, max |Δconf| "
              f"{a['max_conf_diff']:.2e}, ECE ref {a['ece_reference']} vs fast {a['ece_fast']} "
              f"(Δ {a['ece_diff_points']} points)")
    for k, v in res.get("speedups", {}).items():
        print(f"speed-up {k}: {v}")
    for r in res.get("input_pipeline") or []:
        print(f"input pipeline: {r}")
    for v in res.get("variants", []):
        print(f"variant: {v}")
    tower = res.get("image_tower") or {}
    for r in tower.get("rows", []):
        print(f"image tower ({tower.get('gflops_per_view')} GFLOP/view, measured peak "
              f"{tower.get('measured_matmul_peak_tflops')} TFLOP/s): {r}")
    for r in res.get("cli") or []:
        print(f"CLI: {({k: v for k, v in r.items() if k != 'log_tail'})}")
    for e in res.get("errors", []):
        print(f"ERROR {e}")


def main(argv=None) -> int:
    rest = list(sys.argv[1:] if argv is None else argv)
    if rest[:1] == ["table1"]:   # the whole-table benchmark (argtca/bench/table1.py)
        from argtca.bench.table1 import main as table1
        return table1(rest[1:])
    args = parse_args(argv, description=__doc__)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    from argtca.models.clip import load_clip
    res: Dict[str, object] = {"device": device_info(dev), "args": vars(args), "passes": [],
                              "agreement": [], "variants": []}
    tmp = args.data_dir or tempfile.mkdtemp(prefix="argtca_bench_")
    t = time.perf_counter()
    mcfg = bench_cfg(args, {"root": tmp, "attributes": ""}, "fast", "cpu", -1)
    model, tok = load_clip(mcfg, dev)
    if args.logit_scale > 0:
        import math
        model.logit_scale.data.fill_(math.log(args.logit_scale))
    res["model_load_s"] = round(time.perf_counter() - t, 2)
    out_path = args.out

    def save():
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)

    def guarded(what, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except Exception as e:  # one failing pass must not lose the others
            import traceback
            traceback.print_exc()
            res.setdefault("errors", []).append(f"{what}: {type(e).__name__}: {e}"[:500])
            return None
        finally:
            save()

    engine_kw = {"grad_mode": args.grad_mode, "compile_image": args.compile == "on",
                 "text_attention": args.text_attention, "compile_text": args.compile_text,
                 "compile_text_grad": args.compile_text, "compile_jacobian": args.compile_text,
                 "half_image": args.half_image == "on",
                 "prefix_share": args.prefix == "on", "compile_mode": args.compile_mode or None}
    for K in args.classes:
        scale = args.large_scale if K >= 1000 else 1.0
        n_fast = max(args.batch, int(args.n_fast * scale))
        n_cpu = max(args.batch, int(args.n_fast_cpu * scale))
        n_ref = max(2, int(args.n_ref * scale))
        n_agree = int(args.n_agree * scale)
        n_max = max(n_fast, n_cpu, n_ref, n_agree)
        t = time.perf_counter()
        data = make_synthetic_coop(os.path.join(tmp, f"K{K}"), n_max, K, seed=K)
        setup = Setup(args, data, model, tok, dev)
        print(f"K={K}: {setup.P} prompts x {setup.L} tokens; dataset built in "
              f"{time.perf_counter() - t:.1f}s", flush=True)
        if args.variants or args.auto:
            rows = guarded("variants", variants, setup, compile_image=args.compile == "on") or []
            res["variants"].extend(rows)
            ok = [r for r in rows if r["engine"] == "fast" and "error" not in r]
            if args.auto and ok and K == args.classes[0]:
                best = min(ok, key=lambda r: r["ms_per_image"])
                engine_kw = {k: best[k] for k in ("grad_mode", "text_attention", "compile_text",
                                                  "compile_text_grad", "compile_image")
                             if k in best}
                res["chosen_knobs"] = engine_kw
                print(f"  chosen knobs: {engine_kw}", flush=True)
        if args.tower and K == args.classes[0]:
            from argtca.bench.gpu import tower_throughput
            res["image_tower"] = guarded("tower", tower_throughput, setup,
                                         compile_image=args.compile == "on")
        if args.input and K == args.classes[0]:
            res["input_pipeline"] = guarded("input", input_pipeline, setup, args.n_input)
        guarded("warmup", warmup, setup, **engine_kw)
        if "fast-gpu" not in args.skip:
            guarded("warm views", warm_views, setup)
        if args.profile and K == args.classes[0]:
            res["profile"] = guarded("profile", profile_batch, setup, **engine_kw)
        passes = [("ref-cpu", "reference", "cpu", n_ref, {}),
                  ("ref-gpu", "reference", "gpu", n_ref, {}),
                  ("fast-cpu", "fast", "cpu", n_cpu, engine_kw),
                  ("fast-cpufast", "fast", "cpu-fast", n_cpu, engine_kw),
                  ("fast-gpu", "fast", "gpu", n_fast, engine_kw)]
        for name, kind, views, n, kw in passes:
            if name in args.skip or (views == "gpu" and kind == "reference" and dev.type != "cuda"):
                continue
            row = guarded(name, run_pass, setup, kind, views, n, **kw)
            if row:
                res["passes"].append(row)
                save()
        if "agree" not in args.skip and n_agree > 0:
            from argtca.bench.gpu import agreement
            row = guarded("agree", agreement, setup, n_agree, **engine_kw)
            if row:
                res["agreement"].append(row)
        del setup
    sp = {}
    for K in args.classes:
        rows = {(r["engine"], r["views"]): r for r in res["passes"] if r["K"] == K}
        for (fe, fv) in (("fast", "gpu"), ("fast", "cpu")):
            for rv in ("cpu", "gpu"):
                if (fe, fv) in rows and ("reference", rv) in rows:
                    a, b = rows[(fe, fv)], rows[("reference", rv)]
                    sp[f"K={K} {fe}+{fv} views / reference+{rv} views"] = {
                        "end_to_end": round(a["img_per_s"] / b["img_per_s"], 1),
                        "steady": round(a["img_per_s_after_first_batch"]
                                        / b["img_per_s_after_first_batch"], 1)}
        eng = {r["engine"]: r["ms_per_image"] for r in res["variants"]
               if r["K"] == K and "error" not in r and (r["engine"] == "reference" or all(
                   r.get(k) == v for k, v in res.get("chosen_knobs", {}).items()))}
        if "reference" in eng and "fast" in eng:
            sp[f"K={K} engine only (identical views on the device)"] = round(
                eng["reference"] / eng["fast"], 1)
    res["speedups"] = sp
    if args.cli_gpus:
        from argtca.bench.gpu import cli_scaling
        K = args.classes[0]
        data = make_synthetic_coop(os.path.join(tmp, f"cli{K}"), args.cli_images, K, seed=K)
        res["cli"] = guarded("cli", cli_scaling, data, os.path.join(tmp, "cli_out"),
                             args.cli_gpus, args.backbone, args.cli_views,
                             ["INPUT.SIZE", f"({args.size}, {args.size})", "TTA.N_VIEWS",
                              str(args.views)])
    print_table(res)
    save()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
