"""``joint``: greedy trade-off between diversity and discriminability (beyond the paper: its
stated future work)."""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch import Tensor

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import SelectorError, check_inputs, cosine_block, unit
from argtca.selectors.disc import disc_scores


@SELECTOR_REGISTRY.register(name="joint")
def select_joint(emb: Tensor, node_class: Tensor, attrs: List[str], m_prime: int,
                 seed: int = 42, weight: float = 0.5, **kw) -> Dict[int, List[Tuple[int, float]]]:
    """Greedy maximisation of w*Div + (1-w)*Disc per class, w = ``weight`` (JOINT_WEIGHT).

    With s = cosine similarity in ``emb`` and d(i) = the ``disc`` score of node i:

    1. seed pair: the pair i < j of the class maximising
       w*(1 - s_ij) + (1-w)*(d(i) + d(j))/2  (ties: lexicographically lowest (i, j));
       both get that value as score, the one with the larger d(i) first (ties: lower index);
    2. then, while fewer than M' are chosen, add the node k maximising
       w*(1 - max_{j chosen} s_kj) + (1-w)*d(k)  (ties: lowest index), scored by that value.

    w = 1 gives exactly ``div``'s set for M' >= 2, w = 0 exactly ``disc``'s (the top M' by d).
    M' = 1 keeps the first node of the seed pair. M = 1 keeps the only node (score d).
    """
    w = float(weight)
    if not 0.0 <= w <= 1.0:
        raise SelectorError(f"JOINT_WEIGHT must be in [0, 1], got {weight}")
    groups = check_inputs(emb, node_class, attrs, m_prime)
    e = unit(emb)
    d_all = disc_scores(emb, node_class)
    out = {}
    for k, nodes in groups:
        d = d_all[nodes]
        m = nodes.numel()
        if m == 1:
            out[k] = [(int(nodes[0]), float(d[0]))]
            continue
        sim = cosine_block(e[nodes])
        pair_obj = w * (1.0 - sim) + (1.0 - w) * (d[:, None] + d[None, :]) / 2
        upper = torch.triu(torch.ones(m, m, dtype=torch.bool), diagonal=1)
        flat = int(torch.argmax(pair_obj.masked_fill(~upper, float("-inf"))))
        i, j = divmod(flat, m)
        if d[j] > d[i]:
            i, j = j, i
        score = float(pair_obj[i, j]) if i < j else float(pair_obj[j, i])
        chosen = [(i, score), (j, score)]
        maxsim = torch.maximum(sim[i], sim[j]).clone()
        taken = torch.zeros(m, dtype=torch.bool)
        taken[[i, j]] = True
        while len(chosen) < m_prime:
            gain = (w * (1.0 - maxsim) + (1.0 - w) * d).masked_fill(taken, float("-inf"))
            c = int(torch.argmax(gain))
            chosen.append((c, float(gain[c])))
            taken[c] = True
            maxsim = torch.maximum(maxsim, sim[c])
        out[k] = [(int(nodes[c]), s) for c, s in chosen[:m_prime]]
    return out
