"""OnZeta, online zero-shot transfer (Qian & Hu, "Online Zero-Shot Classification with CLIP",
ECCV 2024; official code idstcv/OnZeta, ``main_online.py``, commit befef06).

Each image is seen once, in the stream's order, and nothing of it is stored; two pieces of state
carry over: the dual variable ``rho [K]`` of online label learning (OnLab, the class
distribution of the stream) and the vision-space class proxies ``w [E, K]`` (online proxy
learning), both starting from the text classifier. For the ``t``-th image (t = 1, 2, ...) with
view-0 feature ``x`` (unit, the official plain resize + centre crop):

1. ``q = softmax(x · text / τ_t) ⊙ exp(ρ)``, normalised to sum 1 (OnLab's label);
   ``ρ ← max(0, ρ - c_r/√t · (q - α/K))``;
2. ``v = softmax(x · w / τ_i)`` (the proxies' label);
3. the prediction ``β_t v + (1 - β_t) q`` with ``β_t = β √(t / n)``, ``n`` the stream's length;
4. ``w ← normalise_columns(w - (c_w/√t) / τ_i · x (v - q)ᵀ)``.

The prediction is a probability (it sums to 1) and is recorded as it is. The official script
runs ImageNet only, with β 0.8 and α 1; TTA-VLM (``online_method/onzeta.py``) sets β 0.4 on
every other dataset and α 0 on Caltech101: ``BETA`` / ``ALPHA`` -1 take the official values on
the ImageNet family and TTA-VLM's elsewhere (:data:`PRESETS`; datasets outside both, e.g. the
demo, take ImageNet's). The schedule needs ``n``: the stream trainer tells it
(:meth:`OnZetaAdapter.begin_stream`) before the first image.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from argtca.adapters.base import OFFICIAL, OnlineAdapter, Range
from argtca.config.keys import Key
from argtca.plugins import method

__all__ = ["OnZetaAdapter", "PRESETS", "DEFAULTS"]

_FINE = (0.4, 1.0)     # TTA-VLM: beta 0.4 when test_sets is not a one-letter ImageNet set
# DATASET.NAME -> (BETA, ALPHA)
PRESETS: Dict[str, Tuple[float, float]] = {
    **{name: (0.8, 1.0) for name in ("ImageNet", "ImageNetA", "ImageNetV2", "ImageNetR",
                                     "ImageNetSketch")},
    **{name: _FINE for name in ("OxfordFlowers", "DescribableTextures", "OxfordPets",
                                "StanfordCars", "UCF101", "Food101", "SUN397", "FGVCAircraft",
                                "EuroSAT")},
    "Caltech101": (0.4, 0.0),
}


# TRAINER.ONZETA: the official idstcv/OnZeta main_online.py defaults. -1: the official value
# on the ImageNet family, TTA-VLM's elsewhere (PRESETS: beta 0.4 on the fine-grained sets, alpha
# 0 on Caltech101); other datasets take ImageNet's
DEFAULTS = {
    "TAU_T": Key(0.01, "temperature of the text label (--tau_t)",
                 check=Range(lambda v: v > 0, "> 0 (OnZeta: 0.01)")),
    "TAU_I": Key(0.04, "temperature of the vision proxies (--tau_i)",
                 check=Range(lambda v: v > 0, "> 0 (OnZeta: 0.04)")),
    "CW": Key(0.5, "proxy learning rate cw / sqrt(t) (--cw)",
              check=Range(lambda v: v >= 0, ">= 0 (OnZeta: 0.5)")),
    "CR": Key(20.0, "dual (rho) learning rate cr / sqrt(t) (--cr)",
              check=Range(lambda v: v >= 0, ">= 0 (OnZeta: 20)")),
    "ALPHA": Key(-1.0, "OnLab's class-proportion bound alpha / K (--alpha 1); -1: the official "
                 "value", check=Range(lambda v: v >= 0 or v == -1, f">= 0, {OFFICIAL}")),
    "BETA": Key(-1.0, "proxy weight beta sqrt(t / n) (--beta 0.8); -1: the official value",
                check=Range(lambda v: 0 <= v <= 1 or v == -1, f"in [0, 1], {OFFICIAL}")),
}


@method("onzeta", label="OnZeta", family="online", trainer="OnZeta", defaults=DEFAULTS)
class OnZetaAdapter(OnlineAdapter):
    """OnZeta's label learning and proxy learning over the stream (``TRAINER.ONZETA``)."""

    presets, preset_keys = PRESETS, {"BETA": 0, "ALPHA": 1}
    # the number of images in the stream (β's schedule): :meth:`begin_stream`
    stream_length: Optional[int] = None

    @classmethod
    def needs_views(cls, node, cfg) -> bool:
        return False          # view 0 alone (the official ``preprocess``)

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        beta = float(cls.preset_values(node, cfg)["BETA"])
        if float(node.CR) == 0 and (float(node.CW) == 0 or beta == 0):
            return ("CR 0 and " + ("CW 0" if float(node.CW) == 0 else "BETA 0") + ": neither the "
                    "label nor the proxies learn online, so its predictions are CLIP's zero-shot "
                    "ones")
        return ""

    def __init__(self, node, cfg, text, logit_scale):
        self.tau_t, self.tau_i = float(node.TAU_T), float(node.TAU_I)
        self.cw, self.cr = float(node.CW), float(node.CR)
        given = self.preset_values(node, cfg)
        self.beta, self.alpha = float(given["BETA"]), float(given["ALPHA"])
        super().__init__(node, cfg, text, logit_scale)

    def begin_stream(self, n: int) -> None:
        self.stream_length = int(n)

    def reset(self) -> None:
        K = self.text.shape[0]
        self.state = {"w": self.text.t().contiguous().clone(),          # [E, K] proxies
                      "rho": torch.zeros(K, device=self.device),        # OnLab's dual variable
                      "seen": torch.zeros((), dtype=torch.long, device=self.device)}

    def state_shapes(self, position: int) -> Dict[str, int]:
        return {"seen": position}   # the step count t of the schedules

    def step(self, img: torch.Tensor) -> torch.Tensor:
        if not self.stream_length:
            raise RuntimeError("OnZeta's beta schedule sqrt(t / n) needs the stream's length: "
                               "call begin_stream(n) before the first image")
        st = self.state
        x = img[0].float()
        K = self.text.shape[0]
        t = (st["seen"] + 1).float()                    # on the device: no host sync
        lr, rlr = self.cw * t.rsqrt(), self.cr * t.rsqrt()
        beta = self.beta * (t / self.stream_length).sqrt()
        q = F.softmax(x @ self.text.t() / self.tau_t, dim=0) * torch.exp(st["rho"])
        q = q / q.sum()
        st["rho"] = (st["rho"] - rlr * (q - self.alpha / K)).clamp(min=0)
        v = F.softmax(x @ st["w"] / self.tau_i, dim=0)
        out = beta * v + (1 - beta) * q
        st["w"] = F.normalize(st["w"] - (lr / self.tau_i) * torch.outer(x, v - q), dim=0)
        st["seen"] = st["seen"] + 1
        return out
