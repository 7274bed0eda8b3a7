"""Batched image augmentation on tensors (any device): random resized crops with flips and small
rotations through one ``affine_grid``/``grid_sample`` call, mild colour jitter, CLIP
normalisation."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _u(n: int, lo: float, hi: float, g: Optional[torch.Generator], device) -> torch.Tensor:
    return torch.rand(n, generator=g, device=device) * (hi - lo) + lo


def random_resized_crop(x: torch.Tensor, scale: Tuple[float, float] = (0.08, 1.0),
                        ratio: Tuple[float, float] = (3 / 4, 4 / 3), flip: bool = True,
                        max_rotation: float = 0.0, p_crop: float = 1.0,
                        generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """RandomResizedCrop (+ h-flip, + rotation in degrees) of a float batch ``[B,C,H,W]``.

    Area fraction ~ U(scale), log aspect ratio ~ U(log ratio), crop clamped inside the image.
    With probability ``1 - p_crop`` an image keeps its full extent (flip/rotation still apply).
    """
    B, dev = x.shape[0], x.device
    s = _u(B, scale[0], scale[1], generator, dev)
    logr = _u(B, math.log(ratio[0]), math.log(ratio[1]), generator, dev)
    r = torch.exp(logr)
    w = torch.sqrt(s * r).clamp(max=1.0)
    h = torch.sqrt(s / r).clamp(max=1.0)
    if p_crop < 1.0:
        keep = torch.rand(B, generator=generator, device=dev) >= p_crop
        w = torch.where(keep, torch.ones_like(w), w)
        h = torch.where(keep, torch.ones_like(h), h)
    cx = (torch.rand(B, generator=generator, device=dev) * 2 - 1) * (1 - w)
    cy = (torch.rand(B, generator=generator, device=dev) * 2 - 1) * (1 - h)
    sx = w
    if flip:
        sx = torch.where(torch.rand(B, generator=generator, device=dev) < 0.5, -w, w)
    a = _u(B, -max_rotation, max_rotation, generator, dev) * (math.pi / 180.0)
    cos, sin = torch.cos(a), torch.sin(a)
    theta = torch.stack([torch.stack([sx * cos, -h * sin, cx], -1),
                         torch.stack([sx * sin, h * cos, cy], -1)], 1)
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def color_jitter(x: torch.Tensor, brightness: float = 0.15, contrast: float = 0.15,
                 saturation: float = 0.15,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    B, dev = x.shape[0], x.device
    b = _u(B, 1 - brightness, 1 + brightness, generator, dev).view(B, 1, 1, 1)
    c = _u(B, 1 - contrast, 1 + contrast, generator, dev).view(B, 1, 1, 1)
    s = _u(B, 1 - saturation, 1 + saturation, generator, dev).view(B, 1, 1, 1)
    x = x * b
    mu = x.mean(dim=(1, 2, 3), keepdim=True)
    x = mu + (x - mu) * c
    lum = x.mean(dim=1, keepdim=True)
    x = lum + (x - lum) * s
    return x.clamp(0, 1)


def normalize(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(CLIP_MEAN, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - mean) / std
