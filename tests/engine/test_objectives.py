"""Each objective against an independent hand/loop computation on a few vectors."""
import math

import numpy as np
import pytest
import torch
from yacs.config import CfgNode as CN

from argtca.engine import objectives as O


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_avg_entropy_matches_hand_computation():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    pbar = p.mean(0)
    want = -(pbar * np.log(pbar)).sum()
    got = O.avg_entropy(torch.tensor(logits, dtype=torch.float32)[None])
    assert got.shape == (1,)
    assert abs(float(got[0]) - want) < 1e-6


def test_selection_keeps_lowest_entropy_views_with_stable_ties():
    # view entropies: confident views are 3 and 7; views 1 and 5 tie
    scores = torch.zeros(1, 10, 4)
    scores[0, 3] = torch.tensor([9.0, 0, 0, 0])
    scores[0, 7] = torch.tensor([5.0, 0, 0, 0])
    scores[0, 1] = torch.tensor([2.0, 0, 0, 0])
    scores[0, 5] = torch.tensor([2.0, 0, 0, 0])
    idx = O.select_confident(scores, 0.3)  # int(10*0.3) = 3
    assert idx.tolist() == [[3, 7, 1]]
    assert O.select_confident(torch.randn(2, 64, 5), 0.1).shape == (2, 6)


def test_atfd_by_hand():
    t = _unit([[1, 0], [0, 1], [1, 1]])
    mean = t.mean(0)
    want = np.mean([np.linalg.norm(v - mean) for v in t])
    assert abs(float(O.atfd(torch.tensor(t)[None])[0]) - want) < 1e-9


def _householder_orth(W):
    """O-TPT's official construction, line by line (numpy loops)."""
    G = W @ W.T
    C = G.shape[0]
    M = np.linalg.norm(G, axis=0)
    rows = []
    for i in range(C):
        e = np.zeros(C); e[i] = 1.0
        u = G[i] - M[i] * e
        v = u / np.linalg.norm(u)
        H = np.eye(C) - 2 * np.outer(v, v)
        hx = H @ G[i]
        rows.append(np.linalg.norm(hx - e))
    return np.mean(rows)


def test_orthogonality_equals_official_householder_form():
    rng = np.random.default_rng(0)
    W = _unit(rng.normal(size=(5, 8)))
    want = _householder_orth(W)
    got = float(O.orthogonality(torch.tensor(W)[None])[0])
    assert abs(got - want) < 1e-9
    # and the closed form mean_i(sqrt(1 + sum_{j!=i} cos^2) - 1)
    G = W @ W.T
    closed = np.mean([math.sqrt(1 + sum(G[i, j] ** 2 for j in range(5) if j != i)) - 1
                      for i in range(5)])
    assert abs(got - closed) < 1e-9


def test_angular_diversity_by_hand():
    t = _unit([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1]])
    vals = []
    for i in range(4):
        m = max(float(t[i] @ t[j]) for j in range(4) if j != i)
        vals.append(math.acos(min(max(m, -0.99999), 0.99999)))
    got = float(O.angular_diversity(torch.tensor(t)[None], 0.99999)[0])
    assert abs(got - np.mean(vals)) < 1e-9
    # identical vectors are clamped, not NaN
    same = torch.tensor(_unit([[1, 0], [1, 0]]))[None]
    assert torch.isfinite(O.angular_diversity(same)).all()


def test_tca_terms_by_hand():
    rng = np.random.default_rng(1)
    K, M, D = 3, 2, 4
    f = _unit(rng.normal(size=(K * M, D)))
    mus = [f[k * M:(k + 1) * M].mean(0) for k in range(K)]
    mu = np.mean(mus, axis=0)
    inter = np.mean([np.linalg.norm(m - mu) for m in mus])
    intra = np.mean([np.mean([np.linalg.norm(f[k * M + m] - mus[k]) for m in range(M)])
                     for k in range(K)])
    gi, ga = O.tca_terms(torch.tensor(f)[None], M)
    assert abs(float(gi[0]) - inter) < 1e-9 and abs(float(ga[0]) - intra) < 1e-9


def _tca_node(mode="prob", m=2):
    n = CN()
    n.NUM_ATTRIBUTES, n.ALPHA, n.BETA, n.ENTROPY_INPUT = m, 10.0, 35.0, mode
    return n


def test_tca_probability_is_bag_of_attribute_softmax():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(1, 3, 6)) * 3  # B=1, V=3 views, K=3 classes x M'=2
    obj = O.TCAObjective(_tca_node("prob"))
    p = obj.probs(torch.tensor(logits, dtype=torch.float64))
    e = np.exp(logits)
    want = (np.stack([e[..., 2 * k:2 * k + 2].sum(-1) for k in range(3)], -1)
            / e.sum(-1, keepdims=True))
    assert np.allclose(p.numpy(), want, atol=1e-6)
    # official mode: TPT's entropy sees probabilities as logits; paper mode: log-probabilities
    assert np.allclose(obj.scores(torch.tensor(logits)).numpy(), want, atol=1e-6)
    paper = O.TCAObjective(_tca_node("logprob"))
    assert np.allclose(paper.scores(torch.tensor(logits)).numpy(), np.log(want), atol=1e-5)
    with pytest.raises(ValueError, match="ENTROPY_INPUT"):
        O.TCAObjective(_tca_node("bogus"))


def test_full_losses_combine_terms_with_paper_signs():
    rng = np.random.default_rng(3)
    text = torch.tensor(_unit(rng.normal(size=(1, 4, 5))), dtype=torch.float32)
    sel = torch.tensor(rng.normal(size=(1, 6, 4)), dtype=torch.float32)
    H = O.avg_entropy(sel)
    n = CN(); n.LAMBDA = 50.0
    assert torch.allclose(O.CTPTObjective(n).loss(sel, text), H - 50 * O.atfd(text))
    n = CN(); n.LAMBDA = 18.0
    assert torch.allclose(O.OTPTObjective(n).loss(sel, text), H + 18 * O.orthogonality(text))
    n = CN(); n.LAMBDA, n.TAU = 80.0, 0.99999
    assert torch.allclose(O.ATPTObjective(n).loss(sel, text), H - 80 * O.angular_diversity(text))
    obj = O.TCAObjective(_tca_node("prob"))
    inter, intra = O.tca_terms(text, 2)
    assert torch.allclose(obj.loss(sel[..., :2], text),
                          O.avg_entropy(sel[..., :2]) - 10 * inter + 35 * intra)
    assert torch.allclose(O.TPTObjective().loss(sel, text), H)
