"""``ChainRunner`` (argtca/views/exact_ops.py): TPT's AugMix ops on uint8 tensors with Pillow's
arithmetic, against hand-worked pixels and against Pillow itself (``apply_op_exact``, which
test_exact_views.py ties to TPT's official ``augmix_ops``), pixel for pixel."""
import numpy as np
import pytest
import torch
from PIL import Image

from argtca.views.augmix import OPS, OpCall, sample_plan
from argtca.views.exact import apply_chain_exact, apply_op_exact
from argtca.views.exact_ops import PLAN_WIDTH, ChainRunner, encode_op, encode_plan


def _run(img: np.ndarray, *ops: OpCall) -> np.ndarray:
    plans = np.zeros((1, max(3, len(ops)), PLAN_WIDTH))
    for j, op in enumerate(ops):
        plans[0, j] = encode_op(op, img.shape[0])
    return ChainRunner()(torch.from_numpy(np.ascontiguousarray(img)[None]), plans)[0].numpy()


def _grey(rows) -> np.ndarray:
    a = np.asarray(rows, dtype=np.uint8)
    return np.repeat(a[:, :, None], 3, axis=2)


def test_shear_by_hand():
    """shear_x 0.5 of [[0, 100], [0, 100]]: row y samples x + .5 + .5 (y + .5) - .5, i.e.
    x + .25 (row 0) and x + .75 (row 1); bilinear between the columns, the right neighbour
    clamped, black once the source point reaches x = 2: [[25, 100], [75, 0]]."""
    got = _run(_grey([[0, 100], [0, 100]]), OpCall("shear_x", 0.5))
    assert np.array_equal(got[..., 0], [[25, 100], [75, 0]])
    assert np.array_equal(got, np.asarray(apply_op_exact(Image.fromarray(
        _grey([[0, 100], [0, 100]])), OpCall("shear_x", 0.5))))


def test_colour_ops_by_hand():
    img = _grey([[10, 12], [15, 20]])
    # autocontrast: lo 10, hi 20 -> int((i - 10) * 25.5)
    assert np.array_equal(_run(img, OpCall("autocontrast"))[..., 0], [[0, 51], [127, 255]])
    # equalize: 4 pixels, last used level 20 holds 1 -> step (4 - 1) // 255 = 0: identity
    assert np.array_equal(_run(img, OpCall("equalize")), img)
    # posterize 4 bits: i & 0xF0; solarize 13: values >= 13 become 255 - v
    assert np.array_equal(_run(img, OpCall("posterize", 4))[..., 0], [[0, 0], [0, 16]])
    assert np.array_equal(_run(img, OpCall("solarize", 13))[..., 0], [[10, 12], [240, 235]])
    # rotate 180: both axes reversed; translate_x 1: out(x) = in(x + 1), black past the edge
    assert np.array_equal(_run(img, OpCall("rotate", 180))[..., 0], [[20, 15], [12, 10]])
    assert np.array_equal(_run(img, OpCall("translate_x", 1))[..., 0], [[12, 0], [20, 0]])


def test_equalize_by_hand_with_a_step():
    """600 pixels: 300 at 0, 299 at 100, 1 at 200; step = (600 - 1) // 255 = 2, lut[i] =
    (1 + #pixels below i) // 2: 0 -> 0, 100 -> 150, 200 -> 299 clipped to 255."""
    a = np.zeros((20, 30), dtype=np.uint8)
    a.ravel()[300:599] = 100
    a.ravel()[599] = 200
    got = _run(_grey(a), OpCall("equalize"))[..., 0]
    assert sorted(np.unique(got).tolist()) == [0, 150, 255]
    assert np.array_equal(got, np.asarray(apply_op_exact(Image.fromarray(_grey(a)),
                                                         OpCall("equalize")))[..., 0])


