"""R-TPT's objective: the pointwise entropy loss and the reliability-weighted ensemble recomputed
by hand on a tiny input; the fast engine equals the reference engine for it; the demo runs."""
import math
import os
import re

import pytest
import torch

from argtca.config import get_cfg_default
from argtca.engine.fast import FastEngine
from argtca.engine.objectives import TPTObjective
from argtca.engine.reference import ReferenceEngine
from argtca.models.text import PromptTextEncoder
from argtca.registry import OBJECTIVE_REGISTRY
from conftest import tiny_cfg

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# 4 unit features in 3-d: cosines c01=.6 c02=.8 c03=0 c12=.48 c13=.8 c23=0
FEATS = [[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.8, 0.0, 0.6], [0.0, 1.0, 0.0]]
LOGITS = [[2.0, 1.0, 0.0], [0.5, 3.0, -1.0], [1.0, 1.0, 2.0], [-2.0, 0.0, 4.0]]


def _rtpt(top_k=20, temperature=0.01):
    node = get_cfg_default().TRAINER.RTPT
    node.defrost()
    node.TOP_K, node.TEMPERATURE = top_k, temperature
    return OBJECTIVE_REGISTRY.get("rtpt")(node)


def _softmax(row):
    m = max(row)
    e = [math.exp(x - m) for x in row]
    return [x / sum(e) for x in e]


def _entropy(row):
    return -sum(p * math.log(p) for p in _softmax(row))


def test_loss_is_the_mean_of_the_views_entropies():
    sel = torch.tensor([LOGITS[:2], LOGITS[2:]])                  # [B=2, S=2, K=3]
    text = torch.nn.functional.normalize(torch.randn(2, 3, 3), dim=-1)
    got = _rtpt().loss(sel, text)
    want = [(_entropy(LOGITS[0]) + _entropy(LOGITS[1])) / 2,
            (_entropy(LOGITS[2]) + _entropy(LOGITS[3])) / 2]
    assert torch.allclose(got, torch.tensor(want), atol=1e-6)
    # not TPT's entropy of the mean softmax
    assert not torch.allclose(TPTObjective().loss(sel, text), got, atol=1e-3)
    # a non-finite loss names this term (R-TPT has no regulariser: the loss is all of it)
    assert torch.allclose(_rtpt().entropy_term(sel), torch.tensor(want), atol=1e-6)


def test_a_non_finite_rtpt_loss_names_its_own_entropy_term(tiny_clip, monkeypatch):
    from argtca.engine.reference import NonFiniteLossError
    model, tok = tiny_clip
    cfg = tiny_cfg(**{"TTA.N_VIEWS": 4, "TTA.SELECTION_P": 0.5})
    enc = PromptTextEncoder(model, tok, ["a.", "b.", "c."], ctx_init=cfg.TTA.CTX_INIT)
    obj = _rtpt()
    eng = ReferenceEngine(model, enc, obj, cfg, "cpu")
    with torch.no_grad():
        dim = enc(enc.ctx_init).shape[-1]
    img = torch.nn.functional.normalize(torch.randn(1, 4, dim), dim=-1)
    monkeypatch.setattr(obj, "regularizer",
                        lambda text: text.new_full(text.shape[:-2], float("nan")))
    with pytest.raises(NonFiniteLossError) as e:
        eng.tune(img, ["x.jpg"])
    # the term named is R-TPT's pointwise entropy of the 2 confident views (not TPT's H(p̄))
    msg = str(e.value)
    assert "x.jpg" in msg and "regulariser nan" in msg
    named = float(re.search(r"entropy term ([-0-9.e]+)", msg).group(1))
    with torch.no_grad():
        logits = (model.logit_scale.exp() * img[0] @ enc(enc.ctx_init).t()).tolist()
    ents = sorted(_entropy(row) for row in logits)
    assert named == pytest.approx((ents[0] + ents[1]) / 2, abs=1e-5)


@pytest.mark.parametrize("top_k,reliability", [
    # mean of each view's 2 largest cosines to the other views
    (2, [(0.8 + 0.6) / 2, (0.8 + 0.6) / 2, (0.8 + 0.48) / 2, (0.8 + 0.0) / 2]),
    # k=20 > V-1=3: all three other views
    (20, [(0.6 + 0.8 + 0.0) / 3, (0.6 + 0.48 + 0.8) / 3, (0.8 + 0.48 + 0.0) / 3,
          (0.0 + 0.8 + 0.0) / 3]),
])
def test_reliability_weighted_ensemble_by_hand(top_k, reliability):
    tau = 0.1
    e = [math.exp(r / tau) for r in reliability]
    w = [x / sum(e) for x in e]
    ens = [sum(w[v] * LOGITS[v][k] for v in range(4)) for k in range(3)]
    want = torch.tensor([_softmax(ens)])
    img = torch.tensor([FEATS])
    got = _rtpt(top_k, tau).final(torch.tensor([LOGITS]), img)
    assert torch.allclose(got, want, atol=1e-6), (got, want)
    assert _rtpt(top_k, tau).all_views


def test_fast_engine_equals_reference_for_rtpt(tiny_clip):
    model, tok = tiny_clip
    obj = _rtpt()
    enc = PromptTextEncoder(model, tok, ["dog.", "cat.", "fish.", "bird.", "red car."])
    g = torch.Generator().manual_seed(7)
    views = torch.randn(3, 20, 3, 32, 32, generator=g)
    for steps in (1, 2):
        cfg = tiny_cfg(**{"TTA.STEPS": steps})
        ref = ReferenceEngine(model, enc, obj, cfg, "cpu")
        alone = torch.cat([ref(views[i:i + 1]) for i in range(3)])
        for mode in ("vjp", "recompute", "jacobian"):
            fast = FastEngine(model, enc, obj, cfg, "cpu", grad_mode=mode)
            together = fast(views)
            err = (together - alone).abs().max()
            assert torch.allclose(together, alone, atol=1e-5), (mode, err)
        # not vacuous: the ensemble differs from view 0's prediction with the tuned prompt
        img = fast.image_features(views)
        assert not torch.allclose(fast.predict(img[:, 0], fast.tune(img)), together, atol=1e-4)
