"""``tca``: TCA's rule, the first M' attributes of each class in file order, exactly as the TCA
baseline takes them."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from torch import Tensor

from argtca.attributes import normalize_attribute
from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors._common import SelectorError, check_inputs


@SELECTOR_REGISTRY.register(name="tca", needs_graph=False, repeats=True)
def select_tca(emb: Tensor, node_class: Tensor, attrs: List[str], m_prime: int, seed: int = 42,
               raw: Optional[Sequence[Sequence[str]]] = None, **kw
               ) -> Dict[int, List[tuple]]:
    """The first M' entries of class k's attribute list as given (``raw[k]``, file order, repeats
    and spelling kept: what TCA's code and the TCA baseline put into the prompts), each with the
    node carrying that attribute and its exact spelling as third element; score = 1 - p / len.
    Without ``raw`` (a bare node list): the first M' nodes of each class. ``emb`` is not used."""
    out = {}
    for k, nodes in check_inputs(emb, node_class, attrs, m_prime):
        idx = nodes.tolist()
        if raw is None:
            out[k] = [(i, 1.0 - p / len(idx)) for p, i in enumerate(idx[:m_prime])]
            continue
        listed = list(raw[k])
        if len(listed) < m_prime:
            raise SelectorError(f"class {k} lists {len(listed)} attributes, fewer than "
                                f"NUM_ATTRIBUTES (M'={m_prime})")
        node_of = {}
        for i in idx:
            node_of.setdefault(normalize_attribute(attrs[i]), i)
        picks = []
        for p, a in enumerate(listed[:m_prime]):
            if normalize_attribute(a) not in node_of:
                raise SelectorError(f"class {k}: attribute {a!r} (position {p}) is not among "
                                    f"its graph nodes; raise NUM_CANDIDATES to at least M'")
            picks.append((node_of[normalize_attribute(a)], 1.0 - p / len(listed), a))
        out[k] = picks
    return out
