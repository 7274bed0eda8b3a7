"""The fast engine alone on CUDA (no loader, no view maker): eager against TTA.FAST.FOLD_QUICKGELU
and TTA.FAST.CUDA_GRAPH, on the same random view batches already on the GPU.

For each setting: the probabilities of every batch against the eager engine's (max |Δp|, argmax
agreement), the engine-only rate over N batches pipelined as the test loop does (batch n+1
submitted before batch n's result is read) and the host's seconds in ``submit`` per batch.
ViT-B/16 at random weights, K=101 (TPT) or 101 x 2 attribute prompts (TCA), 64 views, 16 images.

Usage (repository root, CUDA): python benchmarks/probes/graph_check.py [N_BATCHES] [OUT.json]
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def run(eng, batches, n):
    """(probs of each distinct batch, img/s over n pipelined batches, host s in submit/batch)."""
    probs = [eng.submit(v).result().clone() for v in batches]   # also the warm-up/capture
    probs = [eng.submit(v).result().clone() for v in batches]   # through the graph if any
    torch.cuda.synchronize()
    t0, host, pending = time.perf_counter(), 0.0, None
    for i in range(n):
        t = time.perf_counter()
        job = eng.submit(batches[i % len(batches)])
        host += time.perf_counter() - t
        if pending is not None:
            pending.result()
        pending = job
    pending.result()
    dt = time.perf_counter() - t0
    B = batches[0].shape[0]
    return probs, round(n * B / dt, 2), round(host / n * 1e3, 2)


def main():
    from argtca.config import get_cfg_default
    from argtca.engine.fast import FastEngine
    from argtca.models.clip import load_clip
    from argtca.models.text import PromptTextEncoder
    from argtca.registry import OBJECTIVE_REGISTRY

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    out = sys.argv[2] if len(sys.argv) > 2 else None
    dev = torch.device("cuda")
    torch.manual_seed(0)
    cfg = get_cfg_default()
    cfg.MODEL.BACKBONE.NAME, cfg.MODEL.PRETRAINED = "ViT-B/16", "random"
    cfg.TTA.N_VIEWS, cfg.TTA.BATCH_IMAGES, cfg.TTA.STEPS = 64, 16, 1
    model, tok = load_clip(cfg, dev)
    g = torch.Generator(device=dev).manual_seed(1)
    batches = [torch.randn(16, 64, 3, 224, 224, device=dev, generator=g) for _ in range(3)]
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "batches": n}
    classes = [f"class {i}" for i in range(101)]
    for method in ("tpt", "tca"):
        node = {"tpt": cfg.TRAINER.TPT, "tca": cfg.TRAINER.TCA}[method]
        suffixes = ([f"{a} {c}." for c in classes for a in ("small", "furry")] if method == "tca"
                    else [f"{c}." for c in classes])
        enc = PromptTextEncoder(model, tok, suffixes).to(dev)
        obj = OBJECTIVE_REGISTRY.get(method)(node)
        settings = {"eager": dict(cuda_graph="off", fold_gelu=False),
                    "fold": dict(cuda_graph="off", fold_gelu=True),
                    "graph": dict(cuda_graph="on", fold_gelu=False),
                    "fold+graph": dict(cuda_graph="on", fold_gelu=True)}
        jt, ref = None, None
        for name, kw in settings.items():
            eng = FastEngine(model, enc, obj, cfg, dev, grad_mode="jacobian", **kw)
            if jt is None:
                t = time.perf_counter()
                eng.prepare()
                jt = eng.jacobian_t()
                res[f"{method}_jacobian_s"] = round(time.perf_counter() - t, 2)
            else:
                eng._jt = jt   # the same θ0 and text tower: the same Jᵀ
                eng.prepare()
            probs, rate, host = run(eng, batches, n)
            row = {"img_s": rate, "host_ms_per_batch": host, "graphs": len(eng._graphs),
                   "cuda_graph": eng.cuda_graph}
            if ref is None:
                ref = probs
            else:
                d = max(float((p - r).abs().max()) for p, r in zip(probs, ref))
                agree = sum(int((p.argmax(-1) == r.argmax(-1)).sum()) for p, r in zip(probs, ref))
                row.update(max_abs_dp=d, argmax_agree=f"{agree}/{16 * len(ref)}")
            res[f"{method}_{name}"] = row
            print(method, name, json.dumps(row), flush=True)
            del eng
            torch.cuda.empty_cache()
    if out:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
