"""DPE (Zhang et al., NeurIPS 2024, "Dual Prototype Evolution for Test-Time Generalization of
Vision-Language Models"; official code github.com/zhangce01/DPE-CLIP, main_dpe.py and utils.py).

State carried over the stream: the textual prototypes ``T`` [K, E] (a running mean, not
re-normalised, of the start text features and every confident image's tuned prototypes) and a
priority queue per class of the ``SHOT_CAPACITY`` lowest-entropy image features (TDA's cache),
whose per-class means are the visual prototypes. Per image, in the official order:

1. ``W = normalize(T)``; the image's feature ``f``, logits ``l = s·f·Wᵀ``, entropy and prediction
   from view 0 (the official cross-domain sets have one view) or from the ``SELECTION_P`` most
   confident views (mean feature and logits, entropy of the mean probabilities: the official
   ImageNet variants); ``VIEWS`` chooses, "auto" by the dataset. ``(f, H/log2 K)`` joins the
   queue of the predicted class; the visual prototypes ``P`` [C, E] are the means of the C
   non-empty queues.
2. Residuals ``r_t`` [K, E] and ``r_v`` [C, E], zero, are tuned ``STEPS`` AdamW steps (lr
   ``LR_TEXT`` / ``LR_IMAGE``, eps ``ADAM_EPS``, weight decay ``WEIGHT_DECAY``) on
   ``H(softmax(s·f·W'ᵀ + ALPHA·exp(-BETA(1 - f·P'ᵀ)) @ onehot)) + ALIGN · InfoNCE(P', W'_c)``
   with ``W' = normalize(T + r_t)``, ``P' = normalize(P + r_v)`` (rows) and InfoNCE the
   cross-entropy of ``P'·W'_cᵀ / INFONCE_T`` against the diagonal (``info_nce``'s default with
   no negatives: the other classes in the cache are the negatives).
3. The prediction ``s·f₀·W'ᵀ + ALPHA·exp(-BETA(1 - f₀·P'ᵀ)) @ onehot`` with ``f₀`` view 0
   (official, all but ImageNet-A) or the confident views re-selected with ``W'`` (ImageNet-A);
   ``PREDICT_VIEWS`` chooses. Its softmax is returned; when its entropy / log2 K is below
   ``EVOLVE_ENTROPY`` the textual prototypes evolve: ``n += 1; T = T·n/(n+1) + W'/(n+1)``.

The residuals live for one image only; the engine runs adapters under no_grad, so the tuning
step enables gradients itself.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
import torch.nn.functional as F

from argtca.adapters.base import OFFICIAL, OnlineAdapter, Range, view_entropy
from argtca.adapters.boostadapter import image_summary, imagenet_family, resolve_views
from argtca.adapters.cache import affinity_weights, filled, new_cache, priority_push
from argtca.config.keys import Key
from argtca.plugins import method

# The official per-dataset configs (configs/<dataset>.yaml): alpha, beta, learning rate (the text
# and image rates are equal in every file) and the alignment weight. Datasets without an official
# config (the demo, your own ImageFolder) take ImageNet's row.
PRESETS: Dict[str, Tuple[float, float, float, float]] = {
    "Caltech101": (15.0, 5.0, 6e-4, 0.2), "DescribableTextures": (6.0, 3.0, 6e-4, 0.2),
    "EuroSAT": (3.0, 8.0, 5e-5, 0.2), "FGVCAircraft": (6.0, 2.0, 6e-4, 0.2),
    "Food101": (3.0, 1.0, 2e-4, 0.2), "OxfordFlowers": (2.5, 5.0, 1e-4, 0.2),
    "OxfordPets": (4.0, 7.0, 5e-5, 0.2), "StanfordCars": (3.0, 7.0, 1e-4, 1.5),
    "SUN397": (6.0, 3.0, 2e-4, 0.2), "UCF101": (9.0, 8.0, 4e-4, 0.2),
    "ImageNet": (6.0, 5.0, 6e-4, 0.5), "ImageNetA": (6.0, 5.0, 3e-4, 2.5),
    "ImageNetR": (3.0, 8.0, 6e-4, 0.0), "ImageNetSketch": (7.0, 7.45, 6e-4, 0.2),
    "ImageNetV2": (3.0, 8.0, 5e-4, 0.5),
}


def info_nce(query: torch.Tensor, positive: torch.Tensor, temperature: float) -> torch.Tensor:
    """``info_nce.InfoNCE(temperature, reduction='mean')(query, positive)`` without negative
    keys: rows ℓ2-normalised, cross-entropy of ``q·pᵀ / t`` with the diagonal as labels."""
    logits = F.normalize(query, dim=-1) @ F.normalize(positive, dim=-1).t()
    labels = torch.arange(query.shape[0], device=query.device)
    return F.cross_entropy(logits / temperature, labels)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    return view_entropy(logits)


_OFFICIAL = Range(lambda v: v == -1 or v >= 0, f">= 0, {OFFICIAL}")
_VIEWS = ("auto", "original", "confident")

# TRAINER.DPE: official code github.com/zhangce01/DPE-CLIP (main_dpe.py, configs/<dataset>.yaml).
# -1: the official per-dataset value for DATASET.NAME (PRESETS; other datasets take ImageNet's).
DEFAULTS = {
    "SHOT_CAPACITY": Key(3, "priority queue entries per class (all configs)",
                         check=Range(lambda v: v >= 1, ">= 1", True)),
    "ALPHA": Key(-1.0, "cache weight (e.g. Caltech 15, DTD 6, ImageNet 6)", check=_OFFICIAL),
    "BETA": Key(-1.0, "cache sharpness (e.g. Caltech 5, DTD 3, ImageNet 5)", check=_OFFICIAL),
    "LR_TEXT": Key(-1.0, "AdamW lr of the textual residual (5e-5 .. 6e-4)", check=_OFFICIAL),
    "LR_IMAGE": Key(-1.0, "AdamW lr of the visual residual (= LR_TEXT everywhere)",
                    check=_OFFICIAL),
    "ALIGN": Key(-1.0, "weight of the alignment (InfoNCE) loss (0 .. 2.5)", check=_OFFICIAL),
    "STEPS": Key(1, "residual steps per image (main_dpe.py: steps = 1)",
                 check=Range(lambda v: v >= 0, ">= 0 (official: 1)", True)),
    "ADAM_EPS": Key(1e-3, "AdamW eps (main_dpe.py)", check=Range(lambda v: v > 0, "> 0")),
    "WEIGHT_DECAY": Key(0.1, "AdamW weight decay (main_dpe.py)",
                        check=Range(lambda v: v >= 0, ">= 0")),
    "INFONCE_T": Key(0.01, "InfoNCE temperature (main_dpe.py)",
                     check=Range(lambda v: v > 0, "> 0")),
    "EVOLVE_ENTROPY": Key(0.1, "textual prototypes evolve when the prediction's entropy H(nats) "
                          "/ log2 K is below this (main_dpe.py)",
                          check=Range(lambda v: v >= 0, ">= 0 (0: the text never evolves)")),
    "VIEWS": Key("auto", "the feature that is cached and tuned on: \"original\" (view 0: the "
                 "official cross-domain sets, one view), \"confident\" (mean of the confident "
                 "views: ImageNet and its variants); \"auto\": confident for ImageNet*",
                 choices=_VIEWS),
    "PREDICT_VIEWS": Key("auto", "the final prediction's feature: \"original\" (view 0), "
                         "\"confident\" (re-selected with the tuned text: official for "
                         "ImageNet-A only); \"auto\": confident for ImageNetA",
                         choices=_VIEWS),
}


@method("dpe", label="DPE", family="online", defaults=DEFAULTS)
class DPE(OnlineAdapter):
    """Evolving textual and visual prototypes with per-image residuals (module docstring)."""

    presets = PRESETS
    preset_keys = {"ALPHA": 0, "BETA": 1, "LR_TEXT": 2, "LR_IMAGE": 2, "ALIGN": 3}

    @classmethod
    def needs_views(cls, node, cfg) -> bool:
        name = str(cfg.DATASET.NAME)
        return (resolve_views(node.VIEWS, name, imagenet_family(name)) != "original"
                or resolve_views(node.PREDICT_VIEWS, name, name == "ImageNetA") != "original")

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        # the two prototypes that evolve are the method: either one switched off is not DPE
        off = []
        if float(node.EVOLVE_ENTROPY) == 0:
            off.append("its textual prototypes never evolve (EVOLVE_ENTROPY 0)")
        if float(cls.preset_values(node, cfg)["ALPHA"]) == 0:
            off.append("its visual prototypes add nothing to the logits (ALPHA 0)")
        return "; ".join(off)

    def __init__(self, node, cfg, text: torch.Tensor, logit_scale: float):
        name = str(cfg.DATASET.NAME)
        given = self.preset_values(node, cfg)
        self.alpha, self.beta = given["ALPHA"], given["BETA"]
        self.lr_text, self.lr_image = given["LR_TEXT"], given["LR_IMAGE"]
        self.align = given["ALIGN"]
        self.views = resolve_views(node.VIEWS, name, imagenet_family(name))
        self.predict_views = resolve_views(node.PREDICT_VIEWS, name, name == "ImageNetA")
        super().__init__(node, cfg, text, logit_scale)

    def reset(self) -> None:
        K, E = self.text.shape
        self.state = {"text": self.text.clone(), "n_avg": 0,
                      "queue": new_cache(K, int(self.node.SHOT_CAPACITY), E, self.device)}

    def prototypes(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The visual prototypes: (means [C, E] of the non-empty queues, their classes [C])."""
        q = self.state["queue"]
        classes = (q["count"] > 0).nonzero()[:, 0]
        n = q["count"][classes].to(q["keys"].dtype)
        used = filled(q)[classes].to(q["keys"].dtype)
        return (q["keys"][classes] * used[..., None]).sum(1) / n[:, None], classes

    def tune(self, f: torch.Tensor, logits_from, protos: torch.Tensor, onehot: torch.Tensor,
             classes: torch.Tensor):
        """The per-image residuals after ``STEPS`` AdamW steps: (r_t [K, E], r_v [C, E])."""
        node, T = self.node, self.state["text"]
        r_t = torch.zeros_like(T, requires_grad=True)
        r_v = torch.zeros_like(protos, requires_grad=True)
        opt = torch.optim.AdamW(
            [{"params": [r_t], "lr": self.lr_text}, {"params": [r_v], "lr": self.lr_image}],
            eps=float(node.ADAM_EPS), weight_decay=float(node.WEIGHT_DECAY))
        with torch.enable_grad():
            for _ in range(int(node.STEPS)):
                W = F.normalize(T + r_t, dim=-1)
                P = F.normalize(protos + r_v, dim=-1)
                out = logits_from(W) + self.alpha * (affinity_weights(f, P, self.beta) @ onehot)
                loss = entropy(out) + self.align * info_nce(P, W[classes],
                                                            float(node.INFONCE_T))
                opt.zero_grad()
                loss.backward()
                opt.step()
        return r_t.detach(), r_v.detach()

    def step(self, img: torch.Tensor) -> torch.Tensor:
        img = img.float()
        K = self.text.shape[0]
        T = self.state["text"]
        W0 = F.normalize(T, dim=-1)
        logits = self.logit_scale * img @ W0.t()
        f, _, h, _, pred = image_summary(logits, img, self.views, self.selection_p)
        # the official normalisation divides in double precision (Python floats)
        priority_push(self.state["queue"], pred, f, h.double() / math.log2(K))
        protos, classes = self.prototypes()
        onehot = F.one_hot(classes, K).to(img.dtype)
        if self.views == "confident" and img.shape[0] > 1:
            # the selected views stay those chosen with W0; their mean logits = s · mean f · W
            idx = torch.argsort(view_entropy(logits), stable=True)[
                :max(1, int(img.shape[0] * self.selection_p))]
            sel = img[idx]

            def logits_from(W):
                return (self.logit_scale * sel @ W.t()).mean(0)
        else:
            def logits_from(W):
                return self.logit_scale * f @ W.t()
        r_t, r_v = self.tune(f, logits_from, protos, onehot, classes)

        W = F.normalize(T + r_t, dim=-1)
        P = F.normalize(protos + r_v, dim=-1)
        if self.predict_views == "confident" and img.shape[0] > 1:
            fp, lp, _, _, _ = image_summary(self.logit_scale * img @ W.t(), img, "confident",
                                            self.selection_p)
        else:
            fp, lp = img[0], self.logit_scale * img[0] @ W.t()
        out = lp + self.alpha * (affinity_weights(fp, P, self.beta) @ onehot)
        if float(entropy(out)) / math.log2(K) < float(self.node.EVOLVE_ENTROPY):
            n = int(self.state["n_avg"]) + 1
            self.state["n_avg"] = n
            self.state["text"] = T * (n / (n + 1)) + W * (1.0 / (n + 1))
        return out.softmax(-1)
