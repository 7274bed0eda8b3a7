"""``TTA.VIEWS_FLOAT``: the float stage of the exact CPU views (``ToTensor + Normalize`` and TPT's
AugMix mix) run by the loader's consumer (``PixelMixer``) from the uint8 images the workers ship
(``PixelViewDataset``), against the workers' own views (``ExactMixer``). The identity with TPT's
official ``AugMixAugmenter`` is in test_exact_views.py."""
import json

import numpy as np
import pytest
import torch
from PIL import Image
from yacs.config import CfgNode as CN

from argtca.config import get_cfg_default
from argtca.config.checks import CFG_CHOICES
from argtca.datasets import Datum
from argtca.views.cpu import CLIP_MEAN, CLIP_STD, ViewGenerator
from argtca.views.dataset import PixelViewDataset, TestTimeDataset, build_item_loader
from argtca.views.exact import ExactMixer, PixelMixer, preprocess_lut
from argtca.views.loader import ViewsLoader, views_float, views_ops


def test_lut_equals_exactmixer_conversion_at_every_level_and_position():
    """The table gives ExactMixer's float32 for every level of every channel wherever the pixel
    lies in the plane (vectorised bodies and scalar tails alike): 256 shifted ramps of a 3x37x41
    image put each level at every position."""
    lut = preprocess_lut(CLIP_MEAN, CLIP_STD)
    assert lut.shape == (3, 256) and lut.dtype == torch.float32
    mixer = ExactMixer(1, CLIP_MEAN, CLIP_STD)
    ramp = torch.arange(37 * 41 * 3).view(37, 41, 3)
    for s in range(256):
        a = ((ramp + s) % 256).to(torch.uint8)
        want = torch.empty(3, 37, 41)
        want.copy_(a.permute(2, 0, 1))
        want.div_(255).sub_(mixer.mean).div_(mixer.std)   # ExactMixer.preprocess_into's ops
        got = PixelMixer(CLIP_MEAN, CLIP_STD, False).normalise(a[None])[0]
        assert torch.equal(got, want), s
    # independently: level 255 of channel 0 is (1 - mean) / std in float32 arithmetic
    one = np.float32(1.0)
    assert lut[0, 255].item() == float((one - np.float32(CLIP_MEAN[0])) / np.float32(CLIP_STD[0]))


def _images(tmp_path, n, size=(53, 40)):
    rng = np.random.default_rng(7)
    items = []
    for k in range(n):
        p = tmp_path / f"im{k}.png"
        Image.fromarray(rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)).save(p)
        items.append(Datum(str(p), k % 3, "c"))
    return items


@pytest.mark.parametrize("augmix", [True, False])
def test_pixels_through_the_mixer_equal_the_workers_views(tmp_path, augmix):
    vg = ViewGenerator(size=32, n_views=9, augmix=augmix)
    items = _images(tmp_path, 3)
    px, ref = PixelViewDataset(items, vg, seed=4), TestTimeDataset(items, vg, seed=4)
    mixer = PixelMixer(CLIP_MEAN, CLIP_STD, augmix)
    for k in range(3):
        item = px[k]
        for dtype in (torch.float32, torch.float16):
            ref.out_dtype = dtype
            out = mixer(item["pixels"], item["mix"], torch.empty(9, 3, 32, 32, dtype=dtype))
            assert torch.equal(out, ref[k]["views"]), (k, dtype)
    with pytest.raises(ValueError, match="do not hold 8 views"):
        mixer(item["pixels"], item["mix"], torch.empty(8, 3, 32, 32))


def test_item_bytes_are_the_bytes_an_item_ships(tmp_path):
    """The loader's prefetch budget counts what an item really holds: uint8 images (4 an AugMix
    view) and the weights, or the float16 views."""
    vg = ViewGenerator(size=32, n_views=9, augmix=True)
    items = _images(tmp_path, 1)
    px = PixelViewDataset(items, vg, seed=0)
    it = px[0]
    assert px.item_bytes() == it["pixels"].nbytes + it["mix"].nbytes == (1 + 8 * 4) * 32 * 32 * 3 \
        + 8 * 5 * 4
    # TTA.VIEWS_OPS engine: the crops only, and 3 chains x 3 steps x 7 float64 a view
    ops = PixelViewDataset(items, vg, seed=0, ops=True)
    it = ops[0]
    assert ops.item_bytes() == sum(it[k].nbytes for k in ("pixels", "mix", "plans")) == \
        9 * 32 * 32 * 3 + 8 * 5 * 4 + 8 * 3 * 3 * 7 * 8
    ds = TestTimeDataset(items, vg, seed=0)
    ds.out_dtype = torch.float16
    assert ds.item_bytes() == ds[0]["views"].nbytes == 9 * 3 * 32 * 32 * 2


