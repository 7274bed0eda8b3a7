"""TDA, training-free dynamic adapter (Karmanov et al., "Efficient Test-Time Adaptation of
Vision-Language Models", CVPR 2024; official code kdiAAA/TDA, ``tda_runner.py`` and ``utils.py``).

Two key-value caches, filled from the stream by CLIP's own pseudo-labels:

- the positive cache holds, per predicted class, the ``POS_SHOT_CAPACITY`` lowest-entropy test
  features seen so far; every image competes for its predicted class's slots;
- the negative cache holds, per predicted class, ``NEG_SHOT_CAPACITY`` features of images whose
  normalised entropy lies strictly between ``NEG_ENTROPY_LOWER`` and ``NEG_ENTROPY_UPPER``, each
  with the mask of the classes its probability puts strictly between ``NEG_MASK_LOWER`` and
  ``NEG_MASK_UPPER``.

A full class keeps its entries sorted by entropy and a newcomer replaces the last (highest-entropy)
entry only if its entropy is strictly lower; among equal entropies the later entry sorts last (the
official stable sort). The current image enters the caches before its own prediction is made. With
affinity ``A = f · keys`` and weights ``exp(-β (1 - A))``, the prediction is

    logits = clip_logits + α₊ Σ_pos w · onehot(class) - α₋ Σ_neg w · mask.

The official code reports accuracy from the argmax of these logits; the probability recorded here
is their softmax.

Views (``TRAINER.TDA.VIEWS``): the official runner hands one image (resize + centre crop) on the
cross-domain datasets and ImageNet ("original": view 0 here), and 64 (the original + 63 AugMix) on
ImageNet-A/V2/R/Sketch ("confident"): with several views ``get_clip_logits`` keeps the 10 %
lowest-entropy ones and uses the mean of their features (not re-normalised) as the cache key and
query, the mean of their logits as ``clip_logits``, the entropy of their mean probability as the
entropy, that mean probability for the negative mask and the argmax of the mean logits as the
pseudo-label (``TTA.SELECTION_P`` is the kept fraction here).

Entropies are in nats; the negative gate divides them by log₂ K, as the official ``get_entropy``.
The caches are argtca.adapters.cache's fixed-size tensors ``[K, capacity, E]`` with a fill count
per class, so the update and the read-out are a few batched kernels without a host
synchronisation.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch

from argtca.adapters.base import (OnlineAdapter, Range, gate_reason, select_confident,
                                  view_entropy)
from argtca.adapters.cache import cache_logits, new_cache, priority_push
from argtca.engine.objectives import avg_entropy
from argtca.registry import ADAPTER_REGISTRY

__all__ = ["TDAAdapter", "PRESETS", "CONFIDENT_VIEWS"]

# The official configs/<dataset>.yaml: the positive cache's (alpha, beta); every other value is
# the same in all of them. Datasets without an official config take ImageNet's row.
PRESETS: Dict[str, Tuple[float, float]] = {
    "Caltech101": (5.0, 5.0), "DescribableTextures": (2.0, 3.0), "EuroSAT": (4.0, 8.0),
    "FGVCAircraft": (2.0, 2.0), "Food101": (1.0, 1.0), "OxfordFlowers": (1.0, 5.0),
    "OxfordPets": (2.0, 7.0), "StanfordCars": (1.0, 7.0), "SUN397": (2.0, 3.0),
    "UCF101": (3.0, 8.0), "ImageNet": (2.0, 5.0), "ImageNetA": (2.0, 5.0),
    "ImageNetR": (1.0, 8.0), "ImageNetSketch": (2.363, 7.45), "ImageNetV2": (1.0, 8.0),
}
# the datasets the official runner gives 64 views (get_ood_preprocess): "A", "V", "R", "S"
CONFIDENT_VIEWS = ("ImageNetA", "ImageNetV2", "ImageNetR", "ImageNetSketch")


@ADAPTER_REGISTRY.register(name="tda")
class TDAAdapter(OnlineAdapter):
    """TDA's positive and negative caches over the stream (``TRAINER.TDA``)."""

    presets, preset_keys = PRESETS, {"POS_ALPHA": 0, "POS_BETA": 1}
    cfg_ranges = {
        "POS_SHOT_CAPACITY": Range(lambda v: v >= 1, ">= 1", True),
        "POS_ALPHA": Range(lambda v: v >= 0 or v == -1,
                           ">= 0, or -1 for the official per-dataset value"),
        "POS_BETA": Range(lambda v: v >= 0 or v == -1,
                          ">= 0, or -1 for the official per-dataset value"),
        "NEG_SHOT_CAPACITY": Range(lambda v: v >= 1, ">= 1", True),
        "NEG_ALPHA": Range(lambda v: v >= 0, ">= 0"),
        "NEG_BETA": Range(lambda v: v >= 0, ">= 0"),
        **{f"NEG_{k}_{end}": (
            Range(lambda v: v >= 0, ">= 0") if end == "LOWER" else Range(
                lambda v, node, k=k: not isinstance(node[f"NEG_{k}_LOWER"], (int, float))
                or v > node[f"NEG_{k}_LOWER"],
                lambda node, path, k=k: f"> {path}.NEG_{k}_LOWER={node[f'NEG_{k}_LOWER']!r}",
                uses_node=True))
           for k in ("ENTROPY", "MASK") for end in ("LOWER", "UPPER")},
        "VIEWS": ("auto", "original", "confident"),
    }

    @staticmethod
    def resolve_views(node, cfg) -> str:
        views = str(node.VIEWS).lower()
        if views == "auto":
            views = "confident" if str(cfg.DATASET.NAME) in CONFIDENT_VIEWS else "original"
        return views

    @classmethod
    def needs_views(cls, node, cfg) -> bool:
        return cls.resolve_views(node, cfg) != "original"

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        pos_off = not bool(node.POS_ENABLED) or float(
            cls.preset_values(node, cfg)["POS_ALPHA"]) == 0
        gate = gate_reason(node) if bool(node.NEG_ENABLED) else ""
        neg_off = not bool(node.NEG_ENABLED) or float(node.NEG_ALPHA) == 0 or bool(gate)
        if pos_off and neg_off:
            return ("neither cache acts (positive: POS_ENABLED False or POS_ALPHA 0; negative: "
                    f"{gate or 'NEG_ENABLED False or NEG_ALPHA 0'}), so its predictions are "
                    f"CLIP's zero-shot ones")
        return gate

    def __init__(self, node, cfg, text, logit_scale):
        self.pos_enabled = bool(node.POS_ENABLED)
        self.pos_capacity = int(node.POS_SHOT_CAPACITY)
        given = self.preset_values(node, cfg)
        self.pos_alpha, self.pos_beta = given["POS_ALPHA"], given["POS_BETA"]
        self.views = self.resolve_views(node, cfg)
        self.neg_enabled = bool(node.NEG_ENABLED)
        self.neg_capacity = int(node.NEG_SHOT_CAPACITY)
        self.neg_alpha = float(node.NEG_ALPHA)
        self.neg_beta = float(node.NEG_BETA)
        self.neg_entropy = (float(node.NEG_ENTROPY_LOWER), float(node.NEG_ENTROPY_UPPER))
        self.neg_mask = (float(node.NEG_MASK_LOWER), float(node.NEG_MASK_UPPER))
        super().__init__(node, cfg, text, logit_scale)

    def reset(self) -> None:
        K, E = self.text.shape
        self.state = {"pos": new_cache(K, self.pos_capacity, E, self.device),
                      "neg": new_cache(K, self.neg_capacity, E, self.device,
                                       payload={"mask": (K,)})}

    # ------------------------------------------------------------------ the official pieces
    def image_summary(self, img: torch.Tensor):
        """``img [V, E]`` -> (feature [E], logits [K], entropy, probability [K], pseudo-label),
        the official ``get_clip_logits``."""
        if self.views == "original" or img.shape[0] == 1:
            lg = self.clip_logits(img[0])
            return img[0], lg, view_entropy(lg), lg.softmax(-1), lg.argmax()
        logits = self.clip_logits(img)
        idx = select_confident(logits, self.selection_p)
        sel = logits[idx]
        mean = sel.mean(0)
        return img[idx].mean(0), mean, avg_entropy(sel), sel.softmax(-1).mean(0), mean.argmax()

    def step(self, img: torch.Tensor) -> torch.Tensor:
        img = img.float()
        K = self.text.shape[0]
        feat, logits, entropy, prob, pred = self.image_summary(img)
        st = self.state
        final = logits.clone()
        if self.pos_enabled:
            priority_push(st["pos"], pred, feat, entropy)
        if self.neg_enabled:
            norm_entropy = entropy / math.log2(K)
            gate = (self.neg_entropy[0] < norm_entropy) & (norm_entropy < self.neg_entropy[1])
            mask = (prob > self.neg_mask[0]) & (prob < self.neg_mask[1])
            priority_push(st["neg"], pred, feat, entropy, gate=gate, mask=mask)
        if self.pos_enabled:
            final = final + self.pos_alpha * cache_logits(st["pos"], feat, self.pos_beta)
        if self.neg_enabled:
            final = final - self.neg_alpha * cache_logits(st["neg"], feat, self.neg_beta,
                                                          st["neg"]["mask"])
        return final.softmax(-1)
