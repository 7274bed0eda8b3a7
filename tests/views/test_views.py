"""TPT's test-time views: center view, torchvision-identical crops, AugMix by hand,
reproducibility."""
import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image, ImageOps

from argtca.config import get_cfg_default
from argtca.datasets import DataError, Datum
from argtca.views.augmix import (OPS, AugMixPlan, OpCall, apply_op, augmix_view, sample_op,
                                    sample_plan)
from argtca.views.cpu import (CLIP_MEAN, CLIP_STD, ViewGenerator, build_view_generator, item_rngs,
                              random_resized_crop_params)
from argtca.views.dataset import TestTimeDataset, build_test_loader

S = 32


def rand_img(seed=0, w=40, h=30, lo=0, hi=256):
    arr = np.random.default_rng(seed).integers(lo, hi, size=(h, w, 3), dtype=np.uint8)
    return Image.fromarray(arr)


POST = T.Compose([T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])


# ------------------------------------------------------------------------ reference (TPT-style PIL)
def ref_op(img, op, size):
    n, v = op.name, op.magnitude
    if n == "autocontrast":
        return ImageOps.autocontrast(img)
    if n == "equalize":
        return ImageOps.equalize(img)
    if n == "posterize":
        return ImageOps.posterize(img, int(v))
    if n == "rotate":
        return img.rotate(v, resample=Image.BILINEAR)
    if n == "solarize":
        return ImageOps.solarize(img, v)
    coeffs = {"shear_x": (1, v, 0, 0, 1, 0), "shear_y": (1, 0, 0, v, 1, 0),
              "translate_x": (1, 0, v, 0, 1, 0), "translate_y": (1, 0, 0, 0, 1, v)}[n]
    return img.transform((size, size), Image.AFFINE, coeffs, resample=Image.BILINEAR)


def hand_mix(crop, plan, size):
    """m * pre(x) + (1-m) * sum_i w_i pre(chain_i(x)) in float64 with the reference ops."""
    x = POST(crop).double().numpy()
    mix = np.zeros_like(x)
    for w, chain in zip(plan.weights, plan.chains):
        y = crop.copy()
        for op in chain:
            y = ref_op(y, op, size)
        mix += w * POST(y).double().numpy()
    return plan.m * x + (1 - plan.m) * mix


def tpt_sample_op(name, severity, rng, size):
    """TPT's augmix_ops level mapping, written out from the reference formulas."""
    if name in ("autocontrast", "equalize"):
        return 0.0
    level = rng.uniform(0.1, severity)
    if name == "posterize":
        return 4 - int(level * 4 / 10)
    if name == "solarize":
        return 256 - int(level * 256 / 10)
    mag = {"rotate": int(level * 30 / 10), "shear_x": level * 0.3 / 10,
           "shear_y": level * 0.3 / 10, "translate_x": int(level * (size / 3) / 10),
           "translate_y": int(level * (size / 3) / 10)}[name]
    return -mag if rng.uniform() > 0.5 else mag


# ----------------------------------------------------------------------------- AugMix ops
@pytest.mark.parametrize("op", [OpCall("autocontrast"), OpCall("equalize"), OpCall("posterize", 2),
                                OpCall("rotate", 12), OpCall("rotate", -3), OpCall("solarize", 120),
                                OpCall("shear_x", 0.25), OpCall("shear_x", -0.03),
                                OpCall("shear_y", 0.2), OpCall("translate_x", 5),
                                OpCall("translate_x", -7), OpCall("translate_y", 4)])
def test_ops_match_tpt_pil_ops(op):
    img = rand_img(3, S, S, lo=40, hi=180)  # not full range, so autocontrast changes it
    ours = np.asarray(apply_op(img, op), dtype=np.int16)
    ref = np.asarray(ref_op(img, op, S), dtype=np.int16)
    assert ours.shape == (S, S, 3) and np.array_equal(ours, ref)
    assert (ours != np.asarray(img)).any(), "op left the image unchanged"


