"""What a task runs on its node: the runs of one array task, each its own ``python -m argtca.run``
process, and the requeue on preemption (``checkpoint``).

A run never outlives its task: each starts in a session (process group) of its own through
:mod:`.guard`, which stops it when the task dies, even by SIGKILL; a task that ends otherwise
(an exception, Ctrl-C, a preemption) stops its runs' groups itself (SIGINT, then SIGKILL after
``STOP_GRACE_S``). Under submitit's local jobs the task also ends with its job's controller
(the process whose pid is the job id), so killing the job ends its runs. A task started while an
earlier run still holds a run folder's lock waits for it to stop before starting its own."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import submitit

from ...run_folder import LOCK_NAME, RunLock, RunLockedError
from ..plan import REPO

from .guard import RUN_NAME, TASK_PID, set_parent_death_signal
from .options import STOP_GRACE_S, SURVIVOR_WAIT_S


@dataclass
class TaskRun:
    name: str
    argv: List[str]               # python -m argtca.run ARGV
    out: Optional[str] = None     # its run folder, when it could be worked out beforehand
    hashed: bool = True           # a hash-keyed folder (<out-root>/<method>/...): finished = done


# python -m argtca.experiments.launch.guard, without runpy's warning that the package (which
# imports guard) was imported before the module ran as __main__
_GUARD = "import sys; from argtca.experiments.launch.guard import main; main(sys.argv[1:])"


def _preempt_signal():
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"),
                   signal.SIGUSR2)


def _run_signals() -> None:   # in the run's process, before exec
    # SLURM signals every process of the job: the task interrupts its runs itself (SIGINT),
    # so that each stops at a batch boundary with its records flushed
    signal.signal(_preempt_signal(), signal.SIG_IGN)
    # ... which needs SIGINT's default action in the run (Python then raises KeyboardInterrupt),
    # whatever the task inherited: a job started from a background shell has it ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class RunTask(submitit.helpers.Checkpointable):
    """One array task: its runs side by side, one per GPU of the job, each a ``python -m
    argtca.run`` process whose output goes to the task's log. Fails (listed by the launcher)
    when a run fails; preempted, it interrupts its runs and is requeued as it is
    (``checkpoint``), and its runs resume from their records."""

    def __init__(self, runs: Sequence[TaskRun], cwd: str, quiet: bool = False,
                 python: str = sys.executable):
        self.runs = list(runs)
        self.cwd = cwd
        self.quiet = quiet
        self.python = python
        self._procs: List[Tuple[TaskRun, subprocess.Popen]] = []

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_procs"] = []   # processes are this attempt's; a requeued task starts its own
        return state

    def _gpus(self) -> List[Optional[str]]:
        """The GPU each run sees: the job's GPUs (CUDA_VISIBLE_DEVICES) in turn; with one run,
        the job's environment as it is."""
        if len(self.runs) == 1:
            return [None]
        seen = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        if not seen:
            return [None] * len(self.runs)
        return [seen[i % len(seen)] for i in range(len(self.runs))]

    def _wait_for_folder(self, run: TaskRun) -> Optional[str]:
        """None once no other process holds ``run``'s folder lock (a run of an earlier attempt of
        this task stopping); the error line when one still does after ``SURVIVOR_WAIT_S``."""
        if not run.out or not (Path(self.cwd, run.out) / LOCK_NAME).is_file():
            return None
        folder = str(Path(self.cwd, run.out))
        deadline, said = time.time() + SURVIVOR_WAIT_S, False
        while True:
            try:
                RunLock(folder).acquire().release()
                return None
            except RunLockedError as e:
                if time.time() >= deadline:
                    return (f"error: {run.name}: not started, an earlier run still writes its "
                            f"folder after {SURVIVOR_WAIT_S} s: {e}")
                if not said:
                    print(f"[task] {run.name}: waiting up to {SURVIVOR_WAIT_S} s for an earlier "
                          f"run of {folder} to stop: {e}", flush=True)
                    said = True
            time.sleep(0.5)

    def __call__(self) -> List[str]:
        if os.environ.get("SUBMITIT_EXECUTOR") == "local":
            # a local job's controller (single-threaded, its pid the job id) started this task:
            # killing the job kills the task, whose runs then stop (guard)
            set_parent_death_signal(signal.SIGKILL)
            job = os.environ.get("SUBMITIT_LOCAL_JOB_ID", "")
            if (job.isdigit() and not os.environ.get("SUBMITIT_LOCAL_WITH_SHELL")
                    and os.getppid() != int(job)):
                raise RuntimeError(f"the local job's controller (pid {job}) ended before its "
                                   f"task started")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env[TASK_PID] = str(os.getpid())
        self._procs = []
        failed = []
        try:
            for run, gpu in zip(self.runs, self._gpus()):
                if run.out and run.hashed and all(
                        (Path(self.cwd, run.out) / f).is_file() for f in ("summary.json",
                                                                          "config.json")):
                    print(f"[task] {run.name} -> {run.out} (finished: re-read)", flush=True)
                    continue
                busy = self._wait_for_folder(run)
                if busy:
                    print(busy, file=sys.stderr, flush=True)
                    failed.append(f"{run.name} (its folder is busy)")
                    continue
                e = dict(env)
                e[RUN_NAME] = run.name
                if gpu is not None:
                    e["CUDA_VISIBLE_DEVICES"] = gpu
                print(f"[task] {run.name} -> {run.out or 'the folder it picks'}"
                      + (f" (GPU {gpu})" if gpu is not None else ""), flush=True)
                self._procs.append((run, subprocess.Popen(
                    [self.python, "-c", _GUARD] + list(run.argv),
                    cwd=self.cwd, env=e, stdout=subprocess.DEVNULL if self.quiet else None,
                    start_new_session=True, preexec_fn=_run_signals)))
            for run, p in self._procs:
                _reap(p, None)   # not p.wait(): see _reap
                rc = p.returncode
                if rc is None:   # reaped by a preemption still setting it: not a finished run
                    failed.append(f"{run.name} (stopped)")
                    continue
                if rc < 0:   # killed: nothing of the run said why
                    print(f"error: {run.name}: the run was killed ({signal.Signals(-rc).name}); "
                          f"run the command again to resume it from its records",
                          file=sys.stderr, flush=True)
                if rc != 0:
                    failed.append(f"{run.name} (exit {rc})")
        except BaseException as e:   # Ctrl-C, a signal's exception, a bug: no run outlives us
            if any(p.poll() is None for _, p in self._procs):
                print(f"error: the task stopped ({type(e).__name__}); stopping its runs: run "
                      f"the command again to resume them from their records", file=sys.stderr,
                      flush=True)
                self._stop()
            raise
        finally:
            self._procs = []
        if failed:
            raise RuntimeError(f"failed: {'; '.join(failed)}")
        return [r.name for r in self.runs]

    def _stop(self) -> None:
        """SIGINT to each run's process group (a run stops at once with its records kept and
        exits 130), SIGKILL to the groups still there ``STOP_GRACE_S`` later."""
        for _, p in self._procs:
            _signal_group(p, signal.SIGINT)
        deadline = time.time() + STOP_GRACE_S
        for _, p in self._procs:
            _reap(p, max(0.0, deadline - time.time()))
            _signal_group(p, signal.SIGKILL)   # the run, and loader workers it left behind
            _reap(p, None)

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """Preempted or timed out: stop the runs at a batch boundary (SIGINT: a run flushes its
        records and exits 130), then requeue this task unchanged; its runs resume."""
        self._stop()
        self._procs = []
        return super().checkpoint(*args, **kwargs)


