"""What the command lines print besides results: progress on stderr (tqdm's bar on a terminal,
one plain line per ``PROGRESS_STEP_PCT`` % in a log file, so SLURM logs hold no carriage
returns), the third-party warnings that say nothing about the user's run, and the command the
user ran (:func:`user_command`), which every "run the same command again" line names."""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
import warnings
from contextvars import ContextVar
from typing import Iterator, Optional, Sequence

__all__ = ["PROGRESS_STEP_PCT", "LogProgress", "progress", "quiet_third_party_warnings",
           "running_command", "inside_command", "user_command"]

# the command of argtca.experiments whose runs run in this process (None: none); see
# running_command
_COMMAND: ContextVar[Optional[str]] = ContextVar("argtca_user_command", default=None)


@contextlib.contextmanager
def running_command(prog: str, argv: Sequence[str]) -> Iterator[str]:
    """Inside, runs are run by the command ``prog argv`` (``python -m argtca.experiments table1
    ...``): what a run says to run again names that command (:func:`user_command`), and a run
    interrupted by Ctrl-C leaves its one line to the command (:func:`inside_command`), which
    knows that its finished runs are only re-read."""
    token = _COMMAND.set(" ".join([prog, shlex.join(list(argv))]).strip())
    try:
        yield user_command(_COMMAND.get())
    finally:
        _COMMAND.reset(token)


def inside_command() -> bool:
    """Whether a run runs inside a command of :func:`running_command` (which reports its
    interruption, once)."""
    return _COMMAND.get() is not None


def user_command(default: str) -> str:
    """The command the user typed: the script that called us (scripts/_common.sh exports it as
    ``ARGTCA_COMMAND``, with the variables the script reads), else the command of
    :func:`running_command`, else ``default`` (the process's own command line)."""
    return os.environ.get("ARGTCA_COMMAND") or _COMMAND.get() or default

PROGRESS_STEP_PCT = 10

# (message regex, category): deprecations inside libraries argtca calls, not in argtca's use of
# them; the same list as pytest.ini's filterwarnings
THIRD_PARTY_WARNINGS = (
    (r"`torch\.jit\.script` is deprecated", FutureWarning),   # torch_geometric's import
)


def quiet_third_party_warnings() -> None:
    for message, category in THIRD_PARTY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # closed or not a file
        return False


class LogProgress:
    """tqdm's ``update`` / ``set_postfix`` / ``close`` as one line each time another
    ``step_pct`` % of ``total`` is done (and at the end), for output that is not a terminal."""

    def __init__(self, total: int, initial: int = 0, desc: str = "", file=None,
                 step_pct: int = PROGRESS_STEP_PCT):
        self.total, self.n, self.desc = int(total), int(initial), desc
        self.file = sys.stderr if file is None else file
        self.step = max(1, int(step_pct))
        self.postfix = ""
        self.start_n, self.t0 = self.n, time.time()
        self.shown = self._pct() // self.step   # the next line is at the next multiple
        self.pending = self.closed = False

    def _pct(self) -> int:
        return 100 if self.total <= 0 else int(100 * self.n / self.total)

    def _line(self) -> None:
        done = self.n - self.start_n
        secs = time.time() - self.t0
        left = ""
        if 0 < done and self.n < self.total:
            left = f", ~{(self.total - self.n) * secs / done:.0f} s left"
        post = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {self._pct()}% ({self.n}/{self.total}){post}, {secs:.0f} s{left}",
              file=self.file, flush=True)

    def _flush(self) -> None:
        if self.pending:
            self.pending = False
            self._line()

    def update(self, n: int = 1) -> None:
        # the line waits for the postfix callers set right after update (tqdm's usual order)
        self._flush()
        self.n += int(n)
        mark = self._pct() // self.step
        if mark > self.shown:
            self.shown = mark
            self.pending = True

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        items = dict(ordered_dict or {}, **kwargs)
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())
        self._flush()

    def close(self) -> None:
        if not self.closed and self.n > self.start_n and self._pct() // self.step == 0:
            self.pending = True   # a run shorter than one step still says where it ended
        self._flush()
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(total: int, initial: int = 0, desc: str = "", enabled: bool = True, file=None,
             step_pct: int = PROGRESS_STEP_PCT):
    """A progress bar on stderr: tqdm on a terminal, :class:`LogProgress` lines otherwise
    (``file`` for tests), nothing when not ``enabled`` (VERBOSE False)."""
    from tqdm import tqdm
    file = sys.stderr if file is None else file
    if enabled and not _isatty(file):
        return LogProgress(total, initial, desc, file, step_pct)
    # disable=None: tqdm turns itself off should the stream stop being a terminal
    return tqdm(total=total, initial=initial, desc=desc, file=file, dynamic_ncols=True,
                disable=None if enabled else True)
