"""The reference engine: one step touches only the context, resets per image, is one AdamW step
on the objective, and B images at once equal each image alone."""
import copy

import pytest
import torch

from argtca.engine.objectives import CTPTObjective, TPTObjective, avg_entropy, select_confident
from argtca.engine.reference import NonFiniteLossError, ReferenceEngine
from argtca.models.text import PromptTextEncoder
from conftest import tiny_cfg


def _engine(tiny_clip, objective=None, **over):
    model, tok = tiny_clip
    cfg = tiny_cfg(**over)
    enc = PromptTextEncoder(model, tok, ["dog.", "cat.", "fish.", "bird."])
    return ReferenceEngine(model, enc, objective or TPTObjective(), cfg, "cpu"), model, enc, cfg


def test_step_changes_only_context_and_resets(tiny_clip):
    eng, model, enc, cfg = _engine(tiny_clip)
    state = copy.deepcopy(model.state_dict())
    init = enc.ctx_init.clone()
    torch.manual_seed(1)
    views = torch.randn(1, 16, 3, 32, 32)
    img = eng.image_features(views)
    ctx = eng.tune(img)
    assert not torch.allclose(ctx[0], init)          # the context moved
    assert torch.equal(enc.ctx_init, init)           # ... but the stored init did not
    for k, v in model.state_dict().items():          # frozen CLIP untouched
        assert torch.equal(v, state[k]), k
    p1 = eng(views)
    p2 = eng(views)                                  # reset: same image twice → same answer
    assert torch.equal(p1, p2)
    assert torch.allclose(p1.sum(-1), torch.ones(1), atol=1e-5)


def test_one_step_is_adamw_on_the_objective(tiny_clip):
    eng, model, enc, cfg = _engine(tiny_clip)
    torch.manual_seed(2)
    views = torch.randn(1, 20, 3, 32, 32)
    img = eng.image_features(views)
    # independent recomputation of the gradient
    ctx0 = enc.ctx_init.clone().requires_grad_(True)
    text = enc(ctx0)
    logits = model.logit_scale.exp() * img[0] @ text.T
    idx = select_confident(logits[None].detach(), 0.1)[0]
    assert len(idx) == 2
    loss = avg_entropy(logits[idx][None])[0]
    g, = torch.autograd.grad(loss, ctx0)
    lr, wd, eps = 5e-3, 0.01, 1e-8
    # AdamW's first step: m̂ = g, v̂ = g², so the update is g / (|g| + eps), after decoupled decay
    want = enc.ctx_init * (1 - lr * wd) - lr * g / (g.abs() + eps)
    got = eng.tune(img)[0]
    assert torch.allclose(got, want, atol=1e-6)


def test_batch_of_images_equals_each_alone(tiny_clip):
    n = type("N", (), {"LAMBDA": 50.0})()
    eng, model, enc, cfg = _engine(tiny_clip, CTPTObjective(n))
    torch.manual_seed(3)
    views = torch.randn(3, 10, 3, 32, 32)
    together = eng(views)
    alone = torch.cat([eng(views[i:i + 1]) for i in range(3)])
    assert torch.allclose(together, alone, atol=1e-5)
    # different images → different tuned predictions
    assert not torch.allclose(together[0], together[1])


def test_non_finite_loss_names_the_image(tiny_clip):
    n = type("N", (), {"LAMBDA": float("nan")})()
    eng, *_ = _engine(tiny_clip, CTPTObjective(n))
    with pytest.raises(NonFiniteLossError, match="broken.jpg"):
        eng(torch.randn(1, 10, 3, 32, 32), ["broken.jpg"])
