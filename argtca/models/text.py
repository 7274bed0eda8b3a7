"""CLIP's text side: the EOS hidden state used by ArgTCA's graph, plain prompt features, and the
prompt text encoder with learnable context vectors used by every test-time tuning method."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

def _run_text_tower(model: nn.Module, x: torch.Tensor, eot_idx: torch.Tensor) -> torch.Tensor:
    """Token embeddings [N, L, W] (already cut to L tokens) → EOS hidden state after ln_final
    [N, W].

    Exact under CLIP's causal mask: tokens after the last EOS never influence the EOS output."""
    L = x.shape[1]
    cast = model.transformer.get_cast_dtype()
    x = x.to(cast) + model.positional_embedding[:L].to(cast)
    mask = model.attn_mask
    if mask is not None:
        mask = mask[:L, :L]
    x = model.transformer(x, attn_mask=mask)
    x = model.ln_final(x)
    return x[torch.arange(x.shape[0], device=x.device), eot_idx]


def project_text(model: nn.Module, h: torch.Tensor) -> torch.Tensor:
    proj = model.text_projection
    if proj is None:
        return h
    return proj(h) if isinstance(proj, nn.Linear) else h @ proj


@torch.no_grad()
def encode_eos_hidden(model: nn.Module, tokenizer, texts: Sequence[str], device="cpu",
                      batch_size: int = 256) -> torch.Tensor:
    """EOS hidden state (after ln_final, before the text projection) of each text → [N, width]."""
    out = []
    for i in range(0, len(texts), batch_size):
        ids = tokenizer(list(texts[i:i + batch_size])).to(device)
        eot = ids.argmax(-1)
        L = int(eot.max()) + 1
        emb = model.token_embedding(ids[:, :L])
        out.append(_run_text_tower(model, emb, eot).float())
    return torch.cat(out) if out else torch.zeros(0, model.ln_final.normalized_shape[0])


@torch.no_grad()
def encode_texts(model: nn.Module, tokenizer, texts: Sequence[str], device="cpu",
                 batch_size: int = 256) -> torch.Tensor:
    """Normalised text features of plain prompts (cut after the longest EOS) → [N, E]."""
    h = encode_eos_hidden(model, tokenizer, texts, device, batch_size)
    return F.normalize(project_text(model, h.to(device)).float(), dim=-1)


class PromptTextEncoder(nn.Module):
    """Text features of ``[SOS] ctx_1..ctx_n <suffix> [EOS]`` for a list of prompt suffixes.

    The context vectors are *inputs* (``forward(ctx)``), so one encoder serves one image or a batch
    of images each with its own context: ``ctx`` of shape [n_ctx, W] or [B, n_ctx, W] gives
    features [P, E] or [B, P, E] (ℓ2-normalised). ``ctx_init`` holds the token embeddings of the
    initial words (TPT/CoOp: "a photo of a", 4 tokens). The frozen prefix/suffix embeddings are
    buffers, and every sequence is cut right after the longest EOS (exact under the causal mask).
    """

    def __init__(self, model: nn.Module, tokenizer, suffixes: Sequence[str],
                 ctx_init: str = "a photo of a", n_ctx: Optional[int] = None):
        super().__init__()
        if not suffixes:
            raise ValueError("PromptTextEncoder needs at least one prompt suffix")
        self.model = model
        init_ids = tokenizer([ctx_init])[0]
        n_init = int(init_ids.argmax()) - 1  # tokens between SOS and EOS
        if n_ctx is None:
            n_ctx = n_init
        if n_ctx != n_init:
            raise ValueError(f"TTA.N_CTX={n_ctx} but TTA.CTX_INIT={ctx_init!r} "
                             f"has {n_init} tokens; "
                             f"make them agree")
        self.n_ctx = n_ctx
        prompts = [f"{ctx_init} {s}" for s in suffixes]
        ids = tokenizer(prompts)
        eot = ids.argmax(-1)
        L = int(eot.max()) + 1
        dev = model.token_embedding.weight.device
        with torch.no_grad():
            emb = model.token_embedding(ids[:, :L].to(dev)).float()
        self.register_buffer("token_prefix", emb[:, :1].clone(), persistent=False)
        self.register_buffer("token_suffix", emb[:, 1 + n_ctx:].clone(), persistent=False)
        self.register_buffer("eot_idx", eot.to(dev), persistent=False)
        self.register_buffer("ctx_init", emb[0, 1:1 + n_ctx].clone(), persistent=False)
        self.prompts = prompts
        self.seq_len = L

    @property
    def num_prompts(self) -> int:
        return self.token_prefix.shape[0]

    @torch.no_grad()
    def set_context(self, ctx: torch.Tensor) -> None:
        """Start every image from ``ctx`` [n_ctx, W] (e.g. CoOp's learned context) instead of the
        initial words' embeddings."""
        if tuple(ctx.shape) != tuple(self.ctx_init.shape):
            raise ValueError(f"context of shape {tuple(ctx.shape)}; this encoder takes "
                             f"{tuple(self.ctx_init.shape)} (n_ctx x text width)")
        self.ctx_init.copy_(ctx.to(self.ctx_init))

    def forward(self, ctx: torch.Tensor) -> torch.Tensor:
        single = ctx.dim() == 2
        if single:
            ctx = ctx.unsqueeze(0)
        B, P = ctx.shape[0], self.num_prompts
        W = ctx.shape[-1]
        x = torch.cat([
            self.token_prefix.unsqueeze(0).expand(B, -1, -1, -1),
            ctx.unsqueeze(1).expand(-1, P, -1, -1).to(self.token_prefix.dtype),
            self.token_suffix.unsqueeze(0).expand(B, -1, -1, -1),
        ], dim=2).reshape(B * P, self.seq_len, W)
        h = _run_text_tower(self.model, x, self.eot_idx.repeat(B))
        f = F.normalize(project_text(self.model, h).float(), dim=-1).reshape(B, P, -1)
        return f[0] if single else f
