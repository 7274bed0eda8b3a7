"""Where the time of TPT's exact AugMix views goes, on one core, before and after the exact fast
path (argtca/views/exact.py), and what running many such workers at once costs.

    python benchmarks/probes/views_profile.py [--images 6] [--procs 1 15] [--loader-images 64]

* ``stages``: one core (``torch.set_num_threads(1)``), synthetic 300x225 JPEGs (the bench's),
  224 px, 64 views, AugMix on. ``before`` is the PIL path as it was (``random_view`` per view:
  torchvision's ``resized_crop``, ``apply_op`` through torchvision's wrappers, four
  ``ToTensor + Normalize`` and ``mix_processed`` with fresh tensors, the float32 views stacked,
  then ``.to(float16)`` as the loader sends them under amp); ``after`` is ``ViewGenerator.__call__``
  (the same numbers, checked here with ``torch.equal``); ``engine float`` is a worker's share
  under ``TTA.VIEWS_FLOAT engine`` (``ViewGenerator.pixels``: the same images shipped as uint8,
  their float stage done by the consumer, checked equal through ``PixelMixer``). Each stage is
  timed around its calls, in ms per image.
* ``procs``: P processes making views at once (one thread each): ms of one core per image, the
  median over processes; shows what sharing the host's caches and memory bandwidth costs.
* ``loader``: the DataLoader (1 worker, batches of 16, float16, pinned) against calling the
  generator directly: the cost of collating and moving batches between processes.
"""
from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from argtca.bench.data import _jpeg_pool  # noqa: E402
from argtca.views.augmix import OPS, apply_op, mix_processed, sample_plan  # noqa: E402
from argtca.views.cpu import ViewGenerator, item_rngs  # noqa: E402
from argtca.views.exact import PixelMixer, apply_op_exact, mix_row  # noqa: E402
from argtca.views.exact_ops import encode_plan  # noqa: E402

GEOMETRIC = {"rotate", "shear_x", "shear_y", "translate_x", "translate_y"}


class Clock:
    def __init__(self):
        self.s = defaultdict(float)

    def __call__(self, key, fn, *a, **k):
        t = time.perf_counter()
        out = fn(*a, **k)
        self.s[key] += time.perf_counter() - t
        return out


def before(vg: ViewGenerator, data: bytes, seed: int, index: int, c: Clock) -> torch.Tensor:
    """The PIL path as ``ViewGenerator.__call__`` was, stage by stage."""
    img = c("decode", lambda: Image.open(io.BytesIO(data)).convert("RGB"))
    views = c("alloc + stack", torch.empty, vg.n_views, 3, vg.size, vg.size)
    views[0] = c("view 0", vg.base_view, img)
    tg, rng = item_rngs(seed, index)
    for v in range(1, vg.n_views):
        crop = c("crop + flip", vg.preaugment, img, tg)
        plan = c("draw plan", sample_plan, rng, vg.severity, vg.size, OPS)
        x = c("ToTensor + Normalize", vg.preprocess, crop)
        chains = []
        for chain in plan.chains:
            y = crop.copy()
            for op in chain:
                key = "PIL " + ("geometric: " + op.name if op.name in GEOMETRIC else "colour")
                y = c(key, apply_op, y, op)
            chains.append(c("ToTensor + Normalize", vg.preprocess, y))
        views[v] = c("mix", mix_processed, x, chains, plan.weights, plan.m)
    return c("to float16", views.to, torch.float16)


def _chains(crop, plan, c: Clock) -> list:
    """The AugMix chains of one view from its crop, each PIL op timed under its stage."""
    chains = []
    for chain in plan.chains:
        y = crop
        for op in chain:
            key = "PIL " + ("geometric: " + op.name if op.name in GEOMETRIC else "colour")
            y = c(key, apply_op_exact, y, op)
        chains.append(y)
    return chains


def after(vg: ViewGenerator, data: bytes, seed: int, index: int, c: Clock) -> torch.Tensor:
    """``ViewGenerator.__call__``'s steps, stage by stage (the same calls, timed)."""
    img = c("decode", lambda: Image.open(io.BytesIO(data)).convert("RGB"))
    views = c("alloc + stack", torch.empty, vg.n_views, 3, vg.size, vg.size, dtype=torch.float16)
    mixer = vg._mixer()
    c("view 0", lambda: mixer.plain_into(views[0], vg.base_crop(img)))
    tg, rng = item_rngs(seed, index)
    for v in range(1, vg.n_views):
        crop = c("crop + flip", vg.preaugment, img, tg)
        plan = c("draw plan", sample_plan, rng, vg.severity, vg.size, OPS)
        chains = _chains(crop, plan, c)
        c("ToTensor + Normalize + mix", mixer.augmix_into, views[v], crop, chains, plan)
    return views


