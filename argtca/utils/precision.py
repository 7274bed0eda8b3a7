"""The autocast context of a run's precision (``TTA.PREC``), shared by the engines and the models
that run beside them (RLCF's reward CLIP)."""
from __future__ import annotations

import contextlib

import torch

__all__ = ["autocast_ctx"]


def autocast_ctx(device: torch.device, prec: str):
    """fp16 autocast on CUDA under ``prec`` "amp"; no autocast otherwise (the CPU runs fp32)."""
    if device.type == "cuda" and prec == "amp":
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()
