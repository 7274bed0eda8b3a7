"""DMN-ZS, the zero-shot variant of Dual Memory Networks (Zhang et al., "Dual Memory Networks: A
Versatile Adaptation Approach for Vision-Language Models", CVPR 2024; official code YBZh/DMN,
``dmn_main.py`` with ``--n_shot 0``, and ``clip/fix_clip.py``).

The dynamic memory holds up to ``MEMORY_SIZE`` test features per class. For each image of the
stream (all views encoded; view 0 is the plain resize + centre crop):

1. the text prediction ``p_text = softmax(s · f_v · tᵀ)`` of every view; the ``int(V·p)`` views
   with the lowest entropy ``-Σ p log(p + 1e-6)`` are averaged in probability space;
2. the pseudo-label is the argmax of that mean probability and its entropy
   ``-Σ p̄ log(p̄ + 1e-8)`` ranks the entry; view 0's feature enters the memory of that class: a free
   slot takes it, a full class replaces its highest-entropy entry when the new entropy is
   strictly lower (ties: the later slot, as a stable ascending sort's last index);
3. the read-out for view 0's feature ``f``: per class, the memory entries and the class's text
   feature (the static memory of the zero-shot variant) are weighted by
   ``exp(-β (1 - f · m))``, summed and normalised into a class prototype ``c_k``;
   ``p_mem = softmax(s · f · c_kᵀ)``. The current image is in the memory when it is read.

The official script scores ``p_text(view 0) + w · p_mem`` (text weight 1, ``w`` searched on the test
labels from 0.001 to 1000); this adapter returns that sum divided by ``1 + w``, a probability with
the same argmax, at ``w = MEMORY_WEIGHT`` (-1: the official search's logged choice for the
dataset, :data:`PRESETS`). The learnable biases of the official
``DualMem`` are zeros in the zero-shot variant (no training data) and are left out here. The weak
variant (DMN-W, few-shot training images in the static memory) needs labelled training data this
harness does not load for test-time methods, so it is not implemented.

The memory is a fixed tensor ``[K, MEMORY_SIZE, E]`` with entropies and a fill count per class,
updated and read without a host synchronisation.
"""
from __future__ import annotations

from typing import Dict

import torch
import torch.nn.functional as F

from argtca.adapters.base import OnlineAdapter, Range
from argtca.config.keys import Key
from argtca.plugins import method

__all__ = ["DMNAdapter", "PRESETS", "DEFAULTS"]

# The memory weight the official script chose per dataset by test accuracy (zero-shot, ViT-B/16:
# camera_ready_dmn_tf_searched_vit_0.txt, first block, and camera_ready_dmn_tf_shift_0.txt).
# Datasets it did not run take ImageNet's.
PRESETS: Dict[str, float] = {
    "ImageNet": 1.0, "OxfordFlowers": 10.0, "DescribableTextures": 10.0, "OxfordPets": 1.0,
    "StanfordCars": 0.3, "UCF101": 0.3, "Caltech101": 0.3, "Food101": 0.3, "SUN397": 3.0,
    "FGVCAircraft": 1.0, "EuroSAT": 0.3, "ImageNetA": 3.0, "ImageNetV2": 1.0, "ImageNetR": 0.3,
    "ImageNetSketch": 1.0,
}


# TRAINER.DMN: DMN-ZS (Zhang et al., CVPR 2024), official YBZh/DMN scripts/run.sh (zero-shot,
# ViT-B/16)
DEFAULTS = {
    "MEMORY_SIZE": Key(50, "dynamic memory entries per class (--memory_size 50)",
                       check=Range(lambda v: v >= 1, ">= 1 (DMN: 50)", True)),
    "BETA": Key(5.5, "read-out sharpness exp(-beta (1 - sim)) (--beta 5.5)",
                check=Range(lambda v: v >= 0, ">= 0 (DMN: 5.5)")),
    "MEMORY_WEIGHT": Key(-1.0, "weight w of the memory prediction: p = (p_text + w p_mem) / "
                         "(1 + w). The official script picks w per dataset by test accuracy (a "
                         "grid 0.001 .. 1000); -1: its logged choice for DATASET.NAME "
                         "(camera_ready_dmn_tf_*_vit_0.txt; PRESETS, e.g. ImageNet 1, DTD 10, "
                         "Caltech101 0.3); other datasets take ImageNet's 1",
                         check=Range(lambda v: v >= 0 or v == -1,
                                     ">= 0, or -1 for the official per-dataset value")),
}


