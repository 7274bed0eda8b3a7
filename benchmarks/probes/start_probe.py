"""Where the CLI's loop spends the time before its first batch is done.

Builds the trainer as ``python -m argtca.run`` does (TCA, K classes, synthetic JPEGs, random
ViT-B/16, the CLI's defaults unless overridden by ``KEY VALUE`` pairs after ``--``), then:

1. ``loader``: the views loader alone: when its first batches come (workers' start, their first
   batch, the GPU views), nothing else running.
2. ``cold`` / ``warm``: the trainer's loop (:func:`argtca.engine.pipeline.predictions`) over the
   first ``B`` batches, twice in one process (the second after ``forget_dataset``: θ0 and Jᵀ
   again, every kernel already loaded); per batch: when it left the loader, how long its
   submit took, when its probabilities were back.

Usage: python benchmarks/probes/start_probe.py OUT [N_IMAGES] [K] [B] [-- KEY VALUE ...]
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    out = argv[0]
    n = int(argv[1]) if len(argv) > 1 else 2048
    K = int(argv[2]) if len(argv) > 2 else 101
    B = int(argv[3]) if len(argv) > 3 else 10
    os.makedirs(out, exist_ok=True)
    t_start = time.perf_counter()
    from argtca.bench.data import make_synthetic_coop
    from argtca.run import build_parser, build_trainer, setup_cfg
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")  # repo root
    data = make_synthetic_coop(os.path.join(out, "data"), n, K, seed=K)
    args = build_parser().parse_args([
        "--root", data["root"], "--output-dir", os.path.join(out, "run"),
        "--dataset-config-file", os.path.join(here, "configs", "datasets", "caltech101.yaml"),
        "--config-file", os.path.join(here, "configs", "trainers", "tca.yaml"),
        "--backbone", os.environ.get("BACKBONE", "ViT-B-16"), "MODEL.PRETRAINED", "random",
        "DATASET.ATTRIBUTE_FILE", data["attributes"], "TTA.VIEWS_DEVICE", "gpu",
        "TTA.AUGMIX", "on"] + extra)
    cfg = setup_cfg(args)
    tr = build_trainer(cfg)
    t = time.perf_counter()
    tr.build_model()
    dev = tr.device
    res = {"build_model_s": round(time.perf_counter() - t, 2),
           "before_build_s": round(t - t_start, 2), "device": torch.cuda.get_device_name(dev)
           if dev.type == "cuda" else "cpu"}
    print(json.dumps(res), flush=True)
    from argtca.utils.host import loop_threads
    from argtca.engine.pipeline import predictions
    todo = list(range(len(tr.dataset.test)))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def loader():
        # the workers fork from this process, which holds CUDA tensors: collect the garbage
        # first, or a worker's collector frees an inherited CUDA tensor and aborts
        gc.collect()
        return tr.views_loader(todo)

    # 1. the loader alone
    with loop_threads(cfg):
        t0 = time.perf_counter()
        ld = loader()
        it = iter(ld)
        marks = []
        for i in range(B):
            next(it)
            sync()
            marks.append(round(time.perf_counter() - t0, 3))
        res["loader_alone_batch_done_s"] = marks
        del it, ld
    print(json.dumps({"loader_alone_batch_done_s": marks}), flush=True)

    # 2. the loop, cold then warm
    eng = tr.engine
    for phase in ("cold", "warm"):
        eng.forget_dataset()
        rows = []
        orig_submit = eng.submit

        def submit(views, paths, _o=orig_submit, _rows=rows):
            a = time.perf_counter() - t0
            job = _o(views, paths)
            b = time.perf_counter() - t0
            row = {"loader_out_s": round(a, 3), "submit_s": round(b - a, 3)}
            _rows.append(row)
            orig_result = job.result

            def result(_r=orig_result, _row=row):
                p = _r()
                _row["done_s"] = round(time.perf_counter() - t0, 3)
                return p
            job.result = result
            return job
        eng.submit = submit
        clock = {}
        with loop_threads(cfg):
            sync()
            t0 = time.perf_counter()
            ld = loader()
            for i, (batch, probs) in enumerate(predictions(eng, ld, clock)):
                if i + 1 >= B:
                    break
        del eng.submit, batch, probs
        sync()
        res[phase] = {"prepare_s": round(clock["prepare"], 3), "batches": rows[:B]}
        print(json.dumps({phase: res[phase]}), flush=True)
        del ld
    with open(os.path.join(out, "start_probe.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
