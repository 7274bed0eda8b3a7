"""Backbone names as CoOp writes them (``ViT-B/16``) mapped to open_clip's, argtca's own model
configs (``model_configs/*.json``, registered with open_clip on import), and the image size a
backbone takes."""
from __future__ import annotations

import os
from typing import Optional, Tuple

from .lean import open_clip  # open_clip without transformers' import time (lean.py)
from .weights import ModelError

MODEL_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_configs")
open_clip.add_model_config(MODEL_CONFIG_DIR)

# CoOp/TPT spell backbones the OpenAI way. OpenAI weights were trained with QuickGELU; open_clip
# 3.x's plain "ViT-B-16" config uses nn.GELU and only warns, which would silently change every
# number.
BACKBONES = {
    "ViT-B/16": "ViT-B-16-quickgelu",
    "ViT-B/32": "ViT-B-32-quickgelu",
    "ViT-L/14": "ViT-L-14-quickgelu",
    "RN50": "RN50-quickgelu",
    "RN101": "RN101-quickgelu",
}


def open_clip_name(backbone: str) -> str:
    name = BACKBONES.get(backbone, backbone)
    name = name.replace("/", "-")
    if name not in open_clip.list_models():
        raise ModelError(
            f"unknown backbone MODEL.BACKBONE.NAME={backbone!r} (open_clip name {name!r}); "
            f"use one of "
            f"{sorted(BACKBONES)} or an open_clip model name / a JSON in {MODEL_CONFIG_DIR}")
    return name


def backbone_image_size(backbone: str) -> Optional[Tuple[int, int]]:
    """(height, width) of the images the backbone's open_clip config declares; None when it
    declares none."""
    mc = open_clip.get_model_config(open_clip_name(backbone)) or {}
    size = (mc.get("vision_cfg") or {}).get("image_size")
    if isinstance(size, (list, tuple)):
        return tuple(int(s) for s in size)
    return (int(size), int(size)) if size else None


def _input_size(cfg) -> Tuple[int, int]:
    size = cfg.INPUT.SIZE
    return tuple(int(s) for s in size) if isinstance(size, (list, tuple)) else (int(size),) * 2


def check_input_size(cfg) -> None:
    """``INPUT.SIZE`` must be the backbone's image size (a ViT's position embedding and a
    ResNet's attention pool are fixed to it): refused before anything runs (from the open_clip
    config), not by a tensor-shape error after Phase 1."""
    backbone = str(cfg.MODEL.BACKBONE.NAME)
    need = backbone_image_size(backbone)
    have = _input_size(cfg)
    if need is not None and have != tuple(need):
        raise ModelError(f"INPUT.SIZE ({have[0]}, {have[1]}) does not fit MODEL.BACKBONE.NAME="
                         f"{backbone}, which takes {need[0]}x{need[1]} images: set INPUT.SIZE "
                         f"\"({need[0]}, {need[1]})\" (or use a backbone that takes "
                         f"{have[0]}x{have[1]} images)")
