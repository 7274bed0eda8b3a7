"""``disc``: the attributes of each class farthest from the other classes' attributes."""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch import Tensor

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import check_inputs, top_by_score, unit


def disc_scores(emb: Tensor, node_class: Tensor) -> Tensor:
    """score(i) = mean over nodes j of OTHER classes of (1 - cos(emb_i, emb_j)), float64 [N].

    Computed in O(N D) as 1 - e_i . (sum of all e - sum of e of i's class) / (N - N_class);
    0 when there is no other class.
    """
    e = unit(emb)
    node_class = torch.as_tensor(node_class, dtype=torch.long).cpu()
    k = int(node_class.max()) + 1 if node_class.numel() else 0
    class_sum = torch.zeros(k, e.shape[1], dtype=e.dtype).index_add_(0, node_class, e)
    class_n = torch.bincount(node_class, minlength=k).to(e.dtype)
    others = (class_sum.sum(0, keepdim=True) - class_sum)[node_class]
    n_others = (class_n.sum() - class_n)[node_class]
    mean_cos = (e * others).sum(1) / n_others.clamp_min(1)
    return torch.where(n_others > 0, 1.0 - mean_cos, torch.zeros_like(mean_cos))


@SELECTOR_REGISTRY.register(name="disc")
def select_disc(emb: Tensor, node_class: Tensor, attrs: List[str], m_prime: int, seed: int = 42,
                **kw) -> Dict[int, List[Tuple[int, float]]]:
    """Top M' nodes of each class by :func:`disc_scores` (ties: lowest index)."""
    groups = check_inputs(emb, node_class, attrs, m_prime)
    scores = disc_scores(emb, node_class)
    return {k: top_by_score(nodes.tolist(), scores[nodes].tolist(), m_prime)
            for k, nodes in groups}
