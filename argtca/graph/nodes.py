"""Symbolic Attribute Graph: nodes (class, attribute) and their edges.

Nodes are class-major: for class k (in ``classnames`` order) the first M_k = min(M, number of
distinct attributes of k) distinct attributes of its list (file order; repeats compared after
lower-casing and trimming), so class k owns the contiguous block ``nodes_of(k)``. Classes with fewer
than M distinct attributes ("short" classes, e.g. DTD 'grid' with 5) get fewer nodes and one
warning naming them; only a class with fewer than M' (the number to select) is an error.
Edges (directed, both directions stored, no self-loops):

* intra-class: every ordered pair of distinct nodes of the same class (sum_k M_k (M_k - 1) edges);
* inter-class: nodes of different classes whose attribute strings are equal after lower-casing
  and trimming.

``edges`` selects ``full`` (both), ``intra``, ``inter`` or ``none``.
"""
from __future__ import annotations

import itertools
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List, Mapping, Optional, Sequence

import torch
from torch import Tensor

from argtca.attributes import dedupe_attributes, normalize_attribute

__all__ = ["GraphInputError", "ShortClassWarning", "AttributeNodes", "make_nodes", "build_graph",
           "node_text", "EDGE_MODES"]

EDGE_MODES = ("full", "intra", "inter", "none")


class GraphInputError(ValueError):
    """Bad input for the attribute graph: the message names the value and the fix."""


# classes a ShortClassWarning names before it says how many more
SHORT_LISTED = 10


class ShortClassWarning(UserWarning):
    """Some classes have fewer than M distinct attributes and get fewer graph nodes."""


def node_text(attribute: str, classname: str) -> str:
    """Text whose CLIP embedding is a node's initial feature h0."""
    return f"a {attribute} of a {classname}"


@dataclass
class AttributeNodes:
    classnames: List[str]
    attrs: List[str]              # attribute string of each node
    node_class: Tensor            # LongTensor [N]: class index of each node
    num_candidates: int           # M (a class has M_k = min(M, its distinct attributes) nodes)
    raw: List[List[str]] = field(default_factory=list)  # each class's list as given (file order)
    short: Dict[str, int] = field(default_factory=dict)  # class -> M_k for classes with M_k < M

    @property
    def num_nodes(self) -> int:
        return len(self.attrs)

    @property
    def texts(self) -> List[str]:
        return [node_text(a, self.classnames[int(k)]) for a, k in zip(self.attrs, self.node_class)]

    @cached_property
    def sizes(self) -> List[int]:
        """M_k: the number of nodes of each class."""
        return torch.bincount(self.node_class, minlength=len(self.classnames)).tolist()

    @cached_property
    def _starts(self) -> List[int]:
        return [0] + list(itertools.accumulate(self.sizes))

    def nodes_of(self, k: int) -> List[int]:
        return list(range(self._starts[k], self._starts[k + 1]))


def make_nodes(classnames: Sequence[str], attributes: Mapping[str, Sequence[str]],
               num_candidates: int, min_per_class: int = 1, source: Optional[str] = None
               ) -> AttributeNodes:
    """One node per (class, attribute) for the first M_k = min(``num_candidates``, distinct)
    distinct attributes of each class (see the module docstring).

    ``min_per_class`` (M'): a class with fewer distinct attributes is a :class:`GraphInputError`
    naming every such class (and ``source``, the attribute file, when given). Classes with fewer
    than ``num_candidates`` get one :class:`ShortClassWarning` naming them all.
    """
    if num_candidates < 1:
        raise GraphInputError(f"NUM_CANDIDATES must be >= 1, got {num_candidates}")
    missing = [c for c in classnames if c not in attributes]
    if missing:
        raise GraphInputError(f"no attributes given for classes {missing}; pass the dict returned "
                              f"by argtca.attributes.load_attributes for these class names")
    attrs: List[str] = []
    classes: List[int] = []
    raw: List[List[str]] = []
    short: Dict[str, int] = {}
    too_few = []
    for k, c in enumerate(classnames):
        raw.append(list(attributes[c]))
        distinct = dedupe_attributes(attributes[c])
        m_k = min(num_candidates, len(distinct))
        if m_k < min_per_class:
            too_few.append(f"{c!r} has {len(distinct)}")
        if m_k < num_candidates:
            short[c] = m_k
        attrs.extend(distinct[:m_k])
        classes.extend([k] * m_k)
    where = f"attribute file {source!r}: " if source else ""
    if too_few:
        raise GraphInputError(
            f"{where}ArgTCA selects NUM_ATTRIBUTES (M'={min_per_class}) distinct attributes per "
            f"class but {', '.join(too_few)}. Lower TRAINER.ARGTCA.NUM_ATTRIBUTES or add "
            f"attributes to these classes in the attribute file.")
    if short:
        # a dataset of hundreds of classes would fill a screen: the first few, and where the
        # rest are (every one is in the run's phase1.json, "short_classes")
        items = list(short.items())
        listed = ", ".join(f"{c!r} ({n})" for c, n in items[:SHORT_LISTED])
        if len(items) > SHORT_LISTED:
            listed += (f" and {len(items) - SHORT_LISTED} more (phase1.json's \"short_classes\" "
                       f"lists every one)")
        warnings.warn(f"{where}{len(short)} of {len(classnames)} classes have fewer than "
                      f"NUM_CANDIDATES (M={num_candidates}) distinct attributes and get that many "
                      f"graph nodes: {listed}", ShortClassWarning, stacklevel=2)
    return AttributeNodes(list(classnames), attrs, torch.tensor(classes, dtype=torch.long),
                          num_candidates, raw, short)


def _pairs(group: Tensor) -> Tensor:
    """All ordered pairs (i, j), i != j, of the node indices in ``group``: [2, n*(n-1)]."""
    n = group.numel()
    src = group.repeat_interleave(n)
    dst = group.repeat(n)
    keep = src != dst
    return torch.stack([src[keep], dst[keep]])


def build_graph(class_of_node: Tensor, attr_strings: Sequence[str], edges: str = "full") -> Tensor:
    """Directed ``edge_index`` [2, E] (long, sorted by (source, target)), no self-loops."""
    mode = str(edges).lower()
    if mode not in EDGE_MODES:
        raise GraphInputError(f"EDGES={edges!r} is not one of {', '.join(EDGE_MODES)}")
    class_of_node = torch.as_tensor(class_of_node, dtype=torch.long)
    n = class_of_node.numel()
    if len(attr_strings) != n:
        raise GraphInputError(f"{len(attr_strings)} attribute strings for {n} nodes")
    parts = [torch.zeros(2, 0, dtype=torch.long)]
    if mode in ("full", "intra"):
        for k in torch.unique(class_of_node):
            parts.append(_pairs(torch.nonzero(class_of_node == k).flatten()))
    if mode in ("full", "inter"):
        groups: Dict[str, List[int]] = defaultdict(list)
        for i, a in enumerate(attr_strings):
            groups[normalize_attribute(a)].append(i)
        for idx in groups.values():
            if len(idx) > 1:
                p = _pairs(torch.tensor(idx, dtype=torch.long))
                parts.append(p[:, class_of_node[p[0]] != class_of_node[p[1]]])
    ei = torch.cat(parts, dim=1)
    order = torch.argsort(ei[0] * max(n, 1) + ei[1])
    return ei[:, order].contiguous()
