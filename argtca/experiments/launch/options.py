"""The launcher's command-line options (submitit's parameter names) and the launch's end."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


from ..plan import ExperimentError

LAUNCHERS = ("inline", "local", "slurm")
# how long checkpoint() lets an interrupted run write its last records before killing it
STOP_GRACE_S = 60
# how long a task waits for a run of an earlier attempt that still holds a run folder's lock
# (a run whose task died stops within STOP_GRACE_S: launch/guard.py)
SURVIVOR_WAIT_S = STOP_GRACE_S + 30


class LaunchDone(Exception):
    """The command ends here with ``code`` (jobs submitted without --wait, a dry run)."""

    def __init__(self, code: int = 0):
        super().__init__(code)
        self.code = code


@dataclass
class LaunchOptions:
    """The command line's launcher options (submitit's parameter names in the comments)."""
    launcher: str = "inline"              # inline | local | slurm
    partition: Optional[str] = None       # slurm_partition
    gpus_per_job: int = 1                 # gpus_per_node (one task per job)
    cpus_per_gpu: Optional[int] = None    # cpus_per_task = cpus_per_gpu x gpus_per_job
    timeout_min: int = 240                # timeout_min
    array_parallelism: Optional[int] = None   # slurm_array_parallelism; local: jobs at once
    account: Optional[str] = None         # slurm_account
    wait: bool = False
    dry_run: bool = False
    collect: bool = False                 # report on what a launch left, submit nothing
    poll_s: float = 10.0
    out_root: str = "output"
    command: List[str] = field(default_factory=list)   # the command, launcher options left out

    def check(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ExperimentError(f"--launcher {self.launcher!r}: choose from "
                                  f"{', '.join(LAUNCHERS)}")
        for flag, v, low in (("--gpus-per-job", self.gpus_per_job, 0),
                             ("--cpus-per-gpu", self.cpus_per_gpu, 1),
                             ("--timeout-min", self.timeout_min, 1),
                             ("--array-parallelism", self.array_parallelism, 1)):
            if v is not None and v < low:
                raise ExperimentError(f"{flag} {v}: must be >= {low}")
        if self.launcher != "slurm":
            for flag, v in (("--partition", self.partition), ("--account", self.account)):
                if v:
                    raise ExperimentError(f"{flag} {v}: a SLURM option; add --launcher slurm")
