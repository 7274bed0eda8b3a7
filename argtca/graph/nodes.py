"""Symbolic Attribute Graph: nodes (class, attribute) and their edges.

Nodes are class-major: for class k (in ``classnames`` order) the first M distinct attributes of
its list (file order), so node ``k*M + m`` is attribute m of class k. Edges (directed, both
directions stored, no self-loops):

* intra-class: every ordered pair of distinct nodes of the same class (K*M*(M-1) edges);
* inter-class: nodes of different classes whose attribute strings are equal after lower-casing
  and trimming.

``edges`` selects ``full`` (both), ``intra``, ``inter`` or ``none``.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence

import torch
from torch import Tensor

from argtca.attributes import dedupe_attributes, normalize_attribute

__all__ = ["GraphInputError", "AttributeNodes", "make_nodes", "build_graph", "node_text",
           "EDGE_MODES"]

EDGE_MODES = ("full", "intra", "inter", "none")


class GraphInputError(ValueError):
    """Bad input for the attribute graph: the message names the value and the fix."""


def node_text(attribute: str, classname: str) -> str:
    """Text whose CLIP embedding is a node's initial feature h0."""
    return f"a {attribute} of a {classname}"


@dataclass
class AttributeNodes:
    classnames: List[str]
    attrs: List[str]              # attribute string of each node
    node_class: Tensor            # LongTensor [N]: class index of each node
    num_candidates: int           # M

    @property
    def num_nodes(self) -> int:
        return len(self.attrs)

    @property
    def texts(self) -> List[str]:
        return [node_text(a, self.classnames[int(k)]) for a, k in zip(self.attrs, self.node_class)]

    def nodes_of(self, k: int) -> List[int]:
        return list(range(k * self.num_candidates, (k + 1) * self.num_candidates))


def make_nodes(classnames: Sequence[str], attributes: Mapping[str, Sequence[str]],
               num_candidates: int) -> AttributeNodes:
    """One node per (class, attribute) for the first ``num_candidates`` distinct attributes."""
    if num_candidates < 1:
        raise GraphInputError(f"NUM_CANDIDATES must be >= 1, got {num_candidates}")
    missing = [c for c in classnames if c not in attributes]
    if missing:
        raise GraphInputError(f"no attributes given for classes {missing}; pass the dict returned "
                              f"by argtca.attributes.load_attributes for these class names")
    attrs: List[str] = []
    classes: List[int] = []
    short = []
    for k, c in enumerate(classnames):
        distinct = dedupe_attributes(attributes[c])
        if len(distinct) < num_candidates:
            short.append(f"{c!r} has {len(distinct)}")
            continue
        attrs.extend(distinct[:num_candidates])
        classes.extend([k] * num_candidates)
    if short:
        raise GraphInputError(
            f"the attribute graph needs NUM_CANDIDATES={num_candidates} distinct attributes per "
            f"class but {', '.join(short)}. Lower TRAINER.ARGTCA.NUM_CANDIDATES or add attributes "
            f"to these classes in the attribute file.")
    return AttributeNodes(list(classnames), attrs, torch.tensor(classes, dtype=torch.long),
                          num_candidates)


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
