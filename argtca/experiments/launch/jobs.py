"""The state of submitted jobs and the one-line reason a task failed (its stderr's last
``error: ...`` line).

A task's outcome is read from submitit's result file without running anything it holds:
:func:`read_result` unpickles with an unpickler that resolves no global (no class, no
function), so only the plain data a :class:`~.tasks.RunTask` returns (``("success", [run
names])`` or ``("error", traceback text)``) comes back; a file that names any callable, such as
one crafted to call ``os.system``, is refused and the task counts as failed."""
from __future__ import annotations

import io
import os
import pickle
import re
import signal
from pathlib import Path
from typing import Optional, Tuple

import submitit

# a job id as SLURM (``12``, array task ``12_3``) or submitit's local jobs (a pid) write it:
# digits only, so that a job's files (``<folder>/<job id>/...``) stay inside the launch's folder
JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")


class _PlainDataUnpickler(pickle.Unpickler):
    """Builtin containers, strings and numbers only: any global is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused {module}.{name}: a task's result holds plain "
                                     f"data only")


def read_result(path: Path) -> Optional[Tuple[str, object]]:
    """``(outcome, value)`` of submitit's result file, or None when it is torn, not plain data
    or not such a pair."""
    try:
        data = _PlainDataUnpickler(io.BytesIO(Path(path).read_bytes())).load()
    except Exception:   # noqa: BLE001 (torn, refused or not a pickle: no readable outcome)
        return None
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], str):
        return data
    return None


def last_error_line(path: Path) -> str:
    """The one-line error of a task's stderr: its last ``error: ...`` line (the run's own),
    else its last line."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()
                 if ln.strip()]
    except OSError:
        return f"no log at {path}"
    for ln in reversed(lines):
        if ln.startswith("error:"):
            return ln
    return lines[-1] if lines else "(empty log)"


def _pid_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except OSError:
        return True
    return True


def job_state(job) -> str:
    """done | failed | running | pending. A local job: from its result file, else its process.
    A SLURM job: from the scheduler first, since a requeued job (preempted, timed out,
    ``scontrol requeue``) keeps the result file an interrupted attempt may have left; once SLURM
    says it ended, from its result file (none: it ended without one, cancelled or killed)."""
    if isinstance(job, submitit.LocalJob):
        if job.paths.result_pickle.exists():
            return _by_result(job)
        if job._process is not None:   # started by this command
            return "running" if job._process.poll() is None else "failed"
        return "running" if _pid_alive(job.job_id) else "failed"
    from .slurm import ALIVE, RUNNING, scheduler_state
    state = scheduler_state(job)
    if state in ALIVE:
        return "running" if state in RUNNING else "pending"
    if job.paths.result_pickle.exists():
        return _by_result(job)
    # no answer from sacct or squeue: running, as far as anyone can tell
    return "running" if state == "UNKNOWN" else "failed"


def _by_result(job) -> str:
    result = read_result(job.paths.result_pickle)
    return "done" if result is not None and result[0] == "success" else "failed"


def _killed_by(job) -> Optional[str]:
    """The signal that ended a local job this command started (its controller's exit)."""
    proc = getattr(job, "_process", None) if isinstance(job, submitit.LocalJob) else None
    rc = proc.poll() if proc is not None else None
    if rc is not None and rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return None


# states of a SLURM job that SLURM ended (not its task's own exit)
ENDED_BY_SLURM = ("CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE",
                  "BOOT_FAIL")
# submitit's reason when a task timed out more often than it requeues one (max_num_timeout)
_TIMED_OUT = "timed-out too many times"


def failure_line(name: str, job) -> str:
    """``name``'s one line: the run's own ``error:`` line (its task's stderr), what SLURM did to
    the task where SLURM ended it, and the log."""
    why = last_error_line(job.paths.stderr)
    said = why.startswith("error:")
    sig = _killed_by(job)
    if sig and not said:
        why = (f"error: task {job.job_id} was killed ({sig}) before any run said why; run the "
               f"command again to resume its runs from their records")
    if isinstance(job, submitit.SlurmJob):
        from .slurm import scheduler_state
        result = read_result(job.paths.result_pickle) if job.paths.result_pickle.exists() \
            else None
        state = scheduler_state(job)
        if result is not None and result[0] == "error" and _TIMED_OUT in str(result[1]):
            why = (f"error: task {job.job_id} reached its time limit on every attempt (submitit "
                   f"requeues a task 3 times); its runs' finished images are kept: raise "
                   f"--timeout-min and run the command again to resume them")
        elif state in ENDED_BY_SLURM:
            hint = ": raise --timeout-min" if state == "TIMEOUT" else ""
            what = f"SLURM ended task {job.job_id} ({state}{hint})"
            why = (f"{why}; {what}" if said else f"error: {what} before any run said why; run "
                   f"the command again to resume its runs from their records")
    return f"{name}: {why} (log: {job.paths.stderr})"
