"""GPU views (run here on the CPU): the parameters are the CPU path's random draws, view 0 is
bit-identical, the colour ops are PIL's LUTs, crops and warps are close to PIL's, the loader
works."""
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image

from argtca.views.augmix import AugMixPlan, OpCall, OPS, apply_op, augmix_view
from argtca.datasets.base import Datum
from argtca.views.cpu import ViewGenerator
from argtca.views import gpu as G
from argtca.views import gpu_host as H
from argtca.views import loader as L
from argtca.views import gpu_ops as O


pytestmark = pytest.mark.usefixtures("one_thread")


def _smooth_image(w=70, h=52, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for _ in range(3):
        a, b, c = rng.uniform(0.02, 0.12, 3)
        chans.append(127 + 100 * np.sin(a * xx + b * yy + c * 10))
    return Image.fromarray(np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8))


def _plan_from_row(row):
    ops = row[O.OP0:O.MAG0].reshape(3, 3)
    mags = row[O.MAG0:].reshape(3, 3)
    chains = tuple(tuple(OpCall(OPS[int(o)], float(m)) for o, m in zip(ops[c], mags[c]) if o >= 0)
                   for c in range(3))
    return AugMixPlan(m=float(row[5]), weights=tuple(float(x) for x in row[6:9]), chains=chains)


@pytest.mark.parametrize("augmix", [False, True])
def test_params_are_the_cpu_paths_draws(augmix):
    """Rebuilding each CPU view from the sampled parameters gives the CPU path's view exactly."""
    img = _smooth_image()
    vg = ViewGenerator(size=32, n_views=6, augmix=augmix)
    views = vg(img, seed=3, index=7)
    p = H.sample_view_params(vg, img.width, img.height, seed=3, index=7).numpy()
    assert p.shape == (5, len(O.VIEW_PARAM_COLUMNS))
    for v in range(5):
        x0, y0, x1, y1, flip = p[v, :5]
        left, top = round(x0 * img.width), round(y0 * img.height)
        w, h = round(x1 * img.width) - left, round(y1 * img.height) - top
        crop = F.resized_crop(img, top, left, h, w, [32, 32],
                              interpolation=F.InterpolationMode.BILINEAR, antialias=True)
        if flip > 0.5:
            crop = F.hflip(crop)
        want = (augmix_view(crop, _plan_from_row(p[v]), vg.preprocess) if augmix
                else vg.preprocess(crop))
        assert torch.equal(views[v + 1], want), v
    if augmix:  # the plan columns are filled: weights sum to 1, every chain has 1..3 ops
        assert np.allclose(p[:, 6:9].sum(1), 1, atol=1e-6)
        depth = (p[:, O.OP0:O.MAG0].reshape(5, 3, 3) >= 0).sum(-1)
        assert depth.min() >= 1 and depth.max() <= 3
    # other index → other draws
    q = H.sample_view_params(vg, img.width, img.height, seed=3, index=8).numpy()
    assert not np.allclose(p[:, :4], q[:, :4])


def _item(tmp_path, img, name="a.jpg", label=0):
    path = tmp_path / name
    img.save(path, quality=95)
    return Datum(str(path), label, "thing")


def test_view0_is_bit_identical_and_crops_close(tmp_path):
    img = _smooth_image()
    items = [_item(tmp_path, img)]
    vg = ViewGenerator(size=32, n_views=9, augmix=False)
    ds = H.GpuViewDataset(items, vg, seed=1, canvas=128)      # canvas ≥ image: no resize
    batch = H.collate_gpu_views([ds[0]])
    assert batch["hw"].tolist() == [[52, 70]]
    views = G.GpuViewMaker(vg)(batch)
    with Image.open(items[0].impath) as im:
        cpu = vg(im.convert("RGB"), 1, 0)
    assert views.shape == (1, 9, 3, 32, 32)
    assert torch.equal(views[0, 0], cpu[0])
    # same crop boxes and flips, different resampling: close but not identical
    diff = (views[0, 1:] - cpu[1:]).abs().mean(dim=(1, 2, 3))
    assert diff.max() < 0.08, diff
    assert not torch.equal(views[0, 1:], cpu[1:])
    # a flipped view is closer to the flipped CPU view than to the unflipped one
    p = batch["params"][0]
    for v in range(8):
        straight = (views[0, v + 1] - cpu[v + 1]).abs().mean()
        mirrored = (views[0, v + 1].flip(-1) - cpu[v + 1]).abs().mean()
        assert straight < mirrored, (v, float(p[v, 4]))