def test_sample_op_follows_tpt_level_mapping():
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    for k in range(400):
        name = OPS[k % len(OPS)]
        assert sample_op(name, 1, a, 224).magnitude == pytest.approx(tpt_sample_op(name, 1, b, 224))
    # severity-1 ranges (brute force)
    rng = np.random.default_rng(0)
    draws = {n: [sample_op(n, 1, rng, 224).magnitude for _ in range(300)] for n in OPS}
    assert set(draws["posterize"]) == {4}
    assert set(draws["rotate"]) <= {-3, -2, -1, 0, 1, 2, 3} and min(draws["rotate"]) < 0
    assert 231 <= min(draws["solarize"]) and max(draws["solarize"]) <= 254
    assert all(0.003 <= abs(v) <= 0.03 for v in draws["shear_x"])
    assert set(np.abs(draws["translate_x"])) <= set(range(8))   # int(level * 224/3 / 10) <= 7


def test_sample_plan_distribution():
    rng = np.random.default_rng(1)
    plans = [sample_plan(rng, 1, S) for _ in range(400)]
    assert all(len(p.chains) == 3 and len(p.weights) == 3 for p in plans)
    assert all(abs(sum(p.weights) - 1) < 1e-5 and 0 <= p.m <= 1 for p in plans)
    assert {len(c) for p in plans for c in p.chains} == {1, 2, 3}
    assert {op.name for p in plans for c in p.chains for op in c} == set(OPS)
    assert abs(np.mean([p.m for p in plans]) - 0.5) < 0.06            # Beta(1,1)
    assert np.allclose(np.mean([p.weights for p in plans], 0), 1 / 3, atol=0.05)  # Dir(1,1,1)


def test_augmix_mixing_by_hand():
    crop = rand_img(5, S, S)
    vg = ViewGenerator(size=S, n_views=2, augmix=True)
    chains = ((OpCall("rotate", 10),), (OpCall("solarize", 100), OpCall("shear_x", 0.2)),
              (OpCall("translate_y", -6), OpCall("equalize"), OpCall("posterize", 3)))
    # m = 1: the plain preprocessed crop, exactly
    one = augmix_view(crop, AugMixPlan(1.0, (0.2, 0.3, 0.5), chains), vg.preprocess)
    assert torch.equal(one, POST(crop))
    # m = 0, w = e_2: exactly the preprocessed second chain
    only = augmix_view(crop, AugMixPlan(0.0, (0.0, 1.0, 0.0), chains), vg.preprocess)
    assert torch.allclose(only, POST(ref_op(ref_op(crop, chains[1][0], S), chains[1][1], S)),
                          atol=1e-6)
    # general plan against the float64 hand computation
    plan = AugMixPlan(0.3, (0.2, 0.3, 0.5), chains)
    got = augmix_view(crop, plan, vg.preprocess)
    assert got.dtype == torch.float32
    assert np.abs(got.numpy() - hand_mix(crop, plan, S)).max() < 1e-5   # float32 vs float64


# ----------------------------------------------------------------------------- views
def test_crop_params_equal_torchvision():
    for (w, h), scale, ratio in [((40, 30), (0.08, 1.0), (3 / 4, 4 / 3)),
                                 ((224, 500), (0.08, 1.0), (3 / 4, 4 / 3)),
                                 ((300, 8), (0.9, 1.0), (3 / 4, 4 / 3)),   # fallback branch
                                 ((8, 300), (0.9, 1.0), (3 / 4, 4 / 3))]:
        img = Image.new("RGB", (w, h))
        for s in range(25):
            g = torch.Generator().manual_seed(s)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(s)
                want = T.RandomResizedCrop.get_params(img, list(scale), list(ratio))
            assert random_resized_crop_params(w, h, scale, ratio, g) == want


