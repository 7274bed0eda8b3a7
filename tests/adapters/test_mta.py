"""MTA (argtca/adapters/mta.py): one MeanShift round with its inlierness update worked out with
plain numpy on 3 views, the early-stopping loops against a per-image numpy port; one demo run."""
import os

import numpy as np
import pytest
import torch

from argtca.adapters.mta import MTA
import argtca.trainers  # noqa: F401  (registers the methods and their value checks)
from argtca.config import ConfigError, check_cfg_values, get_cfg_default

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make(text, scale, **keys):
    cfg = get_cfg_default()
    for k, v in keys.items():
        cfg.TRAINER.MTA[k] = v
    return MTA(cfg.TRAINER.MTA, cfg, text, scale)


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_mta_one_round_on_three_views_by_hand():
    # 3 views in the (e1, e2) plane at angles 0, 0.2, 1.0 rad; 2 classes (text e1, e2); scale 10
    ang = np.array([0.0, 0.2, 1.0])
    x = np.stack([np.cos(ang), np.sin(ang)], 1)
    text = np.eye(2)
    s, ly, lq = 10.0, 0.2, 4.0
    # bandwidth: k = int(0.3 · 2) = 0 in the official code (NaN); here k = 1, the nearest other
    # view: chord lengths 2 sin(Δ/2) for the angle gaps 0.2 (views 0-1), 0.8 (1-2), 1.0 (0-2)
    c = lambda a: 2 * np.sin(a / 2)  # noqa: E731
    h2 = 0.5 * np.array([c(0.2), c(0.2), c(0.8)]) ** 2
    # affinity of the views' class softmaxes
    p = softmax(s * x @ text.T)
    A = p @ p.T
    # round 1, inlierness (one step): mode = view 0, y uniform
    d2 = ((x - x[0]) ** 2).sum(1)
    kappa = np.exp(-d2 / (2 * h2))
    y = softmax((kappa + lq * A @ np.full(3, 1 / 3)) / ly)
    # round 1, mode step
    kappa = np.exp(-((x - x[0]) ** 2).sum(1) / (2 * h2))
    w = kappa * y
    m = (w[:, None] * x).sum(0) / w.sum()
    m /= np.linalg.norm(m)
    want = softmax(s * m @ text.T)
    ad = make(torch.eye(2), s, MAX_ITER=1)
    img = torch.tensor(x, dtype=torch.float32).unsqueeze(0)
    got = ad(img)[0].double().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    # the numbers: view 2 is the outlier (low κ and low affinity) and the mode leans to view 0-1
    assert y[2] < y[0] and y[2] < y[1]
    mode = ad.solve(img, ad.clip_logits(img))[0].double().numpy()
    np.testing.assert_allclose(mode, m, atol=1e-6)
    assert 0 < np.arctan2(m[1], m[0]) < 0.2


def solve_port(x, logits, ly, lq, max_iter, th, bp):
    """A per-image numpy port of the official loops (mta.py solve_mta, early stops included)."""
    V = len(x)
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    k = max(1, int(bp * (V - 1)))
    h = np.sqrt(0.5 * (np.sort(d, 1)[:, 1:k + 1] ** 2).mean(1))
    p = softmax(logits)
    A = p @ p.T
    y = np.full(V, 1 / V)
    mode = x[0]

    def kernel(m):
        return np.exp(-np.linalg.norm(x - m, axis=1) ** 2 / (2 * h ** 2))

    for _ in range(max_iter):
        dens = kernel(mode)
        for _ in range(max_iter):
            old, y = y, softmax((dens + lq * (A * y[None]).sum(1)) / ly)
            if np.linalg.norm(old - y) < th:
                break
        for _ in range(max_iter):
            wd = kernel(mode) * y
            old, mode = mode, (wd[:, None] * x).sum(0) / wd.sum()
            mode = mode / np.linalg.norm(mode)
            if np.linalg.norm(old - mode) < th:
                break
    return mode


@pytest.mark.parametrize("tol", [1e-6, 3e-2])
def test_mta_matches_a_per_image_port_with_early_stops(tol):
    g = torch.Generator().manual_seed(1)
    K, E, V, B = 5, 8, 11, 12
    text = torch.nn.functional.normalize(torch.randn(K, E, generator=g), dim=-1)
    centre = torch.randn(B, 1, E, generator=g)
    img = torch.nn.functional.normalize(centre + 0.7 * torch.randn(B, V, E, generator=g), dim=-1)
    ad = make(text, 20.0, TOL=tol)
    modes = ad.solve(img, ad.clip_logits(img)).double().numpy()
    probs = ad(img).double().numpy()
    x, t = img.double().numpy(), text.double().numpy()
    want = np.stack([solve_port(x[b], 20.0 * x[b] @ t.T, 0.2, 4.0, 5, tol, 0.3)
                     for b in range(B)])
    np.testing.assert_allclose(modes, want, atol=2e-5)
    np.testing.assert_allclose(probs, softmax(20.0 * want @ t.T), atol=2e-5)
    if tol > 1e-3:
        # the loops' early stops differ between images and change the modes: the test sees them
        never = np.stack([solve_port(x[b], 20.0 * x[b] @ t.T, 0.2, 4.0, 5, 0.0, 0.3)
                          for b in range(B)])
        assert np.abs(never - want).max() > 1e-2


def test_mta_single_view_is_zero_shot():
    g = torch.Generator().manual_seed(2)
    text = torch.nn.functional.normalize(torch.randn(3, 4, generator=g), dim=-1)
    img = torch.nn.functional.normalize(torch.randn(2, 1, 4, generator=g), dim=-1)
    got = make(text, 10.0)(img)
    torch.testing.assert_close(got, (10.0 * img[:, 0] @ text.t()).softmax(-1))


def test_mta_config_checks():
    for key, bad in (("LAMBDA_Y", 0.0), ("MAX_ITER", 0), ("BANDWIDTH_P", 1.5)):
        cfg = get_cfg_default()
        cfg.TRAINER.MTA[key] = bad
        with pytest.raises(ConfigError, match=f"TRAINER.MTA.{key}"):
            check_cfg_values(cfg)
