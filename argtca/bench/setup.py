"""What every benchmark pass shares: the run configuration of a pass (:func:`bench_cfg`), the loaded
model and data (:class:`Setup`), one timed pass (:func:`run_pass`), its thread count and warm-ups.
Used by :mod:`argtca.bench.__main__`, :mod:`argtca.bench.gpu`, :mod:`argtca.bench.trials` and the
probes under ``benchmarks/probes/``."""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, Optional

import torch

from argtca.bench.data import make_synthetic_coop


def bench_cfg(args, data: Dict[str, str], engine: str, views: str, n_images: int,
              fast: Optional[Dict[str, object]] = None):
    """The run configuration of a pass; ``fast``: the fast engine's knobs by their keyword names
    (``grad_mode``, ``compile_image``, ...), set as ``TTA.FAST.<NAME>`` (None or "": the
    default), so a pass configures the engine as a run does."""
    from argtca.config import get_cfg_default
    cfg = get_cfg_default()
    knobs = [x for k, v in (fast or {}).items() if v is not None and v != ""
             for x in (f"TTA.FAST.{k.upper()}", v)]
    cfg.merge_from_list([
        "TRAINER.NAME", "TCA", "DATASET.NAME", "Caltech101", "DATASET.ROOT", data["root"],
        "DATASET.ATTRIBUTE_FILE", data["attributes"], "DATASET.NUM_IMAGES", n_images,
        "MODEL.BACKBONE.NAME", args.backbone, "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", (args.size, args.size), "TTA.N_VIEWS", args.views, "TTA.STEPS", args.steps,
        "TTA.ENGINE", engine, "TTA.VIEWS_DEVICE", views, "TTA.BATCH_IMAGES", args.batch,
        "TTA.AUGMIX", "on", "TRAINER.TCA.NUM_ATTRIBUTES", args.m,
        "DATALOADER.NUM_WORKERS", args.workers, "USE_CUDA", args.device == "cuda",
        "VERBOSE", False, "SEED", 1] + knobs)
    cfg.freeze()
    return cfg


