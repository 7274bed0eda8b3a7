"""Throughput of the training-free and online methods, end to end through ``python -m argtca.run``:
``python -m argtca.bench.zoo [--methods zero mta ...] [--n-images 2048] [--out zoo.json]``.

Each method runs its own trainer config (``configs/trainers/<method>.yaml``) on a synthetic
Caltech101-layout set of JPEGs (K classes, :func:`argtca.bench.data.make_synthetic_coop`) with CLIP
at **random weights** (the real model's FLOPs; the accuracy is meaningless, so none is printed):
from the files through the views (``--views``: gpu, cpu-fast or cpu), the image tower and the
method's rule to the records and metrics. Reported per method: images/s over the whole loop, the
time to the first batch (model warm-up, compilation, per-dataset text) and the rate after it, the
seconds of the whole ``argtca.run`` call (``wall_s``: configuration, data, model, loop, metrics)
and the peak GPU memory. The text features are computed once per dataset; no method here runs the
text tower backward except R-TPT (``rtpt``, listed for comparison with the TPT family).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch

from argtca.bench.data import make_synthetic_coop
from argtca.config.paths import configs_dir
from argtca.trainers.catalogue import zoo_methods

CONFIGS = configs_dir()
METHODS = zoo_methods()


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m argtca.bench.zoo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=METHODS)
    p.add_argument("--n-images", type=int, default=2048)
    p.add_argument("--classes", type=int, default=101)
    p.add_argument("--views", default="gpu", choices=["gpu", "cpu-fast", "cpu"],
                   help="TTA.VIEWS_DEVICE")
    p.add_argument("--n-views", type=int, default=64, help="TTA.N_VIEWS")
    p.add_argument("--batch", type=int, default=32, help="TTA.BATCH_IMAGES")
    p.add_argument("--compile", default="auto", choices=["auto", "on", "off"],
                   help="TTA.COMPILE")
    p.add_argument("--backbone", default="ViT-B/16")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--workers", type=int, default=-1, help="DATALOADER.NUM_WORKERS")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (a smoke test)")
    p.add_argument("--data-dir", default="", help="where to build the data (default: temp)")
    p.add_argument("--out", default="bench_zoo.json")
    p.add_argument("--opts", nargs="*", default=[],
                   help="more config KEY VALUE pairs for every method (e.g. TTA.VIEWS_OPS workers)")
    return p.parse_args(argv)


def run_method(method: str, args, data: Dict[str, str], out_root: str) -> Dict[str, object]:
    from argtca.run import main as run_main
    cfg_file = CONFIGS / "trainers" / f"{method}.yaml"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file}: no trainer config for method {method!r}")
    if torch.cuda.is_available() and not args.cpu:
        torch.cuda.reset_peak_memory_stats()
    argv = ["--root", data["root"], "--seed", "1",
            "--dataset-config-file", str(CONFIGS / "datasets" / "caltech101.yaml"),
            "--config-file", str(cfg_file),
            "MODEL.BACKBONE.NAME", args.backbone, "MODEL.PRETRAINED", "random",
            "INPUT.SIZE", f"({args.size}, {args.size})", "TTA.N_VIEWS", str(args.n_views),
            "TTA.VIEWS_DEVICE", args.views, "TTA.BATCH_IMAGES", str(args.batch),
            "TTA.COMPILE", args.compile, "TTA.AUGMIX", "on",
            "DATASET.ATTRIBUTE_FILE", data["attributes"],
            "DATALOADER.NUM_WORKERS", str(args.workers), "OUTPUT_ROOT", out_root,
            "USE_CUDA", str(not args.cpu), "VERBOSE", "False", *args.opts]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):   # its accuracy means nothing here
        rc = run_main(argv)
    wall = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"{method}: python -m argtca.run exited with {rc}")
    summary = json.loads(next(Path(out_root, method).rglob("summary.json")).read_text())
    timing = summary.get("timing", {})
    n = int(summary["n"])
    loop = float(timing.get("loop_s", float("nan")))
    row = {"method": method, "label": summary.get("label"), "n": n, "K": args.classes,
           "views": args.views, "n_views": args.n_views, "batch": args.batch,
           "loop_s": loop, "img_per_s": round(n / loop, 1) if loop > 0 else None,
           "wall_s": round(wall, 2),
           "first_batch_s": timing.get("first_batch_s"),
           "steady_img_per_s": timing.get("steady_img_per_s"),
           "compile": summary.get("overrides", {}).get("TTA.COMPILE", args.compile),
           "device": summary.get("device")}
    if torch.cuda.is_available() and not args.cpu:
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    tmp = args.data_dir or tempfile.mkdtemp(prefix="argtca_bench_zoo_")
    data = make_synthetic_coop(os.path.join(tmp, f"K{args.classes}"), args.n_images,
                               args.classes, seed=args.classes)
    device = "cpu" if args.cpu or not torch.cuda.is_available() else torch.cuda.get_device_name()
    res = {"device": device, "torch": torch.__version__, "args": vars(args), "rows": []}
    rows: List[Dict[str, object]] = res["rows"]
    for m in args.methods:
        try:
            rows.append(run_method(m, args, data, os.path.join(tmp, "out")))
        except Exception as e:   # noqa: BLE001 (one failing method must not lose the others)
            rows.append({"method": m, "error": f"{type(e).__name__}: {e}"[:400]})
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        r = rows[-1]
        if "error" in r:
            print(f"{m:13s} error: {r['error']}", flush=True)
        else:
            print(f"{m:13s} {r['img_per_s']:8.1f} img/s over {r['n']} images (first batch at "
                  f"{r['first_batch_s']} s, then {r['steady_img_per_s']} img/s; the whole run "
                  f"{r['wall_s']} s), peak {r.get('peak_gib')} GiB", flush=True)
    print(f"device: {device}; K={args.classes}, {args.n_views} views ({args.views}), batch "
          f"{args.batch}, random weights; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