def _rand_u8(n=4, s=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(30, 200, (n, 3, s, s), generator=g).float()
    x[0, 1] = 77.0                                # a flat channel (PIL keeps it)
    return x


def _pil_apply(x, name, mag=0.0):
    out = []
    for im in x:
        pil = Image.fromarray(im.permute(1, 2, 0).numpy().astype(np.uint8))
        out.append(torch.from_numpy(np.array(apply_op(pil, OpCall(name, mag)))).permute(2, 0, 1))
    return torch.stack(out).float()


@pytest.mark.parametrize("name,mag", [("autocontrast", 0), ("equalize", 0), ("posterize", 4),
                                      ("posterize", 2), ("solarize", 231), ("solarize", 128)])
def test_colour_ops_are_pils_luts(name, mag):
    x = _rand_u8()
    m = G.GpuViewMaker
    if name in ("posterize", "solarize"):
        got = getattr(m, name)(x, torch.full((4, 1, 1, 1), float(mag)))
    else:
        got = getattr(m, name)(x)
    assert torch.equal(got, _pil_apply(x, name, mag))


@pytest.mark.parametrize("name,mag", [("rotate", 3), ("rotate", -2), ("shear_x", 0.03),
                                      ("shear_y", -0.02), ("translate_x", 2),
                                      ("translate_y", -3)])
def test_geometric_ops_match_pil_closely(name, mag):
    img = _smooth_image(32, 32, seed=4)
    x = torch.from_numpy(np.array(img)).permute(2, 0, 1).float()[None]
    want = _pil_apply(x, name, mag)
    maker = G.GpuViewMaker(ViewGenerator(size=32, n_views=2, augmix=True))
    A = torch.tensor([O.affine_rows(name, mag, 32)]).view(1, 2, 3)
    got = maker.warp(x, A)
    inner = (slice(None), slice(None), slice(4, -4), slice(4, -4))   # borders: fill conventions
    assert (got - want)[inner].abs().mean() < 2.0
    assert (got - x)[inner].abs().mean() > 2 * (got - want)[inner].abs().mean()  # it did move


def test_augment_mixes_the_chains_with_the_plan_weights():
    maker = G.GpuViewMaker(ViewGenerator(size=16, n_views=2, augmix=True))
    x = _rand_u8(n=2, s=16)
    p = torch.zeros(2, len(O.VIEW_PARAM_COLUMNS))
    p[:, O.OP0:O.MAG0] = -1
    p[:, 5] = torch.tensor([0.25, 0.6])                       # m
    p[:, 6:9] = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    ops = {"solarize": OPS.index("solarize"), "posterize": OPS.index("posterize")}
    p[0, O.OP0 + 0] = ops["solarize"]; p[0, O.MAG0 + 0] = 128                 # chain 0: solarize
    p[0, O.OP0 + 3] = ops["posterize"]; p[0, O.MAG0 + 3] = 4                  # chain 1: posterize
    p[0, O.OP0 + 6] = ops["solarize"]; p[0, O.MAG0 + 6] = 128                 # chain 2: solarize,
    p[0, O.OP0 + 7] = ops["posterize"]; p[0, O.MAG0 + 7] = 4                  #   then posterize
    # image 1: autocontrast
    for c in range(3):
        p[1, O.OP0 + 3 * c] = OPS.index("autocontrast")
    got = maker.augment(x.clone(), p, p)
    sol = _pil_apply(x[:1], "solarize", 128)
    pos = _pil_apply(x[:1], "posterize", 4)
    both = _pil_apply(sol, "posterize", 4)
    want0 = 0.25 * x[0] + 0.75 * (0.5 * sol[0] + 0.3 * pos[0] + 0.2 * both[0])
    ac = _pil_apply(x[1:], "autocontrast")[0]
    want1 = 0.6 * x[1] + 0.4 * ac
    assert torch.allclose(got[0], want0, atol=1e-3)
    assert torch.allclose(got[1], want1, atol=1e-3)


@pytest.mark.parametrize("augmix", [False, True])
def test_views_loader_gpu_path_end_to_end(tmp_path, augmix):
    from conftest import tiny_cfg

    items = [_item(tmp_path, _smooth_image(60 + 9 * i, 40 + 5 * i, seed=i), f"{i}.jpg", i)
             for i in range(5)]
    ds = type("D", (), {"test": items, "fine_grained": augmix})()
    cfg = tiny_cfg(**{"TTA.N_VIEWS": 8, "TTA.VIEWS_DEVICE": "gpu"})
    loader = L.build_views_loader(cfg, ds, seed=2, indices=[4, 1, 3], batch_images=2,
                                  device="cpu", num_workers=0)
    batches = list(loader)
    assert [b["index"].tolist() for b in batches] == [[4, 1], [3]]
    assert batches[0]["views"].shape == (2, 8, 3, 32, 32)
    assert torch.isfinite(batches[0]["views"]).all()
    cfg.TTA.VIEWS_DEVICE = "cpu"
    cpu = list(L.build_views_loader(cfg, ds, seed=2, indices=[4, 1, 3], batch_images=2,
                                    device="cpu", num_workers=0))
    for b, c in zip(batches, cpu):
        assert torch.equal(b["views"][:, 0], c["views"][:, 0])          # view 0 identical
        assert b["label"].tolist() == c["label"].tolist()
        d = (b["views"][:, 1:] - c["views"][:, 1:]).abs().mean()
        assert d < (0.35 if augmix else 0.1), d                         # random views: close
    cfg.TTA.VIEWS_DEVICE = "tpu"
    with pytest.raises(ValueError, match="VIEWS_DEVICE"):
        L.build_views_loader(cfg, ds, 2, [0], 1, "cpu", 0)


def test_view_maker_is_compiled_with_the_towers(tmp_path):
    """The GPU view maker follows the resolved TTA.COMPILE (the towers' switch) unless told."""
    from conftest import tiny_cfg
    items = [_item(tmp_path, _smooth_image(50, 40, seed=0), "0.jpg", 0)]
    ds = type("D", (), {"test": items, "fine_grained": False})()

    def maker(compile=None, **opts):
        cfg = tiny_cfg(**{"TTA.N_VIEWS": 4, "TTA.VIEWS_DEVICE": "gpu", **opts})
        return L.build_views_loader(cfg, ds, 1, [0], 1, "cpu", 0, compile=compile).maker
    assert maker(**{"TTA.COMPILE": "on"}).compile is True
    assert maker(**{"TTA.COMPILE": "off"}).compile is False
    assert maker(**{"TTA.COMPILE": "auto"}).compile is False     # unresolved: eager
    assert maker(True, **{"TTA.COMPILE": "off"}).compile is True
    m = maker(**{"TTA.COMPILE": "on"})
    assert not m._compile_here(torch.device("cpu"))               # CUDA only


def test_vectorised_affine_matrices_equal_the_per_op_rows():
    names = ["rotate", "shear_x", "shear_y", "translate_x", "translate_y", "rotate"]
    mags = torch.tensor([3.0, 0.021, -0.013, -4.0, 7.0, -1.0])
    ids = torch.tensor([OPS.index(n) for n in names])
    got = O.affine_matrices(ids, mags, 32)
    want = torch.tensor([O.affine_rows(n, float(m), 32)
                         for n, m in zip(names, mags)]).view(-1, 2, 3)
    assert torch.allclose(got, want, atol=1e-6)


def test_half_precision_work_dtype_matches_float32(tmp_path):
    """The CUDA default works in float16 (integers 0-255 are exact): same views up to rounding."""
    img = _smooth_image(90, 64, seed=5)
    items = [_item(tmp_path, img)]
    vg = ViewGenerator(size=32, n_views=12, augmix=True)
    batch = H.collate_gpu_views([H.GpuViewDataset(items, vg, seed=4)[0]])
    full = G.GpuViewMaker(vg, work_dtype=torch.float32)(batch)
    try:
        half = G.GpuViewMaker(vg, work_dtype=torch.float16)(batch)
    except (RuntimeError, NotImplementedError) as e:   # a CPU kernel without float16 support
        pytest.skip(f"float16 kernels unavailable on this CPU build: {e}")
    assert half.dtype == torch.float32 and torch.isfinite(half).all()
    assert torch.equal(half[:, 0], full[:, 0])
    assert (half - full).abs().mean() < 0.02
