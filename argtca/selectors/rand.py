"""``random``: M' attributes per class uniformly at random (seeded)."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
from torch import Tensor

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import SelectorError, check_inputs, top_by_score


@SELECTOR_REGISTRY.register(name="random", needs_graph=False)
def select_random(emb: Tensor, node_class: Tensor, attrs: List[str], m_prime: int,
                  seed: int = 42, **kw) -> Dict[int, List[Tuple[int, float]]]:
    """Class k draws one uniform key per candidate from ``numpy.random.default_rng([seed, k])``
    and keeps the M' largest keys (score = key): a uniformly random M'-subset that depends only
    on (seed, k, M), not on the other classes. ``emb`` is not used (may be None)."""
    if int(seed) < 0:
        raise SelectorError(f"SELECTOR_SEED must be >= 0, got {seed}")
    out = {}
    for k, nodes in check_inputs(emb, node_class, attrs, m_prime):
        keys = np.random.default_rng([int(seed), k]).random(nodes.numel())
        out[k] = top_by_score(nodes.tolist(), keys.tolist(), m_prime)
    return out
