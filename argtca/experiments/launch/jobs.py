"""The state of submitted jobs and the one-line reason a task failed (its stderr's last
``error: ...`` line)."""
from __future__ import annotations

import os
from pathlib import Path

import submitit
from submitit.core.utils import pickle_load



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
    """done | failed | running | pending, from the task's result file, else the scheduler."""
    if job.paths.result_pickle.exists():
        try:
            outcome, _ = pickle_load(job.paths.result_pickle)
        except Exception:   # noqa: BLE001 (a torn result: the task did not end well)
            return "failed"
        return "done" if outcome == "success" else "failed"
    if isinstance(job, submitit.LocalJob):
        if job._process is not None:   # started by this command
            return "running" if job._process.poll() is None else "failed"
        return "running" if _pid_alive(job.job_id) else "failed"
    state = str(job.state).upper()
    if state in ("PENDING", "REQUEUED", "CONFIGURING", "REQUEUE_HOLD", "SUSPENDED"):
        return "pending"
    if state in ("RUNNING", "COMPLETING", "UNKNOWN"):
        return "running"
    return "failed"   # ended without a result: CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY...


def failure_line(name: str, job) -> str:
    return f"{name}: {last_error_line(job.paths.stderr)} (log: {job.paths.stderr})"
