"""The autocast context of a run's precision (``TTA.PREC``), shared by the engines and the models
that run beside them (RLCF's reward CLIP)."""
from __future__ import annotations

import contextlib

import torch

__all__ = ["autocast_ctx"]


def autocast_ctx(device: torch.device, prec: str, cache: bool = True):
    """fp16 autocast on CUDA under ``prec`` "amp"; no autocast otherwise (the CPU runs fp32).
    ``cache`` False: without autocast's cast cache, as a CUDA graph's capture needs (a cached
    cast would outlive the capture); the same casts either way."""
    if device.type == "cuda" and prec == "amp":
        return torch.autocast("cuda", dtype=torch.float16, cache_enabled=cache)
    return contextlib.nullcontext()
