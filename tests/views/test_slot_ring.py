"""The slot ring of the device-side views pipelines (argtca/views/dataset.py ``SlotRing``): the
loader workers write each item's uint8 images into reused shared-memory slots, allocated once
before they fork, and send only the slot's number. The views that come out are the ones a fresh
segment per item gives, bit for bit, also with a consumer slower than the workers (a slot
overwritten too early would show), and the ring's size is the DataLoader's dispatch bound."""
import os
import time

import numpy as np
import pytest
import torch
from PIL import Image

from argtca.datasets import Datum
from argtca.views.cpu import CLIP_MEAN, CLIP_STD, ViewGenerator
from argtca.views.dataset import PixelViewDataset, SlotRing, build_item_loader
from argtca.views.exact import PixelMixer
from argtca.views.loader import ViewsLoader


def _images(tmp_path, n):
    rng = np.random.default_rng(3)
    items = []
    for k in range(n):
        p = tmp_path / f"im{k}.png"
        w, h = 40 + 3 * k, 36 + 2 * (k % 5)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(p)
        items.append(Datum(str(p), k % 4, "c"))
    return items


def _views(items, workers, ring, group=3, slow=0.0, ops=True):
    vg = ViewGenerator(size=32, n_views=9, augmix=True)
    ds = PixelViewDataset(items, vg, seed=5, ops=ops)
    loader = build_item_loader(ds, workers, prefetch=1)
    r = None
    if ring and workers:
        r = ds.ring = SlotRing.for_loader(ds.layout(), loader.num_workers,
                                          loader.prefetch_factor, group)
    mixer = PixelMixer(CLIP_MEAN, CLIP_STD, True, "cpu", ops=ops, size=32)
    out = []
    for b in ViewsLoader(loader, "cpu", group=group, mixer=mixer, ring=r):
        out.append((b["index"].tolist(), b["views"].clone()))
        time.sleep(slow)   # the workers fill every slot they may while the consumer waits
    return out, r


@pytest.mark.parametrize("ops", [True, False])
def test_ring_views_equal_fresh_segments_and_in_process(tmp_path, ops):
    items = _images(tmp_path, 14)
    want, _ = _views(items, 0, False, ops=ops)
    fresh, _ = _views(items, 2, False, ops=ops)
    ring, r = _views(items, 2, True, slow=0.05, ops=ops)
    assert [i for i, _ in ring] == [i for i, _ in want] == [[0, 1, 2], [3, 4, 5], [6, 7, 8],
                                                           [9, 10, 11], [12, 13]]
    for (_, a), (_, b), (_, c) in zip(want, fresh, ring):
        assert torch.equal(a, b) and torch.equal(a, c)
    # 2 workers x prefetch 1 + a batch of 3 held + 1: 6 slots, each reused (14 items)
    assert r.n == 6 and r.buffers[0].shape[0] == 6


def test_ring_slot_arithmetic():
    layout = (((2, 4, 4, 3), torch.uint8), ((1, 5), torch.float32))
    r = SlotRing.for_loader(layout, num_workers=3, prefetch=4, hold=16)
    assert r.n == 3 * 4 + 16 + 1 == 29
    assert [r.slot_of(k) for k in (0, 28, 29, 30, 58)] == [0, 28, 0, 1, 0]
    px, mix = r[5]
    assert px.shape == (2, 4, 4, 3) and mix.shape == (1, 5) and px.is_shared()
    px.fill_(7)
    item = r.attach({"index": 3, "slot": 5, "label": 1}, ("pixels", "mix"))
    assert "slot" not in item and int(item["pixels"].sum()) == 7 * px.numel()
    assert r.attach({"index": 3}, ("pixels", "mix")) == {"index": 3}


class _SlowPixels(PixelViewDataset):
    """Each image takes at least 0.1 s more to make."""

    def __getitem__(self, k):
        time.sleep(0.1)
        return super().__getitem__(k)


def test_the_workers_say_how_long_each_item_took(tmp_path):
    """Each item carries its worker's seconds to the loader (not into the batch): 6 items of at
    least 0.1 s each by 2 workers, whose pace (loop_timing) is then at most 2 / 0.1 = 20 img/s."""
    from argtca.engine.pipeline import loop_timing
    items = _images(tmp_path, 6)
    vg = ViewGenerator(size=32, n_views=3, augmix=True)
    ds = _SlowPixels(items, vg, seed=5, ops=True)
    loader = build_item_loader(ds, 2, prefetch=1)
    ds.ring = SlotRing.for_loader(ds.layout(), loader.num_workers, loader.prefetch_factor, 3)
    mixer = PixelMixer(CLIP_MEAN, CLIP_STD, True, "cpu", ops=True, size=32)
    views = ViewsLoader(loader, "cpu", group=3, mixer=mixer, ring=ds.ring)
    batches = list(views)
    assert [sorted(b) for b in batches] == [sorted(["index", "label", "path", "views"])] * 2
    sec = views.seconds
    assert (sec["items"], sec["n_workers"]) == (6, 2)
    assert 0.6 <= sec["made"] < 6.0
    pace = loop_timing({"prepare": 0.0}, sec)["workers_img_per_s"]
    assert pace == round(2 * 6 / sec["made"], 2) and pace <= 20.0


class _Collecting(PixelViewDataset):
    """Each worker runs its collector before making an item."""

    def __getitem__(self, k):
        import gc
        gc.collect()
        return super().__getitem__(k)


class _Cycle:
    """Garbage in a reference cycle that says which process collected it."""

    def __init__(self, log):
        self.me, self.log = self, log

    def __del__(self):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")


def test_a_worker_never_collects_what_this_process_left(tmp_path):
    """Cycles left by an earlier run (in a CUDA process, holding CUDA tensors that a forked
    worker cannot free) are collected here, before the workers fork, never in a worker."""
    import gc
    items = _images(tmp_path, 4)
    vg = ViewGenerator(size=32, n_views=3, augmix=True)
    ds = _Collecting(items, vg, seed=5, ops=True)
    loader = build_item_loader(ds, 2, prefetch=1)
    mixer = PixelMixer(CLIP_MEAN, CLIP_STD, True, "cpu", ops=True, size=32)
    log = tmp_path / "collected_by.txt"
    gc.disable()          # the cycle stays garbage until someone collects it
    try:
        _Cycle(str(log))
        batches = list(ViewsLoader(loader, "cpu", group=2, mixer=mixer))
    finally:
        gc.enable()
    assert len(batches) == 2
    assert log.read_text().split() == [str(os.getpid())]
