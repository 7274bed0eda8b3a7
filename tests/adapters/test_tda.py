"""TDA (argtca/adapters/tda.py): the caches' contents and the final logits of a short stream
worked out by hand with numpy, the confident-views summary, the per-dataset presets, an exact
state round trip mid-stream, and one demo run."""
import io
import os

import numpy as np
import pytest
import torch

from argtca.adapters.tda import TDAAdapter
import argtca.trainers  # noqa: F401  (registers the methods and their value checks)
from argtca.config import ConfigError, check_cfg_values, get_cfg_default
from toy_stream import FEATURES as F, TEXT, softmax

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCALE = 5.0


def make(name="Demo", **keys):
    cfg = get_cfg_default()
    cfg.DATASET.NAME = name
    for k, v in keys.items():
        if k == "SELECTION_P":
            cfg.TTA.SELECTION_P = v
        else:
            cfg.TRAINER.TDA[k] = v
    return TDAAdapter(cfg.TRAINER.TDA, cfg, torch.tensor(TEXT, dtype=torch.float32), SCALE)


def test_stream_caches_and_logits_by_hand():
    # one view per image. Probabilities softmax(5 f·t) and entropies H (nats), H / log2 3:
    #   f1: p = (.868, .103, .029), H = .460, .290 -> class 0, inside the negative gate (.2, .5)
    #   f2: p = (.025, .959, .016), H = .200, .126 -> class 1, outside
    #   f3: p = (.977, .012, .012), H = .126, .080 -> class 0, outside
    #   f4: p = (.709, .267, .023), H = .684, .432 -> class 0, inside
    a = make(POS_SHOT_CAPACITY=1, NEG_SHOT_CAPACITY=1, POS_ALPHA=2.0, POS_BETA=5.0,
             NEG_ALPHA=0.5, NEG_BETA=1.0, NEG_MASK_LOWER=0.05)
    mask1 = np.array([1., 1., 0.])          # f1's classes with .05 < p < 1
    # (class, key) of every positive entry, and (key, mask) of every negative one, after each
    # image: f3 replaces f1 in class 0 (lower entropy, the class is full at one entry); f4 has a
    # higher entropy than f3 (positive) and than f1 (negative) and replaces neither
    pos = {1: [(0, F[1])], 2: [(0, F[1]), (1, F[2])], 3: [(0, F[3]), (1, F[2])],
           4: [(0, F[3]), (1, F[2])]}
    neg = {1: [(F[1], mask1)], 2: [(F[1], mask1)], 3: [(F[1], mask1)], 4: [(F[1], mask1)]}
    for i in (1, 2, 3, 4):
        f = F[i]
        expected = SCALE * TEXT @ f
        for k, key in pos[i]:
            expected[k] += 2.0 * np.exp(-5.0 * (1 - f @ key))
        for key, m in neg[i]:
            expected -= 0.5 * np.exp(-1.0 * (1 - f @ key)) * m
        got = a.step(torch.tensor(f, dtype=torch.float32)[None])
        np.testing.assert_allclose(got.numpy(), softmax(expected), rtol=1e-5, atol=1e-7)
    st = a.state
    assert st["pos"]["count"].tolist() == [1, 1, 0]
    assert st["neg"]["count"].tolist() == [1, 0, 0]
    np.testing.assert_allclose(st["pos"]["keys"][0, 0].numpy(), F[3], rtol=1e-6)
    np.testing.assert_allclose(st["pos"]["keys"][1, 0].numpy(), F[2], rtol=1e-6)
    np.testing.assert_allclose(st["neg"]["keys"][0, 0].numpy(), F[1], rtol=1e-6)
    np.testing.assert_array_equal(st["neg"]["mask"][0, 0].numpy(), mask1)


def test_full_class_keeps_its_lowest_entropy_entries():
    # capacity 2: f1 (H .460), f4 (.684), then f3 (.126) evicts the highest, f4
    a = make(POS_SHOT_CAPACITY=2, NEG_ENABLED=False)
    for i in (1, 4, 3):
        a.step(torch.tensor(F[i], dtype=torch.float32)[None])
    keys = a.state["pos"]["keys"][0].numpy()
    assert a.state["pos"]["count"].tolist() == [2, 0, 0]
    held = [j for j in (1, 3, 4) if any(np.allclose(k, F[j], atol=1e-6) for k in keys)]
    assert held == [1, 3]


