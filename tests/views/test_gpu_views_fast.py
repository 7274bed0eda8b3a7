"""The fused GPU view maker (run here on the CPU, float32) gives the previous implementation's
views (``tests.oracles.gpu_views_reference``) bit for bit: every op type, chains of depth 1-3,
flips, AugMix off, one view; its float16 pieces (grid, folded mixing) agree to their rounding."""
import pytest
import torch

from argtca.views.augmix import OPS
from argtca.views.cpu import ViewGenerator
from argtca.views import gpu as G
from argtca.views import gpu_ops as O
from tests.oracles.gpu_views_reference import ReferenceGpuViewMaker, random_view_batch

pytestmark = pytest.mark.usefixtures("one_thread")


def _both(batch, size, n_views, augmix=True):
    vg = ViewGenerator(size=size, n_views=n_views, augmix=augmix)
    return ReferenceGpuViewMaker(vg)(batch), G.GpuViewMaker(vg)(batch)


@pytest.mark.parametrize("size,B,V,seed", [(32, 3, 13, 0), (40, 2, 17, 1), (24, 4, 9, 2),
                                           (32, 2, 2, 3)])
def test_random_batches_are_bit_identical_to_the_reference(size, B, V, seed):
    batch = random_view_batch(B, V, size, seed=seed)
    p = batch["params_cpu"].reshape(-1, len(O.VIEW_PARAM_COLUMNS))
    ops = p[:, O.OP0:O.MAG0].reshape(-1, 3, 3)
    if V > 2:   # the batch covers what it should: flips, every op at depth 0, depths 1, 2 and 3
        assert 0 < p[:, 4].sum() < p.shape[0]
        assert set(ops[:, :, 0].flatten().long().tolist()) == set(range(len(OPS)))
        assert set((ops >= 0).sum(-1).flatten().tolist()) == {1, 2, 3}
    ref, new = _both(batch, size, V)
    assert new.shape == (B, V, 3, size, size) and new.dtype == torch.float32
    assert torch.equal(new, ref)


@pytest.mark.parametrize("name", OPS)
def test_each_op_alone_at_every_depth_is_bit_identical(name):
    """Every chain made of one op only (1-3 times), so each op's path runs on many rows."""
    batch = random_view_batch(2, 9, 32, seed=11)
    p = batch["params_cpu"]
    ops = p[..., O.OP0:O.MAG0]
    ops[ops >= 0] = float(OPS.index(name))
    if name not in ("autocontrast", "equalize"):   # magnitudes of another op: give this one's
        mags = {"posterize": 3.0, "solarize": 100.0, "rotate": -17.0, "shear_x": 0.2,
                "shear_y": -0.15, "translate_x": -6.0, "translate_y": 5.0}[name]
        p[..., O.MAG0:] = torch.where(ops >= 0, mags, 0.0)
    batch["params"] = p
    ref, new = _both(batch, 32, 9)
    assert torch.equal(new, ref)
    assert not torch.equal(new[:, 1:], _both(batch, 32, 9, augmix=False)[1][:, 1:])   # it acted


@pytest.mark.parametrize("V,augmix", [(1, True), (1, False), (6, False)])
def test_one_view_and_augmix_off_are_bit_identical(V, augmix):
    batch = random_view_batch(3, V, 32, seed=4, augmix=augmix)
    ref, new = _both(batch, 32, V, augmix=augmix)
    assert new.shape == (3, V, 3, 32, 32)
    assert torch.equal(new, ref)


def test_hand_made_chains_without_ops_keep_the_crop():
    """A chain with no op at all (not drawn by AugMix, possible in hand-made plans) is the crop."""
    batch = random_view_batch(2, 5, 24, seed=7)
    p = batch["params_cpu"]
    p[0, :, O.OP0:O.OP0 + 3] = -1          # chain 0 of every view of image 0: empty
    p[1, 1, O.OP0:O.MAG0] = -1             # view 2 of image 1: all chains empty
    batch["params"] = p
    ref, new = _both(batch, 24, 5)
    assert torch.equal(new, ref)


@pytest.mark.parametrize("fold", ["out", "tmp"])
def test_folded_mixing_equals_the_exact_order_to_float32_rounding(fold):
    """The CUDA eager default folds the normalisation into the mixing weights (addcmul into the
    output): same values up to float32 rounding, not bit for bit."""
    batch = random_view_batch(3, 8, 32, seed=5)
    vg = ViewGenerator(size=32, n_views=8, augmix=True)
    exact = G.GpuViewMaker(vg)
    folded = G.GpuViewMaker(vg)
    folded.fold_mix = fold
    a, b = exact(batch), folded(batch)
    assert torch.equal(a[:, 0], b[:, 0])
    assert (a - b).abs().max() < 5e-6
    assert not torch.equal(a, b)     # it is another order of roundings


def test_device_grid_is_the_reference_grid_up_to_rounding():
    """The CUDA path's grid (normalised maps, one broadcast sum) equals the reference's float32
    grid up to float32 rounding; cast to float16, up to one float16 step where the float32 value
    sits at a rounding boundary. Warps with it: the same pixels but for rare rounding ties."""
    maker = G.GpuViewMaker(ViewGenerator(size=224, n_views=2, augmix=True))
    g = torch.Generator().manual_seed(0)
    names = ["rotate", "shear_x", "shear_y", "translate_x", "translate_y"] * 4
    ids = torch.tensor([OPS.index(n) for n in names])
    mags = (torch.rand(20, generator=g) - 0.5) * torch.tensor([60, 0.6, 0.6, 150, 150] * 4)
    A = O.affine_matrices(ids, mags, 224)
    ref32 = maker.grid(A, torch.float32)
    fast32 = maker.grid(A, torch.float32, exact=False)
    assert (fast32 - ref32).abs().max() < 1e-5 and not torch.equal(fast32, ref32)
    half = maker.grid(A, torch.float16, exact=False).float()
    ref = ref32.half().float()
    d = (half - ref).abs()
    assert d.max() <= 2 ** -10                      # one float16 step in [1, 2)
    assert (d > 0).float().mean() < 0.005
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 256, (20, 3, 224, 224), generator=g).float()
    w_ref, w_fast = maker.warp(x, A), maker.warp(x, A, exact=False)
    diff = (w_ref - w_fast).abs()              # noise images: the worst case for rounding ties
    assert diff.max() <= 1 and 0 < (diff > 0).float().mean() < 1e-3


