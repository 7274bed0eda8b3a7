"""Test-time objectives, written batch-first (a leading image dimension B) so the same code serves
the reference engine (B=1) and the batched fast engine.

An objective turns prompt logits ``[B, V, P]`` into the *scores* TPT's view selection and entropy
see (``scores``) and into class probabilities (``probs``), and adds a text-only regulariser
(``regularizer(text [B, P, E]) -> [B]``). ``loss(selected_scores, text) = H(mean softmax) + reg``.
"""
from __future__ import annotations

import math

import torch

from argtca.registry import OBJECTIVE_REGISTRY


# ------------------------------------------------------------------------------ TPT core pieces
def view_entropy(scores: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(scores) per view: [..., V, K] → [..., V]."""
    logp = scores.log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def select_confident(scores: torch.Tensor, p: float) -> torch.Tensor:
    """Indices [B, S] of the ``int(V * p)`` lowest-entropy views (stable: ties → lower index)."""
    V = scores.shape[-2]
    n = max(1, int(V * p))
    return torch.argsort(view_entropy(scores), dim=-1, stable=True)[..., :n]


def avg_entropy(scores: torch.Tensor) -> torch.Tensor:
    """TPT's loss: entropy of the mean of softmax(scores) over the views, in log space.
    [B,S,K]→[B]."""
    logp = scores.float().log_softmax(-1)
    avg = torch.logsumexp(logp, dim=-2) - math.log(logp.shape[-2])
    avg = avg.clamp(min=torch.finfo(avg.dtype).min)
    return -(avg * avg.exp()).sum(-1)


# ------------------------------------------------------------------------------ regularisers
def atfd(text: torch.Tensor) -> torch.Tensor:
    """C-TPT's average text feature dispersion: mean_k ‖t_k − mean_k t_k‖₂. [B,K,E]→[B]."""
    return (text - text.mean(-2, keepdim=True)).norm(dim=-1).mean(-1)


def orthogonality(text: torch.Tensor) -> torch.Tensor:
    """O-TPT's penalty. The official Householder construction reduces to mean_i(‖G_i‖₂ − 1) with
    G = T Tᵀ (unit rows, so ‖G_i‖ ≥ G_ii = 1); tests check it against the Householder form."""
    G = text @ text.transpose(-1, -2)
    return (G.norm(dim=-1) - 1.0).mean(-1)


def angular_diversity(text: torch.Tensor, tau: float = 0.99999) -> torch.Tensor:
    """A-TPT's AD = mean_i arccos(clamp(max_{j≠i} cos_ij, −τ, τ)). [B,K,E]→[B]."""
    G = text @ text.transpose(-1, -2)
    eye = torch.eye(G.shape[-1], dtype=torch.bool, device=G.device)
    G = G.masked_fill(eye, -2.0)  # the diagonal never wins the max
    m = G.max(dim=-1).values
    return torch.arccos(m.clamp(-tau, tau)).mean(-1)


def tca_terms(text: torch.Tensor, m: int):
    """TCA's (L_inter, L_intra) on attribute prompts ordered class-major: [B, K·M', E] → ([B], [B]).

    μ_k = mean_m f_km (not re-normalised), μ = mean_k μ_k; L_inter = mean_k ‖μ_k − μ‖₂,
    L_intra = mean_k mean_m ‖f_km − μ_k‖₂."""
    A = text.reshape(*text.shape[:-2], -1, m, text.shape[-1])
    mu = A.mean(-2)
    inter = (mu - mu.mean(-2, keepdim=True)).norm(dim=-1).mean(-1)
    intra = (A - mu.unsqueeze(-2)).norm(dim=-1).mean(-1).mean(-1)
    return inter, intra


def _no_weight(node, *keys: str) -> str:
    """A regulariser whose weights ``keys`` are all 0: the objective is TPT's ("" otherwise)."""
    if node is None or any(float(node[k]) != 0 for k in keys):
        return ""
    return (" and ".join(f"{k} 0" for k in keys) + ": the regulariser that defines the method "
            "is off, so its steps are TPT's entropy alone")


# ------------------------------------------------------------------------------ objectives
class Objective:
    """Class prompts (one per class): scores are the logits, probabilities their softmax."""

    prompts_per_class = 1
    # the prediction after tuning: False = view 0's (TPT's protocol); True = :meth:`final` over
    # every view's logits with the tuned prompt (R-TPT's ensemble)
    all_views = False

    def __init__(self, node=None):
        self.node = node

    def scores(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.float().softmax(-1)

    def regularizer(self, text: torch.Tensor) -> torch.Tensor:
        return text.new_zeros(text.shape[:-2])

    def text_only(self) -> bool:
        """True when the regulariser depends on the text features only (engine shortcuts)."""
        return True

    def entropy_term(self, selected_scores: torch.Tensor) -> torch.Tensor:
        """The loss's entropy part [B] (named apart in a non-finite-loss error): TPT's H(p̄)."""
        return avg_entropy(selected_scores)

    def loss(self, selected_scores: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        return avg_entropy(selected_scores) + self.regularizer(text.float())

    def final(self, logits: torch.Tensor, img: torch.Tensor) -> torch.Tensor:
        """Probabilities [B, K] from every view's logits [B, V, P] and features [B, V, E] with
        the tuned prompt (used when ``all_views``); here view 0's."""
        return self.probs(logits)[:, 0]

    # the node keys weighting the regulariser that defines the method: all 0 leaves TPT's loss
    defining_weights: tuple = ()

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        """Why tuning with this objective cannot be itself under ``cfg`` ("" when it can): no
        step or a learning rate of 0 (nothing is tuned), or the weights of the regulariser that
        defines the method all 0 (``defining_weights``: its steps are TPT's). A selection of
        ``int(V·p)`` = 0 views is not one: the engines keep the most confident view, as TPT's
        own code does for V·p in [1, 2). The run says so once in its log and in
        ``summary.json`` (argtca/trainers/notes.py), the report beside its row."""
        if int(cfg.TTA.STEPS) < 1:
            return "TTA.STEPS 0: no tuning step, so nothing is adapted"
        if float(cfg.TTA.LR) == 0:
            return "TTA.LR 0: the tuning steps change nothing"
        return _no_weight(node, *cls.defining_weights) if cls.defining_weights else ""

    def view_inputs(self, views: torch.Tensor):
        """What the loss needs of each view beyond the policy's logits, once per image (its
        steps reuse it): a tensor [B, V, ...] from the views [B, V, 3, S, S], or a
        :class:`SelectedViewInputs` that makes them for the confident views only once they are
        chosen (RLCF: the reward model's features), or None (every other objective:
        :meth:`loss` then gets none). The engines pass the confident views' rows, chosen with
        the scores' indices, to :meth:`loss` as a third argument (:func:`objective_loss`)."""
        return None


class SelectedViewInputs:
    """Per-view inputs made for the selected views only, when the loss needs them (RLCF's
    reward features: the official ``reward_model.set_image_features(inputs[selected_idx])``
    encodes the confident views alone, ~10 % of them). Stands where :meth:`Objective.view_inputs`
    returns a tensor: the engines slice it by images (``inputs[i:j]``) and
    :func:`objective_loss` asks it for the rows of the selected views (:meth:`select`).

    ``views`` [B, V, ...] (any device), ``encode``: views [n, S, ...] -> inputs [n, S, ...]
    (rows independent). The inputs of an image are made once, at the first selection the loss
    reads, and reused by its later steps: the engines choose the views once, at the first step
    (the official "only play confident selection once"), so a later call passes those indices
    again — the same tensor or a slice of it (known without a host sync) or, on the engines'
    other paths (the fast engine's recompute chunks, the reference's re-run of a non-finite
    image), equal indices (compared) or others (made afresh)."""

    def __init__(self, views: torch.Tensor, encode, _rows=None, _made=None):
        self.views = views
        self.encode = encode
        self.rows = _rows if _rows is not None else (0, int(views.shape[0]))
        self._made = _made if _made is not None else []   # (r0, r1, sel_idx, inputs), shared

    def __len__(self) -> int:
        return int(self.views.shape[0])

    def __getitem__(self, item) -> "SelectedViewInputs":
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("SelectedViewInputs is sliced by images only (inputs[i:j])")
        i, j, _ = item.indices(len(self))
        j = max(i, j)
        return SelectedViewInputs(self.views[i:j], self.encode,
                                  (self.rows[0] + i, self.rows[0] + j), self._made)

    def select(self, sel_idx: torch.Tensor) -> torch.Tensor:
        """The inputs [n, S, ...] of the views ``sel_idx`` [n, S] of these images."""
        a, b = self.rows
        for r0, r1, idx, made in self._made:
            if r0 <= a and b <= r1 and idx.shape[1:] == sel_idx.shape[1:]:
                part = idx[a - r0:b - r0]
                if _same_memory(part, sel_idx):
                    return made[a - r0:b - r0]
                if torch.equal(part, sel_idx.to(part.device)):
                    # the same views in another tensor: known by its memory from now on
                    self._made.append((a, b, sel_idx, made[a - r0:b - r0]))
                    return made[a - r0:b - r0]
        views = self.views.to(sel_idx.device, non_blocking=True)
        rows = torch.arange(views.shape[0], device=sel_idx.device).unsqueeze(-1)
        made = self.encode(views[rows, sel_idx])
        self._made.append((a, b, sel_idx, made))
        return made


def _same_memory(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether ``y`` is the very memory of ``x`` (same storage, offset, shape and strides): the
    same values, as nothing writes indices in place (``x`` is held, so its memory is not
    reused)."""
    return (x.device == y.device and x.shape == y.shape and x.stride() == y.stride()
            and x.storage_offset() == y.storage_offset()
            and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr())


def objective_loss(objective: Objective, selected_scores: torch.Tensor, text: torch.Tensor,
                   inputs, sel_idx: torch.Tensor) -> torch.Tensor:
    """``objective.loss`` as the engines call it: with the rows of ``inputs``
    (:meth:`Objective.view_inputs`, [B, V, ...], or a :class:`SelectedViewInputs`) of the
    selected views ``sel_idx`` [B, S] as a third argument when the objective has any; the
    two-argument call otherwise."""
    if inputs is None:
        return objective.loss(selected_scores, text)
    if isinstance(inputs, SelectedViewInputs):
        return objective.loss(selected_scores, text, inputs.select(sel_idx))
    idx = sel_idx.reshape(*sel_idx.shape, *([1] * (inputs.dim() - 2)))
    picked = torch.gather(inputs, 1, idx.expand(-1, -1, *inputs.shape[2:]))
    return objective.loss(selected_scores, text, picked)


@OBJECTIVE_REGISTRY.register(name="none")
class NoTuning(Objective):
    """Zero-shot CLIP: nothing is tuned (the engine runs no step)."""

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        return ""   # tuning nothing is what it is


@OBJECTIVE_REGISTRY.register(name="tpt")
class TPTObjective(Objective):
    pass


@OBJECTIVE_REGISTRY.register(name="ctpt")
class CTPTObjective(Objective):
    defining_weights = ("LAMBDA",)

    def regularizer(self, text):
        return -float(self.node.LAMBDA) * atfd(text)


@OBJECTIVE_REGISTRY.register(name="otpt")
class OTPTObjective(Objective):
    defining_weights = ("LAMBDA",)

    def regularizer(self, text):
        return float(self.node.LAMBDA) * orthogonality(text)


@OBJECTIVE_REGISTRY.register(name="atpt")
class ATPTObjective(Objective):
    """The paper's sign, L_TPT − λ·AD (the official fine-grained script adds +λ·AD)."""

    defining_weights = ("LAMBDA",)

    def regularizer(self, text):
        return -float(self.node.LAMBDA) * angular_diversity(text, float(self.node.TAU))


def reliability_weights(img: torch.Tensor, k: int, temperature: float) -> torch.Tensor:
    """R-TPT's view weights: softmax over the views of (mean of a view's k largest cosine
    similarities to the *other* views) / temperature. img [B, V, E] unit rows → [B, V].

    The official code drops the diagonal with ``sim >= 1.0``, which in fp32 misses self-similarities
    that round just below 1; the diagonal is masked here explicitly. k is capped at V - 1 (the
    official k=20 assumes its 64 views)."""
    img = img.float()
    sim = img @ img.transpose(-1, -2)
    eye = torch.eye(sim.shape[-1], dtype=torch.bool, device=sim.device)
    sim = sim.masked_fill(eye, float("-inf"))
    k = max(1, min(int(k), sim.shape[-1] - 1))
    score = sim.topk(k, dim=-1).values.mean(-1)
    return (score / float(temperature)).softmax(-1)


@OBJECTIVE_REGISTRY.register(name="rtpt")
class RTPTObjective(Objective):
    """R-TPT (Sheng et al., CVPR'25): the loss is the mean over the confident views of each view's
    own entropy (pointwise, not the entropy of the mean); the prediction is the reliability-
    weighted ensemble of every view's logits with the tuned prompt, view 0 included, weights from
    :func:`reliability_weights`; probabilities = softmax of the ensembled logits (the official
    code ranks the weighted logits)."""

    all_views = True

    def entropy_term(self, selected_scores):
        return view_entropy(selected_scores.float()).mean(-1)

    def loss(self, selected_scores, text):
        return self.entropy_term(selected_scores) + self.regularizer(text.float())

    def final(self, logits, img):
        w = reliability_weights(img, int(self.node.TOP_K), float(self.node.TEMPERATURE))
        return (w.unsqueeze(-1) * logits.float()).sum(-2).softmax(-1)


# TCA's official script sets alpha/beta by the number of attributes, for ViT-B/16 and RN50 alike;
# it defines M' = 1 and 2 only: larger M' keep M'=2's values (argtca's choice, logged).
TCA_ALPHA_BETA = {1: (1.0, 10.0), 2: (10.0, 35.0)}


def alpha_beta_for(m_prime: int):
    """TCA's (alpha, beta) for M' attributes per class."""
    return TCA_ALPHA_BETA[min(max(int(m_prime), 1), max(TCA_ALPHA_BETA))]


@OBJECTIVE_REGISTRY.register(name="tca")
class TCAObjective(Objective):
    """TCA's bag of attribute prompts: p(k|x) = Σ_m exp(s⟨f, f_km⟩) / Σ_{k',m} exp(s⟨f, f_k'm⟩).

    ``ENTROPY_INPUT``: "prob" reproduces the official code, which feeds these probabilities to
    TPT's view selection and entropy as if they were logits (a softmax of probabilities);
    "logprob" follows the paper's equations (the entropy of p itself)."""

    def __init__(self, node=None):
        super().__init__(node)
        self.prompts_per_class = int(node.NUM_ATTRIBUTES)
        # the trainer resolves AUTO_ALPHA_BETA (argtca/trainers/methods.py) before building this
        self.alpha, self.beta = float(node.ALPHA), float(node.BETA)
        self.entropy_input = str(node.ENTROPY_INPUT).lower()
        if self.entropy_input not in ("prob", "logprob"):
            raise ValueError(f"ENTROPY_INPUT={node.ENTROPY_INPUT!r}: use 'prob' (official code) or "
                             f"'logprob' (paper's equations)")

    defining_weights = ("ALPHA", "BETA")

    def log_probs(self, logits):
        m = self.prompts_per_class
        logits = logits.float()
        per_class = torch.logsumexp(logits.reshape(*logits.shape[:-1], -1, m), dim=-1)
        return per_class - torch.logsumexp(logits, dim=-1, keepdim=True)

    def scores(self, logits):
        logp = self.log_probs(logits)
        return logp.exp() if self.entropy_input == "prob" else logp

    def probs(self, logits):
        return self.log_probs(logits).exp()

    def regularizer(self, text):
        inter, intra = tca_terms(text, self.prompts_per_class)
        return -self.alpha * inter + self.beta * intra


# DeYO's entropy filter as TTL's official code keeps it (deyo.py: ``entropys <= math.log(1000)``,
# a constant whatever the number of classes: every view passes below 1000 classes)
TTL_ENTROPY_CAP = math.log(1000)


@OBJECTIVE_REGISTRY.register(name="ttl")
class TTLObjective(Objective):
    """TTL (Imam et al., WACV'25; official deyo.py ``forward_and_adapt_sar`` as ttl.py runs it):
    the confidence-weighted entropy of every view, ``mean_v H_v · exp(-(H_v - MARGIN))`` with the
    weight taken as a constant (``entropys.clone().detach()``), over the views whose entropy is at
    most log(1000) (all of them below 1000 classes); no confident-view selection. Scores are the
    logits; the prediction is view 0's softmax (with the tuned adapters)."""

    def __init__(self, node=None):
        super().__init__(node)
        self.margin = float(node.MARGIN) if node is not None else 0.4

    def kept(self, scores: torch.Tensor) -> torch.Tensor:
        """bool [B, V]: the views the loss averages over."""
        return view_entropy(scores.detach().float()) <= TTL_ENTROPY_CAP

    def entropy_term(self, scores):
        ent = view_entropy(scores.float())
        keep = ent.detach() <= TTL_ENTROPY_CAP
        w = torch.exp(-(ent.detach() - self.margin))
        return (ent * w * keep).sum(-1) / keep.sum(-1).clamp(min=1)

    def loss(self, scores, text=None):
        """[B, V, K] -> [B]; an image with no view kept has loss 0 (the engine skips its step,
        as the official code steps only when a view is left)."""
        return self.entropy_term(scores)

# ------------------------------------------------------------------------------ RLCF
def clip_rewards(sampled: torch.Tensor, image: torch.Tensor, classes: torch.Tensor,
                 weight: float = 2.5) -> torch.Tensor:
    """RLCF's CLIPScore of each sampled class: ``weight · max(cos(image, class), 0)``.
    sampled [B, S, k] class indices, image [B, S, E] and classes [K, E] unit rows (the reward
    model's) → [B, S, k]."""
    text = classes.float()[sampled]                          # [B, S, k, E]
    cos = (text * image.float().unsqueeze(-2)).sum(-1)
    return (weight * cos).clamp(min=0.0)


def reward_baseline(scores: torch.Tensor, per_image: bool = False, amplify: bool = False
                    ) -> torch.Tensor:
    """RLCF's ``rewards_post_process``: the scores minus their mean over a view's k samples
    (``per_image``: over all S·k samples of the image), divided by their (unbiased) standard
    deviation + 1e-5 with ``amplify``. [B, S, k] → [B, S, k]; a group of one sample is left as
    it is (the official ``shape[-1] > 1`` test)."""
    dims = (-2, -1) if per_image else (-1,)
    n = 1
    for d in dims:
        n *= scores.shape[d]
    if n <= 1:
        return scores
    out = scores - scores.mean(dim=dims, keepdim=True)
    if amplify:
        out = out / (scores.std(dim=dims, keepdim=True) + 1e-5)
    return out


def rlcf_loss(selected_scores: torch.Tensor, image: torch.Tensor, classes: torch.Tensor,
              sample_k: int, weight: float = 2.5, process: bool = True, per_image: bool = False,
              amplify: bool = False) -> torch.Tensor:
    """RLCF's REINFORCE loss (Zhao et al., ICLR'24; mzhaoshuai/RLCF ``TPT/tpt_cls_rl.py``): each
    confident view's top-k classes are the samples, each rewarded by the reward CLIP's score of
    (view, class) (:func:`clip_rewards`, baseline :func:`reward_baseline`); the loss is the mean
    over the views and samples of reward × cross-entropy(policy logits, sampled class).
    selected_scores [B, S, K] the policy's logits, image [B, S, E_r] the reward model's features
    of the same views, classes [K, E_r] its class text features → [B]."""
    logits = selected_scores.float()
    sampled = logits.detach().topk(int(sample_k), dim=-1).indices        # [B, S, k]
    with torch.no_grad():
        reward = clip_rewards(sampled, image, classes, weight)
        if process:
            reward = reward_baseline(reward, per_image, amplify)
    ce = -torch.gather(logits.log_softmax(-1), -1, sampled)             # [B, S, k]
    return (reward * ce).mean(dim=(-2, -1))


@OBJECTIVE_REGISTRY.register(name="rlcf")
class RLCFObjective(Objective):
    """RLCF's prompt tuning: TPT's steps (the views chosen once, at the first step) on
    :func:`rlcf_loss`, the prediction on view 0. The reward model (``reward``: a
    :class:`argtca.models.reward.RewardCLIP`, set by the trainer) gives the features of the views
    (:meth:`view_inputs`, once per image) and of the classes (once per dataset)."""

    def __init__(self, node=None, reward=None):
        super().__init__(node)
        self.reward = reward

    def view_inputs(self, views):
        """The reward model's features of the confident views only, made when the first step
        has chosen them (:class:`SelectedViewInputs`), as the official
        ``reward_model.set_image_features(inputs[selected_idx])`` (``TPT/tpt_cls_rl.py``, in
        ``test_time_tuning``'s first step): the reward tower sees ``int(V·p)`` views an image,
        not V."""
        if self.reward is None:
            raise RuntimeError("RLCF's objective has no reward model: the trainer sets .reward")
        return SelectedViewInputs(views, self.reward.image_features)

    def text_only(self) -> bool:
        return False

    def entropy_term(self, selected_scores):
        return None   # no entropy part: a non-finite loss is named whole

    def loss(self, selected_scores, text, selected_inputs=None):
        if selected_inputs is None:
            raise RuntimeError("RLCF's loss needs the reward features of the selected views: "
                               "the engine passes them (objective_loss)")
        n = self.node
        return rlcf_loss(selected_scores, selected_inputs, self.reward.class_features,
                         int(n.SAMPLE_K), float(n.CLIPSCORE_WEIGHT), bool(n.REWARD_PROCESS),
                         bool(n.PROCESS_BATCH), bool(n.REWARD_AMPLIFY))
