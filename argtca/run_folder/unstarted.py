"""A run that fails before its first record leaves nothing behind: the folders it made, and what
it wrote into a folder that was there before (config.json, its lock), are removed; records and
anything that was there before never are. The corrected command may have another hash and would
never reuse such a folder."""
from __future__ import annotations

import os
from typing import List

from .lock import LOCK_NAME

__all__ = ["missing_dirs", "empty_unstarted", "remove_made"]


def missing_dirs(path: str) -> List[str]:
    """The folders ``os.makedirs(path)`` would create, deepest first (absolute paths)."""
    out, p = [], os.path.abspath(path)
    while not os.path.exists(p) and os.path.dirname(p) != p:
        out.append(p)
        p = os.path.dirname(p)
    return out


def empty_unstarted(out_dir: str, before: set) -> None:
    """Remove what this run wrote into its folder (the entries not in ``before``: config.json,
    the lock file, ...) when it holds no record. Called while this run holds the folder's lock;
    records and what was there before are never removed."""
    import shutil

    rec = os.path.join(out_dir, "records.jsonl")
    try:
        if os.path.isfile(rec) and os.path.getsize(rec) > 0:
            return
        for entry in os.scandir(out_dir):
            if entry.name in before or entry.name == LOCK_NAME:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        if LOCK_NAME not in before:   # still held: no other run can be in the folder
            os.unlink(os.path.join(out_dir, LOCK_NAME))
    except OSError:   # what could not be removed stays; the run's own error is the one shown
        pass


def remove_made(made: List[str], settings_dir: str) -> None:
    """Remove the empty folders of ``made`` (deepest first; a folder that holds anything stops
    it), and the experiment folder's settings.json where this run wrote it and nothing else is
    there."""
    for d in made:
        try:
            if d == settings_dir and os.listdir(d) == ["settings.json"]:
                os.unlink(os.path.join(d, "settings.json"))
            os.rmdir(d)
        except OSError:
            return
