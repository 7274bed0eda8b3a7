r"""The process group of a ``torchrun`` job as engines see it: this process's rank and world
size (:func:`dist_env`), its share of the test indices (:func:`shard_indices`) and work done once
per dataset that the ranks split (:func:`share_jacobian`: when every rank uses the Jacobian at θ0,
grad mode "jacobian", each computes 1/N of its rows and the ranks all-gather them, so that
start-up shrinks with N instead of being repeated by each rank).

Driving a trainer over the ranks (sharding the test set, merging the records, saying an error
once) is argtca/trainers/distributed.py's: engines know no trainer.
"""
from __future__ import annotations

import os
from typing import List, Sequence, Tuple

import torch
import torch.distributed as dist

__all__ = ["dist_env", "world_size", "shard_indices", "share_jacobian"]


def dist_env() -> Tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) without it."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", 0))))


def world_size() -> int:
    return dist_env()[1]


def shard_indices(indices: Sequence[int], rank: int, world: int) -> List[int]:
    """Rank ``rank``'s share of ``indices``: every ``world``-th item (balanced: shard sizes differ
    by at most one, and neighbouring images — often of one class — spread over the ranks)."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} / world size {world}: need 0 <= rank < world >= 1")
    return list(indices)[rank::world]


def share_jacobian(engine, rank: int, world: int, has_images: bool, device) -> bool:
    """Collective (every rank calls it): when every rank will compute the Jacobian at θ0 (grad
    mode "jacobian", a step, images to tune, not yet computed), each computes 1/world of its
    rows and the ranks all-gather them (``FastEngine.jacobian_share``) instead of each
    computing all of it. Returns whether they share."""
    needs = getattr(engine, "needs_jacobian", None)
    ready = int(has_images and needs is not None and bool(needs()))
    flag = torch.tensor([ready], device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    shared = bool(flag.item()) and world > 1
    if shared:
        engine.jacobian_share = (rank, world)
    return shared