@pytest.mark.parametrize("size", [8, 7, 6])      # rows of 192 / 147 / 108 bytes: int64/uint8/int32
def test_wide_row_gathers_and_scatters_equal_index_select_and_copy(size):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 256, (9, 3, size, size), generator=g, dtype=torch.uint8)
    y = torch.randint(0, 256, (3, 3, size, size), generator=g, dtype=torch.uint8)
    rows = torch.tensor([7, 0, 4])
    assert torch.equal(O.take_rows(x, rows), x.index_select(0, rows))
    want = x.clone().index_copy_(0, rows, y)
    O.put_rows(x, rows, y)
    assert torch.equal(x, want)


def test_int32_histograms_count_like_bincount():
    g = torch.Generator().manual_seed(1)
    flat = torch.randint(0, 256, (6, 1000), generator=g, dtype=torch.uint8)
    flat[2] = 7
    idx = O.lut_index(flat)
    assert idx.dtype == torch.int32 and int(idx[3, 0]) == 3 * 256 + int(flat[3, 0])
    want = torch.stack([torch.bincount(r.long(), minlength=256) for r in flat]).int()
    assert torch.equal(O.row_histograms(idx, 6), want)


def test_compile_failure_falls_back_to_eager(monkeypatch, capsys):
    batch = random_view_batch(2, 4, 24, seed=8)
    vg = ViewGenerator(size=24, n_views=4, augmix=True)
    want = G.GpuViewMaker(vg)(batch)
    maker = G.GpuViewMaker(vg, compile=True)
    monkeypatch.setattr(maker, "_compile_here", lambda dev: True)

    def broken(*a, **k):   # compilation fails when the compiled function is first called
        def call(*a, **k):
            raise RuntimeError("no triton here")
        return call
    monkeypatch.setattr(torch, "compile", broken)
    got = maker(batch)
    assert torch.equal(got, want)
    said = capsys.readouterr().out
    assert "torch.compile of the mixing failed (RuntimeError: no triton here)" in said
    assert "torch.compile of the LUT pass failed (RuntimeError: no triton here)" in said
    assert "torch.compile of the warp failed (RuntimeError: no triton here)" in said
    assert maker._compiled is False and maker._compiled_lut is False
    assert maker._compiled_warp is False
    assert torch.equal(maker(batch), want)     # and stays eager, silently
    assert capsys.readouterr().out == ""


def test_full_table_lut_path_is_bit_identical(monkeypatch):
    """``compile=True``'s LUT pass (every row through one LUT, identity where the op is no colour
    op, one gather of the whole chains tensor; compiled on CUDA) run eagerly here."""
    batch = random_view_batch(3, 9, 32, seed=12)
    p = batch["params_cpu"]
    p[0, :, O.OP0:O.OP0 + 3] = -1          # a chain without ops: identity rows at depth 0
    batch["params"] = p
    vg = ViewGenerator(size=32, n_views=9, augmix=True)
    ref = ReferenceGpuViewMaker(vg)(batch)
    maker = G.GpuViewMaker(vg, compile=True)
    maker._compiled_warp = False               # warps: the eager path (tested below)
    monkeypatch.setattr(maker, "_compile_here", lambda dev: True)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    calls = []
    real = O.lut_full_pass
    monkeypatch.setattr(G, "lut_full_pass", lambda *a: calls.append(a[2]) or real(*a))
    assert torch.equal(maker(batch), ref)
    # depth 0 reads the crops (3 chains each), then chains
    assert calls == [3, 1, 1]


@pytest.mark.parametrize("wd", [torch.float32, torch.float16])
def test_compiled_warp_path_matches_the_reference_to_rounding(monkeypatch, wd):
    """``compile=True``'s warp (gather + grid + sampling + rounding in one function, compiled
    with a dynamic row count on CUDA) run eagerly: the reference's views in the same work dtype
    up to rounding ties (its grid is the device grid, its samples rounded to ``wd`` first)."""
    batch = random_view_batch(3, 13, 32, seed=0)
    vg = ViewGenerator(size=32, n_views=13, augmix=True)
    try:
        ref = ReferenceGpuViewMaker(vg, work_dtype=wd)(batch)
    except (RuntimeError, NotImplementedError) as e:   # no float16 grid_sample on this CPU
        pytest.skip(f"float16 kernels unavailable on this CPU build: {e}")
    maker = G.GpuViewMaker(vg, work_dtype=wd, compile=True)
    maker._compiled_lut = maker._compiled = False
    monkeypatch.setattr(maker, "_compile_here", lambda dev: True)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    calls = []
    real = O.warp_rows
    monkeypatch.setattr(G, "warp_rows", lambda *a: calls.append(len(a[1])) or real(*a))
    got = maker(batch)
    assert len(calls) == 3 and sum(calls) > 0
    d = (got - ref).abs()
    assert torch.equal(got[:, 0], ref[:, 0])
    assert d.max() < 0.6 and (d > 0.01).float().mean() < 2e-3 and d.mean() < 5e-4
