"""What ``--launcher slurm`` hands to SLURM: one ``sbatch --array`` through submitit's
SlurmExecutor, its parameters under sbatch's own names, and the ``#SBATCH`` lines a dry run
prints (made by submitit's own writer of the submission file, so they are the lines submitted).

A job's state is read as submitit reads it (``sacct``, through ``SlurmJob.state``); where
``sacct`` has no answer (a cluster without accounting, or a job it does not list yet) it comes
from ``squeue``, which knows every job still in the queue."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import submitit
from submitit.slurm.slurm import _make_sbatch_string

from ..plan import ExperimentError

# a job still in SLURM's hands: it may run (again), whatever an earlier attempt left behind
ALIVE = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESIZING",
         "SUSPENDED", "PREEMPTED", "RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT",
         "RESV_DEL_HOLD")
RUNNING = ("RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT")


def check_slurm() -> None:
    """``--launcher slurm`` needs SLURM's commands here (submitit looks for ``srun``)."""
    if submitit.SlurmExecutor.affinity() <= 0:
        raise ExperimentError("--launcher slurm: SLURM is not available on this machine (no srun "
                              "or sbatch on PATH); submit from the cluster's login node, or use "
                              "--launcher local for submitit's local jobs on this machine")


def sbatch_parameters(opts, parallel: int) -> Dict[str, object]:
    """submitit's SlurmExecutor parameters (sbatch's names) of the launch's array."""
    p: Dict[str, object] = dict(job_name="argtca", time=opts.timeout_min, nodes=1,
                                ntasks_per_node=1, array_parallelism=parallel)
    if opts.gpus_per_job:   # no --gpus-per-node=0: a cluster without GPU gres refuses it
        p["gpus_per_node"] = opts.gpus_per_job
    if opts.cpus_per_gpu:   # submitit's cpus_per_gpu needs gpus_per_task: per task instead
        p["cpus_per_task"] = opts.cpus_per_gpu * max(1, opts.gpus_per_job)
    if opts.partition:
        p["partition"] = opts.partition
    if opts.account:
        p["account"] = opts.account
    return p


def sbatch_lines(folder: Path, params: Dict[str, object], n_tasks: int) -> List[str]:
    """The ``#SBATCH`` lines of the array of ``n_tasks`` tasks, as submitit writes them (one
    task: a plain job, as submitit submits it)."""
    text = _make_sbatch_string(command="", folder=folder,
                               map_count=n_tasks if n_tasks > 1 else None, **params)
    return [ln for ln in text.splitlines() if ln.startswith("#SBATCH ")]


def submit(folder: Path, tasks: list, params: Dict[str, object]) -> list:
    """One ``sbatch --array`` of ``tasks``: their jobs (``<array job>_<index>``; one task is
    submitted as a plain job)."""
    ex = submitit.SlurmExecutor(folder=folder)
    ex.update_parameters(**params)
    return ex.submit_array(tasks)


GONE = "GONE"   # squeue no longer lists the job: it ended (MinJobAge ago), or never was
_SQUEUE_TTL_S = 5.0   # one squeue per array per poll, not one per task
_squeue_cache: Dict[str, Tuple[float, Optional[Dict[str, str]]]] = {}


def squeue_state(job_id: str) -> Optional[str]:
    """The job's state as ``squeue`` has it (``PENDING``, ``RUNNING``, ``COMPLETED``...),
    :data:`GONE` once the controller no longer lists it, None when squeue does not answer. The
    tasks of one array are asked together (``-r``: one line each)."""
    array = job_id.split("_")[0]
    seen, states = _squeue_cache.get(array, (0.0, None))
    if time.time() - seen > _SQUEUE_TTL_S:
        states = _squeue(array)
        _squeue_cache[array] = (time.time(), states)
    if states is None:
        return None
    return states.get(job_id, GONE)


def _squeue(array: str) -> Optional[Dict[str, str]]:
    try:
        p = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", array, "-o", "%i %T"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0 and "invalid job id" not in p.stderr.lower():
        return None
    return {jid: state.upper() for jid, _, state in
            (ln.strip().partition(" ") for ln in p.stdout.splitlines()) if state.strip()}


def refresh_states(jobs) -> None:
    """Read every followed SLURM job's state from ``sacct`` now, in one call. submitit's watcher
    alone reads it at a back-off (2 s after a submission, then half the newest job's age, up to
    10 min), so a launch looking every ``--poll-s`` would see a job's end, or the pending spell
    of a requeued one, minutes late or not at all."""
    slurm = [j for j in jobs if isinstance(j, submitit.SlurmJob)]
    if slurm:
        slurm[0].watcher.update()   # the watcher is shared: one sacct for every job


def scheduler_state(job) -> str:
    """The job's state: sacct's (submitit's watcher, as submitit reads it), else squeue's
    (a cluster without accounting, a job sacct does not list yet): a SLURM state name,
    :data:`GONE`, or ``UNKNOWN`` when neither answers."""
    state = (str(job.state).strip().upper() or "UNKNOWN").split()[0]   # "CANCELLED by 0"
    if state == "UNKNOWN":
        state = squeue_state(job.job_id) or "UNKNOWN"
    return state