def _images(rng, n, size):
    out = []
    for k in range(n):
        a = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        if k % 4 == 1:   # a smooth ramp: bilinear blends of close values
            a = np.linspace(0, 255, size * size * 3).reshape(size, size, 3).astype(np.uint8)
        elif k % 4 == 2:   # a constant channel: autocontrast / equalize leave it
            a[..., 1] = 77
        elif k % 4 == 3:   # four levels a channel
            a = (a // 64 * 60 + 10).astype(np.uint8)
        out.append(a)
    return out


@pytest.mark.parametrize("size,severity", [(40, 1.0), (33, 10.0)])
def test_random_chains_equal_pillow(size, severity):
    """TPT's chains (severity 1) and stronger ones (severity 10: rotations up to 30 degrees,
    shears up to 0.3), three an image as in a view, run together: each equals PIL's."""
    rng = np.random.default_rng(0)
    imgs = _images(rng, 24, size)
    plans = [sample_plan(rng, severity, size, OPS) for _ in imgs]
    x = torch.from_numpy(np.stack([a for a in imgs for _ in range(3)]))
    got = ChainRunner()(x, np.concatenate([encode_plan(p, size) for p in plans])).numpy()
    k = 0
    for a, plan in zip(imgs, plans):
        for chain in plan.chains:
            want = np.asarray(apply_chain_exact(Image.fromarray(a), chain))
            assert np.array_equal(got[k], want), (k, chain)
            k += 1


@pytest.mark.parametrize("op", [OpCall("rotate", a) for a in (1, -2, 13.5, 90, 180, 270, -90)]
                         + [OpCall("shear_x", 0.3), OpCall("shear_y", -0.1),
                            OpCall("translate_x", -7), OpCall("translate_y", 50),
                            OpCall("posterize", 1), OpCall("posterize", 8),
                            OpCall("solarize", 0), OpCall("solarize", 231.5)],
                         ids=lambda op: f"{op.name}{op.magnitude:g}")
def test_single_ops_equal_pillow(op):
    """Pillow's fast paths (rotations by multiples of 90), large angles and shears, shifts past
    the image and the colour ops' extremes."""
    for a in _images(np.random.default_rng(1), 4, 30):
        assert np.array_equal(_run(a, op), np.asarray(apply_op_exact(Image.fromarray(a), op)))


def test_input_untouched_and_plans_checked():
    x = torch.from_numpy(np.stack(_images(np.random.default_rng(2), 2, 16)))
    before = x.clone()
    plans = np.zeros((2, 3, PLAN_WIDTH))
    plans[:, 0] = encode_op(OpCall("equalize"), 16)
    ChainRunner()(x, plans)
    assert torch.equal(x, before)
    with pytest.raises(ValueError, match="do not encode 2 chains"):
        ChainRunner()(x, plans[:1])
    with pytest.raises(ValueError, match="posterize bits=0"):
        encode_op(OpCall("posterize", 0), 16)


def test_triton_kernels_interpreted_equal_pillow():
    """The CUDA kernels' arithmetic (exact_ops_triton.py), run by Triton's interpreter on the
    CPU: Pillow's pixels (on a GPU the device probe checks the compiled kernels the same way)."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    from pathlib import Path
    here = Path(__file__).resolve()
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(here.parents[2]), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(here.with_name("exact_ops_interpreted.py"))],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.split() == ["ok", "54"]


def test_kernel_warm_up_starts_after_the_workers_fork_and_waits_for_others():
    """A fork beside a running thread can leave the child waiting on a lock the thread held: the
    loader joins any running warm-up before it forks, and starts its mixer's after."""
    import threading
    import time

    from argtca.views import exact_ops
    from argtca.views.loader import ViewsLoader
    events = []

    class Loader(list):
        def __iter__(self):
            events.append("fork")
            return super().__iter__()

    class Mixer:
        def warm_up(self):
            events.append("warm up")

    other = threading.Thread(target=lambda: (time.sleep(0.2), events.append("other done")))
    exact_ops._WARMING.add(other)
    other.start()
    ViewsLoader(Loader(), "cpu", group=1, mixer=Mixer()).start()
    assert events == ["other done", "fork", "warm up"] and not exact_ops._WARMING


@pytest.mark.parametrize("op", [OpCall("posterize", b) for b in range(1, 9)]
                         + [OpCall("solarize", t) for t in (0, 1, 100, 231.5, 255, 256)],
                         ids=lambda op: f"{op.name}{op.magnitude:g}")
def test_tables_at_every_level(op):
    """Posterize at every bit count and solarize at integer and fractional thresholds: every
    level 0..255 as Pillow maps it."""
    ramp = np.arange(256, dtype=np.uint8).reshape(16, 16)
    img = np.stack([ramp, ramp[::-1], ramp.T], axis=-1)
    assert np.array_equal(_run(img, op), np.asarray(apply_op_exact(Image.fromarray(img), op)))
