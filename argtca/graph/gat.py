"""AttributeGAT (ArgTCA appendix) and the node attention scores read from it.

h^(1) = ELU(GATConv_1(h0)),  g = GATConv_2(h^(1)),  h^L = normalize(g + W_res h0),
z = W2 GELU(W1 h^L + b1).

Both GATConv layers have ``heads`` heads concatenated to ``hidden`` channels (``hidden // heads``
each), attention dropout ``dropout`` and PyG's own ``add_self_loops=True``. ``W_res`` (no bias) is
initialised to the identity on h0 (on the leading ``min(in_dim, hidden)`` block when the widths
differ). The projection head maps ``hidden -> hidden -> proj_dim`` (SupCon's 128 by default).
"""
from __future__ import annotations

from typing import List, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv

__all__ = ["AttributeGAT", "GATOutput", "source_attention", "incoming_attention"]

Attention = Tuple[Tensor, Tensor]  # (edge_index [2, E'] incl. self-loops, alpha [E', heads])


class GATOutput(NamedTuple):
    h: Tensor                   # h^L [N, hidden], l2-normalised
    z: Tensor                   # projection [N, proj_dim] (not normalised)
    attention: List[Attention]  # one (edge_index, alpha) per GATConv layer


class AttributeGAT(nn.Module):
    def __init__(self, in_dim: int, hidden: int = 512, heads: int = 4, dropout: float = 0.1,
                 proj_dim: int = 128):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"GAT.HIDDEN={hidden} must be divisible by GAT.HEADS={heads}")
        per_head = hidden // heads
        self.conv1 = GATConv(in_dim, per_head, heads=heads, concat=True, dropout=dropout,
                             add_self_loops=True)
        self.conv2 = GATConv(hidden, per_head, heads=heads, concat=True, dropout=dropout,
                             add_self_loops=True)
        self.res = nn.Linear(in_dim, hidden, bias=False)
        with torch.no_grad():
            self.res.weight.zero_()
            d = min(in_dim, hidden)
            self.res.weight[:d, :d] = torch.eye(d)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(),
                                  nn.Linear(hidden, proj_dim, bias=False))

    def forward(self, x: Tensor, edge_index: Tensor) -> GATOutput:
        # return_attention_weights must be True explicitly: PyG tests `if return_attention_weights:`
        g, att1 = self.conv1(x, edge_index, return_attention_weights=True)
        g = F.elu(g)
        g, att2 = self.conv2(g, edge_index, return_attention_weights=True)
        h = F.normalize(g + self.res(x), dim=-1)
        return GATOutput(h, self.head(h), [att1, att2])


def incoming_attention(attention: List[Attention], num_nodes: int) -> Tensor:
    """The appendix's node score: mean attention over a node's incoming edges, averaged over
    layers and heads.

    GATConv normalises alpha with a softmax over the incoming edges of each target node (self-loop
    included), so the incoming weights of v sum to 1 and their mean is exactly 1/deg(v), deg
    counting the self-loop: the score only restates the degree. Kept to show that (tested);
    ArgTCA reports :func:`source_attention` instead.
    """
    total = torch.zeros(num_nodes)
    for ei, alpha in attention:
        a = alpha.detach().float().mean(dim=1).cpu()
        dst = ei[1].cpu()
        s = torch.zeros(num_nodes).index_add_(0, dst, a)
        c = torch.zeros(num_nodes).index_add_(0, dst, torch.ones_like(a))
        total += s / c.clamp_min(1)
    return total / len(attention)


def source_attention(attention: List[Attention], num_nodes: int) -> Tensor:
    """Mean attention a node receives as a SOURCE from its neighbours (its own self-loop
    excluded), averaged over layers and heads: how much the other nodes listen to it.
    A node without neighbours scores 0. Read it from an eval-mode forward (no dropout).
    """
    total = torch.zeros(num_nodes)
    for ei, alpha in attention:
        ei = ei.cpu()
        keep = ei[0] != ei[1]
        a = alpha.detach().float().mean(dim=1).cpu()[keep]
        src = ei[0][keep]
        s = torch.zeros(num_nodes).index_add_(0, src, a)
        c = torch.zeros(num_nodes).index_add_(0, src, torch.ones_like(a))
        total += s / c.clamp_min(1)
    return total / len(attention)
