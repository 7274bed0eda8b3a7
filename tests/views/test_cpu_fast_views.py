"""``TTA.VIEWS_DEVICE cpu-fast`` (FastViewGenerator, augmix.apply_op_planes) against TPT's PIL path:
the same random draws (boxes, flips, AugMix plans), view 0 bit-identical, the colour ops and
translations equal to PIL's, and the measured bounds of what is only statistically equal: the
crops (torch's uint8 resize: within one level of PIL's), rotations and shears (PIL's blend in
float32: within one level), the mix (float32 rounding) and the whole views."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

import argtca.views.cpu as views_mod
from argtca.views.augmix import (OPS, AugMixPlan, OpCall, apply_op, apply_op_planes,
                                    augmix_planes_into, sample_op)
from argtca.views.cpu import FastViewGenerator, ViewGenerator


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
    from argtca.bench.data import _jpeg_pool
    return Image.open(io.BytesIO(_jpeg_pool(1)[0])).convert("RGB").resize((size, size))


# ------------------------------------------------------------------------------ the same draws
def test_crop_planes_are_preaugment_with_the_same_draws():
    # The same draws as the PIL path (box, then one uniform for the flip; the generators end in
    # the same state) and the same flipped crop up to the resize: torch's uint8 antialiased
    # bilinear kernel in place of PIL's (the same filter, another fixed-point precision), so
    # within one level where it differs, identical where the crop is only enlarged.
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode
    img = _random_image(45, 61, 0)
    vg = FastViewGenerator.like(ViewGenerator(size=24, n_views=2))
    g_pil, g_fast, g_hand = torch.Generator(), torch.Generator(), torch.Generator()
    for g in (g_pil, g_fast, g_hand):
        g.manual_seed(7)
    flips = enlarged = 0
    for _ in range(40):
        got = vg.crop_planes(img, g_fast)
        assert got.shape == (3, 24, 24) and got.flags["C_CONTIGUOUS"]
        pil = _planes(vg.preaugment(img, g_pil))
        # by hand: torchvision's box, then one uniform draw for the flip
        i, j, h, w = views_mod.random_resized_crop_params(61, 45, vg.scale, vg.ratio, g_hand)
        crop = _planes(F.resized_crop(img, i, j, h, w, [24, 24],
                                      interpolation=InterpolationMode.BILINEAR, antialias=True))
        flip = torch.rand(1, generator=g_hand).item() < 0.5
        want = crop[:, :, ::-1] if flip else crop
        assert np.array_equal(pil, want)
        assert np.abs(got.astype(np.int16) - want).max() <= 1
        if h <= 24 and w <= 24:
            assert np.array_equal(got, want)
            enlarged += 1
        flips += flip
    assert 0 < flips < 40                                    # both flip outcomes were drawn
    assert 0 < enlarged < 40
    assert torch.equal(g_pil.get_state(), g_fast.get_state())   # same number of draws


def test_crops_within_one_level_of_pil_on_photos():
    # 224-px crops of the benchmark's photos (300 x 225: reduced and enlarged boxes). Measured
    # (8 photos x 40 crops): max 1 level, 0.022 % of the values differ, in 30 % of the crops.
    # Bounds: max 1 level, < 0.1 % of the values, and some crop does differ (else this test
    # would not be looking at the torch kernel).
    from argtca.bench.data import _jpeg_pool
    vg = FastViewGenerator.like(ViewGenerator(size=224, n_views=2))
    diff = total = crops_differing = 0
    for k, data in enumerate(_jpeg_pool(3)):
        img = Image.open(io.BytesIO(data)).convert("RGB")
        g_pil, g_fast = torch.Generator(), torch.Generator()
        g_pil.manual_seed(k)
        g_fast.manual_seed(k)
        for _ in range(12):
            d = np.abs(vg.crop_planes(img, g_fast).astype(np.int16)
                       - _planes(vg.preaugment(img, g_pil)))
            assert d.max() <= 1
            diff += int((d > 0).sum())
            total += d.size
            crops_differing += bool(d.any())
    assert diff / total < 1e-3
    assert crops_differing > 0


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


def test_view0_bit_identical_and_plain_views_within_one_level():
    # view 0 is the PIL path's own code; plain random views (AugMix off) are the crops, so they
    # are within one level of PIL's: |delta| <= 1 / (255 std) after Normalize (+ float rounding)
    img = _random_image(50, 70, 2)
    one_level = 1 / (255 * min(views_mod.CLIP_STD)) + 1e-5
    for augmix in (True, False):
        vg = ViewGenerator(size=32, n_views=6, augmix=augmix)
        ref = vg(img, 5, 3)
        fast = FastViewGenerator.like(vg)(img, 5, 3)
        assert torch.equal(fast[0], ref[0])
        if not augmix:
            assert (fast - ref).abs().max() <= one_level
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
def test_geometric_ops_with_tpt_magnitudes_within_one_level_of_pil(make):
    # Translations are shifts (identical). Rotations and shears compute PIL's bilinear blend in
    # float32 instead of float64 (the geometry stays float64): a truncation tips where the value
    # lies within ~1e-5 of an integer. Measured here: 0 or 1 level on <= 1.4e-5 of the values
    # (the 224 photo); bounds: max 1 level, < 1e-4 of the values.
    img = make()
    x = _planes(img)
    rng = np.random.default_rng(5)
    changed = 0
    for name in ("rotate", "shear_x", "shear_y", "translate_x", "translate_y"):
        for severity in (1.0, 3.0, 10.0):
            op = sample_op(name, severity, rng, x.shape[1])
            got = apply_op_planes(x, op)
            want = _pil_planes(img, op)
            if name.startswith("translate"):
                assert np.array_equal(got, want), op
            diff = np.abs(got.astype(np.int16) - want)
            assert diff.max() <= 1 and (diff > 0).mean() < 1e-4, (op, diff.max())
            changed += not np.array_equal(got, x)
    assert changed >= 12


def test_rotation_special_angles_and_non_square_within_one_level_of_pil():
    # 0, 90, 180 and 270 degrees are array copies (identical); other angles PIL's blend in
    # float32 (measured: 1 level on 0.15 % of a 30 x 30 image at 45 degrees, else identical)
    for img in (_random_image(30, 30, 4), _random_image(21, 34, 5)):
        x = _planes(img)
        for angle in (0.0, 90.0, 180.0, 270.0, -90.0, 1.0, -2.0, 45.0, 359.0):
            op = OpCall("rotate", angle)
            got, want = apply_op_planes(x, op), _pil_planes(img, op)
            if angle % 90 == 0 and (angle % 180 == 0 or img.width == img.height):
                assert np.array_equal(got, want), (img.size, angle)
            diff = np.abs(got.astype(np.int16) - want)
            assert diff.max() <= 1 and (diff > 0).mean() < 0.01, (img.size, angle)


def test_shears_with_round_coefficients_within_one_level_of_pil():
    # Round coefficients put PIL's per-pixel source coordinates (x + .5) + c (y + .5) on decimal
    # fractions (at 1.0 on integers) where its float64 rounding of that sum can tip a truncation
    # the other way; the fast path takes one offset per line and blends in float32. Stated
    # tolerance on a smooth 224 image: at most 1 level anywhere, mean absolute difference < 0.02
    # levels for TPT-range |c| <= 0.3 (measured 0 to 0.0005) and < 0.1 at |c| = 1 (measured
    # <= 0.049). The max bound also checks the black border, where a pixel wrongly kept or
    # blanked would differ by far more than 1.
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
                      chains=((OpCall("equalize"),),
                              (OpCall("shear_x", 0.017), OpCall("solarize", 200)),
                              (OpCall("rotate", -2.0),)))
    mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
    out = np.empty((3, 40, 40), dtype=np.float32)
    augmix_planes_into(out, x, plan, mean, std)
    # the mix by hand in float64 from PIL's own op results
    pre = lambda a: ((a.astype(np.float64) / 255 - np.array(mean)[:, None, None])
                     / np.array(std)[:, None, None])
    chains = [_planes(img)]
    for chain in plan.chains:
        im = img
        for op in chain:
            im = apply_op(im, op)
        chains.append(_planes(im))
    want = plan.m * pre(chains[0]) + (1 - plan.m) * sum(w * pre(c)
                                                         for w, c in zip(plan.weights, chains[1:]))
    assert np.abs(out - want).max() < 5e-6


def test_fast_views_with_pil_crops_equal_pil_views_up_to_the_warps():
    # With PIL's crops patched in, what is left is the ops and the mix: float32 rounding of the
    # mix (a few 1e-7 at |view| <= ~2.2) and the rare float32 warp truncation that tips by one
    # level, which moves a view by its chain's coefficient times one level (1 / (255 std) ~
    # 0.0146). Measured (3 seeds): max 0.0027, mean <= 1.4e-7. Bounds: max < one level, mean
    # < 1e-6; a crop or an op off by one level everywhere would fail the mean by far.
    class PilCrops(FastViewGenerator):
        def crop_planes(self, img, generator, pixels=None):
            return _planes(self.preaugment(img, generator))

    img = _photo(224).resize((150, 112))
    one_level = 1 / (255 * max(views_mod.CLIP_STD))
    for seed, index in ((1, 4), (2, 5), (3, 6)):
        vg = ViewGenerator(size=64, n_views=24, augmix=True)
        ref = vg(img, seed, index)
        diff = (PilCrops.like(vg)(img, seed, index) - ref).abs()
        assert diff.max() < one_level and diff.mean() < 1e-6


def test_fast_views_statistically_equal_pil_views():
    # The whole views: a crop value off by one level can move the AugMix view by more than one
    # level (posterize or solarize at a threshold, autocontrast / equalize tables shifted), so
    # the bound is on how much and how often, in levels (|delta| * 255 * std). Measured on the
    # benchmark's 300 x 225 photos at 224 px (3 photos x 16 views): mean 0.00007-0.0008 levels,
    # 0.02-0.2 % of the values off by more than float rounding (1e-3 level), max 51 levels; at
    # 64 px from a 150 x 112 photo (more reduced crops): mean 0.009-0.013, 2.0-2.4 %.
    from argtca.bench.data import _jpeg_pool
    lvl = 255 * torch.tensor(views_mod.CLIP_STD).view(3, 1, 1)
    cases = [(Image.open(io.BytesIO(data)).convert("RGB"), 224, 16, k)
             for k, data in enumerate(_jpeg_pool(3))]
    cases += [(_photo(224).resize((150, 112)), 64, 24, 4)]
    for img, size, n, index in cases:
        vg = ViewGenerator(size=size, n_views=n, augmix=True)
        ref = vg(img, 1, index)
        fast = FastViewGenerator.like(vg)(img, 1, index)
        assert torch.equal(fast[0], ref[0])
        d = (fast - ref).abs() * lvl
        small = size == 64
        assert d.mean() < (0.05 if small else 0.005), (size, index, d.mean())
        assert (d > 1e-3).float().mean() < (0.05 if small else 0.005), (size, index)
        assert (ref[1:] - ref[1]).abs().amax(dim=(1, 2, 3))[1:].min() > 0.1   # views differ


def test_shears_past_the_border_within_one_level_of_pil():
    # coefficients that move whole lines past the border (every clamped / black case of the
    # per-line copy); the black area is PIL's exactly (where PIL turns an all-white image
    # black), the rest within one level (float32 blend; measured identical here)
    img = _random_image(23, 29, 6)
    white = Image.new("RGB", img.size, (255, 255, 255))
    x = _planes(img)
    for name in ("shear_x", "shear_y"):
        for c in (0.0731, -0.2917, 1.4142, -2.7183, 7.389):
            op = OpCall(name, c)
            got = apply_op_planes(x, op)
            outside = _pil_planes(white, op) == 0
            assert outside.any() and not outside.all()
            assert (got[outside] == 0).all()
            assert np.abs(got.astype(np.int16) - _pil_planes(img, op)).max() <= 1, op


def test_mix_equals_the_per_source_numpy_formula_up_to_float_rounding():
    # the mix sums the uint8 sources with scalar coefficients, then scales and shifts per channel;
    # the earlier formula multiplied every source by its own per-channel factor: same value, only
    # float32 rounding differs (|view| <= ~2.2: a few float32 steps of 2.4e-7)
    from argtca.views.augmix import apply_chain_planes, sample_plan
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
    from argtca.views.dataset import TestTimeDataset
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
