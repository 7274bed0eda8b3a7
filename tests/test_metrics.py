import math

import numpy as np
import pytest

from argtca.metrics import (RunningCalibration, adaptive_ece, bin_index, compute_metrics,
                            expected_calibration_error, reliability_bins)

# Hand-made example (conf, correct), N = 8:
#   a 0.05 ok  -> bin 0 (0, .05]          (on an edge: goes to the LOWER bin)
#   b 0.10 bad -> bin 1 (.05, .10]        (on an edge)
#   c 0.12 ok  -> bin 2 (.10, .15]
#   d 0.50 ok, e 0.50 bad -> bin 9 (.45, .50]
#   f 0.90 ok  -> bin 18: the official upper edge of bin 17 is float32(0.9) = 0.89999997...,
#                 below the Python float 0.9, so 0.9 lies in (0.89999997, 0.95000000]
#   g 1.00 ok  -> bin 19 (.95, 1]
#   h 0.00 bad -> no bin (C-TPT quirk), still counts in N
CONF = [0.05, 0.10, 0.12, 0.50, 0.50, 0.90, 1.00, 0.00]
CORRECT = [1, 0, 1, 1, 0, 1, 1, 0]
LABEL = [3, 3, 3, 3, 3, 3, 3, 3]
PRED = [3 if k else 0 for k in CORRECT]


def ctpt_reference_ece(conf, correct, n_bins=20):
    """Brute-force port of the C-TPT ECE_Loss loop (bin = lower < conf <= upper, the edges
    torch.linspace(0, 1, n_bins + 1) values as Python floats)."""
    import torch
    edges = torch.linspace(0, 1, n_bins + 1)
    conf = np.asarray(conf, dtype=float)
    correct = np.asarray(correct, dtype=float)
    ece = 0.0
    for b in range(n_bins):
        lo, hi = edges[b].item(), edges[b + 1].item()
        m = (conf > lo) & (conf <= hi)
        if m.mean() > 0:
            ece += abs(conf[m].mean() - correct[m].mean()) * m.mean()
    return ece


def test_bin_index_left_open_edges():
    got = bin_index([0.05, 0.0500001, 0.1, 0.15, 0.0, 1.0, 1.0000001, -0.2, 0.951])
    assert got.tolist() == [0, 1, 1, 2, -1, 19, -1, -1, 19]
    assert bin_index(np.float32([0.05, 0.1, 0.35])).tolist() == [0, 1, 6]


def test_confidences_exactly_at_every_official_edge():
    """The official edges are float32 linspace values read back as Python floats:
    e_i = 0.05000000074.., 0.10000000149.., .., e_7 = 0.34999999403.., e_9 = 0.45000001788..
    (NOT float32(0.45) = 0.44999998807..), .., e_18 = 0.89999997615.., e_19 = 0.94999998807.."""
    import torch
    edges = torch.linspace(0, 1, 21)
    # float32 tensors holding exactly the edge values: conf == upper edge -> the lower bin
    want = [-1] + list(range(20))
    assert bin_index(edges).tolist() == want
    assert bin_index(edges.numpy()).tolist() == want
    assert bin_index([e.item() for e in edges]).tolist() == want     # the same values as floats
    # e_9 differs from float32(0.45): a float32 of 0.45 is below e_9 (bin 8); e_9 itself is in 8
    assert bin_index(np.float32([0.45])).tolist() == [8]
    assert bin_index(torch.tensor([0.45])).tolist() == [8]
    # Python floats i/20: worked out from the float32 values of the edges, i/20 lies above e_i
    # for i = 7, 13, 14, 18, 19 (e_i < i/20) and so falls in bin i; else on/below: bin i - 1
    above = {7, 13, 14, 18, 19}
    want_py = [-1] + [i if i in above else i - 1 for i in range(1, 21)]
    assert bin_index([i / 20 for i in range(21)]).tolist() == want_py
    for i in range(1, 21):
        assert (edges[i].item() < i / 20) == (i in above)
    # ECE on confidences at every edge (both kinds) equals the port of the official loop
    rng = np.random.default_rng(0)
    for conf in ([e.item() for e in edges[1:]] * 3, [i / 20 for i in range(1, 21)] * 3):
        correct = rng.random(len(conf)) < 0.6
        ece = compute_metrics(conf, correct.astype(int), np.ones(len(conf), int))["ece"]
        assert ece / 100 == pytest.approx(ctpt_reference_ece(conf, correct), abs=1e-12)
    # and differs from float64 edges i/20 for these Python floats (so the rule matters): there
    # each i/20 is alone in bin i-1; officially 0.35 and 0.40 share bin 7 (gaps .35 and .6 -> .125)
    conf = [i / 20 for i in range(1, 21)]
    correct = np.array([0, 1] * 10)
    naive = sum(abs(c - k) for c, k in zip(conf, correct)) / 20
    official = compute_metrics(conf, correct, np.ones(20, int))["ece"] / 100
    assert official == pytest.approx(ctpt_reference_ece(conf, correct))
    assert abs(official - naive) > 0.01


