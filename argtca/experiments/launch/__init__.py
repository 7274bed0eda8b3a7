"""An experiment command's runs on a cluster: a SLURM job array through submitit, or submitit's
local jobs on a machine without SLURM (docs/workflows.md#cluster).

    python -m argtca.experiments table1 --launcher slurm --partition gpu --gpus-per-job 1 \\
        --timeout-min 240 --array-parallelism 32 --wait
    python -m argtca.experiments collect output/launches/<plan>.json

The command plans exactly as it does in-process (the same runs, the same folders), then hands
its runs to :class:`Launcher` (``runner.dispatching``) instead of running them one after the other:

* **What is submitted.** Every planned run is resolved to its run folder here (its trainer built
  without the model, as the run will build it) and a finished one (``summary.json`` next to the
  fingerprint) is only re-read, never submitted. Each remaining run is one array task; with
  ``--gpus-per-job N`` a task takes N runs, one per GPU, each its own ``python -m argtca.run``
  process. One run per GPU rather than torchrun inside a task: a table has far more runs than a
  job has GPUs, so runs side by side keep every GPU busy with no communication and no start-up
  repeated per rank, a failing run stops no other, and the online methods (a state carried from
  image to image) cannot be sharded at all. One very large run is the exception: the
  multi-node torchrun line of docs/workflows.md#cluster.
* **Resume and requeue.** A task (:class:`RunTask`) is a ``submitit.helpers.Checkpointable``:
  preempted or timed out, submitit calls its ``checkpoint()``, which interrupts the runs (their
  records are flushed per batch) and returns the task itself, requeued; the runs then resume
  from their ``records.jsonl`` (a run folder's own resume) and a run that finished meanwhile is
  only re-read. Running the same command again submits what is still unfinished, nothing else.
* **Following and collecting.** ``--wait`` follows the jobs on one progress line and the command
  then writes its report as in-process; without it the job ids and a ``collect`` command are
  printed. What was submitted is kept in ``<out-root>/launches/<plan>.json`` (the command, the
  job ids, their log folder), which ``collect`` reads; ``collect`` also works from the out-root
  and the same command arguments alone. A failed task is listed with its stderr file and the
  last ``error: ...`` line there (the run's own one-line error).
"""
from .jobs import failure_line, job_state, last_error_line  # noqa: F401
from .launcher import Launcher  # noqa: F401
from .options import LAUNCHERS, LaunchDone, LaunchOptions  # noqa: F401
from .tasks import RunTask, TaskRun  # noqa: F401
