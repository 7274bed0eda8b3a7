"""Selective prediction (risk-coverage, AURC, E-AURC) and OOD detection (AUROC, FPR at 95% TPR)
on examples worked out by hand (argtca/metrics.py's docstring states the rules)."""
import itertools

import numpy as np
import pytest

from argtca.metrics import aurc, eaurc, fpr_at_tpr, ood_auroc, risk_coverage


def test_aurc_by_hand_with_a_tie():
    # confidences 0.9 0.8 0.8 0.6 0.5, correct 1 0 1 1 0 (the tie: one wrong, one right at 0.8).
    # sorted highest first; cumulative errors at k = 1..5: 0, 0.5, 1, 1, 2 (the tied group of
    # 2 images with 1 error adds 1/2 error per image); risk = errors / k:
    #   0, 0.25, 1/3, 0.25, 0.4  -> AURC = (0 + 0.25 + 1/3 + 0.25 + 0.4) / 5 = 0.246667
    # (= the mean of the two orders of the tie: wrong first 1.48333/5, right first 0.98333/5)
    # optimum with 2 errors of 5: risks 0, 0, 0, 1/4, 2/5 -> 0.65 / 5 = 0.13
    # E-AURC = 0.246667 - 0.13 = 0.116667
    conf = [0.9, 0.8, 0.8, 0.6, 0.5]
    correct = [1, 0, 1, 1, 0]
    rc = risk_coverage(conf, correct)
    assert rc["coverage"] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert rc["risk"] == pytest.approx([0, 0.25, 1 / 3, 0.25, 0.4])
    assert aurc(conf, correct) == pytest.approx(1.2333333333 / 5)
    assert eaurc(conf, correct) == pytest.approx(1.2333333333 / 5 - 0.13)
    # the record order does not matter (the tie is never broken by position)
    assert aurc(conf[::-1], correct[::-1]) == pytest.approx(aurc(conf, correct))


def test_ties_are_the_mean_over_every_order_of_the_tied_images():
    rng = np.random.default_rng(1)
    for _ in range(40):
        n = int(rng.integers(2, 6))
        conf = rng.integers(0, 3, n) / 3.0
        ok = rng.random(n) < 0.5
        areas = []
        for p in itertools.permutations(range(n)):
            o = np.argsort(-conf[list(p)], kind="stable")
            err = np.cumsum(~ok[list(p)][o])
            areas.append(np.mean(err / np.arange(1, n + 1)))
        assert aurc(conf, ok) == pytest.approx(np.mean(areas))


def test_eaurc_is_zero_for_a_perfect_ranking_and_aurc_the_error_for_a_constant():
    # every correct image more confident than every wrong one: the optimum itself
    assert eaurc([0.9, 0.8, 0.3, 0.2], [1, 1, 0, 0]) == pytest.approx(0.0)
    # one confidence for all: every coverage sees the overall error rate (2 of 4)
    assert aurc([0.5] * 4, [1, 0, 1, 0]) == pytest.approx(0.5)
    # all wrong first: risk 1, 1, 2/3, 1/2 -> mean 19/24
    assert aurc([0.9, 0.8, 0.3, 0.2], [0, 0, 1, 1]) == pytest.approx(19 / 24)
    with pytest.raises(ValueError, match="no samples"):
        aurc([], [])


def test_auroc_mann_whitney_by_hand():
    # ID 0.9 0.7 0.5, OOD 0.6 0.5: pairs (ID > OOD) = 0.9: 2, 0.7: 2, 0.5: 0 and one tie
    # (0.5 = 0.5) counting 1/2 -> U = 4.5 of 3 x 2 = 6 pairs -> AUROC 0.75
    assert ood_auroc([0.9, 0.7, 0.5], [0.6, 0.5]) == pytest.approx(0.75)
    assert ood_auroc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert ood_auroc([0.1, 0.2], [0.9, 0.8]) == 0.0
    assert ood_auroc([0.5, 0.5], [0.5]) == 0.5
    with pytest.raises(ValueError, match="both sets"):
        ood_auroc([0.5], [])


def test_fpr_at_95_tpr_nearest_rate_and_lowest_threshold():
    # 15 ID scores 16, 17, ..., 30; OOD 10, 16, 16.5, 20. TPR can be 14/15 = 0.9333 (|gap|
    # 0.0167) or 15/15 = 1 (|gap| 0.05): 14/15 is nearest. The thresholds giving 14/15 are
    # 17 and 16.5 (an OOD score between the 14th and 15th ID scores); the lowest, 16.5, is
    # chosen: OOD scores >= 16.5 are 16.5 and 20 -> FPR 2/4 = 0.5. (A "TPR >= 95%" rule would
    # take t = 16 and give 3/4; the highest threshold of TPR 14/15, t = 17, would give 1/4.)
    id_scores = list(range(16, 31))
    assert fpr_at_tpr(id_scores, [10, 16, 16.5, 20]) == pytest.approx(0.5)
    # 20 ID scores 1..20: TPR 19/20 = 0.95 exactly at t = 2 (next lower ID score 1);
    # OOD 0.5, 1.5, 2, 7: >= 1.5 (the lowest threshold of TPR 19/20) are 1.5, 2, 7 -> 3/4
    assert fpr_at_tpr(list(range(1, 21)), [0.5, 1.5, 2, 7]) == pytest.approx(0.75)
    # separable: no OOD score reaches the lowest ID score
    assert fpr_at_tpr([0.9, 0.8, 0.7], [0.1, 0.2]) == 0.0
    with pytest.raises(ValueError, match="tpr"):
        fpr_at_tpr([1], [0], tpr=0)