def test_views_loader_with_workers_gives_the_workers_views(tmp_path):
    """Through the item loader (one worker: the pixels in shared memory) and ViewsLoader's
    grouping, the mixed batches equal the batches of the workers' float16 views."""
    vg = ViewGenerator(size=32, n_views=5, augmix=True)
    items = _images(tmp_path, 5)
    ref_ds = TestTimeDataset(items, vg, seed=2)
    ref_ds.out_dtype = torch.float16
    ref = list(ViewsLoader(build_item_loader(ref_ds, 0), "cpu", group=2))
    loader = build_item_loader(PixelViewDataset(items, vg, seed=2), 1)
    got = list(ViewsLoader(loader, "cpu", group=2, mixer=PixelMixer(CLIP_MEAN, CLIP_STD, True),
                           views_dtype=torch.float16))
    ops = build_item_loader(PixelViewDataset(items, vg, seed=2, ops=True), 1)
    got_ops = list(ViewsLoader(ops, "cpu", group=2, views_dtype=torch.float16,
                               mixer=PixelMixer(CLIP_MEAN, CLIP_STD, True, ops=True)))
    assert [len(b["index"]) for b in got] == [2, 2, 1] == [len(b["index"]) for b in got_ops]
    for a, b, c in zip(got, ref, got_ops):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
        assert a["views"].dtype == torch.float16 and torch.equal(a["views"], b["views"])
        assert torch.equal(c["views"], b["views"])


def test_views_ops_switch():
    cfg = CN({"TTA": CN({"VIEWS_FLOAT": "auto", "VIEWS_OPS": "auto"})})
    assert views_ops(cfg, "cuda") == "engine" and views_ops(cfg, "cpu") == "workers"
    cfg.TTA.VIEWS_OPS = "engine"
    with pytest.raises(ValueError, match="VIEWS_OPS=engine needs the float stage on the engine"):
        views_ops(cfg, "cpu")
    cfg.TTA.VIEWS_FLOAT = "engine"
    assert views_ops(cfg, "cpu") == "engine"
    cfg.TTA.VIEWS_OPS = "workers"
    assert views_ops(cfg, "cuda") == "workers"
    cfg.TTA.VIEWS_OPS = "pil"
    with pytest.raises(ValueError, match="TTA.VIEWS_OPS='pil'"):
        views_ops(cfg, "cuda")
    assert get_cfg_default().TTA.VIEWS_OPS == "auto"
    assert CFG_CHOICES["TTA.VIEWS_OPS"] == ("auto", "workers", "engine")


def test_views_float_switch():
    cfg = CN({"TTA": CN({"VIEWS_FLOAT": "auto"})})
    assert views_float(cfg, "cuda") == "engine" and views_float(cfg, "cpu") == "workers"
    cfg.TTA.VIEWS_FLOAT = "engine"
    assert views_float(cfg, "cpu") == "engine"
    cfg.TTA.VIEWS_FLOAT = "gpu"
    with pytest.raises(ValueError, match="TTA.VIEWS_FLOAT='gpu'"):
        views_float(cfg, "cpu")
    assert get_cfg_default().TTA.VIEWS_FLOAT == "auto"
    assert CFG_CHOICES["TTA.VIEWS_FLOAT"] == ("auto", "workers", "engine")


@pytest.mark.usefixtures("one_thread")
def test_demo_records_identical_with_the_float_stage_in_the_workers_or_the_engine(tmp_path,
                                                                                  monkeypatch):
    """TPT on the demo (AugMix views), CPU: the float stage forced onto the engine's side (one
    loader worker shipping uint8 images) writes the same records, byte for byte, as the workers'
    views; the switch is not part of the run's fingerprint."""
    import argtca.views.loader as loader_mod
    from argtca.run import main
    from conftest import REPO
    monkeypatch.chdir(REPO)
    mixed = []

    class Counting(PixelMixer):   # the consumer's float stage, counted where it runs
        def __call__(self, pixels, mix, out, plans=None):
            mixed.append((int(out.shape[0]), plans is not None))
            return super().__call__(pixels, mix, out, plans=plans)

    monkeypatch.setattr(loader_mod, "PixelMixer", Counting)
    outs = {}
    for where, workers, ops in (("workers", "0", "auto"), ("engine", "1", "workers"),
                                ("ops", "1", "engine")):
        out = tmp_path / where
        rc = main(["--dataset-config-file", "configs/datasets/demo.yaml",
                   "--config-file", "configs/trainers/tpt.yaml", "--output-dir", str(out),
                   "DATASET.NUM_IMAGES", "6", "TTA.N_VIEWS", "8", "TTA.AUGMIX", "on",
                   "USE_CUDA", "False", "VERBOSE", "False", "DATALOADER.NUM_WORKERS", workers,
                   "TTA.VIEWS_FLOAT", "workers" if where == "workers" else "engine",
                   "TTA.VIEWS_OPS", ops])
        assert rc == 0
        outs[where] = out
    # the engine runs' 6 images, 8 views each, the chains run there in the third; none in the
    # first
    assert mixed == [(8, False)] * 6 + [(8, True)] * 6
    runs = ("workers", "engine", "ops")
    a, b, c = ((outs[w] / "records.jsonl").read_bytes() for w in runs)
    assert len(a.splitlines()) == 6 and a == b == c
    fp = [json.loads((outs[w] / "config.json").read_text()) for w in runs]
    assert fp[0] == fp[1] == fp[2]
