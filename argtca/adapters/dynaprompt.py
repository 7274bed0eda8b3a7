"""DynaPrompt (Xiao et al., ICLR 2025, "DynaPrompt: Dynamic Test-Time Prompt Tuning"; official code
zzzx1224/DynaPrompt at acd33cf: ``dynap_classification.py`` with ``clip/custom_clip_lessctx.py``,
``run_dynap.sh``/``scripts/test_dynap.sh`` for the defaults).

An online buffer of ``NUM_PROMPTS`` (M) prompts, each a residual ``δ_m`` [n, W] added to the
initial context (``TTA.CTX_INIT``'s embeddings, as the official ``ctx + init_ctx``), carried over
the stream with each slot's use count and the slots' least-recently-selected order. Per image
(``img [V, E]``, view 0 the plain crop, the others the augmented views), in the official order:

1. **Append.** When every slot has been used at least once (``APPEND``; the official ``noapp``
   ablation turns it off), the least recently selected slot (``order[0]``) is reset: residual 0
   (the initial prompt), use count 0.
2. For ``TTA.STEPS`` steps: logits ``[V, M, K]`` of every view under every prompt (no graph);
   :func:`select_prompts` picks slots from them by prediction entropy and probability
   difference, always with ``order[0]``; each picked slot's use count grows and it moves to the
   end of ``order``; TPT's loss on the picked slots (the ``int(V·TTA.SELECTION_P)`` views of
   lowest entropy averaged over the picked prompts, then the mean over those prompts of the
   entropy of the views' mean probability), their logits computed again with a graph for those
   slots alone (the official code runs every prompt with a graph and indexes the picked ones:
   the same loss and gradient, the others' exactly 0, up to the rounding of a smaller batch in
   the text tower); one AdamW step (``TTA.LR``, ``TTA.WEIGHT_DECAY``, fresh moments each image:
   the official ``optimizer.load_state_dict(optim_state)``) on the whole buffer, through a
   GradScaler kept over the stream (init ``TTA.LOSS_SCALE``; enabled under fp16 autocast only).
3. The prediction: view 0's logits under each picked slot after the step, averaged over the
   picked slots (duplicates counted twice, as the official code); its softmax is recorded.

The state (``state_dict``): the residuals [M, n, W], the use counts, the order and the scaler's
state. The text tower is the one thing of the engine the trainer hands over (``tower``, a
TunableText: the text tower, ``autocast()`` and ``amp``), so the prompt features have gradients
while the images' features stay the features engine's (computed once, no gradient).
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import torch
import torch.nn.functional as F

from argtca.adapters.base import OnlineAdapter, Range
from argtca.config import ConfigError
from argtca.config.keys import Key
from argtca.plugins import method

__all__ = ["DynaPromptAdapter", "select_prompts", "prompt_entropy_and_difference",
           "confident_views_loss", "DEFAULTS"]


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    """The official ``entropy``: of softmax(logits) over the last dimension."""
    logp = logits - logits.logsumexp(dim=-1, keepdim=True)
    return -(logp * logp.exp()).sum(dim=-1)


def prompt_entropy_and_difference(logits: torch.Tensor):
    """``logits [V, M, K]`` (view 0 the plain crop) -> (entropy [M], difference [M]): each
    prompt's prediction entropy averaged over all V views, and view 0's largest logit minus each
    augmented view's largest logit, averaged over the augmented views (the official ``p_ent`` and
    ``plpd``: logits, not probabilities, and each view's own maximum)."""
    ent = _entropy(logits).mean(0)
    diff = (logits[0].max(-1)[0].unsqueeze(0) - logits[1:].max(dim=-1)[0]).mean(0)
    return ent, diff


