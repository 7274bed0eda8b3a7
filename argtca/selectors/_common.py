"""Helpers shared by the selectors (input checks, per-class grouping, cosine similarity)."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

class SelectorError(ValueError):
    """Bad selector input: the message names the value and the fix."""


def check_inputs(emb: Tensor, node_class: Tensor, attrs: Sequence[str], m_prime: int
                 ) -> List[Tuple[int, Tensor]]:
    """Validate and return ``[(class index, node indices ascending), ...]`` by class index."""
    node_class = torch.as_tensor(node_class, dtype=torch.long).cpu()
    if emb is not None and (emb.dim() != 2 or emb.shape[0] != node_class.numel()):
        raise SelectorError(f"emb must be [N, D] with N = {node_class.numel()} nodes, "
                            f"got {tuple(emb.shape)}")
    if len(attrs) != node_class.numel():
        raise SelectorError(f"{len(attrs)} attribute strings for {node_class.numel()} nodes")
    groups = [(int(k), torch.nonzero(node_class == k).flatten())
              for k in torch.unique(node_class)]
    if m_prime < 1:
        raise SelectorError(f"NUM_ATTRIBUTES (M') must be >= 1, got {m_prime}")
    short = [(k, g.numel()) for k, g in groups if g.numel() < m_prime]
    if short:
        raise SelectorError(
            f"NUM_ATTRIBUTES (M'={m_prime}) exceeds the candidates per class (M): "
            + ", ".join(f"class {k} has {n}" for k, n in short)
            + ". Set TRAINER.ARGTCA.NUM_ATTRIBUTES <= TRAINER.ARGTCA.NUM_CANDIDATES.")
    return groups


def unit(emb: Tensor) -> Tensor:
    """l2-normalised float64 copy on CPU (float64 keeps exact ties rare and reproducible)."""
    return F.normalize(emb.detach().to("cpu", torch.float64), dim=1)


def cosine_block(e: Tensor) -> Tensor:
    """Symmetric cosine-similarity matrix of the unit rows ``e``."""
    s = e @ e.T
    return (s + s.T) / 2


def top_by_score(nodes: Sequence[int], scores: Sequence[float], m_prime: int
                 ) -> List[Tuple[int, float]]:
    """The ``m_prime`` highest scores, ties to the lowest node index."""
    ranked = sorted(zip(nodes, scores), key=lambda t: (-t[1], t[0]))
    return [(int(i), float(s)) for i, s in ranked[:m_prime]]