class Setup:
    """One dataset (K classes) with the shared CLIP: trainer pieces + text encoder."""

    def __init__(self, args, data, model, tokenizer, device):
        from argtca.models.text import PromptTextEncoder
        from argtca.trainers.methods import TCA
        self.args, self.data, self.device = args, data, device
        self.trainer = TCA(bench_cfg(args, data, "fast", "cpu", -1), device=device)
        tr = self.trainer
        tr.model, tr.tokenizer = model, tokenizer
        tr.objective = tr.build_objective()
        t = time.perf_counter()
        tr.text_encoder = PromptTextEncoder(model, tokenizer, tr.prompt_suffixes(tr.classnames),
                                            ctx_init=tr.cfg.TTA.CTX_INIT,
                                            n_ctx=int(tr.cfg.TTA.N_CTX)).to(device)
        self.prompt_seconds = time.perf_counter() - t
        self.K = len(tr.classnames)
        self._fast_engines = {}   # one warmed fast engine per setting (see engine())
        self.P = tr.text_encoder.num_prompts
        self.L = int(tr.text_encoder.seq_len)

    def engine(self, kind: str, **kw):
        from argtca.engine.fast import FastEngine
        from argtca.engine.reference import ReferenceEngine
        tr = self.trainer
        if kind == "reference":
            cfg = bench_cfg(self.args, self.data, kind, "cpu", -1)
            return ReferenceEngine(tr.model, tr.text_encoder, tr.objective, cfg, self.device)
        cfg = bench_cfg(self.args, self.data, kind, "cpu", -1,
                        fast={k: v for k, v in kw.items() if k != "n_images"})
        eng = FastEngine(tr.model, tr.text_encoder, tr.objective, cfg, self.device,
                         n_images=kw.get("n_images"))
        # one engine per setting (grad mode resolved): what the warm-up compiled is what a timed
        # pass runs, as in one CLI run (its compiled code is reused, its per-dataset caches not)
        key = (tuple(sorted((k, repr(v)) for k, v in kw.items()
                            if k not in ("n_images", "grad_mode"))), eng.grad_mode)
        return self._fast_engines.setdefault(key, eng)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_pass(setup: Setup, engine_kind: str, views: str, n_images: int, engine=None,
             **engine_kw) -> Dict[str, object]:
    """The trainer's loop from JPEG files to metrics, timed; returns a result row."""
    from argtca.datasets import build_dataset
    from argtca.views.loader import build_views_loader
    from argtca.run_folder import RecordWriter
    from argtca.metrics import compute_metrics
    args, dev, tr = setup.args, setup.device, setup.trainer
    cfg = bench_cfg(args, setup.data, engine_kind, views, n_images)
    batch_images = args.batch if engine_kind == "fast" else 1
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    if engine_kind == "fast":   # the trainer's rule: grad mode "auto" sees the test-set size
        engine_kw = dict(engine_kw, n_images=n_images)
    eng = engine if engine is not None else setup.engine(engine_kind, **engine_kw)
    if engine_kind == "fast":   # per-dataset work (θ0 text, Jacobian) inside the timed pass
        eng.forget_dataset()
    _sync(dev)
    t0 = time.perf_counter()
    dataset = build_dataset(cfg)
    loader = build_views_loader(cfg, dataset, int(cfg.SEED), list(range(len(dataset.test))),
                                batch_images, dev, args.workers,
                                prefetch=int(cfg.DATALOADER.PREFETCH),
                                compile=views_compiled(args))
    fd, rec_path = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    writer = RecordWriter(rec_path)
    records, t_first, n_first = [], None, 0
    from argtca.engine.pipeline import predictions
    host = {}
    threads = pass_thread_count(setup)
    try:
        with pass_threads(setup):
            for batch, probs in predictions(eng, loader, host):   # the trainer's loop
                recs = tr.make_records(batch, probs)
                writer.write(recs)
                records.extend(recs)
                if t_first is None:
                    t_first, n_first = time.perf_counter(), len(recs)
    finally:
        writer.close()
        os.unlink(rec_path)
    m = compute_metrics([r["conf"] for r in records], [r["pred"] for r in records],
                        [r["label"] for r in records], p_label=[r["p_label"] for r in records],
                        brier=[r["brier"] for r in records], n_bins=20)
    t1 = time.perf_counter()
    n = len(records)
    steady = (n - n_first) / (t1 - t_first) if n > n_first and t1 > t_first else float("nan")
    row = {"engine": engine_kind, "views": views, "K": setup.K, "prompts": setup.P,
           "tokens": setup.L, "n": n, "seconds": round(t1 - t0, 3),
           "img_per_s": round(n / (t1 - t0), 2), "img_per_s_after_first_batch": round(steady, 2),
           "accuracy": round(m["accuracy"], 3), "ece": round(m["ece"], 3),
           "peak_gib": (round(torch.cuda.max_memory_allocated(dev) / 2 ** 30, 2)
                        if dev.type == "cuda" else None),
           "batch_images": batch_images, "workers": args.workers, "main_threads": threads,
           "views_compiled": views == "gpu" and views_compiled(args) and dev.type == "cuda"}
    row.update({k: v for k, v in engine_kw.items()})
    if engine_kind == "fast":
        row["grad_mode_resolved"] = eng.grad_mode
        row["jacobian_s"] = round(getattr(eng, "jacobian_seconds", 0.0), 2)
    # where the host thread's loop time went (seconds): per-dataset work, waiting for the
    # DataLoader's workers, queueing GPU views, queueing the engine (a host blocked on a full
    # CUDA launch queue waits here), waiting for results
    host.update(getattr(loader, "seconds", {}))
    row["host_s"] = {k: round(v, 2) for k, v in host.items()}
    print(f"  {engine_kind:9s} {views:3s} views K={setup.K:4d} n={n:4d}: {row['img_per_s']:8.2f} "
          f"img/s (after 1st batch {row['img_per_s_after_first_batch']:.2f}), peak "
          f"{row['peak_gib']} GiB", flush=True)
    return row


