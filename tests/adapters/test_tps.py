"""TPS: one shift step recomputed from the formulas (the gradient of the entropy of the mean
softmax w.r.t. the prototype shifts written out by hand, AdamW's first step), batching, the
shared-shift variant, and a demo run."""
import os

import torch

import argtca.adapters  # noqa: F401  (registration)
from argtca.config import get_cfg_default
from argtca.registry import ADAPTER_REGISTRY

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCALE, LR = 10.0, 5e-3


def _unit(rows):
    t = torch.tensor(rows, dtype=torch.float64)
    return t / t.norm(dim=-1, keepdim=True)


TEXT = _unit([[1.0, 0.2, 0.0], [0.1, 1.0, 0.3], [0.0, 0.3, 1.0]])          # K=3, E=3
IMG = _unit([[0.9, 0.3, 0.1], [0.2, 0.9, 0.1], [0.7, 0.1, 0.6],           # V=4 views
             [0.1, 0.4, 0.9]])


def _adapter(per_class=True, steps=1):
    cfg = get_cfg_default()
    cfg.TTA.SELECTION_P = 0.5               # 2 of the 4 views
    cfg.TRAINER.TPS.PER_CLASS = per_class
    cfg.TRAINER.TPS.STEPS = steps
    return ADAPTER_REGISTRY.get("tps")(cfg.TRAINER.TPS, cfg, TEXT.float(), SCALE)


def _hand_gradient():
    """d H(mean_{v∈S} softmax(z_v)) / d s_k at s = 0, with z_vk = SCALE·x_v·(t_k+s_k)/|t_k+s_k|:
    dH/dz_vj = -(1/|S|) p_vj (log p̄_j − Σ_k p_vk log p̄_k); dz_vj/ds_j = SCALE (I − t_j t_jᵀ) x_v."""
    z = SCALE * IMG @ TEXT.T                                            # [V, K]
    p = torch.exp(z - z.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    ent = -(p * p.log()).sum(-1)
    sel = sorted(range(4), key=lambda v: float(ent[v]))[:2]
    ps = p[sel]
    logpbar = ps.mean(0).log()
    dz = -(ps * (logpbar - (ps * logpbar).sum(-1, keepdim=True))) / len(sel)   # [S, K]
    g = torch.zeros(3, 3, dtype=torch.float64)
    for j in range(3):
        proj = torch.eye(3, dtype=torch.float64) - torch.outer(TEXT[j], TEXT[j])
        for i, v in enumerate(sel):
            g[j] += SCALE * dz[i, j] * (proj @ IMG[v])
    return g


def _predict(shift):
    protos = TEXT + shift
    protos = protos / protos.norm(dim=-1, keepdim=True)
    return torch.softmax(SCALE * IMG[0] @ protos.T, -1)


def test_one_shift_step_by_hand():
    g = _hand_gradient()
    assert g.abs().min() > 1e-6          # every coordinate moves: the check is not vacuous
    # AdamW's first step from 0: m̂ = g, v̂ = g², decay of a zero shift is zero
    shift = -LR * g / (g.abs() + 1e-8)
    want = _predict(shift)
    a = _adapter()
    got = a(IMG.float().unsqueeze(0))[0]
    assert torch.allclose(got.double(), want, atol=1e-5), (got, want)
    assert torch.allclose(a.tune(IMG.float().unsqueeze(0))[0].double(), shift, atol=1e-6)
    # the step changed the prediction compared with zero-shot CLIP
    assert (want - _predict(torch.zeros(3, 3, dtype=torch.float64))).abs().max() > 1e-4


def test_shared_shift_sums_the_class_gradients():
    g = _hand_gradient().sum(0)
    want = _predict(-LR * g / (g.abs() + 1e-8))
    got = _adapter(per_class=False)(IMG.float().unsqueeze(0))[0]
    assert torch.allclose(got.double(), want, atol=1e-5)


def test_batch_equals_images_alone_and_zero_steps_is_zero_shot():
    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(3, 6, 3, generator=g), dim=-1)
    a = _adapter(steps=2)
    together = a(img)
    alone = torch.cat([a(img[i:i + 1]) for i in range(3)])
    assert torch.allclose(together, alone, atol=1e-6)
    zs = torch.softmax(SCALE * img[:, 0] @ TEXT.float().T, -1)
    assert torch.allclose(_adapter(steps=0)(img), zs, atol=1e-6)
