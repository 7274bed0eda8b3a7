"""The demo CLIP (open_clip config ``argtca-demo-clip``) and a truncated text forward.

``encode_text_ids`` runs the text tower only up to the longest sequence in the batch.  Under the
causal mask with EOT (argmax) pooling this is exact (``tests/demo/test_demo_generator.py`` compares
it with ``model.encode_text``) and about 4x cheaper for the ~10-token demo captions.  It optionally
replaces the token embeddings at positions ``1..n_ctx`` by learnable context vectors, the way
TPT/CoOp inject their soft prompt.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

MODEL_NAME = "argtca-demo-clip"
MODEL_CONFIG_DIR = Path(__file__).resolve().parents[1] / "models" / "model_configs"
_registered = False


def register_model_configs() -> None:
    global _registered
    if not _registered:
        import open_clip
        open_clip.add_model_config(MODEL_CONFIG_DIR)
        _registered = True


def build_demo_model(name: str = MODEL_NAME):
    """A randomly initialised open_clip CLIP of the demo config (fp32, eval mode)."""
    import open_clip
    register_model_configs()
    model = open_clip.create_model(name, pretrained=None)
    return model.eval()


def encode_text_ids(model, ids: torch.Tensor, ctx: Optional[torch.Tensor] = None,
                    normalize: bool = False) -> torch.Tensor:
    """Text features of token ids ``[B, L]`` (L <= context length; padding with 0).

    ``ctx``: ``[n_ctx, width]`` or ``[B, n_ctx, width]`` embeddings written over positions
    ``1..n_ctx`` (after SOT).
    """
    L = int((ids > 0).sum(1).max()) if ids.numel() else 1
    L = max(L, 1 + (ctx.shape[-2] if ctx is not None else 0))
    ids = ids[:, :L]
    x = model.token_embedding(ids)
    if ctx is not None:
        n = ctx.shape[-2]
        ctx = ctx.to(x.dtype)
        if ctx.dim() == 2:
            ctx = ctx.unsqueeze(0).expand(x.shape[0], -1, -1)
        x = torch.cat([x[:, :1], ctx, x[:, 1 + n:]], dim=1)
    return encode_text_embeds(model, x, ids, normalize)


def encode_text_embeds(model, x: torch.Tensor, ids: torch.Tensor,
                       normalize: bool = False) -> torch.Tensor:
    """Text features from token embeddings ``x [B, L, width]`` (pooled at the EOT of ``ids``)."""
    L = x.shape[1]
    x = x + model.positional_embedding[:L].to(x.dtype)
    mask = model.attn_mask[:L, :L] if model.attn_mask is not None else None
    x = model.transformer(x, attn_mask=mask)
    x = model.ln_final(x)
    x = x[torch.arange(x.shape[0], device=x.device), ids[:, :L].argmax(dim=-1)]
    if isinstance(model.text_projection, torch.nn.Linear):
        x = model.text_projection(x)
    elif model.text_projection is not None:
        x = x @ model.text_projection
    return F.normalize(x, dim=-1) if normalize else x
