"""``TTA.VIEWS_FLOAT engine`` and ``TTA.VIEWS_OPS engine`` on a real device: the float stage of
the exact CPU views (``PixelMixer``: the LUT gather and TPT's mix, on the device) and their AugMix
ops (``ChainRunner``) against the workers' views (PIL and ``ExactMixer`` on the CPU), byte for
byte, and what each costs.

    python benchmarks/probes/views_float_identity.py [--images 8] [--views 64] [--device cuda]

* ``direct``: for each of ``--images`` synthetic 300x225 JPEGs (the bench's), the views made
  on the CPU (float32 and float16) and the same views from :meth:`ViewGenerator.pixels` through
  ``PixelMixer`` on ``--device``, without and with the AugMix ops there: the count of differing
  bytes (must be 0) over every view (``--images`` x (``--views`` - 1) AugMix views);
* ``loader``: ``build_views_loader`` with the float stage and ops in the workers, the float
  stage on the engine, and both there (loader workers, pinned memory, the copy stream, batches
  of 16) on the same items: differing bytes of the batches handed to the engine;
* ``cost``: ms per image of 64 views of the float stage on one CPU core (``ExactMixer``, what
  a worker no longer does) and on the device (``PixelMixer``, CUDA-synchronised); a worker's
  ms with and without the AugMix ops, and the ops + float stage on the device.
Exit status 1 when any byte differs.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from PIL import Image  # noqa: E402

from argtca.bench.data import _jpeg_pool  # noqa: E402
from argtca.views.cpu import ViewGenerator  # noqa: E402
from argtca.views.exact import PixelMixer  # noqa: E402


def _bytes_differ(a: torch.Tensor, b: torch.Tensor) -> int:
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return int((a.view(torch.uint8) != b.view(torch.uint8)).sum())


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def direct(vg, pool, dev):
    bad = 0
    for ops in (False, True):   # TTA.VIEWS_OPS workers / engine
        mixer = PixelMixer(vg.mean, vg.std, vg.augmix, dev, ops=ops)
        diff = {torch.float32: 0, torch.float16: 0}
        n_views = 0
        for k, data in enumerate(pool):
            img = Image.open(io.BytesIO(data)).convert("RGB")
            got = vg.pixels(img, 1, k, ops=ops)
            px, mix = got[0].to(dev), got[1].to(dev)
            plans = got[2].numpy() if ops else None
            for dtype in diff:
                ref = vg(img, 1, k, dtype=dtype)
                out = mixer(px, mix, torch.empty(ref.shape, dtype=dtype, device=dev),
                            plans=plans)
                diff[dtype] += _bytes_differ(out, ref)
            n_views += vg.n_views - 1
        print(f"IDENTITY direct{' ops' if ops else ''}: {len(pool)} images, {n_views} AugMix "
              f"views + {len(pool)} views 0 on {dev}"
              f"{' (AugMix ops on the device)' if ops else ''}: differing bytes float32 "
              f"{diff[torch.float32]}, float16 {diff[torch.float16]}", flush=True)
        bad += sum(diff.values())
    return bad


MODES = {"workers": ("workers", "workers"), "engine": ("engine", "workers"),
         "ops": ("engine", "engine")}   # TTA.VIEWS_FLOAT, TTA.VIEWS_OPS


def loader(vg, pool, dev, workers):
    from argtca.config import get_cfg_default
    from argtca.datasets import Datum
    from argtca.views.loader import build_views_loader, views_float, views_ops
    tmp = tempfile.mkdtemp(prefix="views_float_")
    items = []
    for k, data in enumerate(pool):
        p = os.path.join(tmp, f"{k}.jpg")
        with open(p, "wb") as f:
            f.write(data)
        items.append(Datum(p, k % 5, "c"))
    dataset = types.SimpleNamespace(test=items, fine_grained=True)
    batches = {}
    for mode, (where, ops) in MODES.items():
        cfg = get_cfg_default()
        cfg.merge_from_list(["TTA.N_VIEWS", vg.n_views, "TTA.AUGMIX", "on", "INPUT.SIZE",
                             (vg.size, vg.size), "TTA.VIEWS_FLOAT", where, "TTA.VIEWS_OPS", ops])
        assert (views_float(cfg, dev), views_ops(cfg, dev)) == (where, ops)
        ld = build_views_loader(cfg, dataset, 1, list(range(len(items))), 16, dev, workers)
        batches[mode] = [(b["index"], b["views"].cpu()) for b in ld]
    bad = 0
    for mode in ("engine", "ops"):
        diff = sum(_bytes_differ(a[1], b[1]) for a, b in zip(batches["workers"], batches[mode]))
        same_idx = all(torch.equal(a[0], b[0]) for a, b in zip(batches["workers"],
                                                              batches[mode]))
        dtype = batches[mode][0][1].dtype
        print(f"IDENTITY loader {mode}: {len(items)} images through build_views_loader "
              f"({workers} workers, {dtype}, batches of 16, TTA.VIEWS_FLOAT / VIEWS_OPS "
              f"{' / '.join(MODES[mode])}) on {dev}: differing bytes against the workers' views "
              f"{diff}, same order {same_idx}", flush=True)
        bad += diff + (0 if same_idx else 1)
    return bad


def cost(vg, pool, dev, reps=5):
    img = Image.open(io.BytesIO(pool[0])).convert("RGB")
    px, mix = vg.pixels(img, 1, 0)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    mixer_cpu = vg._mixer()
    crops, chains_plans = [], []
    for crop, plan, chains in vg.random_images(img, 1, 0):
        crops.append(crop)
        chains_plans.append((chains, plan))
    out = torch.empty(vg.n_views, 3, vg.size, vg.size, dtype=torch.float16)
    t = time.perf_counter()
    for _ in range(reps):
        for v, (crop, (chains, plan)) in enumerate(zip(crops, chains_plans), 1):
            mixer_cpu.augmix_into(out[v], crop, chains, plan)
    cpu_ms = (time.perf_counter() - t) / reps * 1e3
    torch.set_num_threads(n)
    mixer = PixelMixer(vg.mean, vg.std, vg.augmix, dev)
    pxd, mixd = px.to(dev), mix.to(dev)
    outd = torch.empty(out.shape, dtype=torch.float16, device=dev)
    mixer(pxd, mixd, outd)
    _sync(dev)
    t = time.perf_counter()
    for _ in range(reps * 4):
        mixer(pxd, mixd, outd)
    _sync(dev)
    dev_ms = (time.perf_counter() - t) / (reps * 4) * 1e3
    mb = (px.nbytes + mix.nbytes) / 1e6
    print(f"COST float stage, ms per image of {vg.n_views} views (float16 out): ExactMixer on one "
          f"CPU core {cpu_ms:.1f}; PixelMixer on {dev} {dev_ms:.2f}; shipped {mb:.1f} MB uint8 "
          f"an image (float16 views: {out.nbytes / 1e6:.1f} MB)", flush=True)
    # TTA.VIEWS_OPS engine: the worker's part on one core, and the chains + float stage on dev
    torch.set_num_threads(1)
    worker_ms = {}
    for ops in (False, True):
        t = time.perf_counter()
        for _ in range(reps):
            got = vg.pixels(img, 1, 0, ops=ops)
        worker_ms[ops] = (time.perf_counter() - t) / reps * 1e3
    torch.set_num_threads(n)
    mixer = PixelMixer(vg.mean, vg.std, vg.augmix, dev, ops=True)
    pxd, mixd, plans = got[0].to(dev), got[1].to(dev), got[2].numpy()
    mixer(pxd, mixd, outd, plans=plans)
    _sync(dev)
    t = time.perf_counter()
    for _ in range(reps * 4):
        mixer(pxd, mixd, outd, plans=plans)
    _sync(dev)
    ops_ms = (time.perf_counter() - t) / (reps * 4) * 1e3
    mb_ops = sum(x.nbytes for x in got) / 1e6
    # the chains alone, by kernels: host ms (launches, not waiting) and synchronised ms
    from argtca.views.exact_ops import ChainRunner
    crops = pxd[1:]
    runs = crops.unsqueeze(1).expand(crops.shape[0], 3, *crops.shape[1:]).flatten(0, 1)
    flat = plans.reshape(runs.shape[0], *plans.shape[2:])
    first = None
    for kernels in ("torch", "triton") if dev.type == "cuda" else ("torch",):
        try:
            runner = ChainRunner(dev, kernels=kernels)
            res = runner(runs, flat)
            if first is None:
                first = res
            else:
                print(f"IDENTITY chains {kernels} against torch: differing bytes "
                      f"{_bytes_differ(res, first)}", flush=True)
        except Exception as e:   # noqa: BLE001 (report, go on)
            print(f"COST chains {kernels}: {type(e).__name__}: {e}"[:300], flush=True)
            continue
        _sync(dev)
        t = time.perf_counter()
        host = 0.0
        for _ in range(reps * 4):
            h = time.perf_counter()
            runner(runs, flat)
            host += time.perf_counter() - h
        _sync(dev)
        total = (time.perf_counter() - t) / (reps * 4) * 1e3
        print(f"COST chains {kernels} on {dev}: {total:.2f} ms an image synchronised, host "
              f"{host / (reps * 4) * 1e3:.2f} ms", flush=True)
    print(f"COST AugMix ops, ms per image of {vg.n_views} views: a worker on one CPU core "
          f"(ViewGenerator.pixels) with the ops {worker_ms[False]:.1f}, without "
          f"{worker_ms[True]:.1f}; ChainRunner + PixelMixer on {dev} {ops_ms:.2f} (host thread "
          f"and device, synchronised); shipped {mb_ops:.1f} MB an image", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=8)
    p.add_argument("--loader-images", type=int, default=40)
    p.add_argument("--views", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args(argv)
    dev = torch.device(a.device)
    print(f"host: {os.cpu_count()} cores; torch {torch.__version__}; device "
          f"{torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}", flush=True)
    vg = ViewGenerator(a.size, a.views, augmix=True)
    pool = _jpeg_pool(max(a.images, a.loader_images))
    bad = direct(vg, pool[:a.images], dev)
    if a.loader_images:
        bad += loader(vg, pool[:a.loader_images], dev, a.workers)
    cost(vg, pool, dev)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