def test_compute_metrics_by_hand():
    m = compute_metrics(CONF, PRED, LABEL)
    assert m["n"] == 8
    assert m["accuracy"] == pytest.approx(100 * 5 / 8)
    # gaps: bin0 |1-.05|=.95, bin1 |0-.10|=.10, bin2 |1-.12|=.88, bin9 |.5-.5|=0,
    # bin18 |1-.9|=.1, bin19 |1-1|=0; every bin has one sample except bin 9 (two)
    ece = (0.95 * 1 + 0.10 * 1 + 0.88 * 1 + 0.0 * 2 + 0.1 * 1 + 0.0 * 1) / 8
    assert m["ece"] == pytest.approx(100 * ece)
    assert m["mce"] == pytest.approx(100 * 0.95)
    # default 20 equal-mass bins with 8 samples -> one sample per bin: mean |correct - conf|
    ada20 = (0.95 + 0.10 + 0.88 + 0.5 + 0.5 + 0.1 + 0.0 + 0.0) / 8
    assert m["adaece"] == pytest.approx(100 * ada20)
    assert m["nll"] is None and m["brier"] is None
    assert m["ece"] / 100 == pytest.approx(ctpt_reference_ece(CONF, CORRECT))


def test_edge_rule_changes_the_result():
    # if 0.05 went to (0.05, 0.10] with b, that bin would have acc .5, conf .075 -> different
    wrong_rule = (abs(0.5 - 0.075) * 2 + 0.88 + 0.1) / 8
    assert compute_metrics(CONF, PRED, LABEL)["ece"] != pytest.approx(100 * wrong_rule)


def test_adaece_equal_mass_by_hand():
    # sorted: h .00 x, a .05 v, b .10 x | c .12 v, d .50 v, e .50 x | f .90 v, g 1.0 v
    # (array_split of 8 into 3 -> sizes 3, 3, 2)
    expected = (abs(1 - 0.15) + abs(2 - 1.12) + abs(2 - 1.90)) / 8
    assert adaptive_ece(CONF, CORRECT, n_bins=3) == pytest.approx(expected)
    assert compute_metrics(CONF, PRED, LABEL, n_bins=3)["adaece"] == pytest.approx(100 * expected)


def test_mce_picks_largest_nonempty_bin():
    conf = [0.30, 0.30, 0.80, 0.62]
    correct = [1, 1, 0, 1]
    # bin (.25,.30]: acc 1 conf .3 -> .7 ; bin (.75,.8]: .8 ; bin (.6,.65]: .38
    m = compute_metrics(conf, correct, [1, 1, 1, 1])
    assert m["mce"] == pytest.approx(80.0)
    assert m["ece"] == pytest.approx(100 * (0.7 * 2 + 0.8 + 0.38) / 4)


