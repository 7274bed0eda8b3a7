"""ZERO: test-time adaptation with "zero" temperature (Farina et al., NeurIPS 2024; official code
github.com/FarinaMatteo/zero, ``ttas/zero.py``).

Every view (the original image, view 0, included) is classified by CLIP; the ``int(V · γ)`` views
of lowest softmax entropy are kept (γ = ``TTA.SELECTION_P``, 0.3 in the official code); each kept
view's softmax at temperature → 0 is the one-hot of its argmax, and their sum ``p̄`` counts the
votes. The prediction is the most voted class. A tie is broken by the views that were not kept,
in order of increasing entropy: the first whose argmax is a tied class decides (official
``greedy_break``), and that class gets one more vote (``p_bar[pred] += 1``).

The official method returns ``p̄`` itself (vote counts, plus the tie-break vote). As a probability
vector that is ``p̄ / Σ p̄``, the fraction of the kept views voting for each class: ``OUTPUT
"vote"`` (default). ``OUTPUT "onehot"`` puts all the mass on the prediction instead (confidence 1,
so ECE = 100 − accuracy), the zero-temperature limit applied to the output too.

Where the official code does something else:

* It computes the logits in CLIP's fp16 and divides the unscaled cosines by
  ``torch.finfo(fp16).eps`` = 2⁻¹⁰, so its "zero" temperature is 2⁻¹⁰ on cosine similarities and a
  kept view whose two best classes are within ~0.005 in cosine splits its vote. Here the features
  are fp32 and ``TEMPERATURE 0`` votes one-hot (the paper's method); ``TEMPERATURE 0.0009765625``
  gives the official fp16 run's soft votes.
* When no left-out view votes for a tied class, ``break_sample_tie`` means to take the tied class
  of highest logit in the first left-out view, but its ``logit[~ties]`` (bitwise NOT of an int
  tensor: negative indices) masks the wrong classes. Here the intended rule is applied.
* With every view kept (γ · V ≥ V) the official code has no left-out view and fails; here the
  most confident view breaks the tie.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from argtca.adapters.base import Adapter, Range, view_entropy
from argtca.config.keys import Key
from argtca.plugins import method

OUTPUTS = ("vote", "onehot")

# TRAINER.ZERO; the confident fraction is TTA.SELECTION_P (official gamma = 0.3,
# configs/trainers/zero.yaml)
DEFAULTS = {
    "OUTPUT": Key("vote", "the recorded probabilities: \"vote\" = the official output p_bar (the "
                  "confident views' vote counts + the tie-break vote) normalised; \"onehot\" = "
                  "the prediction alone", choices=OUTPUTS),
    "TEMPERATURE": Key(0.0, "the votes' temperature on cosine similarities: 0 = one-hot votes "
                       "(the paper); the official fp16 code divides by finfo(fp16).eps, i.e. "
                       "0.0009765625",
                       check=Range(lambda v: v >= 0, ">= 0 (0: one-hot votes, ZERO's paper)")),
}


@method("zero", label="ZERO", family="training-free", defaults=DEFAULTS)
class Zero(Adapter):
    """``zero(img [B, V, E]) -> probs [B, K]``: the confident views' vote, batched over images."""

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        # int(V·γ) = 0 keeps the most confident view (as the official code for V·γ in [1, 2)):
        # still ZERO; one view in all is CLIP's own prediction
        if int(cfg.TTA.N_VIEWS) < 2:
            return ("TTA.N_VIEWS 1: the only view votes alone, so its prediction is CLIP's "
                    "zero-shot one")
        return ""

    def __init__(self, node, cfg, text, logit_scale):
        super().__init__(node, cfg, text, logit_scale)
        self.output = str(node.OUTPUT).lower()
        if self.output not in OUTPUTS:
            raise ValueError(f"TRAINER.ZERO.OUTPUT={node.OUTPUT!r}: use 'vote' (the official "
                             f"vote counts, normalised) or 'onehot' (the prediction alone)")
        self.temperature = float(node.TEMPERATURE)

    def votes(self, logits: torch.Tensor):
        """CLIP logits [B, V, K] -> (votes [B, K] with the tie-break vote added, prediction [B])."""
        B, V, K = logits.shape
        n = max(1, int(V * self.selection_p))
        # views by increasing entropy; stable so that equal entropies keep the view order
        order = torch.argsort(view_entropy(logits), dim=-1, stable=True)
        kept, left = order[:, :n], (order[:, n:] if n < V else order[:, :1])
        top = logits.argmax(-1)                                           # [B, V]
        if self.temperature > 0:
            # the official ``softmax(cos / T)``: CLIP's logits are logit_scale · cos
            sel = logits.gather(1, kept.unsqueeze(-1).expand(-1, -1, K))
            votes = (sel / (self.logit_scale * self.temperature)).softmax(-1).sum(1)
        else:
            votes = F.one_hot(top.gather(1, kept), K).sum(1).to(logits.dtype)
        tied = votes == votes.max(-1, keepdim=True).values                # [B, K]
        # the first left-out view (by entropy) whose argmax is a tied class decides ...
        left_top = top.gather(1, left)                                    # [B, L]
        hit = tied.gather(1, left_top)                                    # [B, L]
        first = hit.to(torch.uint8).argmax(-1, keepdim=True)              # first True (or 0)
        greedy = left_top.gather(1, first).squeeze(1)
        # ... else the tied class of highest logit in the first left-out view
        first_left = logits.gather(1, left[:, :1].unsqueeze(-1).expand(-1, -1, K)).squeeze(1)
        fallback = first_left.masked_fill(~tied, float("-inf")).argmax(-1)
        pred = torch.where(hit.any(-1), greedy, fallback)
        # a unique winner is its own tie-break (it is the only tied class); only ties get a vote
        extra = (tied.sum(-1) > 1).to(votes.dtype)
        votes = votes.scatter_add(1, pred.unsqueeze(1), extra.unsqueeze(1))
        return votes, pred

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        votes, pred = self.votes(self.clip_logits(img))
        if self.output == "onehot":
            return F.one_hot(pred, votes.shape[-1]).to(votes.dtype)
        return votes / votes.sum(-1, keepdim=True)