def pixels(vg: ViewGenerator, data: bytes, seed: int, index: int, c: Clock):
    """A worker's steps under ``TTA.VIEWS_FLOAT engine`` (``ViewGenerator.pixels``), stage by
    stage: the same images, copied out as uint8; no float work."""
    img = c("decode", lambda: Image.open(io.BytesIO(data)).convert("RGB"))
    px, mix = c("alloc + stack", lambda: tuple(torch.zeros(s, dtype=d)
                                               for s, d in vg.pixels_layout()))
    dst = px.numpy()
    c("view 0", lambda: dst.__setitem__(0, np.asarray(vg.base_crop(img))))
    tg, rng = item_rngs(seed, index)
    k = 1
    for v in range(1, vg.n_views):
        crop = c("crop + flip", vg.preaugment, img, tg)
        plan = c("draw plan", sample_plan, rng, vg.severity, vg.size, OPS)
        chains = _chains(crop, plan, c)
        for im in [crop, *chains]:
            c("uint8 images out (4 a view)", dst.__setitem__, k, np.asarray(im))
            k += 1
        mix[v - 1] = torch.tensor(mix_row(plan))
    return px, mix


def pixels_ops(vg: ViewGenerator, data: bytes, seed: int, index: int, c: Clock):
    """A worker's steps under ``TTA.VIEWS_OPS engine`` (``ViewGenerator.pixels(ops=True)``):
    the crops out as uint8 and the chains encoded; no PIL AugMix op, no float work."""
    img = c("decode", lambda: Image.open(io.BytesIO(data)).convert("RGB"))
    px, mix, plans = c("alloc + stack", lambda: tuple(torch.zeros(s, dtype=d)
                                                      for s, d in vg.pixels_layout(ops=True)))
    dst, enc = px.numpy(), plans.numpy()
    c("view 0", lambda: dst.__setitem__(0, np.asarray(vg.base_crop(img))))
    tg, rng = item_rngs(seed, index)
    for v in range(1, vg.n_views):
        crop = c("crop + flip", vg.preaugment, img, tg)
        plan = c("draw plan", sample_plan, rng, vg.severity, vg.size, OPS)
        c("encode the chains", encode_plan, plan, vg.size, enc[v - 1])
        c("uint8 images out (1 a view)", dst.__setitem__, v, np.asarray(crop))
        mix[v - 1] = torch.tensor(mix_row(plan))
    return px, mix, plans


def stages(n_images: int):
    torch.set_num_threads(1)
    vg = ViewGenerator(224, 64, augmix=True)
    pool = _jpeg_pool(n_images)
    res = {}
    names = ("before", "after", "engine float", "engine ops")
    for name, fn in zip(names, (before, after, pixels, pixels_ops)):
        c = Clock()
        fn(vg, pool[0], 0, 0, Clock())          # warm-up
        t = time.perf_counter()
        outs = [fn(vg, pool[i], 1, i, c) for i in range(n_images)]
        res[name] = (c.s, (time.perf_counter() - t) / n_images * 1e3, outs)
    # the engine-float worker's images through the consumer's float stage, here on the CPU (on
    # CUDA it runs on the device): the consumer's cost, not the worker's
    mixer = PixelMixer(vg.mean, vg.std, vg.augmix)
    t = time.perf_counter()
    mixed = [mixer(px, mix, torch.empty(vg.n_views, 3, vg.size, vg.size, dtype=torch.float16))
             for px, mix in res["engine float"][2]]
    consumer = (time.perf_counter() - t) / n_images * 1e3
    ops_mixer = PixelMixer(vg.mean, vg.std, vg.augmix, ops=True)
    t = time.perf_counter()
    mixed_ops = [ops_mixer(px, mix, torch.empty(vg.n_views, 3, vg.size, vg.size,
                                                dtype=torch.float16), plans=plans.numpy())
                 for px, mix, plans in res["engine ops"][2]]
    consumer_ops = (time.perf_counter() - t) / n_images * 1e3
    same = all(torch.equal(a, b) for a, b in zip(res["before"][2], res["after"][2]))
    same_px = all(torch.equal(a, b) for a, b in zip(mixed, res["after"][2])) and \
        all(torch.equal(a, b) for a, b in zip(mixed_ops, res["after"][2]))
    keys = sorted(set().union(*(res[n][0] for n in names)),
                  key=lambda k: -res["before"][0].get(k, 0))
    print(f"\nstages, one core, ms per image (64 views, 224 px, AugMix), {n_images} images; "
          f"after == before (torch.equal): {same}; engine float and engine ops (their items "
          f"through PixelMixer) == after: {same_px}")
    print("| stage | before | after | engine float (the worker) | engine ops (the worker) |\n"
          "|---|---|---|---|---|")
    fmt = (lambda s: "-" if s is None else f"{s / n_images * 1e3:.1f}")
    for k in keys:
        print("| " + k + " | " + " | ".join(fmt(res[n][0].get(k)) for n in names) + " |")
    print("| **total (wall)** | " + " | ".join(f"**{res[n][1]:.1f}**" for n in names) + " |")
    print(f"consumer's float stage (PixelMixer) on this CPU, one thread: {consumer:.1f} ms an "
          f"image (runs on the engine's device under TTA.VIEWS_FLOAT engine); with the chains "
          f"(ChainRunner, torch ops): {consumer_ops:.1f} (TTA.VIEWS_OPS engine)")
    return same and same_px


