"""The main process's cost of taking one item from the loader workers, with and without the slot
ring (issue 42 item 2; argtca/views/dataset.py SlotRing): the exact views' device-side items
(``TTA.VIEWS_OPS engine``: 64 views, 224 px, uint8 crops + mix + encoded chains, 9.7 MB), the
workers given time to fill their prefetch before each timed pass, so that ``next()`` measures the
hand-over alone (receiving the item, attaching its tensors), then a copy of its pixels into one
reused buffer (what the consumer's page-locked staging does).

    python benchmarks/probes/slot_ring_probe.py [--workers 1] [--items 8] [--rounds 3]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from argtca.datasets import Datum
from argtca.views.cpu import ViewGenerator
from argtca.views.dataset import PixelViewDataset, SlotRing, build_item_loader


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--items", type=int, default=8, help="items each worker holds ready")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="argtca_ring_"))
    rng = np.random.default_rng(0)
    n = a.workers * a.items * (a.rounds + 1)
    items = []
    for k in range(n):
        f = tmp / f"{k}.jpg"
        Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)).save(f)
        items.append(Datum(str(f), 0, "c"))
    vg = ViewGenerator(size=224, n_views=64, augmix=True)
    for ring in (False, True):
        ds = PixelViewDataset(items, vg, seed=1, ops=True)
        loader = build_item_loader(ds, a.workers, prefetch=a.items)
        r = None
        if ring:
            r = ds.ring = SlotRing.for_loader(ds.layout(), loader.num_workers,
                                              loader.prefetch_factor, 1)
        staging = None
        it = iter(loader)
        times = []
        for _ in range(a.rounds):
            time.sleep(a.items * 1.0)   # the workers fill their prefetch
            for _ in range(a.workers * a.items):
                t = time.perf_counter()
                b = next(it)
                if r is not None:
                    b = r.attach(b, PixelViewDataset.KEYS)
                px = b["pixels"]
                if staging is None:
                    staging = torch.empty_like(px)
                staging.copy_(px)
                times.append(time.perf_counter() - t)
        times.sort()
        print(f"ring {'on ' if ring else 'off'}: {len(times)} items, hand-over + copy "
              f"median {1e3 * times[len(times) // 2]:.2f} ms, mean "
              f"{1e3 * sum(times) / len(times):.2f} ms ({px.nbytes / 1e6:.1f} MB an item)")
        del it
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
