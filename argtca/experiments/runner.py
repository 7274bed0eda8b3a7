"""Running a plan: every planned run in this process, one after the other (after the checks of
what the runs share, argtca/experiments/preflight.py), or handed to a launcher
(argtca/experiments/launch/) through :func:`dispatching`."""
from __future__ import annotations

import contextlib
import io
import sys
import time
from contextvars import ContextVar
from typing import Callable, List, Optional, Sequence

from .plan import Outcome, RunSpec, finished, finished_runs, resolve_run_dirs
from .preflight import PreflightError, preflight, preflight_message

__all__ = ["dispatching", "dry_run", "execute"]


# Where execute() sends the runs: None = this process, one after the other; else a callable
# with execute's arguments returning the Outcomes (argtca/experiments/launch/: a submitit job
# array, or collecting what one left). A context variable, so the commands in tables.py and
# tune.py plan and report exactly as they do in-process, whichever launcher runs their runs.
_DISPATCH: ContextVar[Optional[Callable[..., List["Outcome"]]]] = ContextVar(
    "argtca_experiments_dispatch", default=None)


@contextlib.contextmanager
def dispatching(launcher: Optional[Callable[..., List["Outcome"]]]):
    """``with dispatching(launcher):`` every execute() inside hands its runs to ``launcher``."""
    token = _DISPATCH.set(launcher)
    try:
        yield launcher
    finally:
        _DISPATCH.reset(token)


def execute(specs: Sequence[RunSpec], root: str, plugins: Sequence[str] = (),
            tag: str = "experiments", quiet: bool = False,
            runner: Optional[Callable[[List[str]], int]] = None,
            also: Sequence[str] = ()) -> List[Outcome]:
    """Run every spec in order with ``argtca.run.main`` in this process (or hand them to the
    launcher of :func:`dispatching`). First, once, what the runs share is checked
    (argtca/experiments/preflight.py: each run set up as it will be, each weights file looked
    up): any problem stops everything before the first run (:class:`PreflightError`, one message
    naming every problem with its fix, ``also`` too: what the command leaves out anyway). A run
    whose hash-keyed folder is finished is skipped (its records are only re-read by the report).
    A run failing later is reported (its own error line is printed by the run) and the others
    still run; the CPU-time box of real weights without CUDA is shown by the first run only."""
    launcher = _DISPATCH.get()
    if launcher is not None and runner is None:
        return launcher(list(specs), root, plugins, tag, quiet)
    if runner is None:
        from ..run import main as runner
    from ..models.run_checks import CPU_WARNING_SHOWN
    problems = preflight(specs, root, plugins)
    if problems:
        raise PreflightError(preflight_message(problems, len(specs), tag, also))
    token = CPU_WARNING_SHOWN.set([])
    try:
        return _execute(specs, root, plugins, tag, quiet, runner)
    finally:
        CPU_WARNING_SHOWN.reset(token)


def dry_run(specs: Sequence[RunSpec], root: str, plugins: Sequence[str] = (),
            tag: str = "experiments", notes: Sequence[str] = ()) -> int:
    """A command's ``--dry-run``: each run's folder, marked finished (re-read, not run again)
    or to run, and what the real command would refuse (the preflight's message, exit 2);
    nothing run or written. ``notes``: what the command leaves out anyway."""
    problems = preflight(specs, root, plugins)
    done = finished_runs(specs, root, plugins)
    for s in specs:
        print(f"[{tag}] {'finished (re-read)' if s in done else 'would run'}: {s.name} -> "
              f"{s.where}" + (f" ({' '.join(s.overrides)})" if s.overrides else ""))
    print(f"[{tag}] {len(done)} of {len(specs)} run(s) finished (re-read, not run again), "
          f"{len(specs) - len(done)} to run")
    for line in notes:
        print(f"[{tag}] {line}")
    if problems:
        print(preflight_message(problems, len(specs), tag, notes), file=sys.stderr)
        return 2
    return 0


def _execute(specs: Sequence[RunSpec], root: str, plugins: Sequence[str], tag: str, quiet: bool,
             runner: Callable[[List[str]], int]) -> List[Outcome]:
    outcomes = []
    for i, s in enumerate(specs, 1):
        if finished(s):
            print(f"[{tag}] {i}/{len(specs)} {s.name} -> {s.out} (finished: re-read)",
                  flush=True)
            outcomes.append(Outcome(s, 0, 0.0))
            continue
        print(f"[{tag}] {i}/{len(specs)} {s.name} -> {s.where}", flush=True)
        t0 = time.time()
        argv = s.argv(root, plugins)
        if quiet:   # the run's own progress lines go nowhere; its errors still reach stderr
            with contextlib.redirect_stdout(io.StringIO()):
                rc = runner(argv)
        else:
            rc = runner(argv)
        if rc == 130:   # Ctrl-C: stop the whole batch; one line (the run itself says nothing)
            from ..utils.console import user_command
            again = user_command(f"python -m argtca.experiments {tag} ...")
            print(f"[{tag}] interrupted at {s.name} (its finished images are kept in "
                  f"{s.where}/records.jsonl); run the same command again to resume it, the "
                  f"finished runs only re-read: {again}", file=sys.stderr)
            raise SystemExit(130)
        if rc == 0 and s.out is None:   # it could not be set up beforehand, yet it ran
            resolve_run_dirs([s], root, plugins)
        o = Outcome(s, int(rc or 0), time.time() - t0)
        if rc == 0 and not o.ok:
            print(f"[{tag}] error: {s.name} finished but {s.where}/summary.json is missing",
                  file=sys.stderr)
        elif rc != 0:
            fix = ("" if s.out_root is not None else
                   f" A folder made with other settings is never reused: delete {s.out} or "
                   f"choose another --out-root")
            print(f"[{tag}] error: {s.name} failed (exit {rc}, message above); the other runs "
                  f"go on.{fix}", file=sys.stderr)
        outcomes.append(o)
    return outcomes
