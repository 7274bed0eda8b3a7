"""BoostAdapter (Zhang et al., NeurIPS 2024, "BoostAdapter: Improving Vision-Language Test-Time
Adaptation via Regional Bootstrapping"; official code github.com/taolinzhang/BoostAdapter,
runner.py and utils.py, built on TDA's).

Per image of the stream, in the official order:

1. The image's feature ``f``, CLIP logits ``l``, entropy ``h`` (nats), probabilities ``p`` and
   prediction: view 0 alone (the official cross-domain sets), or the ``SELECTION_P`` most
   confident views (mean feature, mean logits, entropy of the mean probabilities: the official
   ImageNet variants); ``HISTORY_VIEWS`` chooses, "auto" by the dataset.
2. The historical (positive) cache, a priority queue per predicted class holding the
   ``SHOT_CAPACITY`` lowest-entropy ``(f, h)``, takes the image.
3. Boosting samples: the ``int(V · SELECTION_P)`` lowest-entropy views of all V views, each with
   its own feature, entropy and prediction, join a copy of the historical cache made for this
   image only, whose capacity per class is ``SHOT_CAPACITY + DELTA``.
4. The negative cache (FIFO per class, ``NEG_SHOT_CAPACITY``) takes ``(f, p)`` when
   ``NEG_ENTROPY_LOWER < h / log2(K) < NEG_ENTROPY_UPPER`` (nats over log2, as the official code).
5. ``logits = l + ALPHA · A(f, boosted cache) - NEG_ALPHA · A⁻(f, negative cache)`` with
   ``A = exp(-β(1 - f·keys)) @ one_hot(classes)`` and ``A⁻``'s values the mask
   ``NEG_MASK_LOWER < p < NEG_MASK_UPPER``; the probabilities are its softmax.

Both caches are argtca.adapters.cache's fixed-size tensors in ``self.state``.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch

from argtca.adapters.base import (OFFICIAL, OnlineAdapter, Range, gate_reason, selection_reason,
                                  view_entropy)
from argtca.adapters.cache import (cache_logits, entries, fifo_push, new_cache, priority_push,
                                   widen)
from argtca.engine.objectives import avg_entropy
from argtca.config.keys import Key
from argtca.plugins import method

# The official per-dataset configs (configs/<dataset>.yaml): positive alpha, beta and delta. The
# official imagenet.yaml has no delta (its runner fails on it); 1 is TTA-VLM's value for ImageNet.
# Datasets without an official config (the demo, your own ImageFolder) take ImageNet's row.
PRESETS: Dict[str, Tuple[float, float, int]] = {
    "Caltech101": (5.0, 5.0, 2), "DescribableTextures": (2.0, 3.0, 0),
    "EuroSAT": (4.0, 8.0, 0), "FGVCAircraft": (2.0, 2.0, 2), "Food101": (1.0, 1.0, 3),
    "OxfordFlowers": (1.0, 5.0, 0), "OxfordPets": (2.0, 7.0, 0),
    "StanfordCars": (1.0, 7.0, 3), "SUN397": (2.0, 3.0, 1), "UCF101": (3.0, 8.0, 0),
    "ImageNet": (2.0, 5.0, 1), "ImageNetA": (2.0, 5.0, 3), "ImageNetR": (1.0, 8.0, 3),
    "ImageNetSketch": (2.363, 7.45, 1), "ImageNetV2": (1.0, 8.0, 1),
}


def imagenet_family(dataset_name: str) -> bool:
    """The official OOD benchmark (ImageNet and its variants) averages the confident views; the
    cross-domain sets use the original image."""
    return str(dataset_name).startswith("ImageNet")


def resolve_views(choice: str, dataset_name: str, confident_when: bool) -> str:
    """A views key: "original" / "confident" as given, "auto" -> "confident" iff
    ``confident_when``."""
    choice = str(choice).lower()
    if choice == "auto":
        return "confident" if confident_when else "original"
    return choice


def image_summary(logits: torch.Tensor, img: torch.Tensor, mode: str, p: float):
    """The official ``get_clip_logits``: [V, K], [V, E] -> (feature [E], logits [K], entropy in
    nats, probabilities [K], predicted class), tensors on the device. "original": view 0;
    "confident": the ``max(1, int(V·p))`` lowest-entropy views' mean feature (not
    re-normalised), mean logits, entropy of their mean probabilities, mean probabilities, argmax
    of the mean logits."""
    if mode == "original" or logits.shape[0] == 1:
        l0 = logits[0]
        return img[0], l0, view_entropy(l0), l0.softmax(-1), l0.argmax()
    n = max(1, int(logits.shape[0] * p))
    idx = torch.argsort(view_entropy(logits), stable=True)[:n]
    sel = logits[idx]
    mean = sel.mean(0)
    return img[idx].mean(0), mean, avg_entropy(sel), sel.softmax(-1).mean(0), mean.argmax()


_UNIT = Range(lambda v: 0 <= v <= 1, "[0, 1]")
_GE0 = Range(lambda v: v >= 0, ">= 0")

# TRAINER.BOOSTADAPTER: official code github.com/taolinzhang/BoostAdapter (runner.py,
# configs/<dataset>.yaml). -1: the official per-dataset value for DATASET.NAME (PRESETS; other
# datasets take ImageNet's). The boosting samples are the int(V * TTA.SELECTION_P) most confident
# views (official: 10 %).
DEFAULTS = {
    "SHOT_CAPACITY": Key(3, "historical cache entries per class (all configs)",
                         check=Range(lambda v: v >= 1, ">= 1", True)),
    "ALPHA": Key(-1.0, "positive cache weight (e.g. Caltech 5, DTD 2); -1: the official value",
                 check=Range(lambda v: v == -1 or v >= 0, f">= 0, {OFFICIAL}")),
    "BETA": Key(-1.0, "positive cache sharpness (e.g. Caltech 5, DTD 3); -1: the official value",
                check=Range(lambda v: v == -1 or v >= 0, f">= 0, {OFFICIAL}")),
    "DELTA": Key(-1, "extra entries per class for boosting samples (configs' delta: 0-3; "
                 "ImageNet has none: 1); -1: the official value",
                 check=Range(lambda v: v >= -1, f">= 0, {OFFICIAL}", True)),
    "NEG_SHOT_CAPACITY": Key(2, "negative cache entries per class (FIFO)",
                             check=Range(lambda v: v >= 1, ">= 1", True)),
    "NEG_ALPHA": Key(0.117, "negative cache weight (all configs)", check=_GE0),
    "NEG_BETA": Key(1.0, "negative cache sharpness (all configs)", check=_GE0),
    "NEG_ENTROPY_LOWER": Key(0.2, "an image enters the negative cache when lower < H(nats) / "
                             "log2 K < upper (official)", check=_UNIT),
    "NEG_ENTROPY_UPPER": Key(0.5, "the upper bound of that entropy gate (official)",
                             check=_UNIT),
    "NEG_MASK_LOWER": Key(0.03, "negative values: lower < p < upper (official)", check=_UNIT),
    "NEG_MASK_UPPER": Key(1.0, "the upper bound of the negative mask (official)", check=_UNIT),
    "HISTORY_VIEWS": Key("auto", "the image's feature for the caches and its CLIP logits: "
                         "\"original\" (view 0: the official cross-domain sets), \"confident\" "
                         "(mean of the confident views: its ImageNet variants), \"auto\": "
                         "confident for DATASET.NAME ImageNet*, else view 0",
                         choices=("auto", "original", "confident")),
}


@method("boostadapter", label="BoostAdapter", family="online", trainer="BoostAdapter",
        defaults=DEFAULTS)
class BoostAdapter(OnlineAdapter):
    """Historical cache + per-image boosting samples + negative cache (module docstring)."""

    presets, preset_keys = PRESETS, {"ALPHA": 0, "BETA": 1, "DELTA": 2}

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        # the boosting samples are what BoostAdapter adds to TDA's caches; the official
        # int(V · p) (no lower bound of one, unlike the confident-view selections)
        why = selection_reason(int(cfg.TTA.N_VIEWS), float(cfg.TTA.SELECTION_P),
                               "boosting views")
        if why:
            return (f"{why}: no boosting sample joins the cache, so it runs as TDA's historical "
                    f"and negative caches alone")
        alpha = cls.preset_values(node, cfg)["ALPHA"]
        if float(alpha) == 0:
            return ("TRAINER.BOOSTADAPTER.ALPHA 0: the historical and boosted cache add nothing "
                    "to CLIP's logits")
        return gate_reason(node)

    def __init__(self, node, cfg, text: torch.Tensor, logit_scale: float):
        name = str(cfg.DATASET.NAME)
        given = self.preset_values(node, cfg)
        self.alpha, self.beta, self.delta = given["ALPHA"], given["BETA"], given["DELTA"]
        self.history_views = resolve_views(node.HISTORY_VIEWS, name, imagenet_family(name))
        super().__init__(node, cfg, text, logit_scale)

    def reset(self) -> None:
        K, E = self.text.shape
        self.state = {
            "pos": new_cache(K, int(self.node.SHOT_CAPACITY), E, self.device),
            "neg": new_cache(K, int(self.node.NEG_SHOT_CAPACITY), E, self.device, fifo=True,
                             payload={"prob": (K,)})}

    def boosted_cache(self, logits: torch.Tensor, img: torch.Tensor):
        """The historical cache with this image's boosting samples pushed in (official: a deep
        copy of the cache, each selected view pushed, most confident first, with capacity
        SHOT_CAPACITY + DELTA)."""
        boosted = widen(self.state["pos"], int(self.node.SHOT_CAPACITY) + self.delta)
        n_boost = int(logits.shape[0] * self.selection_p)   # official int(V * 0.1): 0 for V < 10
        ent = view_entropy(logits)
        idx = torch.argsort(ent, stable=True)[:n_boost]
        feats, ents, preds = img[idx], ent[idx], logits[idx].argmax(-1)
        for i in range(n_boost):
            priority_push(boosted, preds[i], feats[i], ents[i])
        return boosted

    def boosted_entries(self, logits: torch.Tensor, img: torch.Tensor):
        """The boosted cache's entries, class-major, each class sorted by entropy:
        (keys [N, E], classes [N])."""
        return entries(self.boosted_cache(logits, img))

    def step(self, img: torch.Tensor) -> torch.Tensor:
        img = img.float()
        K = self.text.shape[0]
        node = self.node
        logits = self.clip_logits(img)                               # [V, K]
        f, l, h, p, pred = image_summary(logits, img, self.history_views, self.selection_p)
        priority_push(self.state["pos"], pred, f, h)
        boosted = self.boosted_cache(logits, img)
        # the official gate divides in double precision (Python floats)
        norm_h = h.double() / math.log2(K)
        gate = (float(node.NEG_ENTROPY_LOWER) < norm_h) & (norm_h < float(node.NEG_ENTROPY_UPPER))
        fifo_push(self.state["neg"], pred, f, gate=gate, prob=p)
        out = l + self.alpha * cache_logits(boosted, f, self.beta)
        neg = self.state["neg"]
        mask = ((neg["prob"] > float(node.NEG_MASK_LOWER))
                & (neg["prob"] < float(node.NEG_MASK_UPPER))).float()
        out = out - float(node.NEG_ALPHA) * cache_logits(neg, f, float(node.NEG_BETA), mask)
        return out.softmax(-1)