def script_setup(n_images: int, K: int = 101, workers: str = "15"):
    """``(args, device, Setup)`` for the probes in benchmarks/probes/: this module's arguments
    from ``BENCH_ARGS`` (e.g. ``--device cpu --backbone argtca-tiny-test`` for a CPU smoke test),
    ``WORKERS`` loader workers (default ``workers``), a synthetic ``K``-class set of
    ``n_images``."""
    args = parse_args(["--workers", os.environ.get("WORKERS", workers)]
                      + os.environ.get("BENCH_ARGS", "").split())
    dev = torch.device(args.device)
    from argtca.models.clip import load_clip
    model, tok = load_clip(bench_cfg(args, {"root": "/tmp", "attributes": ""}, "fast", "cpu", -1),
                           dev)
    data = make_synthetic_coop(os.path.join(tempfile.mkdtemp(), f"K{K}"), n_images, K, seed=K)
    return args, dev, Setup(args, data, model, tok, dev)


def pass_thread_count(setup: Setup) -> int:
    """The main process's torch threads in a timed pass (``--main-threads`` resolved as
    ``DATALOADER.MAIN_THREADS``; 0 = torch's default)."""
    from argtca.utils.host import main_threads
    args = setup.args
    return main_threads(setup.device.type, args.workers, args.main_threads)


def pass_threads(setup: Setup):
    """:func:`pass_thread_count` as a context manager. The warm-ups run under it too:
    torch.compile guards its code on the thread count, so code compiled under another count is
    compiled again inside the timed pass."""
    from argtca.utils.host import host_threads
    return host_threads(pass_thread_count(setup))


def views_compiled(args) -> bool:
    """Whether the GPU view maker is compiled (``--compile-views``, default ``--compile``)."""
    return (args.compile_views or args.compile) == "on"


def warm_views(setup: Setup, batches: int = 2) -> None:
    """Compile the GPU view maker on a few batches (untimed; its compiled code is reused by the
    next maker, as the engines' is) when the passes compile it."""
    if not (views_compiled(setup.args) and setup.device.type == "cuda"):
        return
    from argtca.datasets import build_dataset
    from argtca.views.loader import build_views_loader
    args = setup.args
    cfg = bench_cfg(args, setup.data, "fast", "gpu", batches * args.batch)
    dataset = build_dataset(cfg)
    loader = build_views_loader(cfg, dataset, 1, list(range(len(dataset.test))), args.batch,
                                setup.device, 0, compile=True)
    with pass_threads(setup):
        for _ in loader:
            pass
    _sync(setup.device)


def warmup(setup: Setup, kinds=("reference", "fast"), **engine_kw) -> None:
    g = torch.Generator().manual_seed(0)
    args = setup.args
    for kind in kinds:
        b = args.batch if kind == "fast" else 1
        v = torch.randn(b, args.views, 3, args.size, args.size, generator=g)
        # grad mode "auto" resolves per pass (by its number of images): compile both candidates
        modes = ([{"grad_mode": m} for m in ("jacobian", "recompute" if engine_kw.get(
            "compile_text_grad") else "vjp")] if kind == "fast" and engine_kw.get(
            "grad_mode", "auto") == "auto" else [{}])
        for extra in modes:
            eng = setup.engine(kind, **dict(engine_kw, **extra))
            with pass_threads(setup):
                eng(v.to(setup.device), None)
                prepare = getattr(eng, "prepare", None)
                if prepare is not None:   # θ0's text pass: a shape the batches never run
                    prepare()
    _sync(setup.device)


# ------------------------------------------------------------------------------ main


