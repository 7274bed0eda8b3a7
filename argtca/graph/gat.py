"""AttributeGAT (ArgTCA appendix) and the node attention scores read from it.

The appendix's update, applied at EVERY layer l = 0, 1 (heads concatenated, then ELU)::

    h_i^(l+1) = ELU( ||_{k=1..H}  sum_{j in N(i) + {i}}  alpha_ij^(l,k) W^(l,k) h_j^(l) )
    alpha_ij^(l,k) = softmax_j( LeakyReLU_0.2( a_src^(l,k) . W^(l,k) h_j^(l)
                                               + a_dst^(l,k) . W^(l,k) h_i^(l) ) )

then the residual and the normalisation: h^L = normalize(h^(2) + W_res h0), and the projection
head z = W2 GELU(W1 h^L + b1) (used by the loss only with GAT.LOSS_ON z).

Both GATConv layers have ``heads`` heads concatenated to ``hidden`` channels (``hidden // heads``
each), attention dropout ``dropout`` and PyG's own ``add_self_loops`` (``self_loops``, default True:
N(i) + {i} as in the GAT paper; GAT.SELF_LOOPS). Eq. 6 and Appendix B add no bias, so by default
the layers have none; ``bias=True`` (GAT.BIAS, PyG's default) adds a trained b^(l) inside the ELU,
as earlier builds did. ``W_res`` (no bias) is
initialised to the identity on h0 (on the leading ``min(in_dim, hidden)`` block when the widths
differ). The projection head maps ``hidden -> hidden -> proj_dim`` (SupCon's 128 by default).

Speed: PyG's GATConv materialises one [heads, channels] message per edge; on the attribute graphs
(~1e5 edges from shared attribute strings) that makes CPU training take minutes. ``SparseGATConv``
is GATConv with only its weighted neighbour sum replaced by sparse-matrix products (CSR SpMM
forward; SpMM and SDDMM backward): same parameters, attention and outputs (tested against
GATConv), tens of times faster on CPU. ``AttributeGAT(sparse=False)`` uses plain GATConv.
"""
from __future__ import annotations

import warnings
from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv

__all__ = ["AttributeGAT", "GATOutput", "SparseGATConv", "source_attention",
           "incoming_attention"]

Attention = Tuple[Tensor, Tensor]  # (edge_index [2, E'] incl. self-loops, alpha [E', heads])


class GATOutput(NamedTuple):
    h: Tensor                   # h^L [N, hidden], l2-normalised
    z: Tensor                   # projection [N, proj_dim] (not normalised)
    attention: List[Attention]  # one (edge_index, alpha) per GATConv layer


def _csr(rows: Tensor, cols: Tensor, n_rows: int) -> Tuple[Tensor, Tensor, Tensor]:
    """CSR structure of the pairs (rows, cols): (crow_indices, col_indices, permutation)."""
    perm = torch.argsort(rows * (int(cols.max()) + 1 if cols.numel() else 1) + cols, stable=True)
    counts = torch.bincount(rows, minlength=n_rows)
    crow = torch.zeros(n_rows + 1, dtype=torch.long, device=rows.device)
    crow[1:] = torch.cumsum(counts, 0)
    return crow, cols[perm], perm


def _csr_tensor(crow: Tensor, col: Tensor, values: Tensor, shape: Tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta" noise
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, shape)


class _EdgeWeightedSum(torch.autograd.Function):
    """out[v, h] = sum over edges e = (u -> v) of alpha[e, h] * x[u, h]  (x: [N_src, H, C])."""

    @staticmethod
    def forward(ctx, alpha: Tensor, x: Tensor, src: Tensor, dst: Tensor, num_dst: int):
        n_src, heads, _ = x.shape
        crow, col, perm = _csr(dst, src, num_dst)
        a = alpha[perm].T.contiguous()  # [H, E] in CSR order
        out = torch.stack([_csr_tensor(crow, col, a[h], (num_dst, n_src)) @ x[:, h]
                           for h in range(heads)], 1)
        ctx.save_for_backward(alpha, x, src, dst, crow, col, perm)
        ctx.num_dst = num_dst
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        alpha, x, src, dst, crow, col, perm = ctx.saved_tensors
        n_src, heads, _ = x.shape
        grad_out = grad_out.contiguous()
        grad_alpha = grad_x = None
        if ctx.needs_input_grad[0]:  # SDDMM: <grad_out[dst_e, h], x[src_e, h]> on the edges
            grad_alpha = torch.empty_like(alpha)
            pattern = _csr_tensor(crow, col, torch.zeros(col.numel(), dtype=x.dtype,
                                                         device=x.device), (ctx.num_dst, n_src))
            for h in range(heads):
                vals = torch.sparse.sampled_addmm(pattern, grad_out[:, h], x[:, h].T,
                                                  beta=0.0).values()
                grad_alpha[perm, h] = vals
        if ctx.needs_input_grad[1]:  # SpMM with the transposed attention matrix
            crow_t, col_t, perm_t = _csr(src, dst, n_src)
            a = alpha[perm_t].T.contiguous()
            grad_x = torch.stack([_csr_tensor(crow_t, col_t, a[h], (n_src, ctx.num_dst))
                                  @ grad_out[:, h] for h in range(heads)], 1)
        return grad_alpha, grad_x, None, None, None


class SparseGATConv(GATConv):
    """torch_geometric GATConv (same constructor, parameters, attention and output) whose
    neighbour aggregation is a sparse-matrix product instead of per-edge messages."""

    def propagate(self, edge_index: Tensor, size: Optional[Tuple[int, int]] = None, **kwargs):
        x_src, x_dst = kwargs["x"]
        alpha = kwargs["alpha"]
        if size is not None and size[1] is not None:
            num_dst = int(size[1])
        else:
            num_dst = x_dst.size(0) if x_dst is not None else x_src.size(0)
        return _EdgeWeightedSum.apply(alpha, x_src, edge_index[0], edge_index[1], num_dst)


class AttributeGAT(nn.Module):
    def __init__(self, in_dim: int, hidden: int = 512, heads: int = 4, dropout: float = 0.1,
                 proj_dim: int = 128, sparse: bool = True, self_loops: bool = True,
                 bias: bool = False):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"GAT.HIDDEN={hidden} must be divisible by GAT.HEADS={heads}")
        per_head = hidden // heads
        conv = SparseGATConv if sparse else GATConv
        self.conv1 = conv(in_dim, per_head, heads=heads, concat=True, dropout=dropout,
                          add_self_loops=bool(self_loops), bias=bool(bias))
        self.conv2 = conv(hidden, per_head, heads=heads, concat=True, dropout=dropout,
                          add_self_loops=bool(self_loops), bias=bool(bias))
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
        g = F.elu(g)  # the appendix applies ELU after every layer, the last one included
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
