import torch

from argtca.models.text import PromptTextEncoder, encode_eos_hidden, encode_texts


def test_context_at_init_reproduces_encode_text(tiny_clip):
    model, tok = tiny_clip
    suffixes = ["dog.", "golden retriever.", "fluffy tabby cat with long whiskers."]
    enc = PromptTextEncoder(model, tok, suffixes, ctx_init="a photo of a", n_ctx=4)
    assert enc.n_ctx == 4
    ref = model.encode_text(tok([f"a photo of a {s}" for s in suffixes]), normalize=True)
    out = enc(enc.ctx_init)
    assert out.shape == ref.shape
    assert torch.allclose(out, ref, atol=1e-5)


def test_sequence_is_cut_after_longest_eos_and_is_exact(tiny_clip):
    model, tok = tiny_clip
    suffixes = ["a.", "b c d e f."]
    enc = PromptTextEncoder(model, tok, suffixes)
    ids = tok([f"a photo of a {s}" for s in suffixes])
    assert enc.seq_len == int(ids.argmax(-1).max()) + 1 < 77
    # full-length (77-token) manual path with the same random context equals the cut path
    ctx = torch.randn(4, enc.ctx_init.shape[-1])
    emb = model.token_embedding(ids)
    full = torch.cat([emb[:, :1], ctx.expand(2, -1, -1), emb[:, 5:]], dim=1)
    x = full + model.positional_embedding
    x = model.ln_final(model.transformer(x, attn_mask=model.attn_mask))
    x = x[torch.arange(2), ids.argmax(-1)] @ model.text_projection
    ref = torch.nn.functional.normalize(x, dim=-1)
    assert torch.allclose(enc(ctx), ref, atol=1e-5)


def test_batched_contexts_equal_single(tiny_clip):
    model, tok = tiny_clip
    enc = PromptTextEncoder(model, tok, ["dog.", "cat."])
    ctxs = torch.randn(3, 4, enc.ctx_init.shape[-1])
    batched = enc(ctxs)
    for b in range(3):
        assert torch.allclose(batched[b], enc(ctxs[b]), atol=1e-6)


def test_ctx_init_length_must_match_n_ctx(tiny_clip):
    model, tok = tiny_clip
    import pytest
    with pytest.raises(ValueError, match="N_CTX"):
        PromptTextEncoder(model, tok, ["dog."], ctx_init="a photo of a", n_ctx=5)


def test_eos_hidden_is_before_projection(tiny_clip):
    model, tok = tiny_clip
    texts = ["a red of a apple", "a round of a ball"]
    h = encode_eos_hidden(model, tok, texts)
    assert h.shape == (2, model.ln_final.normalized_shape[0])
    f = torch.nn.functional.normalize(h @ model.text_projection, dim=-1)
    assert torch.allclose(f, encode_texts(model, tok, texts), atol=1e-6)
    assert torch.allclose(f, model.encode_text(tok(texts), normalize=True), atol=1e-5)
