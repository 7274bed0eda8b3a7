"""A run started by a launch task ends with its task: ``python -m argtca.experiments.launch.guard
ARGV`` is ``python -m argtca.run ARGV`` in the same process, plus what a killed task cannot do for
itself (a SIGKILLed process runs no handler).

The run asks the kernel for a signal when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``).
On that signal it prints one ``error:`` line to the task's log naming the cause, stops at once as
on Ctrl-C (``argtca.run`` keeps the finished images and says how to resume) and, should it not
have ended ``STOP_GRACE_S`` later, kills its process group (the run and its loader workers: the
task starts each run in a session of its own). SIGTERM, which SLURM sends every process of a job it
ends, stops the run the same way, with its own ``error:`` line."""
from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from typing import List

from .options import STOP_GRACE_S

TASK_PID = "ARGTCA_TASK_PID"     # the task that started the run (its parent)
RUN_NAME = "ARGTCA_TASK_RUN"     # the run's name in the plan, for the log line
DEATH_SIGNAL = signal.SIGHUP     # a run has no terminal (own session): nothing else sends it
_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int) -> bool:
    """Ask for ``sig`` when this process's parent dies (Linux only; False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _kill_group() -> None:
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    except OSError:
        os._exit(137)


def _on_task_death(task: int, name: str):
    def handler(signum, frame):
        signal.signal(signum, signal.SIG_IGN)   # once
        cause = (f"its task (pid {task}) died" if task and os.getppid() != task
                 else f"it received {signal.Signals(signum).name}")
        print(f"error: {name}: stopped because {cause}; its finished images are kept in its "
              f"records: run the command again to resume it", file=sys.stderr, flush=True)
        timer = threading.Timer(STOP_GRACE_S, _kill_group)
        timer.daemon = True
        timer.start()
        raise KeyboardInterrupt   # argtca.run's Ctrl-C path: records kept, exit 130
    return handler


def _on_terminate(name: str):
    def handler(signum, frame):
        signal.signal(signum, signal.SIG_IGN)   # once
        print(f"error: {name}: stopped by SIGTERM (SLURM ends its job: scancel, a requeue, a "
              f"preemption or the time limit); its finished images are kept in its records: it "
              f"resumes from them when the job is requeued or the command is run again",
              file=sys.stderr, flush=True)
        raise KeyboardInterrupt   # argtca.run's Ctrl-C path: records kept, exit 130
    return handler


def main(argv: List[str]) -> None:
    task = int(os.environ.get(TASK_PID) or 0)
    name = os.environ.get(RUN_NAME) or "the run"
    signal.signal(DEATH_SIGNAL, _on_task_death(task, name))
    # SLURM signals every process of a job it ends (SIGTERM, then SIGKILL KillWait later): the
    # run stops at once as on Ctrl-C, with one line that says so, rather than dying mid-batch
    signal.signal(signal.SIGTERM, _on_terminate(name))
    set_parent_death_signal(DEATH_SIGNAL)
    if task and os.getppid() != task:   # the task died before the kernel was asked
        os.kill(os.getpid(), DEATH_SIGNAL)
    sys.argv = [sys.argv[0]] + list(argv)
    runpy.run_module("argtca.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
