"""RLCF's reward model: a second frozen CLIP (``TRAINER.RLCF.REWARD_BACKBONE`` /
``REWARD_PRETRAINED``, loaded as the policy's, by :func:`argtca.models.clip.load_clip`) whose
features of the views and of the classes give the CLIPScore rewards
(:func:`argtca.engine.objectives.clip_rewards`). An empty key means the policy's own value; with
both empty the policy's frozen CLIP is its own reward model (TTA-VLM's choice) and is not loaded
twice."""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from argtca.utils.paths import resolve_builtin

from .backbones import open_clip_name
from .weights import ModelError

NODE = "TRAINER.RLCF"
# reward-model views per image-tower call (memory bound; rows are independent)
CHUNK = 256


def reward_spec(cfg) -> Tuple[str, str]:
    """(backbone, pretrained) of the reward model: the node's values, an empty one the
    policy's (``MODEL.BACKBONE.NAME`` / ``MODEL.PRETRAINED``)."""
    node = cfg.TRAINER.RLCF
    backbone = str(node.REWARD_BACKBONE).strip() or str(cfg.MODEL.BACKBONE.NAME)
    pretrained = str(node.REWARD_PRETRAINED).strip() or str(cfg.MODEL.PRETRAINED)
    return backbone, pretrained


def is_policy(cfg) -> bool:
    """Whether the reward model is the policy's own CLIP (same backbone and weights)."""
    return reward_spec(cfg) == (str(cfg.MODEL.BACKBONE.NAME), str(cfg.MODEL.PRETRAINED))


def reward_weights_file(cfg) -> Optional[str]:
    """The local file the reward weights are read from, when ``REWARD_PRETRAINED`` names one
    (it then enters the run's fingerprint by content); None for a tag, ``random`` or the
    policy's own weights."""
    value = str(cfg.TRAINER.RLCF.REWARD_PRETRAINED).strip()
    if not value:
        return None
    path = os.path.expanduser(resolve_builtin(value))
    return path if os.path.isfile(path) else None


def _ours(message: str) -> str:
    """A model-loading message in the reward model's key names."""
    return (message.replace("MODEL.BACKBONE.NAME", f"{NODE}.REWARD_BACKBONE")
            .replace("MODEL.PRETRAINED", f"{NODE}.REWARD_PRETRAINED"))


def check_reward(cfg) -> None:
    """Load-time checks of the reward model's keys (before any data or weights are read): a
    backbone open_clip knows, and a weights path that exists. One :class:`ModelError` line."""
    backbone, pretrained = reward_spec(cfg)
    try:
        open_clip_name(backbone)
    except ModelError as e:
        raise ModelError(_ours(str(e))) from None
    value = str(cfg.TRAINER.RLCF.REWARD_PRETRAINED).strip()
    path = os.path.expanduser(resolve_builtin(value))
    pathlike = (value.startswith(("builtin:", "~", ".", os.path.sep)) or os.path.sep in value
                or value.endswith((".pt", ".pth", ".bin", ".safetensors")))
    if value and not value.startswith("hf-hub:") and pathlike and not os.path.isfile(path):
        raise ModelError(f"{NODE}.REWARD_PRETRAINED checkpoint not found: {path}; give an "
                         f"existing file (e.g. OpenAI's ViT-L-14.pt), a tag such as 'openai', or "
                         f"'' for the policy's own weights")


class RewardCLIP:
    """The reward CLIP's unit features: of the classes ``class_features`` [K, E] (computed once,
    from ``prompts``) and of the views (:meth:`image_features`, bicubic-resized to its image size
    when the views are another size, as the official ``extract_image_features``)."""

    def __init__(self, model, tokenizer, prompts: List[str], device, prec: str = "amp"):
        from argtca.utils.precision import autocast_ctx
        self.model = model
        self.device = torch.device(device)
        self.autocast = lambda: autocast_ctx(self.device, prec)
        size = getattr(model.visual, "image_size", None)
        self.size = tuple(size) if isinstance(size, (tuple, list)) else (
            (int(size),) * 2 if size else None)
        with torch.no_grad(), self.autocast():
            tokens = tokenizer(prompts).to(self.device)
            text = model.encode_text(tokens)
        self.class_features = F.normalize(text.float(), dim=-1)

    @torch.no_grad()
    def image_features(self, views: torch.Tensor) -> torch.Tensor:
        """[B, V, 3, S, S] → unit features [B, V, E] (fp32), ``CHUNK`` views a call."""
        B, V = views.shape[:2]
        flat = views.flatten(0, 1)
        out = []
        for i in range(0, flat.shape[0], CHUNK):
            x = flat[i:i + CHUNK].to(self.device, non_blocking=True)
            if self.size is not None and tuple(x.shape[-2:]) != self.size:
                x = F.interpolate(x, size=self.size, mode="bicubic", align_corners=True)
            with self.autocast():
                out.append(self.model.encode_image(x).float())
        return F.normalize(torch.cat(out), dim=-1).reshape(B, V, -1)


def load_reward(cfg, device, policy, prompts: List[str]) -> RewardCLIP:
    """The reward model of ``cfg`` on ``device``: the policy's (model, tokenizer) ``policy``
    itself when the spec is the policy's, else a CLIP loaded like the policy's; a loading
    problem is one :class:`ModelError` line in the reward model's key names."""
    from .clip import load_clip
    if is_policy(cfg):
        model, tokenizer = policy
    else:
        backbone, pretrained = reward_spec(cfg)
        rcfg = cfg.clone()
        rcfg.defrost()
        rcfg.MODEL.BACKBONE.NAME, rcfg.MODEL.PRETRAINED = backbone, pretrained
        try:
            model, tokenizer = load_clip(rcfg, device)
        except ModelError as e:
            raise ModelError(f"RLCF's reward model: {_ours(str(e))}") from None
    return RewardCLIP(model, tokenizer, prompts, device, str(cfg.TTA.PREC))