def select_prompts(logits: torch.Tensor, order: List[int]) -> List[int]:
    """The slots DynaPrompt tunes and predicts with for one image, in the official order.

    ``logits [V, M, K]`` (detached), ``order``: the slots, least recently selected first;
    ``order[0]`` (the reference, fresh or just reset: the initial prompt) is always picked.
    ``e`` = the slots by entropy, highest first, ``r`` = the reference's place in ``e``,
    ``d`` = the slots by difference, highest first. The candidates are the slots after the
    reference in ``e`` (lower entropy; the reference itself when it is last) that are also among
    the first ``r`` of ``d``; when there are any, the picked slots are ``e[c]`` for each
    candidate ``c`` in increasing order followed by the reference, else the reference alone.
    ``e[c]`` indexes the entropy ranking *by slot number*, as the official
    ``ent_order[alllist]`` does (the paper's rule would take the candidates themselves), so a
    slot may be picked twice."""
    M = logits.shape[1]
    ent, diff = prompt_entropy_and_difference(logits)
    ent_order = ent.topk(M)[1]
    ref = int(order[0])
    r = torch.where(ent_order == ref)[0].item()
    lower = ent_order[min(r + 1, M - 1):]
    higher = diff.topk(M)[1][:r]
    both = np.intersect1d(lower.cpu().numpy(), higher.cpu().numpy())
    if len(both):
        return [int(i) for i in ent_order[torch.as_tensor(both, dtype=torch.long,
                                                          device=ent_order.device)]] + [ref]
    return [ref]


def confident_views_loss(logits: torch.Tensor, p: float) -> torch.Tensor:
    """TPT's loss over the picked prompts, as the official code: ``logits [V, k, K]``; the
    ``max(1, int(V·p))`` views of lowest entropy averaged over the k prompts, then per prompt the
    entropy of those views' mean probability, averaged over the prompts."""
    V = logits.shape[0]
    ent = _entropy(logits).mean(-1)
    idx = torch.argsort(ent, descending=False)[:max(1, int(V * p))]
    out = logits[idx]
    logp = out - out.logsumexp(dim=-1, keepdim=True)
    avg = logp.logsumexp(dim=0) - np.log(logp.shape[0])
    avg = torch.clamp(avg, min=torch.finfo(avg.dtype).min)
    return -(avg * torch.exp(avg)).sum(dim=-1).mean()


# TRAINER.DYNAPROMPT: the official zzzx1224/DynaPrompt run_dynap.sh defaults: a buffer of prompts
# tuned by TPT's step (TTA.STEPS, TTA.LR, TTA.WEIGHT_DECAY, TTA.SELECTION_P, TTA.N_VIEWS,
# TTA.CTX_INIT, the GradScaler's TTA.LOSS_SCALE) over one stream
DEFAULTS = {
    "NUM_PROMPTS": Key(12, "prompts in the buffer (num_p=12; TTA-VLM: 10)",
                       check=Range(lambda v: v >= 1, ">= 1 (official: 12)", True)),
    "APPEND": Key(True, "reset the least recently picked prompt once all are used (False: the "
                  "official 'noapp' ablation)"),
}


@method("dynaprompt", label="DynaPrompt", family="online", trainer="DynaPrompt",
        defaults=DEFAULTS)
