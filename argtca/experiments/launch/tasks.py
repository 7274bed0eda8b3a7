"""What a task runs on its node: the runs of one array task, each its own ``python -m argtca.run``
process, and the requeue on preemption (``checkpoint``)."""
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

from ..plan import REPO

from .options import STOP_GRACE_S


@dataclass
class TaskRun:
    name: str
    argv: List[str]               # python -m argtca.run ARGV
    out: Optional[str] = None     # its run folder, when it could be worked out beforehand
    hashed: bool = True           # a hash-keyed folder (<out-root>/<method>/...): finished = done


def _preempt_signal():
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"),
                   signal.SIGUSR2)


def _ignore_preemption() -> None:   # in the run's process, before exec
    # SLURM signals every process of the job: the task interrupts its runs itself (SIGINT),
    # so that each stops at a batch boundary with its records flushed
    signal.signal(_preempt_signal(), signal.SIG_IGN)


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

    def __call__(self) -> List[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self._procs = []
        for run, gpu in zip(self.runs, self._gpus()):
            if run.out and run.hashed and all(
                    (Path(self.cwd, run.out) / f).is_file() for f in ("summary.json",
                                                                      "config.json")):
                print(f"[task] {run.name} -> {run.out} (finished: re-read)", flush=True)
                continue
            e = dict(env)
            if gpu is not None:
                e["CUDA_VISIBLE_DEVICES"] = gpu
            print(f"[task] {run.name} -> {run.out or 'the folder it picks'}"
                  + (f" (GPU {gpu})" if gpu is not None else ""), flush=True)
            self._procs.append((run, subprocess.Popen(
                [self.python, "-m", "argtca.run"] + list(run.argv), cwd=self.cwd, env=e,
                stdout=subprocess.DEVNULL if self.quiet else None,
                preexec_fn=_ignore_preemption)))
        failed = []
        for run, p in self._procs:
            rc = p.wait()
            if rc < 0:   # killed: nothing of the run said why
                print(f"error: {run.name}: the run was killed ({signal.Signals(-rc).name}); "
                      f"run the command again to resume it from its records", file=sys.stderr,
                      flush=True)
            if rc != 0:
                failed.append(f"{run.name} (exit {rc})")
        self._procs = []
        if failed:
            raise RuntimeError(f"failed: {'; '.join(failed)}")
        return [r.name for r in self.runs]

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """Preempted or timed out: stop the runs at a batch boundary (SIGINT: a run flushes its
        records and exits 130), then requeue this task unchanged; its runs resume."""
        for _, p in self._procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.time() + STOP_GRACE_S
        for _, p in self._procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
        self._procs = []
        return super().checkpoint(*args, **kwargs)
