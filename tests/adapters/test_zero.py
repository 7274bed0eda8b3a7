"""ZERO (argtca/adapters/zero.py): the vote of the confident views, recomputed by hand and by a
plain per-image port of the official rule; one run on the demo."""
import os

import numpy as np
import pytest
import torch

from argtca.adapters.zero import Zero
import argtca.trainers  # noqa: F401  (registers the methods and their value checks)
from argtca.config import ConfigError, check_cfg_values, get_cfg_default

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K = 4


def make(output="vote", temperature=0.0, p=0.3, scale=10.0, text=None):
    cfg = get_cfg_default()
    cfg.TTA.SELECTION_P = p
    cfg.TRAINER.ZERO.OUTPUT = output
    cfg.TRAINER.ZERO.TEMPERATURE = temperature
    text = torch.eye(K) if text is None else text
    return Zero(cfg.TRAINER.ZERO, cfg, text, scale)


def view(cls, spread, extra=None):
    """A unit feature (text = the identity: its logits are scale · feature) leaning to ``cls``;
    a larger ``spread`` means a flatter softmax (higher entropy)."""
    w = np.full(K, spread)
    w[cls] += 1.0
    if extra is not None:
        w[extra[0]] += extra[1]
    return w / np.linalg.norm(w)


def entropy(x, scale=10.0):
    z = scale * x
    p = np.exp(z - z.max())
    p /= p.sum()
    return -(p * np.log(p)).sum()


# Three images of V = 10 views (int(10 · 0.3) = 3 kept), each (class, spread[, extra]):
# 1. kept views vote 2, 2, 1 (view 0 among them): class 2, votes (0, 1, 2, 0) / 3;
# 2. kept vote 0, 1, 3 (a three-way tie); the left-out views by entropy vote 2 (not tied), then
#    3: class 3 wins and gets the extra vote, (1, 1, 0, 2) / 4;
# 3. kept vote 0, 1, 2; every left-out view votes 3 (no tied class): the first left-out view's
#    highest tied logit decides (class 1, its 0.5 extra on class 1), (1, 2, 1, 0) / 4.
IMAGES = [
    [(2, 0.00), (1, 0.10), (2, 0.05), (3, 0.90), (0, 1.00), (1, 1.10), (3, 1.20), (0, 1.30),
     (1, 1.40), (2, 1.50)],
    [(0, 0.00), (2, 0.60), (1, 0.05), (3, 0.70), (3, 0.10), (0, 0.80), (2, 0.90), (1, 1.00),
     (2, 1.10), (0, 1.20)],
    [(0, 0.05), (3, 0.80, (1, 0.5)), (1, 0.00), (2, 0.10), (3, 2.0), (3, 2.1), (3, 2.2),
     (3, 2.3), (3, 2.4), (3, 2.5)],
]
EXPECTED = [np.array([0, 1, 2, 0]) / 3, np.array([1, 1, 0, 2]) / 4, np.array([1, 2, 1, 0]) / 4]
KEPT = [{0, 1, 2}, {0, 2, 4}, {0, 2, 3}]
FIRST_LEFT_OUT = [None, 1, 1]


def hand_images():
    feats = np.stack([np.stack([view(*v) for v in img]) for img in IMAGES])
    # the designed entropy order holds (so the expectations above are the rule's)
    for b, img in enumerate(feats):
        order = np.argsort([entropy(x) for x in img], kind="stable")
        assert set(order[:3].tolist()) == KEPT[b]
        if FIRST_LEFT_OUT[b] is not None:
            assert order[3] == FIRST_LEFT_OUT[b]
    return torch.tensor(feats, dtype=torch.float32)


def test_zero_votes_and_tie_breaks_by_hand():
    probs = make()(hand_images())
    np.testing.assert_allclose(probs.numpy(), np.stack(EXPECTED), atol=1e-6)


def test_zero_onehot_output_is_the_prediction():
    probs = make(output="onehot")(hand_images())
    np.testing.assert_array_equal(probs.numpy(), np.eye(K)[[2, 3, 1]])


def official_rule(logits, p, temperature=0.0, scale=10.0):
    """A plain per-image port of ZERO's rule (ttas/zero.py, greedy_break with the tie-break
    fallback as intended): [V, K] logits -> normalised p_bar."""
    V = len(logits)
    z = logits - logits.max(1, keepdims=True)
    pr = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    ent = -(pr * np.log(np.maximum(pr, 1e-300))).sum(1)
    order = np.argsort(ent, kind="stable")
    n = max(1, int(V * p))
    kept = order[:n]
    if temperature > 0:
        pbar = np.zeros(K)
        for v in kept:
            s = logits[v] / (scale * temperature)
            e = np.exp(s - s.max())
            pbar += e / e.sum()
    else:
        pbar = np.bincount(logits[kept].argmax(1), minlength=K).astype(float)
    ties = [c for c in range(K) if pbar[c] == pbar.max()]
    if len(ties) > 1:
        rest = logits[order[n:]]
        pred = None
        for row in rest:
            if row.argmax() in ties:
                pred = row.argmax()
                break
        if pred is None:
            pred = max(ties, key=lambda c: rest[0][c])
        pbar[pred] += 1
    return pbar / pbar.sum()


@pytest.mark.parametrize("temperature", [0.0, 0.05])
def test_zero_matches_a_per_image_port_on_random_batches(temperature):
    g = torch.Generator().manual_seed(0)
    text = torch.nn.functional.normalize(torch.randn(K, 8, generator=g), dim=-1)
    img = torch.nn.functional.normalize(torch.randn(64, 12, 8, generator=g), dim=-1)
    probs = make(temperature=temperature, p=0.25, text=text)(img).double().numpy()
    logits = (10.0 * img @ text.t()).double().numpy()
    want = np.stack([official_rule(lg, 0.25, temperature) for lg in logits])
    np.testing.assert_allclose(probs, want, atol=1e-5)
    if temperature == 0:
        # 3 kept views: a tie is a three-way one, broken to votes (2, 1, 1) / 4
        n_ties = sum(np.isclose(w.max(), 0.5) for w in want)
        assert n_ties > 0, "the batch exercises the tie-break"


def test_zero_config_checks():
    cfg = get_cfg_default()
    cfg.TRAINER.ZERO.OUTPUT = "argmax"
    with pytest.raises(ConfigError, match="TRAINER.ZERO.OUTPUT"):
        check_cfg_values(cfg)
    cfg = get_cfg_default()
    cfg.TRAINER.ZERO.TEMPERATURE = -1.0
    with pytest.raises(ConfigError, match="TRAINER.ZERO.TEMPERATURE"):
        check_cfg_values(cfg)