class DynaPromptAdapter(OnlineAdapter):
    """An online method that tunes prompts: the prompt buffer, its selection, tuning and
    replacement (module docstring). It is built with the engine's text tower (the buffer's
    features need gradients: ``needs_text_tower``), and TPT's step keys (TTA.STEPS, TTA.LR,
    TTA.N_VIEWS >= 2) are checked as for the prompt-tuning methods (``tunes``)."""

    tunes = True
    needs_text_tower = True

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        # TTA.STEPS >= 1 and TTA.N_VIEWS >= 2 are refused at build time (ConfigError)
        if int(node.NUM_PROMPTS) < 2:
            return ("NUM_PROMPTS 1: one prompt, so there is no prompt to select among"
                    + (" and it is reset to the initial prompt at every image (an episodic TPT)"
                       if bool(node.APPEND) else ""))
        if float(cfg.TTA.LR) == 0:
            return "TTA.LR 0: no prompt changes, so its predictions are CLIP's zero-shot ones"
        return ""

    def __init__(self, node, cfg, text: torch.Tensor, logit_scale: float, *, tower):
        self.encoder = tower
        self.num_prompts = int(node.NUM_PROMPTS)
        self.append = bool(node.APPEND)
        self.steps = int(cfg.TTA.STEPS)
        self.lr = float(cfg.TTA.LR)
        self.weight_decay = float(cfg.TTA.WEIGHT_DECAY)
        self.init_scale = float(cfg.TTA.LOSS_SCALE)
        if self.steps < 1 or int(cfg.TTA.N_VIEWS) < 2:
            raise ConfigError(
                f"DynaPrompt: TTA.STEPS={self.steps}, TTA.N_VIEWS={cfg.TTA.N_VIEWS}: its prompt "
                f"selection compares view 0 with the augmented views and tunes the picked prompts; "
                f"use TTA.STEPS >= 1 and TTA.N_VIEWS >= 2 (official: 1 and 64)")
        super().__init__(node, cfg, text, logit_scale)
        self.n_classes = text.shape[0]

    def reset(self) -> None:
        base = self.encoder.ctx_init
        self.state = {"ctx": torch.zeros((self.num_prompts,) + tuple(base.shape),
                                         dtype=torch.float32, device=base.device),
                      "use": [0] * self.num_prompts,
                      "order": list(range(self.num_prompts)),
                      "scaler": {}}
        self.scaler = torch.amp.GradScaler("cuda", init_scale=self.init_scale,
                                           enabled=self.encoder.amp)

    def state_dict(self) -> Dict[str, Any]:
        self.state["scaler"] = self.scaler.state_dict()
        return super().state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.scaler = torch.amp.GradScaler("cuda", init_scale=self.init_scale,
                                           enabled=self.encoder.amp)
        if self.state["scaler"]:
            self.scaler.load_state_dict(self.state["scaler"])

    def logits(self, img: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """``img [V, E]``, residuals ``[m, n, W]`` -> logits [V, m, K] (the prompts' class
        features: the mean of each class's prompts, re-normalised, when it has several)."""
        with self.encoder.autocast():
            t = self.encoder(self.encoder.ctx_init.float() + delta)             # [m, P, E]
        t = t.float()
        if t.shape[1] != self.n_classes:
            t = F.normalize(t.reshape(t.shape[0], self.n_classes, -1, t.shape[-1]).mean(2),
                            dim=-1)
        # the official product: every view against all m·K prompt features at once, so that
        # prompts that are still equal (fresh slots) get bit-equal logits and tie as there
        m, K, E = t.shape
        return (self.logit_scale * img @ t.reshape(m * K, E).t()).view(img.shape[0], m, K)

    def step(self, img: torch.Tensor) -> torch.Tensor:
        st = self.state
        img = img.float()
        use, order = st["use"], st["order"]
        if self.append and 0 not in use:
            oldest = order[0]
            use[oldest] = 0
            st["ctx"][oldest] = 0.0
        delta = st["ctx"].clone().requires_grad_(True)
        opt = torch.optim.AdamW([delta], lr=self.lr, weight_decay=self.weight_decay)
        picked: List[int] = [order[0]]
        with torch.enable_grad():
            for _ in range(self.steps):
                # the selection reads every prompt's logits, detached: no graph for them
                with torch.no_grad():
                    picked = select_prompts(self.logits(img, delta), order)
                for i in picked:
                    order.remove(i)
                    use[i] += 1
                    order.append(i)
                # the loss reads the picked prompts' logits only: only they enter the text tower
                # with a graph (the others' gradient is exactly 0 either way: AdamW still decays
                # their residuals, as the official optimizer over the whole buffer)
                slots = sorted(set(picked))
                logits = self.logits(img, delta[slots])
                sel = torch.as_tensor([slots.index(i) for i in picked], dtype=torch.long,
                                      device=logits.device)
                loss = confident_views_loss(logits[:, sel], self.selection_p)
                opt.zero_grad()
                self.scaler.scale(loss).backward()
                self.scaler.step(opt)
                self.scaler.update()
        st["ctx"] = delta.detach()
        with torch.no_grad():
            sel = torch.as_tensor(picked, dtype=torch.long, device=delta.device)
            out = self.logits(img[:1], st["ctx"][sel])[0].mean(0)
        return out.softmax(-1)