def test_view0_and_shape():
    img = rand_img(0)
    views = ViewGenerator(size=S, n_views=64, augmix=True)(img, seed=1, index=0)
    assert views.shape == (64, 3, S, S) and views.dtype == torch.float32
    center = T.Compose([T.Resize(S, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(S),
                        T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])(img)
    assert torch.equal(views[0], center)
    flat = views.flatten(1)
    assert torch.cdist(flat, flat).add(torch.eye(64) * 1e9).min() > 0, "two identical views"


def test_random_views_without_augmix_are_torchvision_pipeline():
    """With the global RNG set to the item's torch generator state, TPT's own torchvision
    pipeline (RandomResizedCrop(S) + RandomHorizontalFlip + ToTensor + Normalize) reproduces the
    views bit for bit."""
    img = rand_img(1, 50, 37)
    V = 12
    views = ViewGenerator(size=S, n_views=V, augmix=False)(img, seed=3, index=9)
    tg, _ = item_rngs(3, 9)
    pre = T.Compose([T.RandomResizedCrop(S), T.RandomHorizontalFlip()])
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(tg.get_state())
        ref = torch.stack([POST(pre(img)) for _ in range(V - 1)])
    assert torch.equal(views[1:], ref)


def test_augmix_views_by_hand():
    img = rand_img(2)
    vg = ViewGenerator(size=S, n_views=6, augmix=True)
    views = vg(img, seed=0, index=4)
    tg, rng = item_rngs(0, 4)
    plain_diffs = []
    for v in range(1, 6):
        crop = vg.preaugment(img, tg)      # crop + flip, proven equal to torchvision above
        plan = sample_plan(rng, 1, S)
        assert np.abs(views[v].numpy() - hand_mix(crop, plan, S)).max() < 1e-5
        plain_diffs.append((views[v] - POST(crop)).abs().max().item())
    assert max(plain_diffs) > 0.1, "AugMix did not change any view"


def _items(tmp_path, n=4):
    items = []
    for k in range(n):
        p = tmp_path / f"img{k}.jpg"
        rand_img(10 + k).save(p)
        items.append(Datum(str(p), k % 2, f"c{k % 2}"))
    items.append(Datum(items[0].impath, 0, "c0"))   # same file as item 0, different index
    return items


def test_reproducibility_order_workers_and_rng_independence(tmp_path):
    items = _items(tmp_path)
    vg = ViewGenerator(size=S, n_views=4, augmix=True)
    ds = TestTimeDataset(items, vg, seed=5)
    torch.manual_seed(123)
    np.random.seed(123)
    t_state, n_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    ref = {k: ds[k] for k in (3, 0, 4, 2, 1)}
    assert torch.equal(torch.get_rng_state(), t_state)
    assert (np.random.get_state()[1] == n_state).all()
    torch.manual_seed(999)
    np.random.seed(999)
    again = TestTimeDataset(items, vg, seed=5)
    for k in range(5):
        d = again[k]
        assert d["index"] == k and d["label"] == items[k].label and d["path"] == items[k].impath
        assert torch.equal(d["views"], ref[k]["views"])
    # subset: indices keep the global item index and its views
    sub = TestTimeDataset(items, vg, seed=5, indices=[2])
    assert len(sub) == 1 and sub[0]["index"] == 2 and torch.equal(sub[0]["views"], ref[2]["views"])
    # same file, different index: same center view, different random views
    assert torch.equal(ref[4]["views"][0], ref[0]["views"][0])
    assert not torch.equal(ref[4]["views"][1:], ref[0]["views"][1:])
    # another seed: same center view, different random views
    other = TestTimeDataset(items, vg, seed=6)[2]["views"]
    assert torch.equal(other[0], ref[2]["views"][0])
    assert not torch.equal(other[1:], ref[2]["views"][1:])
    # DataLoader: 0 and 2 workers, batch 1 and 2, identical tensors
    for workers, b in ((0, 1), (2, 2)):
        seen = []
        for batch in build_test_loader(ds, num_workers=workers, batch_images=b, prefetch=2):
            B = len(batch["path"])
            assert batch["views"].shape == (B, 4, 3, S, S)
            assert batch["index"].dtype == torch.long and batch["label"].dtype == torch.long
            for j in range(B):
                k = int(batch["index"][j])
                seen.append(k)
                assert batch["path"][j] == items[k].impath
                assert int(batch["label"][j]) == items[k].label
                assert torch.equal(batch["views"][j], ref[k]["views"])
        assert seen == list(range(5))


def test_bad_images(tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not an image at all")
    items = [Datum(str(bad), 0, "a"), Datum(str(tmp_path / "gone.jpg"), 0, "a")]
    ds = TestTimeDataset(items, ViewGenerator(size=S, n_views=2), seed=0)
    for k in range(2):
        with pytest.raises(DataError, match=items[k].impath):
            ds[k]
    with pytest.raises(IndexError):
        TestTimeDataset(items, ds.view_gen, seed=0, indices=[2])


def test_build_view_generator_policy():
    class Coarse:
        fine_grained = False

    class Fine:
        fine_grained = True

    cfg = get_cfg_default()
    cfg.INPUT.SIZE = S
    cfg.TTA.N_VIEWS = 5
    assert cfg.TTA.AUGMIX == "auto"
    vg = build_view_generator(cfg, Fine())
    assert vg.augmix and vg.size == S and vg.n_views == 5 and vg.mean == list(CLIP_MEAN)
    assert not build_view_generator(cfg, Coarse()).augmix
    cfg.TTA.AUGMIX = "on"
    assert build_view_generator(cfg, Coarse()).augmix
    cfg.TTA.AUGMIX = "off"
    assert not build_view_generator(cfg, Fine()).augmix
    cfg.TTA.AUGMIX = "sometimes"
    with pytest.raises(ValueError, match="TTA.AUGMIX"):
        build_view_generator(cfg, Fine())
    cfg.TTA.AUGMIX = "auto"
    cfg.INPUT.SIZE = (S, S)
    assert build_view_generator(cfg, Fine()).size == S
    cfg.INPUT.SIZE = (S, 2 * S)
    with pytest.raises(ValueError, match="INPUT.SIZE"):
        build_view_generator(cfg, Fine())
    cfg.INPUT.SIZE = S
    cfg.TTA.N_VIEWS = 0
    with pytest.raises(ValueError, match="N_VIEWS"):
        build_view_generator(cfg, Fine())
    cfg.TTA.N_VIEWS = 1
    v = build_view_generator(cfg, Fine())(rand_img(0), 0, 0)
    assert v.shape == (1, 3, S, S)


def test_prefetch_is_capped_by_the_bytes_of_waiting_views():
    """16 images x 64 fp16 views of 224 px = 16*64*3*224*224*2 = 308,281,344 bytes a batch: 15
    workers x 4 batches would hold 18.5 GB; a 4 GiB budget allows 4294967296 // (15 * 308281344)
    = 0 -> 1 batch a worker; 2 workers: 4294967296 // 616562688 = 6 -> capped at the asked 4."""
    from argtca.views.dataset import capped_prefetch
    batch = 16 * 64 * 3 * 224 * 224 * 2
    assert batch == 308_281_344
    assert capped_prefetch(4, 15, batch) == 1
    assert capped_prefetch(4, 2, batch) == 4
    assert capped_prefetch(8, 2, batch) == 6
    assert capped_prefetch(4, 0, batch) == 4            # no workers: nothing waits in queues
    import torch
    from argtca.views.cpu import ViewGenerator
    from argtca.views.dataset import TestTimeDataset, build_test_loader
    ds = TestTimeDataset([], ViewGenerator(224, 64, augmix=True), 1)
    ds.out_dtype = torch.float16
    assert build_test_loader(ds, 15, batch_images=16, prefetch=4).prefetch_factor == 1
    assert build_test_loader(ds, 2, batch_images=16, prefetch=4).prefetch_factor == 4


class _WhoMade(TestTimeDataset):
    """Items whose view 0 carries the id of the loader worker that made them."""

    def __getitem__(self, k):
        from torch.utils.data import get_worker_info
        d = super().__getitem__(k)
        d["views"][0].fill_(float(get_worker_info().id))
        return d


def test_cpu_views_loader_groups_single_images_from_every_worker(tmp_path):
    """The CPU views loader's workers make single images (in shared memory) that the main
    process groups into batches: every worker works on the first batch (formerly one worker
    made a whole batch), and the batches are the same as made without workers."""
    from argtca.views.dataset import build_item_loader
    from argtca.views.loader import ViewsLoader
    items = _items(tmp_path, n=6)   # 7 items, the last one the file of the first
    vg = ViewGenerator(size=S, n_views=4, augmix=True)
    ds = TestTimeDataset(items, vg, seed=3, indices=[6, 0, 5, 1, 4, 2, 3])
    ref = list(ViewsLoader(build_item_loader(ds, 0), "cpu", group=3))
    assert [b["index"].tolist() for b in ref] == [[6, 0, 5], [1, 4, 2], [3]]
    for b in ref:
        assert b["views"].shape == (len(b["path"]), 4, 3, S, S)
        for j, k in enumerate(b["index"].tolist()):
            assert torch.equal(b["views"][j], vg(Image.open(items[k].impath), 3, k))
            assert b["label"][j] == items[k].label and b["path"][j] == items[k].impath
    got = list(ViewsLoader(build_item_loader(ds, 2, prefetch=2), "cpu", group=3))
    assert [b["index"].tolist() for b in got] == [[6, 0, 5], [1, 4, 2], [3]]
    for a, b in zip(got, ref):
        assert torch.equal(a["views"], b["views"])
    who = _WhoMade(items, vg, seed=3)
    first = next(iter(ViewsLoader(build_item_loader(who, 2, prefetch=2), "cpu", group=4)))
    assert sorted(set(first["views"][:, 0].flatten().tolist())) == [0.0, 1.0]
    # in a worker the views are written straight into shared memory (sent without a copy)
    from torch.utils.data import _utils
    assert not ds[0]["views"].is_shared()
    _utils.worker._worker_info = _utils.worker.WorkerInfo(id=0, num_workers=1, seed=0,
                                                          dataset=None)
    try:
        shared = ds[0]["views"]
    finally:
        _utils.worker._worker_info = None
    assert shared.is_shared() and torch.equal(shared, ref[0]["views"][0])


def test_cpu_views_loader_holds_prefetch_batches_of_images_a_worker():
    """DATALOADER.PREFETCH counts batches a worker may hold ready; the CPU views loader's workers
    make single images, so each may hold PREFETCH x BATCH_IMAGES images (it held PREFETCH: 4 a
    worker, 60 images on 15 workers, while the model is built), capped by the 4 GiB budget. On
    the CPU the views stay float32: 64 * 3 * 224 * 224 * 4 = 38,535,168 bytes an image;
    15 workers: 4294967296 // (15 * 38535168) = 7 < 4 * 16; 2 workers: 4294967296 // 77070336
    = 55 < 64; 1 image a batch: 4 * 1 = 4."""
    from argtca.views.loader import build_views_loader

    class Fine:
        fine_grained = True
        test = []

    cfg = get_cfg_default()
    cfg.INPUT.SIZE = 224
    cfg.TTA.N_VIEWS = 64
    cfg.TTA.VIEWS_DEVICE = "cpu"
    assert 64 * 3 * 224 * 224 * 4 == 38_535_168
    depth = {}
    for workers, batch in ((15, 16), (2, 16), (2, 1)):
        ld = build_views_loader(cfg, Fine(), 1, [], batch, "cpu", workers, prefetch=4)
        assert ld.group == batch and ld.loader.num_workers == workers
        depth[workers, batch] = ld.loader.prefetch_factor
    assert depth == {(15, 16): 7, (2, 16): 55, (2, 1): 4}
