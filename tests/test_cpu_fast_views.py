"""``TTA.VIEWS_DEVICE cpu-fast`` (FastViewGenerator, augmix.apply_op_planes) against TPT's PIL path:
the same random draws, view 0 and plain views bit-identical, every AugMix op equal to PIL's, the
mixed views equal up to float32 rounding."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

import argtca.datasets.views as views_mod
from argtca.datasets.augmix import (OPS, AugMixPlan, OpCall, apply_op, apply_op_planes,
                                    augmix_planes_into, sample_op)
from argtca.datasets.views import FastViewGenerator, ViewGenerator


def _planes(img):
    return np.ascontiguousarray(np.asarray(img).transpose(2, 0, 1))


def _pil_planes(img, op):
    return _planes(apply_op(img, op))


def _random_image(h, w, seed):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def _smooth_image(h, w):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    rgb = np.stack([127.5 + 120 * np.sin(x / 9.0 + y / 23.0), 255.0 * x / (w - 1),
                    127.5 + 120 * np.cos(y / 7.0)], axis=-1)
    return Image.fromarray(np.round(rgb).astype(np.uint8))


def _photo(size=224):
    from argtca.bench_data import _jpeg_pool
    return Image.open(io.BytesIO(_jpeg_pool(1)[0])).convert("RGB").resize((size, size))


# ------------------------------------------------------------------------------ the same draws
def test_crop_planes_are_preaugment_with_the_same_draws():
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode
    img = _random_image(45, 61, 0)
    vg = FastViewGenerator.like(ViewGenerator(size=24, n_views=2))
    g_pil, g_fast, g_hand = torch.Generator(), torch.Generator(), torch.Generator()
    for g in (g_pil, g_fast, g_hand):
        g.manual_seed(7)
    flips = 0
    for _ in range(40):
        got = vg.crop_planes(img, g_fast)
        assert got.shape == (3, 24, 24) and got.flags["C_CONTIGUOUS"]
        assert np.array_equal(got, _planes(vg.preaugment(img, g_pil)))
        # by hand: torchvision's box, then one uniform draw for the flip
        i, j, h, w = views_mod.random_resized_crop_params(61, 45, vg.scale, vg.ratio, g_hand)
        crop = _planes(F.resized_crop(img, i, j, h, w, [24, 24],
                                      interpolation=InterpolationMode.BILINEAR, antialias=True))
        flip = torch.rand(1, generator=g_hand).item() < 0.5
        assert np.array_equal(got, crop[:, :, ::-1] if flip else crop)
        flips += flip
    assert 0 < flips < 40                                    # both flip outcomes were drawn
    assert torch.equal(g_pil.get_state(), g_fast.get_state())   # same number of draws


def test_fast_views_draw_the_same_boxes_and_plans_in_the_same_order(monkeypatch):
    seen = {"boxes": [], "plans": []}
    real_box, real_plan = views_mod.random_resized_crop_params, views_mod.sample_plan

    def box(*a, **k):
        seen["boxes"].append(real_box(*a, **k))
        return seen["boxes"][-1]

    def plan(*a, **k):
        seen["plans"].append(real_plan(*a, **k))
        return seen["plans"][-1]

    monkeypatch.setattr(views_mod, "random_resized_crop_params", box)
    monkeypatch.setattr(views_mod, "sample_plan", plan)
    img = _random_image(40, 52, 1)
    vg = ViewGenerator(size=20, n_views=9, augmix=True)
    vg(img, 3, 11)
    pil = dict(boxes=seen["boxes"][:], plans=seen["plans"][:])
    seen["boxes"].clear()
    seen["plans"].clear()
    FastViewGenerator.like(vg)(img, 3, 11)
    assert len(pil["boxes"]) == len(pil["plans"]) == 8
    assert seen == pil
    assert len(set(pil["boxes"])) == 8                  # the draws differ from view to view


def test_view0_and_plain_views_are_bit_identical():
    img = _random_image(50, 70, 2)
    for augmix in (True, False):
        vg = ViewGenerator(size=32, n_views=6, augmix=augmix)
        ref = vg(img, 5, 3)
        fast = FastViewGenerator.like(vg)(img, 5, 3)
        assert torch.equal(fast[0], ref[0])
        if not augmix:
            assert torch.equal(fast, ref)
    one = ViewGenerator(size=32, n_views=1)
    assert torch.equal(FastViewGenerator.like(one)(img, 0, 0), one(img, 0, 0))
    gray = img.convert("L")              # non-RGB input goes through the same conversion
    assert torch.equal(FastViewGenerator.like(one)(gray, 0, 0), one(gray, 0, 0))


# --------------------------------------------------------------------- colour ops: exactly PIL's
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lut_ops_equal_pil(seed):
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (19, 23, 3), dtype=np.uint8)
    arr[..., 1] = 77                                 # a constant channel: autocontrast identity
    arr[..., 2] = np.where(arr[..., 2] > 127, 200, 40)   # two values
    narrow = (rng.integers(90, 110, (19, 23, 3))).astype(np.uint8)   # a narrow range stretches
    for img in (Image.fromarray(arr), Image.fromarray(narrow)):
        x = _planes(img)
        ops = [OpCall("autocontrast"), OpCall("equalize")]
        ops += [OpCall("posterize", b) for b in range(1, 9)]
        ops += [OpCall("solarize", t) for t in (0.0, 1.0, 100.5, 128.0, 231.0, 255.0, 256.0)]
        for op in ops:
            got = apply_op_planes(x, op)
            assert got.dtype == np.uint8 and np.array_equal(got, _pil_planes(img, op)), op


def test_equalize_clips_its_table_like_pil():
    # 511 pixels below the top value and one at it: step = 511 // 255 = 2 and the top value's
    # entry (1 + 511) // 2 = 256 exceeds 255 (PIL's point clips it)
    vals = np.concatenate([np.arange(511) % 255, [255]]).astype(np.uint8)
    img = Image.fromarray(np.repeat(vals.reshape(16, 32, 1), 3, axis=2))
    got = apply_op_planes(_planes(img), OpCall("equalize"))
    assert np.array_equal(got, _pil_planes(img, OpCall("equalize")))
    assert got.max() == 255


# --------------------------------------------------------------------- geometric ops vs PIL
@pytest.mark.parametrize("make", [lambda: _random_image(37, 41, 3), lambda: _smooth_image(64, 48),
                                  _photo])
def test_geometric_ops_with_tpt_magnitudes_equal_pil(make):
    img = make()
    x = _planes(img)
    rng = np.random.default_rng(5)
    changed = 0
    for name in ("rotate", "shear_x", "shear_y", "translate_x", "translate_y"):
        for severity in (1.0, 3.0, 10.0):
            op = sample_op(name, severity, rng, x.shape[1])
            got = apply_op_planes(x, op)
            assert np.array_equal(got, _pil_planes(img, op)), op
            changed += not np.array_equal(got, x)
    assert changed >= 12


def test_rotation_special_angles_and_non_square_equal_pil():
    for img in (_random_image(30, 30, 4), _random_image(21, 34, 5)):
        x = _planes(img)
        for angle in (0.0, 90.0, 180.0, 270.0, -90.0, 1.0, -2.0, 45.0, 359.0):
            op = OpCall("rotate", angle)
            assert np.array_equal(apply_op_planes(x, op), _pil_planes(img, op)), (img.size, angle)


def test_shears_with_round_coefficients_within_one_level_of_pil():
    # Round coefficients put PIL's per-pixel source coordinates (x + .5) + c (y + .5) on decimal
    # fractions (at 1.0 on integers) where its float64 rounding of that sum can tip a truncation
    # the other way; the fast path takes one offset per line (TPT's drawn magnitudes: identical,
    # test above). Stated tolerance on a smooth 224 image: at most 1 level anywhere, mean absolute
    # difference < 0.02 levels for TPT-range |c| <= 0.3 (measured 0 to 0.008) and < 0.1 at
    # |c| = 1 (measured <= 0.045). The max bound also checks the black border, where a pixel
    # wrongly kept or blanked would differ by far more than 1.
    img = _smooth_image(224, 224)
    x = _planes(img)
    for name in ("shear_x", "shear_y"):
        for c in (0.02, -0.1, 0.25, 0.3, 1.0, -1.0):
            op = OpCall(name, c)
            got = apply_op_planes(x, op).astype(np.int16)
            want = _pil_planes(img, op).astype(np.int16)
            diff = np.abs(got - want)
            assert diff.max() <= 1, (op, diff.max())
            assert diff.mean() < (0.02 if abs(c) <= 0.3 else 0.1), (op, diff.mean())


def test_ops_never_write_into_their_input():
    x = _planes(_photo(48))
    before = x.copy()
    for name in OPS:
        for mag in (0.0, 3.0, -0.2, 240.0, 2.0):
            try:
                apply_op_planes(x, OpCall(name, mag))
            except ValueError:       # posterize bits outside 1..8, as PIL
                pass
    assert np.array_equal(x, before)


# --------------------------------------------------------------------- the mixed views
def test_mix_is_tpt_mix_up_to_float_rounding():
    img = _photo(40)
    x = _planes(img)
    plan = AugMixPlan(m=0.3, weights=(0.5, 0.2, 0.3),
                      chains=((OpCall("equalize"),), (OpCall("shear_x", 0.017), OpCall("solarize", 200)),
                              (OpCall("rotate", -2.0),)))
    mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
    out = np.empty((3, 40, 40), dtype=np.float32)
    augmix_planes_into(out, x, plan, mean, std)
    # the mix by hand in float64 from PIL's own op results
    pre = lambda a: (a.astype(np.float64) / 255 - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
    chains = [_planes(img)]
    for chain in plan.chains:
        im = img
        for op in chain:
            im = apply_op(im, op)
        chains.append(_planes(im))
    want = plan.m * pre(chains[0]) + (1 - plan.m) * sum(w * pre(c) for w, c in zip(plan.weights, chains[1:]))
    assert np.abs(out - want).max() < 5e-6


def test_fast_views_equal_pil_views_up_to_float32_rounding():
    # |view| <= ~2.2 after Normalize, so float32 steps are ~2.4e-7; the PIL path rounds after each
    # of its ~12 float32 operations per view, the fast path after its ~8, in another order:
    # differences stay a few 1e-7 (measured max ~1e-6); 1e-5 would still be 1/1000 of one level
    # (1 / 255 / std ~ 0.0146), so a single pixel off by one level in any chain would fail this.
    img = _photo(224).resize((150, 112))
    vg = ViewGenerator(size=64, n_views=24, augmix=True)
    ref = vg(img, 1, 4)
    fast = FastViewGenerator.like(vg)(img, 1, 4)
    diff = (fast - ref).abs()
    assert diff.max() < 1e-5 and diff.mean() < 1e-6
    assert torch.equal(fast[0], ref[0])
    assert (ref[1:] - ref[1]).abs().amax(dim=(1, 2, 3))[1:].min() > 0.1   # the views do differ


def test_shears_past_the_border_equal_pil():
    # coefficients that move whole lines past the border (every clamped / black case of the
    # per-line copy), non-round so that PIL's per-pixel rounding agrees with the per-line offset
    img = _random_image(23, 29, 6)
    x = _planes(img)
    for name in ("shear_x", "shear_y"):
        for c in (0.0731, -0.2917, 1.4142, -2.7183, 7.389):
            op = OpCall(name, c)
            got = apply_op_planes(x, op)
            assert np.array_equal(got, _pil_planes(img, op)), op
            assert (got == 0).any() and (got != 0).any()


def test_mix_equals_the_per_source_numpy_formula_up_to_float_rounding():
    # the mix sums the uint8 sources with scalar coefficients, then scales and shifts per channel;
    # the earlier formula multiplied every source by its own per-channel factor: same value, only
    # float32 rounding differs (|view| <= ~2.2: a few float32 steps of 2.4e-7)
    from argtca.datasets.augmix import apply_chain_planes, sample_plan
    mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
    inv = (1 / (255 * np.asarray(std, dtype=np.float32))).reshape(3, 1, 1).astype(np.float32)
    shift = (np.asarray(mean, dtype=np.float32)
             / np.asarray(std, dtype=np.float32)).reshape(3, 1, 1)
    rng = np.random.default_rng(8)
    worst = 0.0
    for _ in range(20):
        x = rng.integers(0, 256, (3, 33, 27), dtype=np.uint8)
        plan = sample_plan(rng, 3.0, 33)
        out = np.full((3, 33, 27), np.nan, dtype=np.float32)
        assert augmix_planes_into(out, x, plan, mean, std) is out
        m = np.float32(plan.m)
        want = x * (m * inv)
        for w, chain in zip(plan.weights, plan.chains):
            want = want + apply_chain_planes(x, chain) * ((np.float32(1) - m) * np.float32(w) * inv)
        want = want - shift
        assert out.dtype == np.float32
        worst = max(worst, float(np.abs(out - want).max()))
    assert worst < 2e-6


def test_fast_views_in_float16_are_the_float32_views_rounded_once():
    img = _photo(224).resize((90, 70))
    for augmix in (True, False):
        vg = FastViewGenerator.like(ViewGenerator(size=40, n_views=7, augmix=augmix))
        f32 = vg(img, 2, 9)
        f16 = vg(img, 2, 9, dtype=torch.float16)
        assert f32.dtype == torch.float32 and f16.dtype == torch.float16
        assert torch.equal(f16, f32.to(torch.float16))
    with pytest.raises(ValueError, match="float16"):
        vg(img, 2, 9, dtype=torch.bfloat16)


def test_dataset_in_float16_gets_the_same_views_from_the_fast_generator(tmp_path):
    from argtca.datasets.base import Datum
    from argtca.datasets.views import TestTimeDataset
    path = tmp_path / "a.png"
    _photo(224).resize((80, 60)).save(path)
    vg = FastViewGenerator.like(ViewGenerator(size=32, n_views=5, augmix=True))
    items = [Datum(impath=str(path), label=3, classname="c")]
    ds32, ds16 = TestTimeDataset(items, vg, 4), TestTimeDataset(items, vg, 4)
    ds16.out_dtype = torch.float16
    a, b = ds32[0]["views"], ds16[0]["views"]
    assert b.dtype == torch.float16 and torch.equal(b, a.to(torch.float16))
    ds16.out_dtype = torch.bfloat16          # a dtype the generator does not write: cast after
    assert torch.equal(ds16[0]["views"], a.to(torch.bfloat16))
