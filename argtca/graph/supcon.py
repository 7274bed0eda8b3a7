"""Supervised contrastive loss (Khosla et al., NeurIPS 2020, L^sup_out).

With f the l2-normalised features, s_ia = f_i . f_a, P(i) the other nodes of i's class and
A the anchors (nodes with |P(i)| >= 1):

    L = mean_{i in A}  -1/|P(i)| * sum_{p in P(i)} log( exp(s_ip/tau) / sum_{a != i} exp(s_ia/tau) )
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["supcon_loss"]


def supcon_loss(features: Tensor, labels: Tensor, tau: float = 0.07) -> Tensor:
    """``features`` [N, D] (normalised here), ``labels`` [N]. Returns 0 when no node has a
    positive."""
    f = F.normalize(features, dim=1)
    n = f.shape[0]
    labels = labels.to(f.device)
    self_mask = torch.eye(n, dtype=torch.bool, device=f.device)
    logits = (f @ f.T / tau).masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    pos = (labels[:, None] == labels[None, :]) & ~self_mask
    n_pos = pos.sum(dim=1)
    anchors = n_pos > 0
    if not bool(anchors.any()):
        return features.sum() * 0.0
    pos_sum = log_prob.masked_fill(~pos, 0.0).sum(dim=1)
    return -(pos_sum[anchors] / n_pos[anchors]).mean()
