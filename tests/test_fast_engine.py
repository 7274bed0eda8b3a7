"""FastEngine == ReferenceEngine per image, for every objective, 1 and 2 steps, every gradient
mode; plus the pieces the fast engine relies on (θ0 VJP, cached regulariser, chunking, skips)."""
import pytest
import torch

from argtca.config import get_cfg_default
from argtca.engine.fast import FastEngine
from argtca.engine.reference import NonFiniteLossError, ReferenceEngine
from argtca.models.clip import PromptTextEncoder
from argtca.registry import OBJECTIVE_REGISTRY
from conftest import tiny_cfg

CLASSES = ["dog", "cat", "fish", "bird", "red car"]
ATTRS = ["small", "furry animal"]


def _objective(name):
    d = get_cfg_default()
    node = {"tpt": d.TRAINER.TPT, "ctpt": d.TRAINER.CTPT, "otpt": d.TRAINER.OTPT,
            "atpt": d.TRAINER.ATPT, "tca": d.TRAINER.TCA, "none": None}[name]
    return OBJECTIVE_REGISTRY.get(name)(node)


def _engines(tiny_clip, name, steps, grad_mode="vjp", **kw):
    model, tok = tiny_clip
    obj = _objective(name)
    if name == "tca":
        suffixes = [f"{a} {c}." for c in CLASSES for a in ATTRS]
    else:
        suffixes = [f"{c}." for c in CLASSES]
    enc = PromptTextEncoder(model, tok, suffixes)
    cfg = tiny_cfg(**{"TTA.STEPS": steps})
    return (ReferenceEngine(model, enc, obj, cfg, "cpu"),
            FastEngine(model, enc, obj, cfg, "cpu", grad_mode=grad_mode, **kw))


def _views(seed, B=4, V=20):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, V, 3, 32, 32, generator=g)


@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("name", ["tpt", "ctpt", "otpt", "atpt", "tca"])
def test_fast_equals_reference_per_image(tiny_clip, name, steps):
    ref, fast = _engines(tiny_clip, name, steps)
    views = _views(10 + steps)
    alone = torch.cat([ref(views[i:i + 1]) for i in range(views.shape[0])])
    together = fast(views)
    assert together.shape == alone.shape == (4, len(CLASSES))
    assert torch.allclose(together, alone, atol=1e-5, rtol=1e-4), (together - alone).abs().max()
    # the tuned contexts themselves agree, and tuning moved them (the comparison is not vacuous)
    img = ref.image_features(views)
    c_ref = torch.cat([ref.tune(img[i:i + 1]) for i in range(4)])
    c_fast = fast.tune(img)
    assert torch.allclose(c_fast, c_ref, atol=1e-6)
    assert (c_fast - ref.initial_context(4)).abs().amax(dim=(1, 2)).min() > 1e-4
    # tuning changes the prediction compared with zero-shot at θ0
    zs = fast.predict(img[:, 0], None)
    assert not torch.allclose(zs, together, atol=1e-4)


@pytest.mark.parametrize("mode", ["loop", "recompute"])
def test_gradient_modes_agree(tiny_clip, mode):
    ref, fast = _engines(tiny_clip, "ctpt", 2, grad_mode=mode)
    views = _views(3, B=3)
    assert torch.allclose(fast(views), ref(views), atol=1e-5, rtol=1e-4)


def test_vjp_of_cached_theta0_equals_batched_backward(tiny_clip):
    """J(θ0)ᵀ·G_b through the one kept graph == the gradient of Σ_b <G_b, T(ctx_b)> (brute force)."""
    _, fast = _engines(tiny_clip, "tpt", 1)
    enc = fast.text_encoder
    g = torch.Generator().manual_seed(5)
    cot = torch.randn(3, enc.num_prompts, fast.theta0()[1].shape[-1], generator=g)
    got = fast._vjp_theta0(cot)
    ctx = enc.ctx_init.detach().repeat(3, 1, 1).requires_grad_(True)
    (enc(ctx) * cot).sum().backward()
    assert torch.allclose(got, ctx.grad, atol=1e-5, rtol=1e-5)
    # called twice on the same graph: identical (the graph is retained, not consumed)
    assert torch.equal(fast._vjp_theta0(cot), got)


def test_cached_regularizer_is_the_per_image_one(tiny_clip):
    _, fast = _engines(tiny_clip, "tca", 1)
    reg0, reg_grad = fast.regularizer0()
    t = fast.theta0()[1].detach().repeat(2, 1, 1).requires_grad_(True)
    r = fast.objective.regularizer(t)
    r.sum().backward()
    assert torch.allclose(reg0.expand(2), r.detach())
    assert torch.allclose(reg_grad.expand(2, -1, -1), t.grad)  # loss scale is 1 on CPU
    assert reg_grad.abs().max() > 0


def test_chunking_does_not_change_results(tiny_clip):
    ref, fast = _engines(tiny_clip, "otpt", 2, image_chunk=7, text_tokens=1)
    views = _views(7, B=3, V=10)
    assert fast._images_per_text_call() == 1
    assert torch.allclose(fast(views), ref(views), atol=1e-5, rtol=1e-4)


def test_zero_steps_is_zero_shot_from_cached_text(tiny_clip):
    model, tok = tiny_clip
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
    cfg = tiny_cfg(**{"TTA.STEPS": 0})
    ref = ReferenceEngine(model, enc, _objective("none"), cfg, "cpu")
    fast = FastEngine(model, enc, _objective("none"), cfg, "cpu")
    views = _views(4, B=3, V=1)
    # independent zero-shot: softmax(s · f(view0) · T(θ0)ᵀ)
    f = torch.nn.functional.normalize(model.encode_image(views[:, 0]), dim=-1)
    want = (model.logit_scale.exp() * f @ enc(enc.ctx_init).T).softmax(-1)
    assert torch.allclose(fast(views), want, atol=1e-5)
    assert torch.allclose(ref(views), want, atol=1e-5)


def test_non_finite_step_is_skipped_per_image(tiny_clip):
    """An image whose gradient is not finite keeps θ0 (the reference's rule); others still move."""
    _, fast = _engines(tiny_clip, "tpt", 1)
    img = fast.image_features(_views(8, B=3))
    real = fast._vjp_theta0

    def poisoned(cot):
        g = real(cot)
        g[1, 0, 0] = float("inf")
        return g
    fast._vjp_theta0 = poisoned
    ctx = fast.tune(img)
    init = fast.text_encoder.ctx_init
    assert torch.equal(ctx[1], init)
    assert not torch.allclose(ctx[0], init) and not torch.allclose(ctx[2], init)


def test_non_finite_loss_names_the_image(tiny_clip):
    model, tok = tiny_clip
    obj = _objective("ctpt")
    obj.node = type("N", (), {"LAMBDA": float("nan")})()
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
    fast = FastEngine(model, enc, obj, tiny_cfg(), "cpu")
    with pytest.raises(NonFiniteLossError, match="first.jpg"):
        fast(_views(1, B=2), ["first.jpg", "second.jpg"])


def test_bad_grad_mode_is_an_error(tiny_clip):
    with pytest.raises(ValueError, match="grad_mode"):
        _engines(tiny_clip, "tpt", 1, grad_mode="magic")
