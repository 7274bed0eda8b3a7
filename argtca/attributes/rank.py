"""Ranking generated attributes as TCA describes: by the cosine similarity between CLIP's text
embedding of the attribute and of the class name, most similar first.

Texts are embedded bare (the class name as written, the attribute with hyphens read as spaces),
through :func:`argtca.models.text.encode_texts` — the same text tower, EOS token and projection
as every prompt argtca builds. TCA publishes only its finished files, not the ranking code, so the
bare texts (no "a photo of a" template) are argtca's choice. Ties keep the model's order.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

__all__ = ["AttributeRanker"]


class AttributeRanker:
    """``rank(classname, attributes) -> [(attribute, cosine), ...]`` with a loaded CLIP."""

    def __init__(self, model, tokenizer, device="cpu"):
        self.model, self.tokenizer, self.device = model, tokenizer, device

    @classmethod
    def from_cfg(cls, cfg, device="cpu") -> "AttributeRanker":
        from ..models.clip import load_clip
        model, tokenizer = load_clip(cfg, device)
        return cls(model, tokenizer, device)

    @torch.no_grad()
    def scores(self, classname: str, attributes: Sequence[str]) -> torch.Tensor:
        from ..models.text import encode_texts
        texts = [classname] + [a.replace("-", " ") for a in attributes]
        f = encode_texts(self.model, self.tokenizer, texts, self.device).float().cpu()
        return f[1:] @ f[0]

    def rank(self, classname: str, attributes: Sequence[str]) -> List[Tuple[str, float]]:
        if not attributes:
            return []
        s = self.scores(classname, attributes).tolist()
        order = sorted(range(len(attributes)), key=lambda i: (-s[i], i))
        return [(attributes[i], float(s[i])) for i in order]