def _worker(args):
    n, seed = args
    torch.set_num_threads(1)
    vg = ViewGenerator(224, 64, augmix=True)
    pool = _jpeg_pool(4)
    out = {}
    for name, fn in (("before", before), ("after", after), ("engine float", pixels)):
        fn(vg, pool[0], 0, 0, Clock())
        t = time.process_time()
        for i in range(n):
            fn(vg, pool[i % 4], seed, i, Clock())
        out[name] = (time.process_time() - t) / n * 1e3
    return out


def procs(counts, n):
    print("\nP processes at once, ms of one core per image (median over processes)")
    names = ("before", "after", "engine float")
    print("| P | " + " | ".join(names) + " |\n|---|---|---|---|")
    ctx = mp.get_context("fork")
    for p in counts:
        with ctx.Pool(p) as pool:
            rows = pool.map(_worker, [(n, s) for s in range(p)])
        med = {k: float(np.median([r[k] for r in rows])) for k in names}
        print(f"| {p} | " + " | ".join(f"{med[k]:.0f}" for k in names) + " |", flush=True)


def loader(n_images: int):
    import tempfile
    from argtca.datasets import Datum
    from argtca.views.dataset import (PixelViewDataset, TestTimeDataset, build_item_loader,
                                      build_test_loader)
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp()
    items = []
    for k, data in enumerate(_jpeg_pool(n_images)):
        p = os.path.join(tmp, f"{k}.jpg")
        with open(p, "wb") as f:
            f.write(data)
        items.append(Datum(p, 0, "c"))
    ds = TestTimeDataset(items, ViewGenerator(224, 64, augmix=True), seed=0)
    ds.out_dtype = torch.float16
    t = time.perf_counter()
    for k in range(len(ds)):
        ds[k]
    direct = (time.perf_counter() - t) / n_images * 1e3
    ld = build_test_loader(ds, 1, batch_images=16, pin_memory=torch.cuda.is_available(),
                           prefetch=2)
    t = time.perf_counter()
    n = sum(len(b["path"]) for b in ld)
    through = (time.perf_counter() - t) / n * 1e3
    print(f"\nloader, ms per image: direct {direct:.0f}, through 1 worker (batches of 16, fp16"
          f"{', pinned' if torch.cuda.is_available() else ''}) {through:.0f}: "
          f"{through - direct:+.0f} for collating, transport and the worker's start")
    # TTA.VIEWS_FLOAT engine: single items of uint8 images (2x the bytes of fp16 views)
    px = PixelViewDataset(items, ds.view_gen, seed=0)
    t = time.perf_counter()
    for k in range(len(px)):
        px[k]
    direct = (time.perf_counter() - t) / n_images * 1e3
    ld = build_item_loader(px, 1, pin_memory=torch.cuda.is_available(), prefetch=16)
    t = time.perf_counter()
    n = sum(1 for _ in ld)
    through = (time.perf_counter() - t) / n * 1e3
    print(f"loader, engine float (uint8 items, {px.item_bytes() / 1e6:.1f} MB an image), ms per "
          f"image: direct {direct:.0f}, through 1 worker {through:.0f}: {through - direct:+.0f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=6)
    p.add_argument("--procs", type=int, nargs="*", default=[1, 15])
    p.add_argument("--proc-images", type=int, default=4)
    p.add_argument("--loader-images", type=int, default=48)
    a = p.parse_args(argv)
    print(f"host: {os.cpu_count()} cores; torch {torch.__version__}")
    ok = stages(a.images)
    if a.procs:
        procs(a.procs, a.proc_images)
    if a.loader_images:
        loader(a.loader_images)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
