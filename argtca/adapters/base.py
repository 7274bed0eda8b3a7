"""What a training-free or online test-time method is here: an :class:`Adapter`, a rule from the
frozen CLIP features of an image's views and the classes' text features to class probabilities.

The engine (argtca/engine/features.py) runs the image tower on every view once, batched, and hands
the adapter ``img [B, V, E]`` (ℓ2-normalised, fp32; view 0 is the plain resize + centre crop, the
others the augmented views TPT makes). The adapter was built once per dataset with the classes'
text features ``text [K, E]`` (ℓ2-normalised, from the prompts ``TTA.CTX_INIT + class``) and CLIP's
logit scale. An episodic adapter treats each image alone, so a batch is B independent problems;
an online one (:class:`OnlineAdapter`) carries state from image to image in the stream's order and
can save and restore that state (the stream engine checkpoints it with the records).
"""
from __future__ import annotations

import math
from typing import Any, Dict

import torch

from argtca.config.checks import Range, Table
from argtca.engine.objectives import select_confident, view_entropy

__all__ = ["Adapter", "OnlineAdapter", "confident_mask", "view_entropy", "select_confident",
           "Range", "OFFICIAL", "MAX_NORM_ENTROPY", "kept_views", "views_needed",
           "selection_reason", "gate_reason"]

# the text of a range that also takes -1 for the official per-dataset value (``presets``)
OFFICIAL = "or -1 for the official value of the dataset"
# the largest entropy (nats) over log2 K, the normalised entropy the cache gates compare with a
# threshold (TDA's get_entropy): ln K / log2 K = ln 2 whatever K
MAX_NORM_ENTROPY = math.log(2)


def kept_views(v: int, p: float) -> int:
    """``int(V · p)``: the views a confident-view selection keeps as the official code writes it
    (argtca's selections keep at least one where that is 0)."""
    return int(int(v) * float(p))


def views_needed(p: float, keep: int = 1) -> int:
    """The fewest views for which ``int(V · p) >= keep`` (0 when no number of views does)."""
    if float(p) <= 0:
        return 0
    v = max(1, int(keep / float(p)) - 1)
    while kept_views(v, p) < keep:
        v += 1
    return v


def selection_reason(v: int, p: float, what: str) -> str:
    """Why a selection of the ``int(V · p)`` most confident views keeps none ("" when it keeps
    one): ``what`` names what it selects."""
    if kept_views(v, p) >= 1:
        return ""
    need = views_needed(p)
    return (f"TTA.N_VIEWS {v} x TTA.SELECTION_P {float(p):g} keeps int({v * float(p):g}) = 0 "
            f"{what} (the official code keeps int(V·p); at least {need} views keep one)")


def gate_reason(node, prefix: str = "NEG_") -> str:
    """Why a negative cache's entropy gate (``LOWER < H / log2 K < UPPER``) or value mask
    (``MASK_LOWER < p < MASK_UPPER``) admits nothing ("" when it can)."""
    lo, hi = float(node[f"{prefix}ENTROPY_LOWER"]), float(node[f"{prefix}ENTROPY_UPPER"])
    if lo >= MAX_NORM_ENTROPY or hi <= 0 or hi <= lo:
        return (f"its negative cache never fills: {prefix}ENTROPY_LOWER {lo:g} .. "
                f"{prefix}ENTROPY_UPPER {hi:g} admits no image (H / log2 K lies in [0, "
                f"ln 2 = {MAX_NORM_ENTROPY:.3f}])")
    mlo, mhi = float(node[f"{prefix}MASK_LOWER"]), float(node[f"{prefix}MASK_UPPER"])
    if mlo >= 1 or mhi <= 0 or mhi <= mlo:
        return (f"its negative cache's mask is empty: {prefix}MASK_LOWER {mlo:g} .. "
                f"{prefix}MASK_UPPER {mhi:g} holds no probability")
    return ""


def confident_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """[..., V, K] -> bool [..., V]: the ``int(V * p)`` lowest-entropy views (TPT's selection)."""
    idx = select_confident(logits, p)
    mask = torch.zeros(logits.shape[:-1], dtype=torch.bool, device=logits.device)
    return mask.scatter_(-1, idx, True)