@method("dmn", label="DMN-ZS", family="online", defaults=DEFAULTS)
class DMNAdapter(OnlineAdapter):
    """DMN-ZS's dynamic memory over the stream (``TRAINER.DMN``)."""

    presets, preset_keys = PRESETS, {"MEMORY_WEIGHT": 0}

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        w = float(node.MEMORY_WEIGHT)
        if w < 0:
            w = float(cls.preset_values(node, cfg)["MEMORY_WEIGHT"])
        if w == 0:
            return ("MEMORY_WEIGHT 0: the memory's prediction gets no weight, so its predictions "
                    "are CLIP's zero-shot ones (view 0)")
        return ""

    def __init__(self, node, cfg, text, logit_scale):
        self.memory_size = int(node.MEMORY_SIZE)
        self.beta = float(node.BETA)
        self.memory_weight = self.preset_values(node, cfg)["MEMORY_WEIGHT"]
        super().__init__(node, cfg, text, logit_scale)

    def reset(self) -> None:
        K, E = self.text.shape
        dev = self.device
        self.state = {"features": torch.zeros(K, self.memory_size, E, device=dev),
                      "entropy": torch.zeros(K, self.memory_size, device=dev),
                      "count": torch.zeros(K, dtype=torch.long, device=dev)}

    def pseudo_label(self, probs: torch.Tensor):
        """``probs [V, K]`` -> (pseudo-label [1], its entropy [1]): the official
        ``select_confident_samples`` and ``update_memory_bank``'s label and entropy."""
        ent = -(probs * torch.log(probs + 1e-6)).sum(-1)
        n = max(1, int(probs.shape[0] * self.selection_p))
        idx = torch.argsort(ent, stable=True)[:n]
        mean = probs[idx].mean(0, keepdim=True)                       # [1, K]
        return mean.argmax(-1), -(mean * torch.log(mean + 1e-8)).sum(-1)

    def update(self, feat: torch.Tensor, label: torch.Tensor, entropy: torch.Tensor) -> None:
        st = self.state
        M = self.memory_size
        count = st["count"][label]                                    # [1]
        full = count >= M
        ent_row = st["entropy"][label]                                # [1, M]
        top = ent_row.max(-1).values
        slots = torch.arange(M, device=ent_row.device)
        last = torch.where(ent_row == top[:, None], slots, -1).argmax(-1)
        slot = torch.where(full, last, count.clamp(max=M - 1))
        write = ~full | (entropy < top)
        old = st["features"][label, slot]
        st["features"][label, slot] = torch.where(write[:, None], feat, old)
        st["entropy"][label, slot] = torch.where(write, entropy, st["entropy"][label, slot])
        st["count"][label] = count + (~full).long()

    def memory_probs(self, feat: torch.Tensor) -> torch.Tensor:
        """``feat [E]`` (unit) -> p_mem [K], the similarity-weighted read-out."""
        st = self.state
        mem = st["features"]                                          # [K, M, E]
        filled = (torch.arange(mem.shape[1], device=mem.device)[None, :]
                  < st["count"][:, None])
        w_mem = torch.exp(-self.beta * (1 - mem @ feat)) * filled     # [K, M]
        w_text = torch.exp(-self.beta * (1 - self.text @ feat))       # [K]
        proto = torch.einsum("km,kme->ke", w_mem, mem) + w_text[:, None] * self.text
        proto = F.normalize(proto, dim=-1)
        return (self.logit_scale * proto @ feat).softmax(-1)

    def step(self, img: torch.Tensor) -> torch.Tensor:
        img = img.float()
        probs = self.clip_logits(img).softmax(-1)                     # [V, K]
        label, entropy = self.pseudo_label(probs)
        feat = F.normalize(img[0], dim=-1)
        self.update(feat, label, entropy)
        p_mem = self.memory_probs(feat)
        return (probs[0] + self.memory_weight * p_mem) / (1 + self.memory_weight)
