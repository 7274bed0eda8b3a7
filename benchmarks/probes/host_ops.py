"""Host work per batch of the fast engine's eager path, counted on the CPU: the aten ops every
stage of ``FastEngine.submit`` dispatches (each compute op is one kernel launch on CUDA; view ops
such as reshape/permute launch nothing), by a ``TorchDispatchMode`` that counts every call.

The model is ViT-B/16 at random weights (the layer counts of the measured runs) with few views,
images and classes: an op count does not depend on them (every op is batched), except the
chunked calls, whose sizes are printed. With ``TTA.FAST.CUDA_GRAPH`` a captured batch is one
graph replay plus a few copies whatever these counts are (printed as "graphed").

Usage (repository root): python benchmarks/probes/host_ops.py [BACKBONE] [K] [V] [B]
      defaults: ViT-B/16 10 2 2 (a smoke run: argtca-tiny-test 10 4 2 with INPUT 32)
"""
from __future__ import annotations

import collections
import os
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# ops that only reinterpret memory: no kernel on CUDA
VIEW_OPS = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "unsqueeze",
            "squeeze", "select", "slice", "as_strided", "alias", "detach", "split", "chunk",
            "unbind", "unflatten", "flatten", "lift_fresh", "_reshape_alias", "view_as",
            "split_with_sizes", "diagonal", "narrow", "_to_copy_noop"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def split(self):
        compute = {k: v for k, v in self.ops.items() if k not in VIEW_OPS}
        return sum(compute.values()), sum(self.ops.values()) - sum(compute.values()), compute


def main():
    from argtca.config import get_cfg_default
    from argtca.engine.fast import FastEngine
    from argtca.models.clip import load_clip
    from argtca.models.text import PromptTextEncoder
    from argtca.registry import OBJECTIVE_REGISTRY

    a = sys.argv[1:]
    backbone = a[0] if a else "ViT-B/16"
    K, V, B = (int(x) for x in (a[1:4] + ["10", "2", "2"][len(a[1:4]):]))
    size = 32 if backbone == "argtca-tiny-test" else 224
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for method in ("tpt", "tca"):
        cfg = get_cfg_default()
        cfg.MODEL.BACKBONE.NAME, cfg.MODEL.PRETRAINED = backbone, "random"
        cfg.USE_CUDA, cfg.INPUT.SIZE = False, (size, size)
        cfg.TTA.N_VIEWS, cfg.TTA.BATCH_IMAGES, cfg.TTA.STEPS = V, B, 1
        model, tok = load_clip(cfg)
        node = {"tpt": cfg.TRAINER.TPT, "tca": cfg.TRAINER.TCA}[method]
        classes = [f"class {i}" for i in range(K)]
        suffixes = ([f"{a} {c}." for c in classes for a in ("small", "furry")] if method == "tca"
                    else [f"{c}." for c in classes])
        eng = FastEngine(model, PromptTextEncoder(model, tok, suffixes),
                         OBJECTIVE_REGISTRY.get(method)(node), cfg, "cpu", grad_mode="jacobian",
                         cuda_graph="off")
        # Jᵀ's values do not change an op count; building it by forward mode on one CPU thread
        # takes minutes at ViT-B/16's width, so a zero matrix of its shape stands in
        ctx0, t0 = eng.theta0()
        eng._jt = torch.zeros(ctx0.numel(), t0.numel())
        t = time.perf_counter()
        eng.prepare()
        print(f"{method}: {backbone}, K={K} ({len(suffixes)} prompts), {V} views, {B} images; "
              f"prepare {time.perf_counter() - t:.1f} s", flush=True)
        views = torch.randn(B, V, 3, size, size, generator=torch.Generator().manual_seed(1))
        eng.submit(views).result()   # warm (lazy state)
        stages = {}
        with Count() as c:
            img = eng.image_features(views)
        stages["image tower"] = c
        with Count() as c:
            ctx, first_bad, bad_seen = eng._tune_async(img)
        stages["step 1 (scores, selection, cot @ J^T, AdamW)"] = c
        with Count() as c:
            probs = eng.final(img, ctx).float()
        stages["final text pass + probs"] = c
        with Count() as c:
            eng.submit(views).result()
        stages["whole submit + result"] = c
        for name, c in stages.items():
            n, nv, ops = c.split()
            top = ", ".join(f"{k} {v}" for k, v in collections.Counter(ops).most_common(8))
            print(f"  {name:46s} {n:5d} compute ops (+{nv} views)   {top}")
        print(f"  text calls per batch (no grad): {-(-B // eng._images_per_text_call(False))}; "
              f"image chunks: {-(-B * V // eng.image_chunk)}")
        print("  graphed (TTA.FAST.CUDA_GRAPH on CUDA): copy into the static input, one replay, "
              "3 clones of the checks' tensors; Pending's 2 copies and event as before")
        del probs, first_bad, bad_seen


if __name__ == "__main__":
    main()