def test_confident_views_summary_by_hand():
    # views f1..f4 of one image; SELECTION_P .5 keeps the two lowest-entropy views, f3 and f2
    a = make(VIEWS="confident", SELECTION_P=0.5, POS_ALPHA=2.0, POS_BETA=5.0, NEG_ALPHA=0.5,
             NEG_BETA=1.0)
    views = np.stack([F[1], F[2], F[3], F[4]])
    sel_logits = SCALE * np.stack([F[3], F[2]]) @ TEXT.T
    fbar = (F[3] + F[2]) / 2                # the key: the mean, not re-normalised
    mean_logits = sel_logits.mean(0)
    pbar = np.mean([softmax(x) for x in sel_logits], axis=0)
    H = -(pbar * np.log(pbar)).sum()
    pred = int(np.argmax(mean_logits))
    expected = mean_logits.copy()
    expected[pred] += 2.0 * np.exp(-5.0 * (1 - fbar @ fbar))
    if 0.2 < H / np.log2(3) < 0.5:
        expected -= 0.5 * np.exp(-1.0 * (1 - fbar @ fbar)) * ((pbar > .03) & (pbar < 1.0))
    got = a.step(torch.tensor(views, dtype=torch.float32))
    np.testing.assert_allclose(got.numpy(), softmax(expected), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(a.state["pos"]["keys"][pred, 0].numpy(), fbar, rtol=1e-6)
    np.testing.assert_allclose(float(a.state["pos"]["entropy"][pred, 0]), H, rtol=1e-5)
    # "original" (the cross-domain protocol) reads view 0 alone: f1's zero-shot logits + cache
    b = make(VIEWS="original", POS_ALPHA=2.0, POS_BETA=5.0, NEG_ENABLED=False)
    expected = SCALE * TEXT @ F[1]
    expected[0] += 2.0
    np.testing.assert_allclose(b.step(torch.tensor(views, dtype=torch.float32)).numpy(),
                               softmax(expected), rtol=1e-5, atol=1e-7)


def test_presets_and_auto_views():
    a = make("Caltech101")
    assert (a.pos_alpha, a.pos_beta, a.views) == (5.0, 5.0, "original")
    a = make("ImageNetSketch")
    assert (a.pos_alpha, a.pos_beta, a.views) == (2.363, 7.45, "confident")
    a = make("ImageNet")
    assert (a.pos_alpha, a.pos_beta, a.views) == (2.0, 5.0, "original")
    a = make("Demo", POS_ALPHA=0.5)
    assert (a.pos_alpha, a.pos_beta) == (0.5, 5.0)


def test_state_round_trip_mid_stream_is_exact():
    g = torch.Generator().manual_seed(0)
    text = torch.nn.functional.normalize(torch.randn(6, 8, generator=g), dim=-1)
    imgs = torch.nn.functional.normalize(torch.randn(40, 8, 8, generator=g), dim=-1)
    cfg = get_cfg_default()
    cfg.TRAINER.TDA.VIEWS = "confident"
    a = TDAAdapter(cfg.TRAINER.TDA, cfg, text, 4.0)
    a(imgs[:20])
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = TDAAdapter(cfg.TRAINER.TDA, cfg, text, 4.0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert int(b.state["neg"]["count"].sum()) > 0 and int(b.state["pos"]["count"].sum()) > 0
    assert torch.equal(a(imgs[20:]), b(imgs[20:]))


def test_config_ranges_refused():
    cfg = get_cfg_default()
    cfg.TRAINER.TDA.NEG_ENTROPY_UPPER = 0.1           # not above the lower bound 0.2
    cfg.TRAINER.TDA.POS_ALPHA = -2.0                  # only -1 means "the official value"
    cfg.TRAINER.TDA.VIEWS = "all"
    cfg.TRAINER.DMN.MEMORY_SIZE = 0
    with pytest.raises(ConfigError) as e:
        check_cfg_values(cfg)
    for key in ("TRAINER.TDA.NEG_ENTROPY_UPPER=0.1", "TRAINER.TDA.POS_ALPHA=-2.0",
                "TRAINER.TDA.VIEWS='all'", "TRAINER.DMN.MEMORY_SIZE=0"):
        assert key in str(e.value)
    check_cfg_values(get_cfg_default())               # the defaults pass
