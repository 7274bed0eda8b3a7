"""OnZeta (argtca/adapters/onzeta.py): a short stream worked out with numpy from the paper's update
rules, the same stream through the official script's loop (idstcv/OnZeta main_online.py, read from
a fetched copy), the per-dataset values, and an exact state round trip mid-stream."""
import ast
import io
import math
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from argtca.adapters.onzeta import OnZetaAdapter
from argtca.config import get_cfg_default
from helpers_official import official_source

OFFICIAL = ("idstcv/OnZeta", "main_online.py", "befef06dd681c30a8c2ecedd4d5bfe4847a3a963")
TEXT = np.eye(3, 4)                          # K = 3 classes, E = 4: class k is the axis e_k
RAW = [[1, .5, .2, .3], [.2, 1, .1, .4], [1, .1, .1, .1], [.3, .2, 1, .2], [.8, .6, .1, .2]]
FEATS = np.array([np.array(v, float) / np.linalg.norm(v) for v in RAW])


def make(name="Demo", n=None, text=TEXT, **keys):
    cfg = get_cfg_default()
    cfg.DATASET.NAME = name
    for k, v in keys.items():
        cfg.TRAINER.ONZETA[k] = v
    a = OnZetaAdapter(cfg.TRAINER.ONZETA, cfg, torch.tensor(text, dtype=torch.float32), 100.0)
    a.stream_length = n
    return a


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def test_stream_by_hand():
    # tau_t .01 / tau_i .04 as official; beta .5 and alpha .9 (not the defaults) so that every
    # term shows; n = 5 images
    tau_t, tau_i, cw, cr, alpha, beta, n = .01, .04, .5, 20., .9, .5, 5
    a = make(n=n, BETA=beta, ALPHA=alpha)
    rho, w = np.zeros(3), TEXT.T.copy()
    for t, x in enumerate(FEATS, start=1):
        q = softmax(x @ TEXT.T / tau_t) * np.exp(rho)
        q /= q.sum()                                   # OnLab's label, ρ-tilted
        rho = np.maximum(0, rho - cr / math.sqrt(t) * (q - alpha / 3))
        v = softmax(x @ w / tau_i)                     # the proxies' label
        want = beta * math.sqrt(t / n) * v + (1 - beta * math.sqrt(t / n)) * q
        w = w - cw / math.sqrt(t) / tau_i * np.outer(x, v - q)
        w /= np.linalg.norm(w, axis=0, keepdims=True)
        got = a.step(torch.tensor(x, dtype=torch.float32)[None]).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)
        assert abs(got.sum() - 1) < 1e-5
    np.testing.assert_allclose(a.state["rho"].numpy(), rho, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(a.state["w"].numpy(), w, rtol=1e-4, atol=1e-6)
    assert int(a.state["seen"]) == 5
    assert (rho > 0).any()                             # the dual variable did move


def _official_loop():
    """The official script's ``for iter in range(args.repeat)`` loop (its online pass), as
    code to run on given features."""
    tree = ast.parse(official_source(*OFFICIAL))
    main = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "main")
    loop = next(s for s in ast.walk(main) if isinstance(s, ast.For)
                and isinstance(s.target, ast.Name) and s.target.id == "iter")
    return compile(ast.fix_missing_locations(ast.Module([loop], [])), OFFICIAL[1], "exec")


def test_matches_the_official_loop(monkeypatch):
    code = _official_loop()
    g = torch.Generator().manual_seed(0)
    K, E, n = 5, 8, 30
    text = F.normalize(torch.randn(K, E, generator=g), dim=-1)
    labels = torch.randint(0, K, (n,), generator=g)
    feats = F.normalize(text[labels] + 0.8 * torch.randn(n, E, generator=g), dim=-1)
    # on the CPU, in the stream order given (its random permutation: the identity here)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch, "randperm", lambda m, *a, **k: torch.arange(m))
    args = types.SimpleNamespace(repeat=1, cw=.5, cr=20., beta=.8, alpha=1., tau_t=.01,
                                 tau_i=.04)
    ns = dict(torch=torch, F=F, math=math, args=args, image_feat=feats.clone(),
              text_classifier=text.t().clone(), n=n, num_class=K, image_label=labels,
              acc_onzeta=torch.zeros(1), acc_onlab=torch.zeros(1),
              # its accuracy() only reports (and calls float() on a 1-element array, which
              # numpy 2 refuses): the predictions are what is compared
              accuracy=lambda output, target, topk: [0.0] * len(topk))
    exec(code, ns)
    a = make(n=n, text=text.numpy(), BETA=.8, ALPHA=1.)
    got = a(feats[:, None])
    torch.testing.assert_close(got, ns["combo_label"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.state["w"], ns["w"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.state["rho"], ns["rho"], rtol=1e-5, atol=1e-5)


def test_presets():
    assert (make("ImageNetA").beta, make("ImageNetA").alpha) == (0.8, 1.0)     # official
    assert (make("DescribableTextures").beta, make("DescribableTextures").alpha) == (0.4, 1.0)
    assert (make("Caltech101").beta, make("Caltech101").alpha) == (0.4, 0.0)   # TTA-VLM's
    assert make("Demo").beta == 0.8                                            # ImageNet's
    assert make("Caltech101", BETA=0.3).beta == 0.3


def test_the_schedule_needs_the_stream_length():
    with pytest.raises(RuntimeError, match="stream's length"):
        make(n=None).step(torch.tensor(FEATS[:1], dtype=torch.float32))


def test_state_round_trip_mid_stream_is_exact():
    g = torch.Generator().manual_seed(1)
    text = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    imgs = F.normalize(torch.randn(40, 1, 8, generator=g), dim=-1)
    a = make(n=40, text=text.numpy())
    a(imgs[:20])
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make(n=40, text=text.numpy())
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert int(b.state["seen"]) == 20
    fresh = make(n=40, text=text.numpy())
    fresh.load_state_dict(fresh.state_dict())
    rest = b(imgs[20:])
    assert torch.equal(a(imgs[20:]), rest)
    # the saved state is what made the difference: a stream started over predicts otherwise
    assert not torch.allclose(fresh(imgs[20:]), rest)
