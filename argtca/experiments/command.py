"""A sub-command of ``python -m argtca.experiments``, declared beside what it runs.

Each command module declares its commands as :class:`Command` values (``tables.TABLE1``,
``shift.SHIFT``, ...); ``__main__`` adds the arguments every command shares (datasets and
overrides, ``--root``, ``--out-root``, ``--plugin``, the report folder and, for commands with runs,
``--seeds``, ``--dry-run``, ``--quiet`` and the launcher's options), then the command's own
(``add_arguments``), settles the shared ones once and calls ``run(args, datasets, common)``:
``common`` holds the keyword arguments every command function takes (``root``, ``out_root``,
``opts``, ``plugins``, ``report_dir``; with runs also ``seeds``, ``dry_run``, ``quiet``).
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    seeds: Optional[str]       # the default of --seeds; None: no runs (no seeds, no launcher)
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, List[str], Dict[str, Any]], int]


def split_list(value: str) -> List[str]:
    """``"a,b c"`` -> ``["a", "b", "c"]`` (an option's list, commas or spaces)."""
    return [x for x in re.split(r"[,\s]+", value or "") if x]