def parse_args(argv=None, description: str = ""):
    p = argparse.ArgumentParser(prog="python -m argtca.bench", description=description or None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="bench.json", help="JSON file for all results")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backbone", default="ViT-B/16")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--views", type=int, default=64)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--m", type=int, default=2, help="M': attribute prompts per class")
    p.add_argument("--batch", type=int, default=16, help="TTA.BATCH_IMAGES of the fast engine")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 3) - 2),
                   help="DataLoader workers (default: cores - 2: the main process drives the GPU "
                   "and a pin-memory thread copies batches)")
    p.add_argument("--main-threads", type=int, default=-1,
                   help="torch threads of the main process in a pass (DATALOADER.MAIN_THREADS: "
                   "-1 = 1 on CUDA with workers, 0 = torch's default)")
    p.add_argument("--logit-scale", type=float, default=100.0,
                   help="set CLIP's logit scale (trained CLIP: 100; random init: 14.3) so that the "
                   "random-weight model's probabilities are as peaked as a trained one's; <= 0 "
                   "keeps the random init")
    p.add_argument("--classes", type=int, nargs="+", default=[101, 1000])
    p.add_argument("--n-fast", type=int, default=1024, help="images of a fast GPU-views pass")
    p.add_argument("--n-fast-cpu", type=int, default=512, help="images of a fast CPU-views pass")
    p.add_argument("--n-ref", type=int, default=48, help="images of a reference pass")
    p.add_argument("--n-agree", type=int, default=400, help="images of the agreement check")
    p.add_argument("--large-scale", type=float, default=0.25,
                   help="fraction of the image counts used at K>=1000")
    p.add_argument("--grad-mode", default="auto", help="auto | vjp | loop | recompute | jacobian")
    p.add_argument("--prefix", default="on", choices=["off", "on"],
                   help="prefix sharing in the text tower (exact)")
    p.add_argument("--compile-mode", default="", help="torch.compile mode of the image tower")
    p.add_argument("--compile-text", action="store_true",
                   help="torch.compile the text tower (final pass, recompute passes and the "
                   "Jacobian's tangent pass, all compiled in the warm-up)")
    p.add_argument("--text-attention", default="",
                   help="text tower attention: split | default | math | efficient | flash | cudnn "
                   "(empty: the engine's default, split with prefix sharing)")
    p.add_argument("--auto", action="store_true", help="run the engine-only trial of the knobs "
                   "(--variants) and use the fastest fast-engine setting for the timed passes")
    p.add_argument("--input", action="store_true", help="time the input pipelines alone")
    p.add_argument("--n-input", type=int, default=256, help="images of the input-pipeline timing")
    p.add_argument("--compile", default="off", choices=["off", "on"],
                   help="torch.compile the image tower")
    p.add_argument("--compile-views", default="", choices=["", "off", "on"],
                   help="torch.compile the GPU view maker (empty: as --compile, like the CLI's "
                   "TTA.COMPILE); warmed before the timed passes")
    p.add_argument("--variants", action="store_true", help="engine-only timing of the knobs")
    p.add_argument("--profile", action="store_true", help="profile one fast batch")
    p.add_argument("--skip", nargs="*", default=[],
                   help="passes to skip: ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu agree")
    p.add_argument("--data-dir", default="", help="where to build the dataset (default: temp)")
    p.add_argument("--half-image", default="on", choices=["off", "on"],
                   help="fast engine: image tower stored in fp16 with the patch matmul (CUDA)")
    p.add_argument("--tower", action="store_true", help="image tower TFLOP/s and %% of peak")
    p.add_argument("--cli-gpus", type=int, nargs="*", default=[],
                   help="also run python -m argtca.run / torchrun on these GPU counts (e.g. 1 2)")
    p.add_argument("--cli-images", type=int, default=2048, help="images of the CLI runs")
    p.add_argument("--cli-views", default="gpu", help="TTA.VIEWS_DEVICE of the CLI runs")
    return p.parse_args(argv)
