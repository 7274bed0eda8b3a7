"""TTA-VLM's ``dmn_weak``: DMN-ZS's dynamic memory fed by the plain image alone (TomSheng21/tta-vlm,
``online_method/dmn_weak.py``, commit bcc735f; no official code of its own: it is TTA-VLM's
cheaper variant of YBZh/DMN's zero-shot method, argtca/adapters/dmn.py).

It needs no labelled image: the "weak" is the weaker use of the test image, one view (TTA-VLM's
``base`` transform: resize + centre crop, view 0 here) instead of DMN's augmented views. Per
image of the stream:

1. ``p = softmax(s · f · tᵀ)`` of view 0; the pseudo-label is its argmax and its entropy
   ``-Σ p log(p + 1e-5)`` ranks the entry;
2. the feature enters the memory of that class: a free slot takes it; a full class ALWAYS
   replaces its highest-entropy entry (TTA-VLM's ``MemoryBank.update``; DMN-ZS's official code
   replaces it only for a strictly lower entropy); among equal entropies the first slot goes;
3. the read-out is DMN-ZS's (the memory entries and the class text feature weighted by
   ``exp(-β (1 - f · m))``, summed, normalised into class prototypes; ``p_mem = softmax(s · f ·
   cᵀ)``), the current image already in the memory.

TTA-VLM scores ``p + w · p_mem`` with ``w = 1``; the probability recorded here is that sum divided
by ``1 + w`` (same argmax). This is the DMN-W of neither the DMN paper nor its code (DMN-W uses
labelled few-shot images); the state is DMN-ZS's fixed memory tensors.
"""
from __future__ import annotations

import torch

from argtca.adapters.base import OnlineAdapter, Range
from argtca.adapters.dmn import DMNAdapter
from argtca.config.keys import Key
from argtca.plugins import method

__all__ = ["DMNWeakAdapter", "DEFAULTS"]

# TRAINER.DMNWEAK: TTA-VLM's dmn_weak (TomSheng21/tta-vlm online_method/dmn_weak.py)
DEFAULTS = {
    "MEMORY_SIZE": Key(50, "dynamic memory entries per class (max_len 50)",
                       check=Range(lambda v: v >= 1, ">= 1 (TTA-VLM: 50)", True)),
    "BETA": Key(5.5, "read-out sharpness exp(-beta (1 - sim)) (beta 5.5)",
                check=Range(lambda v: v >= 0, ">= 0 (TTA-VLM: 5.5)")),
    "MEMORY_WEIGHT": Key(1.0, "p = (p_text + w p_mem) / (1 + w) (alpha 1.0)",
                         check=Range(lambda v: v >= 0, ">= 0 (TTA-VLM: 1)")),
}


@method("dmn_weak", label="DMN-weak", family="online", trainer="DMNWeak", defaults=DEFAULTS)
class DMNWeakAdapter(DMNAdapter):
    """DMN-ZS's memory on view 0 alone, TTA-VLM's rules (``TRAINER.DMNWEAK``)."""

    presets, preset_keys = {}, {}

    @classmethod
    def needs_views(cls, node, cfg) -> bool:
        return False

    def __init__(self, node, cfg, text, logit_scale):
        self.memory_size = int(node.MEMORY_SIZE)
        self.beta = float(node.BETA)
        self.memory_weight = float(node.MEMORY_WEIGHT)
        OnlineAdapter.__init__(self, node, cfg, text, logit_scale)

    def pseudo_label(self, probs: torch.Tensor):
        """``probs [V, K]`` -> (view 0's argmax [1], its entropy with TTA-VLM's 1e-5 [1])."""
        p = probs[:1]
        return p.argmax(-1), -(p * torch.log(p + 1e-5)).sum(-1)

    def update(self, feat: torch.Tensor, label: torch.Tensor, entropy: torch.Tensor) -> None:
        st = self.state
        count = st["count"][label]                                    # [1]
        full = count >= self.memory_size
        slot = torch.where(full, st["entropy"][label].argmax(-1),
                           count.clamp(max=self.memory_size - 1))
        st["features"][label, slot] = feat
        st["entropy"][label, slot] = entropy
        st["count"][label] = count + (~full).long()
