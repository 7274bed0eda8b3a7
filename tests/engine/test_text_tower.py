"""The fast engine's text tower (argtca/engine/text_tower.py): prefix sharing and the EOS-only last
layer give the plain encoder's features and gradients; the forward-mode Jacobian at θ0 gives the
autograd VJP; grad_mode "jacobian" tunes exactly like the reference engine."""
import copy

import pytest
import torch

from argtca.engine.fast import FastEngine
from argtca.engine.reference import ReferenceEngine
from argtca.engine.text_tower import (PrefixSharedText, prefix_sharing_supported,
                                      tangents_supported, text_jacobian, text_tangents)
from argtca.models.text import PromptTextEncoder
from conftest import tiny_cfg
from test_fast_engine import _objective, _views

CLASSES = ["dog", "cat", "fish", "bird", "red car"]
ATTRS = ["small", "furry animal with long ears"]   # suffixes of different lengths

pytestmark = pytest.mark.usefixtures("one_thread")


def _encoder(tiny_clip):
    model, tok = tiny_clip
    return PromptTextEncoder(model, tok, [f"{a} {c}." for c in CLASSES for a in ATTRS])


def _contexts(enc, B=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return enc.ctx_init.unsqueeze(0).repeat(B, 1, 1) + 0.1 * torch.randn(
        B, *enc.ctx_init.shape, generator=g)


@pytest.mark.parametrize("attention", ["sdpa", "manual", "split"])
def test_prefix_shared_features_and_gradients_equal_the_encoder(tiny_clip, attention):
    enc = _encoder(tiny_clip)
    text = PrefixSharedText(enc, attention)
    ctx = _contexts(enc)
    want = enc(ctx)
    got = text(ctx)
    assert got.shape == want.shape == (3, len(CLASSES) * len(ATTRS), want.shape[-1])
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(text(ctx[1]), want[1], atol=1e-5)          # one context [n, W]
    cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    a = ctx.clone().requires_grad_(True)
    b = ctx.clone().requires_grad_(True)
    ga, = torch.autograd.grad((enc(a) * cot).sum(), a)
    gb, = torch.autograd.grad((text(b) * cot).sum(), b)
    assert ga.abs().max() > 1e-3
    assert torch.allclose(gb, ga, atol=1e-4, rtol=1e-4)


def test_prefix_is_computed_once_per_context_and_last_layer_on_eos_rows(tiny_clip):
    """Rows entering each block's MLP: the plain encoder runs B·P·L in every layer; the shared
    tower runs B·n0 prefix rows + B·P·(L − n0) suffix rows, and B·P (one EOS row per prompt) in
    the last layer, where the prefix needs no MLP."""
    enc = _encoder(tiny_clip)
    text = PrefixSharedText(enc)
    B, P, L, n0 = 2, enc.num_prompts, enc.seq_len, 1 + enc.n_ctx
    blocks = enc.model.transformer.resblocks
    rows = {i: [] for i in range(len(blocks))}
    hooks = [blk.mlp.register_forward_hook(
        lambda m, inp, out, i=i: rows[i].append(inp[0].shape[:-1].numel()))
        for i, blk in enumerate(blocks)]
    try:
        enc(_contexts(enc, B))
        plain = {i: list(r) for i, r in rows.items()}
        for r in rows.values():
            r.clear()
        text(_contexts(enc, B))
    finally:
        for h in hooks:
            h.remove()
    last = len(blocks) - 1
    assert all(plain[i] == [B * P * L] for i in rows)
    assert all(rows[i] == [B * n0, B * P * (L - n0)] for i in range(last))
    assert rows[last] == [B * P]


@pytest.mark.parametrize("by_hand", [True, False])
def test_jacobian_transpose_gives_the_vjp(tiny_clip, by_hand):
    """Written-out forward mode (text_tangents) and torch.func's jvp both give J."""
    enc = _encoder(tiny_clip)
    text = PrefixSharedText(enc, "manual")
    assert tangents_supported(text)                     # QuickGELU, LayerNorm, a projection
    c0 = enc.ctx_init.detach().clone()
    jt = text_jacobian(text, c0, chunk=20, by_hand=by_hand)   # chunks that do not divide n·W
    n, W = c0.shape
    T0 = enc(c0)
    assert jt.shape == (n * W, T0.numel())
    x = c0.clone().requires_grad_(True)
    T = enc(x)
    cot = torch.randn(3, *T.shape, generator=torch.Generator().manual_seed(2))
    for b in range(3):
        g, = torch.autograd.grad(T, x, cot[b], retain_graph=True)
        assert torch.allclose((jt @ cot[b].flatten()).view(n, W), g, atol=1e-4, rtol=1e-4)
    # one column against a central finite difference (float64 copy of the model; its features
    # come out as float32, hence a step of 1e-3: rounding ~1e-4, truncation ~1e-6)
    enc64 = copy.deepcopy(enc).double()
    e = torch.zeros(n, W, dtype=torch.float64)
    e[1, 3] = 1e-3
    fd = (enc64(c0.double() + e).double() - enc64(c0.double() - e).double()) / 2e-3
    assert fd.abs().max() > 1e-2
    assert torch.allclose(jt[1 * W + 3].double(), fd.flatten(), atol=1e-3)


def test_jacobian_rows_are_the_slice_of_the_full_jacobian(tiny_clip):
    """rows=(lo, hi) (a rank's share in a multi-GPU run) gives those rows of Jᵀ, whatever the
    chunking; an empty share gives an empty matrix of the right width; a bad range is refused."""
    enc = _encoder(tiny_clip)
    text = PrefixSharedText(enc, "manual")
    c0 = enc.ctx_init.detach().clone()
    full = text_jacobian(text, c0, chunk=16)
    D = full.shape[0]
    for lo, hi, chunk in ((0, D // 2, 7), (D // 2, D, 64), (5, 6, 3)):
        part = text_jacobian(text, c0, chunk=chunk, rows=(lo, hi))
        assert part.shape == (hi - lo, full.shape[1])
        assert torch.allclose(part, full[lo:hi], atol=1e-6)
    assert text_jacobian(text, c0, rows=(D, D)).shape == (0, full.shape[1])
    with pytest.raises(ValueError, match="rows"):
        text_jacobian(text, c0, rows=(3, D + 1))


def test_gelu_tower_tangents_equal_torch_func(tiny_clip):
    """A tower with exact GELU instead of QuickGELU: the written-out derivative still holds."""
    from torch.func import jvp, vmap
    enc = _encoder(tiny_clip)
    model = copy.deepcopy(enc.model)
    for blk in model.transformer.resblocks:
        blk.mlp[1] = torch.nn.GELU()
    enc.model = model
    text = PrefixSharedText(enc, "manual")
    assert tangents_supported(text)
    x0 = enc.ctx_init.detach()
    tan = torch.randn(5, *x0.shape, generator=torch.Generator().manual_seed(4))
    want = vmap(lambda t: jvp(text, (x0,), (t,))[1])(tan)
    assert torch.allclose(text_tangents(text, x0, tan), want, atol=1e-4, rtol=1e-4)
    blk.mlp[1] = torch.nn.SiLU()                        # unknown: torch.func is used instead
    assert not tangents_supported(text)


@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("name", ["tpt", "ctpt", "tca"])
def test_jacobian_grad_mode_equals_reference(tiny_clip, name, steps):
    model, tok = tiny_clip
    enc = (_encoder(tiny_clip) if name == "tca"
           else PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES]))
    cfg = tiny_cfg(**{"TTA.STEPS": steps})
    ref = ReferenceEngine(model, enc, _objective(name), cfg, "cpu")
    fast = FastEngine(model, enc, _objective(name), cfg, "cpu", grad_mode="jacobian")
    views = _views(20 + steps)
    alone = torch.cat([ref(views[i:i + 1]) for i in range(views.shape[0])])
    assert torch.allclose(fast(views), alone, atol=1e-5, rtol=1e-4)
    img = ref.image_features(views)
    c_ref = torch.cat([ref.tune(img[i:i + 1]) for i in range(4)])
    assert torch.allclose(fast.tune(img), c_ref, atol=1e-6)
    assert fast._jt is not None and fast._theta0[1].grad_fn is None   # no θ0 graph kept


@pytest.mark.parametrize("grad_mode", ["jacobian", "recompute", "vjp"])
def test_split_attention_engine_equals_reference(tiny_clip, grad_mode):
    """text_attention "split" (suffix queries over the shared prefix keys, no per-prompt copy)
    tunes and predicts as the reference does, in every grad mode that runs the text tower."""
    model, tok = tiny_clip
    enc = _encoder(tiny_clip)
    cfg = tiny_cfg()
    ref = ReferenceEngine(model, enc, _objective("tca"), cfg, "cpu")
    fast = FastEngine(model, enc, _objective("tca"), cfg, "cpu", grad_mode=grad_mode,
                      text_attention="split")
    assert fast.text.attention == "split"
    views = _views(31)
    alone = torch.cat([ref(views[i:i + 1]) for i in range(views.shape[0])])
    assert torch.allclose(fast(views), alone, atol=1e-5, rtol=1e-4)


def test_default_text_attention_follows_the_grad_mode(tiny_clip):
    model, tok = tiny_clip
    enc = _encoder(tiny_clip)

    def engine(**kw):
        return FastEngine(model, enc, _objective("tca"), tiny_cfg(), "cpu", **kw)
    assert engine(grad_mode="jacobian").text_attention == "split"       # forward-only text
    assert engine(grad_mode="vjp").text_attention == "efficient"        # a backward is timed
    assert engine(grad_mode="jacobian", prefix_share=False).text_attention == "efficient"
    assert engine(grad_mode="jacobian", text_attention="split",
                  prefix_share=False).text_attention == "efficient"     # split needs the prefix
    assert engine(grad_mode="vjp", text_attention="split").text.attention == "split"


def test_jacobian_tf32_is_cuda_only_and_scoped_to_the_product(tiny_clip):
    model, tok = tiny_clip
    enc = _encoder(tiny_clip)
    fast = FastEngine(model, enc, _objective("tca"), tiny_cfg(), "cpu", grad_mode="jacobian")
    assert fast.jacobian_tf32 is False                      # the CPU product stays fp32
    before = torch.backends.cuda.matmul.allow_tf32
    fast.jacobian_tf32 = True
    with fast._jacobian_precision():
        assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.backends.cuda.matmul.allow_tf32 == before   # restored for everything else


def test_unsupported_tower_falls_back_to_the_encoder(tiny_clip):
    model, tok = tiny_clip
    m = copy.deepcopy(model)
    m.attn_mask = None                                  # not a causal text tower
    enc = PromptTextEncoder(m, tok, [f"{c}." for c in CLASSES])
    assert "causal" in prefix_sharing_supported(enc)
    with pytest.raises(ValueError, match="causal"):
        PrefixSharedText(enc)
    fast = FastEngine(m, enc, _objective("tpt"), tiny_cfg(), "cpu")
    assert fast.prefix_share is False and fast.text is enc
    assert fast.grad_mode == "vjp"                      # "auto" on the CPU


def test_auto_grad_mode_on_cpu_and_prefix_switch(tiny_clip):
    model, tok = tiny_clip
    enc = _encoder(tiny_clip)
    cfg = tiny_cfg()
    on = FastEngine(model, enc, _objective("tca"), cfg, "cpu")
    off = FastEngine(model, enc, _objective("tca"), cfg, "cpu", prefix_share=False)
    assert on.grad_mode == off.grad_mode == "vjp" and on.prefix_share and not off.prefix_share
    views = _views(31, B=2)
    assert torch.allclose(on(views), off(views), atol=1e-5)