def test_nll_and_brier():
    p_label = [0.5, 0.25, 1.0, 0.0]
    m = compute_metrics([0.5, 0.6, 1.0, 0.9], [1, 0, 2, 1], [1, 1, 2, 0], p_label=p_label,
                        brier=[0.5, 0.9, 0.0, 1.62])
    nll = (math.log(2) + math.log(4) + 0.0 - math.log(1e-12)) / 4   # p = 0 clamped at 1e-12
    assert m["nll"] == pytest.approx(nll)
    # per-image Brier from probability vectors, by hand
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]])
    b = [(0.7 - 1) ** 2 + 0.2 ** 2 + 0.1 ** 2, 0.1 ** 2 + 0.6 ** 2 + (0.3 - 1) ** 2]
    m2 = compute_metrics(probs.max(1), [0, 1], [0, 2], p_label=[0.7, 0.3], brier=b)
    assert m2["brier"] == pytest.approx((0.14 + 0.86) / 2)
    assert m2["accuracy"] == pytest.approx(50.0)


def test_reliability_bins():
    b = reliability_bins(CONF, CORRECT)
    assert b["count"].sum() == 7                       # conf 0 is in no bin
    assert b["count"][[0, 1, 2, 9, 18, 19]].tolist() == [1, 1, 1, 2, 1, 1]
    assert b["acc"][9] == pytest.approx(0.5) and b["conf"][9] == pytest.approx(0.5)
    assert np.isnan(b["acc"][3]) and np.isnan(b["conf"][3])
    assert b["lower"][1] == pytest.approx(0.05) and b["upper"][1] == pytest.approx(0.10)


def test_matches_bruteforce_on_random_data():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 997)
    conf[:40] = rng.integers(0, 21, 40) / 20          # many exact edges, including 0 and 1
    correct = rng.uniform(size=997) < conf
    m = compute_metrics(conf, correct.astype(int), np.ones(997, int))
    assert m["ece"] / 100 == pytest.approx(ctpt_reference_ece(conf, correct), abs=1e-12)
    assert expected_calibration_error(conf, correct) == pytest.approx(m["ece"] / 100)


def test_running_calibration_equals_compute_metrics():
    rng = np.random.default_rng(1)
    conf = rng.uniform(0, 1, 300)
    conf[:30] = rng.integers(0, 21, 30) / 20
    correct = rng.uniform(size=300) < conf ** 2
    rc = RunningCalibration()
    assert rc.ece == 0.0 and rc.accuracy == 0.0
    i = 0
    for size in [1, 1, 7, 50, 1, 100, 140]:            # scalars and batches
        if size == 1:
            rc.update(float(conf[i]), bool(correct[i]))
        else:
            rc.update(conf[i:i + size], correct[i:i + size])
        i += size
    assert i == 300 and rc.n == 300
    m = compute_metrics(conf, correct.astype(int), np.ones(300, int))
    assert rc.ece == pytest.approx(m["ece"], abs=1e-9)
    assert rc.accuracy == pytest.approx(m["accuracy"])
    assert rc.count.shape == (20,)                      # O(n_bins) state
    assert set(rc.postfix()) == {"acc", "ece"}


def test_torch_tensors_accepted():
    torch = pytest.importorskip("torch")
    m_np = compute_metrics(CONF, PRED, LABEL)
    m_t = compute_metrics(torch.tensor(CONF, dtype=torch.float64), torch.tensor(PRED),
                          torch.tensor(LABEL))
    assert m_t == pytest.approx(m_np)


def test_bad_inputs():
    with pytest.raises(ValueError, match="same length"):
        compute_metrics([0.5, 0.6], [1], [1, 1])
    with pytest.raises(ValueError, match="non-finite"):
        compute_metrics([0.5, float("nan")], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="no samples"):
        compute_metrics([], [], [])
