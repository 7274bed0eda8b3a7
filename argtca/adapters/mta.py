"""MTA: MeanShift for test-time augmentation (Zanella & Ben Ayed, CVPR 2024, "On the test-time
zero-shot generalization of vision-language models: Do we really need prompt learning?"; official
code github.com/MaxZanella/MTA, ``mta.py`` ``solve_mta``).

The views' features ``x_i`` (view 0, the original image, included) and CLIP's logits
``l_i = s · x_i · Tᵀ`` give, once per image:

* per-view bandwidths ``h_i² = ½ · mean of the squared distances from x_i to its k nearest other
  views``, k = ``int(BANDWIDTH_P · (V − 1))`` (official: 0.3);
* the affinity ``A = softmax(l) softmax(l)ᵀ`` [V, V].

From ``y = 1/V`` (inlierness scores) and ``m = x_0`` (the mode), ``MAX_ITER`` rounds alternate

* the inlierness step, ``y ← softmax_i((κ_i + λ_q · (A y)_i) / λ_y)`` with ``κ_i = exp(−‖x_i −
  m‖² / 2h_i²)`` computed once a round, repeated until ``‖Δy‖ < TOL`` or MAX_ITER times;
* the mode step (weighted MeanShift), ``m ← Σ κ_i y_i x_i / Σ κ_i y_i``, re-normalised, with κ
  recomputed at each step, repeated until ``‖Δm‖ < TOL`` or MAX_ITER times.

The prediction is the mode's CLIP logits ``s · m · Tᵀ`` (the official output); the probabilities
recorded here are their softmax. Every image of a batch runs the same number of steps; an image
whose inner loop has converged keeps its values, exactly as the official early stop.

Where the official code gives NaN, this does not: with fewer than 5 views (k = 0) k is 1; the
MeanShift weights κ_i y_i / Σ κ y are computed as a softmax of log κ + log y (the same ratio), so
that κ underflowing for every view cannot divide 0 by 0.
"""
from __future__ import annotations

import torch

from argtca.adapters.base import Adapter, Range
from argtca.config.keys import Key
from argtca.plugins import method

# TRAINER.MTA: github.com/MaxZanella/MTA mta.py solve_mta and main.py's arguments
DEFAULTS = {
    "LAMBDA_Y": Key(0.2, "inlierness entropic weight (main.py --lambda_y)",
                    check=Range(lambda v: v > 0, "> 0 (MTA: 0.2)")),
    "LAMBDA_Q": Key(4.0, "inlierness affinity (quadratic) weight (--lambda_q)",
                    check=Range(lambda v: v >= 0, ">= 0 (MTA: 4)")),
    "MAX_ITER": Key(5, "rounds, and steps of each inner loop (mta.py max_iter)",
                    check=Range(lambda v: v >= 1, ">= 1 (MTA: 5)", True)),
    "TOL": Key(1e-6, "an inner loop stops when its step's L2 norm is below it",
               check=Range(lambda v: v >= 0, ">= 0 (MTA: 1e-6)")),
    "BANDWIDTH_P": Key(0.3, "a view's bandwidth: its int(P * (V - 1)) nearest views",
                       check=Range(lambda v: 0 < v <= 1, "(0, 1] (MTA: 0.3)")),
}


@method("mta", label="MTA", family="training-free", defaults=DEFAULTS)
class MTA(Adapter):
    """``mta(img [B, V, E]) -> probs [B, K]``: softmax of the logits of the views' inlier mode."""

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        if int(cfg.TTA.N_VIEWS) < 2:
            return ("TTA.N_VIEWS 1: the mode of one view is that view, so its predictions are "
                    "CLIP's zero-shot ones")
        return ""

    def __init__(self, node, cfg, text, logit_scale):
        super().__init__(node, cfg, text, logit_scale)
        self.lambda_y = float(node.LAMBDA_Y)
        self.lambda_q = float(node.LAMBDA_Q)
        self.max_iter = int(node.MAX_ITER)
        self.tol = float(node.TOL)
        self.bandwidth_p = float(node.BANDWIDTH_P)

    def bandwidth2(self, x: torch.Tensor) -> torch.Tensor:
        """[B, V, E] -> h² [B, V]: half the mean squared distance to the k nearest other views."""
        B, V, _ = x.shape
        if V == 1:
            return x.new_ones(B, 1)      # one view: it is the mode whatever the bandwidth
        k = min(max(1, int(self.bandwidth_p * (V - 1))), V - 1)
        d = torch.cdist(x, x)
        # column 0 of the sorted distances is the view itself (distance 0)
        near = d.sort(dim=-1).values[..., 1:k + 1]
        return 0.5 * (near ** 2).mean(-1)

    def solve(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Views [B, V, E] and their logits [B, V, K] -> the mode [B, E]. A fixed number of
        batched steps (no host sync); ``done`` freezes an image whose inner loop has stopped."""
        B, V, _ = x.shape
        # log κ_i = ‖x_i − m‖² · neg_inv_i with neg_inv = −1 / 2h²
        neg_inv = -0.5 / self.bandwidth2(x).clamp_min(torch.finfo(x.dtype).tiny)
        p = logits.softmax(-1)
        # the inlierness logits (κ + λ_q · A y) / λ_y = κ / λ_y + (λ_q / λ_y · A) y
        affinity = (p @ p.transpose(-1, -2)) * (self.lambda_q / self.lambda_y)   # [B, V, V]
        y = x.new_full((B, V, 1), 1.0 / V)
        mode = x[:, 0]
        for _ in range(self.max_iter):
            kappa = ((x - mode.unsqueeze(1)).square().sum(-1) * neg_inv).exp()
            kappa = kappa.unsqueeze(-1) / self.lambda_y
            done = torch.zeros(B, 1, 1, dtype=torch.bool, device=x.device)
            for _ in range(self.max_iter):
                new = torch.baddbmm(kappa, affinity, y).softmax(1)
                step = torch.linalg.vector_norm(new - y, dim=(1, 2), keepdim=True)
                y = torch.where(done, y, new)
                done = done | (step < self.tol)
            # MeanShift weights κ_i y_i / Σ κ y, as a softmax of log κ + log y: the same ratio,
            # and no 0 / 0 when every κ underflows
            log_y = y.squeeze(-1).log()
            done = torch.zeros(B, 1, dtype=torch.bool, device=x.device)
            for _ in range(self.max_iter):
                logk = (x - mode.unsqueeze(1)).square().sum(-1) * neg_inv
                w = (logk + log_y).softmax(-1)
                new = (w.unsqueeze(1) @ x).squeeze(1)
                new = new / torch.linalg.vector_norm(new, dim=-1, keepdim=True)
                step = torch.linalg.vector_norm(new - mode, dim=-1, keepdim=True)
                mode = torch.where(done, mode, new)
                done = done | (step < self.tol)
        return mode

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        img = img.float()
        mode = self.solve(img, self.clip_logits(img))
        return self.clip_logits(mode).softmax(-1)
