"""One seed for Python's, numpy's and torch's generators (Dassl's ``set_random_seed``, with its
default ``SEED -1`` wrapped into range)."""
from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["set_random_seed"]


def set_random_seed(seed: int) -> None:
    seed = int(seed) % (1 << 32)  # Dassl's default SEED is -1
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
