"""ECALP (argtca/adapters/ecalp.py): a short stream whose graph is complete (every image and class a
neighbour) worked out densely with numpy from the paper's propagation, a longer stream against the
official ``iterative_label_propagation`` (Yushu-Li/ECALP, read from a fetched copy) where the kNN
lists truncate, and an exact state round trip mid-stream."""
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from argtca.adapters.ecalp import ECALPAdapter
from argtca.config import get_cfg_default
from helpers_official import official_module

OFFICIAL = ("Yushu-Li/ECALP", "utils/iterative_label_propagation.py",
            "96ddf0bd482a44bcca460b6ff58eaa2597512851")
TEXT = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, .3]], float)
TEXT /= np.linalg.norm(TEXT, axis=1, keepdims=True)
RAW = [[1, .5, .2, .3], [.2, 1, .1, .4], [.9, .1, .3, .1], [.3, .2, 1, .2]]
FEATS = np.array([np.array(v, float) / np.linalg.norm(v) for v in RAW])


def make(text=TEXT, **keys):
    cfg = get_cfg_default()
    for k, v in keys.items():
        cfg.TRAINER.ECALP[k] = v
    return ECALPAdapter(cfg.TRAINER.ECALP, cfg, torch.tensor(text, dtype=torch.float32), 100.0)


def dense_reference(feats, text, gamma, alpha, iters, scale):
    """Per image, with every node a neighbour: nodes = classes, images so far, the query (the
    image again). An image-image edge weighs S(a, b)^γ, S(a, b) = cos(a ⊙ v, b) with ``a`` the
    node that came first (v: the text features' per-dimension variance; the official code
    weights the older end of an edge), an image-class edge cos^γ; W = A + Aᵀ, D^-½ W D^-½; Y:
    classes one-hot, images their previous top-1 / 5; ``iters`` × Y_img = α W̃_img Y + (1-α) Y0."""
    K = len(text)
    v = text.var(axis=0, ddof=1)

    def S(a, b):
        aw = a * v
        return aw @ b / np.linalg.norm(aw) / np.linalg.norm(b)

    outs, kept = [], None
    for i in range(len(feats)):
        nodes = list(feats[:i + 1]) + [feats[i]]
        n = len(nodes)
        A = np.zeros((K + n, K + n))
        for a in range(n):
            for b in range(n):
                A[K + a, K + b] = S(nodes[min(a, b)], nodes[max(a, b)]) ** gamma
            A[K + a, :K] = (text @ nodes[a]) ** gamma
        W = A + A.T
        d = 1 / (np.sqrt(W.sum(1)) + 1e-6)
        Wt = d[:, None] * W * d[None, :]
        y0 = np.zeros((n, K))
        if kept is not None:
            y0[:len(kept) - 1] = kept[:-1]      # the previous query's row gives way
        Y = np.vstack([np.eye(K), y0])
        for _ in range(iters):
            Y = np.vstack([np.eye(K), alpha * Wt[K:] @ Y + (1 - alpha) * y0])
        img = Y[K:]
        kept = np.zeros_like(img)
        kept[np.arange(n), img.argmax(1)] = img.max(1) / 5
        z = scale * img[-1]
        outs.append(np.exp(z - z.max()) / np.exp(z - z.max()).sum())
    return np.array(outs)


def test_complete_graph_stream_by_hand():
    # K_IMAGE 8 >= the 5 image nodes and K_TEXT 3 = K: no kNN list truncates; gamma 2 and
    # alpha .6 so that both the weights and the kept labels Y0 matter
    a = make(K_TEXT=3, K_IMAGE=8, GAMMA=2.0, ALPHA=0.6, ITERATIONS=3, OUTPUT_SCALE=10.0)
    want = dense_reference(FEATS, TEXT, 2.0, 0.6, 3, 10.0)
    got = torch.stack([a.step(torch.tensor(f, dtype=torch.float32)[None]) for f in FEATS])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    assert tuple(a.state["feats"].shape) == (4, 4) and tuple(a.state["knn_im"].shape) == (5, 5)
    assert len({tuple(r.round(4)) for r in want}) == 4       # the graph changes every answer


# the official code's notices on the CPU (CUDA-only amp, sparse tensors in beta)
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_matches_the_official_function(tmp_path):
    off = official_module(*OFFICIAL, tmp_path)
    g = torch.Generator().manual_seed(0)
    K, E, n = 4, 8, 16
    text = F.normalize(torch.randn(K, E, generator=g), dim=-1)
    labels = torch.randint(0, K, (n,), generator=g)
    feats = F.normalize(text[labels] + 0.7 * torch.randn(n, E, generator=g), dim=-1)
    keys = dict(K_TEXT=2, K_IMAGE=3, GAMMA=10.0, ALPHA=0.8, ITERATIONS=3, OUTPUT_SCALE=1e4)
    a = make(text.numpy(), **keys)
    for i in range(n):
        want = off.iterative_label_propagation(
            torch.cat([feats[:i + 1], feats[i:i + 1]]), text, 2, 3, 8, 10.0, 0.8, max_iter=3)
        got = a.step(feats[i:i + 1])
        st = a.state
        # the kNN lists and the kept labels are the official module's globals
        assert torch.equal(st["knn_im"], off.knn_im2im) and torch.equal(
            st["knn_store"], off.knn_im2im_store) and torch.equal(st["knn_text"], off.knn_im2text)
        torch.testing.assert_close(st["sim_im"], off.sim_im2im)
        torch.testing.assert_close(st["sim_store"], off.sim_im2im_store)
        y0 = torch.zeros_like(off.Y_0).scatter_(1, st["y0_idx"][:, None], st["y0_val"][:, None])
        torch.testing.assert_close(y0, off.Y_0, rtol=1e-5, atol=1e-7)
        # softmax(10000 y) turns a 1e-7 difference of y into 1e-3 of a logit
        torch.testing.assert_close(got, want[0], rtol=0, atol=2e-3)
        assert got.argmax() == want[0].argmax()
    assert tuple(off.knn_im2im.shape) == (n + 1, 3)               # the lists did truncate


def test_state_round_trip_mid_stream_is_exact():
    g = torch.Generator().manual_seed(1)
    text = F.normalize(torch.randn(5, 8, generator=g), dim=-1)
    imgs = F.normalize(torch.randn(30, 1, 8, generator=g), dim=-1)
    a = make(text.numpy(), K_IMAGE=4)
    a(imgs[:15])
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make(text.numpy(), K_IMAGE=4)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert b.state["feats"].shape[0] == 15
    rest = b(imgs[15:])
    assert torch.equal(a(imgs[15:]), rest)
    fresh = make(text.numpy(), K_IMAGE=4)
    assert not torch.allclose(fresh(imgs[15:]), rest)     # the graph so far matters
