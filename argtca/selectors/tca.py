"""``tca``: TCA's rule, the first M' attributes of each class in file order."""
from __future__ import annotations

from typing import Dict, List, Tuple

from torch import Tensor

from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import check_inputs


@SELECTOR_REGISTRY.register(name="tca")
def select_tca(emb: Tensor, node_class: Tensor, attrs: List[str], m_prime: int, seed: int = 42,
               **kw) -> Dict[int, List[Tuple[int, float]]]:
    """First M' nodes of each class (node order = file order). Score = 1 - position / M.
    ``emb`` is not used (may be None)."""
    out = {}
    for k, nodes in check_inputs(emb, node_class, attrs, m_prime):
        m = nodes.numel()
        out[k] = [(int(i), 1.0 - p / m) for p, i in enumerate(nodes[:m_prime].tolist())]
    return out
