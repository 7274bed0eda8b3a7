"""The host's cores as this process sees them, and the loader workers they allow."""
from __future__ import annotations

import os

__all__ = ["MAX_AUTO_WORKERS", "usable_cpus", "auto_workers"]

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
