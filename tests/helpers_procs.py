"""Child processes of tests that send signals: their disposition arranged by the test, and
always reaped.

A shell's background job (``cmd &`` without job control, ``nohup``, many schedulers) starts
with SIGINT ignored, and every process it starts inherits that: Python then never installs its
KeyboardInterrupt handler, and ``sh``'s ``trap ... INT`` is refused. A test that sends SIGINT
to a child it started restores SIGINT's default in that child (:func:`sigint_default`, its
``preexec_fn``): it tests the code, not how pytest was started. argtca itself keeps an inherited
"ignore" (a run started in the background is meant not to die of the terminal's Ctrl-C), except
where it stops its own children by SIGINT (the launcher's tasks: argtca/experiments/launch/
tasks.py)."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["sigint_default", "reap", "kill_group", "python_env"]

REPO = Path(__file__).resolve().parents[1]


def python_env(*paths) -> dict:
    """The environment of a child Python that imports ``paths`` first, then this checkout, then
    the caller's PYTHONPATH; one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(REPO),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    return env


def sigint_default() -> None:
    """``preexec_fn``: SIGINT's default action in the child, whatever this process has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_group(pgid: Optional[int]) -> None:
    """SIGKILL to process group ``pgid`` (none there: nothing to do)."""
    if not pgid:
        return
    try:
        os.killpg(int(pgid), signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(procs: Iterable[Optional[subprocess.Popen]] = (), pids: Iterable[int] = (),
         groups: Iterable[int] = ()) -> None:
    """Whatever a test started is gone when it ends, passed or not: SIGKILL to the process
    groups ``groups``, the pids ``pids`` and the Popen ``procs`` still running (those waited
    for)."""
    for g in groups:
        kill_group(g)
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError, TypeError):
            pass
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            try:
                p.communicate(timeout=30)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                pass