# how long a waiter that found the run reaped by the other (a preemption's stop, or the task's
# own wait) waits for that one to set its exit status
REAPED_BY_OTHER_S = 2.0


def _reap(p: subprocess.Popen, timeout: Optional[float]) -> bool:
    """Whether ``p`` ended within ``timeout`` seconds (None: wait for it), reaping it with
    ``os.waitpid`` itself. Not ``p.wait()``: ``checkpoint`` runs in submitit's handler of SLURM's
    signal, which interrupts ``__call__`` inside ``p.wait()``, and that call holds the lock
    ``p.wait()`` takes: waiting on it there never returns (the task then hung until SLURM
    killed it at its time limit, without requeueing it). ``__call__`` waits with it too: a
    ``p.wait()`` blocked in ``waitpid`` while a preemption's ``_reap`` reaped the run first gets
    ``ChildProcessError`` and records exit 0, so a preempted task said its runs had finished."""
    deadline = None if timeout is None else time.time() + timeout
    while p.returncode is None:
        try:
            pid, status = os.waitpid(p.pid, os.WNOHANG)
        except ChildProcessError:   # reaped already, by the other waiter: it sets returncode
            end = time.time() + REAPED_BY_OTHER_S
            while p.returncode is None and time.time() < end:
                time.sleep(0.01)
            return True
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return True
        if deadline is not None and time.time() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    """``sig`` to the process group ``p`` leads (started in its own session: its group id is
    its pid, held while any member lives), else to ``p`` alone."""
    try:
        os.killpg(p.pid, sig)
        return
    except ProcessLookupError:   # no such group: p was not started in a session of its own
        pass
    except PermissionError:
        return
    if p.poll() is None:
        p.send_signal(sig)
