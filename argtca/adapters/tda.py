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
from argtca.config.keys import Key
from argtca.engine.objectives import avg_entropy
from argtca.plugins import method

__all__ = ["TDAAdapter", "PRESETS", "CONFIDENT_VIEWS", "DEFAULTS"]

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

_GE0 = Range(lambda v: v >= 0, ">= 0")
_OFFICIAL = Range(lambda v: v >= 0 or v == -1, ">= 0, or -1 for the official per-dataset value")


def _above(lower: str) -> Range:
    """The upper bound of a (lower, upper) pair: above the node's ``lower`` key."""
    return Range(lambda v, node: not isinstance(node[lower], (int, float)) or v > node[lower],
                 lambda node, path: f"> {path}.{lower}={node[lower]!r}", uses_node=True)


# TRAINER.TDA: the official kdiAAA/TDA configs/<dataset>.yaml, ViT-B/16. Only the positive
# cache's alpha/beta differ per dataset; -1: the official value for DATASET.NAME (PRESETS; other
# datasets, e.g. the demo, take ImageNet's 2 / 5, also the median of the ten fine-grained sets')
DEFAULTS = {
    "POS_ENABLED": Key(True, "positive cache on (all configs)"),
    "POS_SHOT_CAPACITY": Key(3, "positive cache entries per class (all configs)",
                             check=Range(lambda v: v >= 1, ">= 1", True)),
    "POS_ALPHA": Key(-1.0, "weight of the positive cache logits (e.g. Caltech 5); -1: the "
                     "official value for DATASET.NAME", check=_OFFICIAL),
    "POS_BETA": Key(-1.0, "sharpness of exp(-beta (1 - affinity)) (e.g. Caltech 5); -1: the "
                    "official value for DATASET.NAME", check=_OFFICIAL),
    "NEG_ENABLED": Key(True, "negative cache on (all configs)"),
    "NEG_SHOT_CAPACITY": Key(2, "negative cache entries per class (all configs)",
                             check=Range(lambda v: v >= 1, ">= 1", True)),
    "NEG_ALPHA": Key(0.117, "weight of the subtracted negative logits (all configs)",
                     check=_GE0),
    "NEG_BETA": Key(1.0, "sharpness of the negative cache's weights (all configs)", check=_GE0),
    "NEG_ENTROPY_LOWER": Key(0.2, "an image enters the negative cache when lower < H / log2 K "
                             "< upper (H in nats, as get_entropy; all configs)", check=_GE0),
    "NEG_ENTROPY_UPPER": Key(0.5, "the upper bound of that entropy gate (all configs)",
                             check=_above("NEG_ENTROPY_LOWER")),
    "NEG_MASK_LOWER": Key(0.03, "its negative mask: the classes with lower < p < upper (all "
                          "configs)", check=_GE0),
    "NEG_MASK_UPPER": Key(1.0, "the upper bound of that mask (all configs)",
                          check=_above("NEG_MASK_LOWER")),
    "VIEWS": Key("auto", "the image's feature and logits: \"original\" (view 0: the official "
                 "runner on the cross-domain sets and ImageNet), \"confident\" (the confident "
                 "views' mean: its ImageNet-A/V2/R/Sketch runs), \"auto\": confident for "
                 "DATASET.NAME ImageNetA, ImageNetV2, ImageNetR, ImageNetSketch",
                 choices=("auto", "original", "confident")),
}


@method("tda", label="TDA", family="online", defaults=DEFAULTS)
class TDAAdapter(OnlineAdapter):
    """TDA's positive and negative caches over the stream (``TRAINER.TDA``)."""

    presets, preset_keys = PRESETS, {"POS_ALPHA": 0, "POS_BETA": 1}

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
