"""The host's cores as this process sees them, the loader workers they allow, the main
process's torch threads around a test loop (``DATALOADER.MAIN_THREADS``), and the collector's
state around the workers' fork (:func:`forking`)."""
from __future__ import annotations

import contextlib
import gc
import os
from typing import Iterator

__all__ = ["MAX_AUTO_WORKERS", "usable_cpus", "auto_workers", "main_threads", "host_threads",
           "loop_threads", "forking"]

MAX_AUTO_WORKERS = 16


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def auto_workers() -> int:
    """Loader workers per process: the usable cores shared by the processes of this node
    (``torchrun`` sets LOCAL_WORLD_SIZE), one core left to each process, at most 16."""
    procs = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, min(usable_cpus() // procs - 1, MAX_AUTO_WORKERS))


def main_threads(device_type: str, workers: int, value: int = -1) -> int:
    """``DATALOADER.MAIN_THREADS`` resolved: the main process's torch threads in the test loop
    (0 = torch's default)."""
    value = int(value)
    if value != -1:
        return value
    return 1 if str(device_type) == "cuda" and int(workers) != 0 else 0


@contextlib.contextmanager
def host_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` (> 0) inside the block, restored after it."""
    if int(n) <= 0:
        yield
        return
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def loop_threads(cfg):
    """:func:`host_threads` for a test loop under ``cfg``: the resolved
    ``DATALOADER.MAIN_THREADS`` (0, torch's default, where the key is absent)."""
    return host_threads(int(cfg.DATALOADER.get("MAIN_THREADS", 0)))


@contextlib.contextmanager
def forking() -> Iterator[None]:
    """Around a fork of loader workers: the garbage collected first, here, then every object
    made so far frozen out of the collector until the block ends. A forked worker has no CUDA,
    and a CUDA tensor freed there aborts it ("CUDA error: initialization error" in the caching
    allocator): what a run met when a previous run of the same process (table1's inline runner,
    the whole-table benchmark) had left cycles holding CUDA tensors, and a worker's collector
    freed them. This process's collector takes the frozen objects back after the fork."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
