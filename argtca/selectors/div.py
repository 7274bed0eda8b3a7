"""``div``: the most mutually dissimilar attributes of each class."""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch import Tensor

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import check_inputs, cosine_block, unit


def diverse_order(sim: Tensor, m_prime: int) -> List[Tuple[int, float]]:
    """Greedy max-min selection inside one class; ``sim`` [M, M] cosine similarities.

    Start with the pair (i < j) of minimum similarity (ties: lexicographically lowest), both
    scored 1 - sim[i, j]; then repeatedly add the node whose maximum similarity to the chosen ones
    is smallest (ties: lowest index), scored 1 - that maximum. Returns local indices in the order
    chosen; the selection for M' is a prefix of the one for M'+1 (M'=1 keeps i).
    """
    m = sim.shape[0]
    if m == 1:
        return [(0, 0.0)]
    upper = torch.triu(torch.ones(m, m, dtype=torch.bool), diagonal=1)
    flat = int(torch.argmin(sim.masked_fill(~upper, float("inf"))))  # first minimum, row-major
    i, j = divmod(flat, m)
    score = 1.0 - float(sim[i, j])
    chosen = [(i, score), (j, score)]
    maxsim = torch.maximum(sim[i], sim[j]).clone()
    maxsim[[i, j]] = float("inf")
    while len(chosen) < m_prime:
        k = int(torch.argmin(maxsim))
        chosen.append((k, 1.0 - float(maxsim[k])))
        maxsim = torch.maximum(maxsim, sim[k])
        maxsim[k] = float("inf")
    return chosen[:m_prime]


@SELECTOR_REGISTRY.register(name="div")
def select_div(emb: Tensor, node_class: Tensor, attrs: List[str], m_prime: int, seed: int = 42,
               **kw) -> Dict[int, List[Tuple[int, float]]]:
    """Per class, the pair of nodes with minimum cosine similarity in ``emb``; for M' > 2 extended
    greedily by the node whose maximum similarity to the chosen ones is smallest
    (see :func:`diverse_order`)."""
    e = unit(emb)
    out = {}
    for k, nodes in check_inputs(emb, node_class, attrs, m_prime):
        local = diverse_order(cosine_block(e[nodes]), m_prime)
        out[k] = [(int(nodes[i]), s) for i, s in local]
    return out