class Adapter:
    """``adapter(img [B, V, E]) -> probs [B, K]``, episodic: each image alone."""

    online = False
    # tunes prompts through the engine's text tower: TPT's step keys (TTA.STEPS, TTA.LR,
    # TTA.N_VIEWS >= 2) are checked as for the prompt-tuning methods (DynaPrompt)
    tunes = False
    # built with a tunable text tower too (``tower=``: argtca/engine/reference.py TunableText,
    # the text tower, its AMP flag and autocast), not only the class text features
    needs_text_tower = False
    # value checks of the method's config node TRAINER.<NODE> beyond its Keys' own (``check``,
    # ``choices`` of the ``defaults`` given to argtca.plugins.method): key -> Range or the allowed
    # spellings (argtca/config/checks.py loops over every registered method's table)
    cfg_ranges: Table = {}
    # "-1 = the official per-dataset value": DATASET.NAME -> the official row (a tuple, or one
    # number), the row datasets without an official config take, and node key -> its place in
    # the row
    presets: Dict[str, Any] = {}
    default_preset = "ImageNet"
    preset_keys: Dict[str, int] = {}

    def __init__(self, node, cfg, text: torch.Tensor, logit_scale: float):
        self.node = node                      # the method's TRAINER.<NAME> config node
        self.cfg = cfg
        self.text = text.float()              # [K, E], unit rows
        self.logit_scale = float(logit_scale)
        self.selection_p = float(cfg.TTA.SELECTION_P)

    @classmethod
    def preset_values(cls, node, cfg) -> Dict[str, Any]:
        """Node key -> the value the run uses, for each of ``preset_keys``: as configured, or, for
        a negative value (-1), the official value for ``DATASET.NAME`` (``presets``; other datasets
        take ``default_preset``'s row). A configured value keeps the type of the key's default
        (an int stays an int)."""
        name = str(cfg.DATASET.NAME)
        row = cls.presets.get(name, cls.presets.get(cls.default_preset))
        row = row if isinstance(row, (tuple, list)) else (row,)
        out: Dict[str, Any] = {}
        for key, place in cls.preset_keys.items():
            v = node[key]
            given = int(v) if isinstance(v, int) and not isinstance(v, bool) else float(v)
            out[key] = row[place] if given < 0 else given
        return out

    @classmethod
    def resolved_presets(cls, node, cfg) -> Dict[str, Any]:
        """The keys left at -1 and the official values they resolved to (for summary.json)."""
        values = cls.preset_values(node, cfg)
        return {k: v for k, v in values.items() if float(node[k]) < 0}

    @classmethod
    def needs_views(cls, node, cfg) -> bool:
        """Whether the rule reads the augmented views; False (view 0 alone, e.g. TDA on the
        fine-grained sets as its official runner) lets the loader make one view an image
        instead of ``TTA.N_VIEWS``: the same numbers at a fraction of the image-tower time."""
        return True

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        """Why the method's defining mechanism cannot act under these settings ("" when it can):
        fewer views than its selection keeps, a cache that never fills, a threshold that admits
        nothing, a weight of 0 that leaves CLIP's zero-shot prediction. ``node``: its config
        node (-1 values unresolved: :meth:`preset_values`), ``cfg`` the run's configuration,
        ``n_classes`` the dataset's. The run says so once in its log and in ``summary.json``
        (argtca/trainers/notes.py), the report beside its row."""
        return ""

    @property
    def device(self) -> torch.device:
        return self.text.device

    def clip_logits(self, img: torch.Tensor) -> torch.Tensor:
        """CLIP's logits ``logit_scale · img · textᵀ``: [..., E] -> [..., K]."""
        return self.logit_scale * img.float() @ self.text.t()

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class OnlineAdapter(Adapter):
    """An adapter whose state carries over from image to image: ``__call__`` runs :meth:`step`
    over the batch's images in order. The state lives in ``self.state`` (a dict of tensors,
    numbers and lists of them) so that :meth:`state_dict` / :meth:`load_state_dict` restore it
    exactly; :meth:`reset` sets it to the start of a stream."""

    online = True

    def __init__(self, node, cfg, text: torch.Tensor, logit_scale: float):
        super().__init__(node, cfg, text, logit_scale)
        self.state: Dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        self.state = {}

    def begin_stream(self, n: int) -> None:
        """Told the stream's length ``n`` before its first image (and on resume, after the
        state is restored); a rule whose schedule depends on it keeps it (OnZeta)."""

    def step(self, img: torch.Tensor) -> torch.Tensor:
        """One image of the stream: ``img [V, E]`` -> ``probs [K]``, updating the state."""
        raise NotImplementedError

    def state_shapes(self, position: int) -> Dict[str, Any]:
        """What :attr:`state` holds after ``position`` images where it is not the fresh state's
        size, nested as the state: a tensor's shape or a list's length (a tuple) for a buffer
        that grows with the stream, an int for a counter of the images seen. A resumed state is
        checked against it and against the fresh state's shapes (argtca/trainers/
        stream_state.py), so a buffer of the wrong length is refused naming the file. Default:
        nothing grows."""
        return {}

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.step(img[b]) for b in range(img.shape[0])])

    def state_dict(self) -> Dict[str, Any]:
        return _to(self.state, torch.device("cpu"))

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.state = _to(state, self.device)


def _to(obj: Any, device: torch.device) -> Any:
    """A copy of ``obj`` (nested dicts, lists, tuples of tensors and numbers) on ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device, copy=True)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj
