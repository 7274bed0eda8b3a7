"""TPS, Test-Time Prototype Shifting (Sui et al., WACV'25; github elaine-sui/TPS).

Each class prototype (the unit text feature) gets a shift vector in the embedding space, zero at
the start of every image. For each test image the shifts take ``TRAINER.TPS.STEPS`` AdamW steps
on TPT's loss (the entropy of the mean softmax over the ``TTA.SELECTION_P`` lowest-entropy views,
view 0 among the candidates); the prototypes are ``normalize(t_k + s_k)`` (the official model
re-normalises after shifting). The prediction is view 0's softmax with the shifted prototypes.

Batched: image b owns ``shift[b]``; AdamW is element-wise and the loss of image b depends on
``shift[b]`` only, so one optimiser over ``[B, K, E]`` equals B fresh per-image optimisers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from argtca.adapters.base import Adapter, Range
from argtca.config.keys import Key
from argtca.engine.objectives import avg_entropy, select_confident
from argtca.plugins import method

# TRAINER.TPS
DEFAULTS = {
    "LR": Key(5e-3, "AdamW lr on the shifts (TPS README / args.py default; TTA-VLM uses 1e-3 on "
              "the fine-grained sets)", check=Range(lambda v: v > 0, "> 0 (TPS: 5e-3)")),
    "STEPS": Key(1, "shift steps per image (TPS scripts: --tta_steps 1)",
                 check=Range(lambda v: v >= 0, ">= 0 (0: zero-shot; TPS: 1)", True)),
    "WEIGHT_DECAY": Key(0.01, "AdamW weight decay: torch AdamW's default (TPS sets none)",
                        check=Range(lambda v: v >= 0, ">= 0")),
    "PER_CLASS": Key(True, "one shift per class prototype (TPS scripts: --per_label); False: "
                     "one shift shared by every class"),
}


@method("tps", label="TPS", family="training-free", defaults=DEFAULTS)
class TPS(Adapter):
    """``TRAINER.TPS``: LR, STEPS, WEIGHT_DECAY (AdamW), PER_CLASS (a shift per class, or one
    shared by all classes)."""

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        if int(node.STEPS) == 0:
            return "STEPS 0: no shift is tuned, so its predictions are CLIP's zero-shot ones"
        return ""

    def __init__(self, node, cfg, text, logit_scale):
        super().__init__(node, cfg, text, logit_scale)
        self.lr = float(node.LR)
        self.steps = int(node.STEPS)
        self.weight_decay = float(node.WEIGHT_DECAY)
        self.per_class = bool(node.PER_CLASS)

    def logits(self, img: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """img [B, V, E], shift [B, K or 1, E] -> logit_scale · img · normalize(text + shift)ᵀ."""
        protos = F.normalize(self.text.unsqueeze(0) + shift, dim=-1)
        return self.logit_scale * torch.einsum("bve,bke->bvk", img, protos)

    def tune(self, img: torch.Tensor) -> torch.Tensor:
        """The shifts [B, K or 1, E] after the steps (zeros without steps)."""
        img = img.float()
        K, E = self.text.shape
        shift = img.new_zeros(img.shape[0], K if self.per_class else 1, E)
        if self.steps <= 0:
            return shift
        shift.requires_grad_(True)
        opt = torch.optim.AdamW([shift], lr=self.lr, weight_decay=self.weight_decay)
        with torch.enable_grad():
            for _ in range(self.steps):
                logits = self.logits(img, shift)
                # the official loop selects the confident views again at every step
                idx = select_confident(logits.detach(), self.selection_p)
                sel = torch.gather(logits, 1, idx.unsqueeze(-1).expand(-1, -1, K))
                opt.zero_grad(set_to_none=True)
                avg_entropy(sel).sum().backward()
                opt.step()
        return shift.detach()

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        shift = self.tune(img)
        return self.logits(img[:, :1].float(), shift)[:, 0].softmax(-1)
