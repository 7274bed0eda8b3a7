"""An experiment command's runs on a cluster: a SLURM job array through submitit, or submitit's
local jobs on a machine without SLURM (docs/workflows.md#cluster).

    python -m argtca.experiments table1 --launcher slurm --partition gpu --gpus-per-job 1 \\
        --timeout-min 240 --array-parallelism 32 --wait
    python -m argtca.experiments collect output/launches/<plan>.json

The command plans exactly as it does in-process (the same runs, the same folders), then hands
its runs to :class:`Launcher` (``plan.dispatching``) instead of running them one after the other:

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
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import submitit
from submitit.core.utils import pickle_load

from ..utils.io import write_json
from .plan import (RATE_SOURCE, REPO, VIEWS_ASSUMPTION, ExperimentError, Outcome, RunSpec,
                   build_run_trainer, finished, resolve_run_dirs, seconds_per_image)

LAUNCHERS = ("inline", "local", "slurm")
# how long checkpoint() lets an interrupted run write its last records before killing it
STOP_GRACE_S = 60


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


# ----------------------------------------------------------------------------- the task
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


# ----------------------------------------------------------------------------- the plan
@dataclass
class Planned:
    spec: RunSpec
    images: Optional[int] = None      # its test images (None: it could not be set up here)
    classes: Optional[int] = None
    finished: bool = False            # already ran to the end: re-read, never submitted

    @property
    def gpu_seconds(self) -> Optional[float]:
        if self.images is None or self.classes is None:
            return None
        return seconds_per_image(self.spec.method, self.classes) * self.images


def _same_run(out: Optional[Path], fp) -> bool:
    """An explicit run folder (``--output-dir``) holding the summary of exactly this run."""
    if out is None or fp is None or not (out / "summary.json").is_file():
        return False
    try:
        return json.loads((out / "config.json").read_text()) == \
            json.loads(json.dumps(fp, default=str))
    except (OSError, ValueError):
        return False


def survey(specs: Sequence[RunSpec], root: str, plugins: Sequence[str] = (),
           device: Optional[str] = None) -> List[Planned]:
    """Each spec's run folder (set on ``spec.out`` for hash-keyed ones), test images, classes
    and whether it already finished, from its trainer built as the run will build it on a
    machine of ``device`` type. A spec that cannot be set up here is submitted anyway: its run
    reports its own error."""
    if plugins:
        from ..selectors import load_plugins
        load_plugins(plugins)
    datasets: Dict[str, object] = {}
    out = []
    for s in specs:
        p, fp = Planned(s), None
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                tr = build_run_trainer(s, root, plugins, datasets, device)
                if s.out_root is not None:
                    s.out = Path(tr.output_dir())
                p.images, p.classes = len(tr.dataset.test), len(tr.dataset.classnames)
                fp = tr.fingerprint()
            except (Exception, SystemExit):   # noqa: BLE001 (reported by the run itself)
                pass
        p.finished = finished(s) if s.out_root is not None else _same_run(s.out, fp)
        out.append(p)
    return out


def plan_summary(plans: Sequence[Planned], gpus_per_job: int) -> List[str]:
    """Runs, test images and estimated GPU hours of what is to be submitted."""
    todo = [p for p in plans if not p.finished]
    tasks = len(group(todo, gpus_per_job))
    lines = [f"{len(plans)} run(s) planned: {len(plans) - len(todo)} finished (re-read, not "
             f"submitted), {len(todo)} to submit in {tasks} task(s)"
             + (f" of {gpus_per_job} GPU(s)" if gpus_per_job else " (CPU)")]
    known = [p for p in todo if p.gpu_seconds is not None]
    s = sum(p.gpu_seconds for p in known)
    lines.append(f"to submit: {sum(p.images for p in known)} test images, {s / 3600:.2f} GPU "
                 f"hours ({s:.0f} GPU s)")
    lines.append(f"GPU hours estimated from {RATE_SOURCE}, linear in the classes; zero-shot at "
                 f"1/64 of a TTA image; model loading and ArgTCA's Phase 1 not included; GPU "
                 f"time {VIEWS_ASSUMPTION}")
    if len(known) < len(todo):
        lines.append(f"{len(todo) - len(known)} run(s) could not be set up here (each reports "
                     f"its own error when it starts): not counted")
    return lines


def group(plans: Sequence[Planned], gpus_per_job: int) -> List[List[Planned]]:
    """The array tasks: one run each, or ``gpus_per_job`` runs (one per GPU) in plan order."""
    n = max(1, gpus_per_job)
    return [list(plans[i:i + n]) for i in range(0, len(plans), n)]


def plan_hash(specs: Sequence[RunSpec], root: str, plugins: Sequence[str]) -> str:
    """Twelve hex digits naming the plan: every run's name and command (the same command
    arguments give the same plan, hence the same launch record)."""
    text = json.dumps([[s.name, s.argv(root, plugins)] for s in specs])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------- job states
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


# ----------------------------------------------------------------------------- the launcher
class Launcher:
    """``plan.execute``'s stand-in (``plan.dispatching(Launcher(opts))``): survey, submit,
    follow or collect, and return the Outcomes the command's report is made from."""

    def __init__(self, opts: LaunchOptions):
        opts.check()
        self.opts = opts
        self.jobs_submitted = 0   # array tasks submitted by this command (tests read it)

    # what the runs will see: GPU nodes on SLURM; this machine's devices for local jobs
    def _device(self) -> Optional[str]:
        if self.opts.gpus_per_job == 0:
            return "cpu"
        return "cuda" if self.opts.launcher == "slurm" else None

    def __call__(self, specs: List[RunSpec], root: str, plugins: Sequence[str] = (),
                 tag: str = "experiments", quiet: bool = False) -> List[Outcome]:
        if not specs:
            return []
        o = self.opts
        plans = survey(specs, root, plugins, self._device())
        for line in plan_summary(plans, o.gpus_per_job):
            print(f"[{tag}] {line}", flush=True)
        record = Path(o.out_root).resolve() / "launches" / f"{plan_hash(specs, root, plugins)}.json"
        if o.collect:
            return self._collect(plans, record, tag)
        todo = [p for p in plans if not p.finished]
        if o.dry_run:
            for p in plans:
                print(f"[{tag}] {'finished' if p.finished else 'would submit'}: {p.spec.name} "
                      f"-> {p.spec.where}")
            raise LaunchDone(0)
        if not todo:
            print(f"[{tag}] every run is finished: nothing submitted", flush=True)
            return self._outcomes(plans, root, plugins)
        tasks = [RunTask([TaskRun(p.spec.name, p.spec.argv(root, plugins),
                                  str(p.spec.out) if p.spec.out is not None else None,
                                  p.spec.out_root is not None) for p in g],
                         os.getcwd(), quiet) for g in group(todo, o.gpus_per_job)]
        names = [[p.spec.name for p in g] for g in group(todo, o.gpus_per_job)]
        folder = Path(o.out_root).resolve() / "launches" / "logs" / "%j"
        if o.launcher == "slurm":
            jobs, queue = self._submit_slurm(folder, tasks, tag), None
        else:
            jobs, queue = self._start_local(folder, tasks, tag)
        self._write_record(record, jobs, names, queue, len(tasks))
        if queue and not o.wait:
            print(f"[{tag}] local jobs: {len(tasks)} task(s), {self._parallel()} at a time: "
                  f"this command starts the rest as slots free up (as with --wait)", flush=True)
        elif not o.wait:
            ids = " ".join(sorted({j.job_id.split("_")[0] for j in jobs}))
            print(f"[{tag}] submitted {len(tasks)} task(s): job {ids}; logs in "
                  f"{folder.parent}", flush=True)
            print(f"[{tag}] when they end, write the report with: python -m argtca.experiments "
                  f"collect {record}", flush=True)
            raise LaunchDone(0)
        failed = self._follow(jobs, names, queue, tag, record)
        for line in failed:
            print(f"[{tag}] failed: {line}", file=sys.stderr, flush=True)
        return self._outcomes(plans, root, plugins)

    # --------------------------------------------------------------- submission
    def _parallel(self) -> int:
        if self.opts.array_parallelism:
            return self.opts.array_parallelism
        if self.opts.launcher == "local":   # one job per free GPU group of this machine
            import torch
            n = torch.cuda.device_count()
            return max(1, n // self.opts.gpus_per_job) if n and self.opts.gpus_per_job else 1
        return 256   # submitit's default for arrays

    def slurm_parameters(self) -> Dict[str, object]:
        o = self.opts
        p: Dict[str, object] = dict(timeout_min=o.timeout_min, gpus_per_node=o.gpus_per_job,
                                    nodes=1, tasks_per_node=1, name="argtca",
                                    slurm_array_parallelism=self._parallel())
        if o.cpus_per_gpu:   # submitit's cpus_per_gpu needs gpus_per_task: per task instead
            p["cpus_per_task"] = o.cpus_per_gpu * max(1, o.gpus_per_job)
        if o.partition:
            p["slurm_partition"] = o.partition
        if o.account:
            p["slurm_account"] = o.account
        return p

    def _submit_slurm(self, folder: Path, tasks: List[RunTask], tag: str) -> list:
        ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        ex.update_parameters(**self.slurm_parameters())
        print(f"[{tag}] submitting {len(tasks)} task(s) as a SLURM job array", flush=True)
        jobs = ex.submit_array(tasks)   # one sbatch --array
        self.jobs_submitted += len(jobs)
        return jobs

    def _start_local(self, folder: Path, tasks: List[RunTask], tag: str):
        """Local jobs, at most ``_parallel()`` at a time, each on its own GPUs (the rest are
        started by :meth:`_follow` as slots free up)."""
        import torch
        ex = submitit.LocalExecutor(folder=folder)
        g = self.opts.gpus_per_job
        n_gpus = torch.cuda.device_count()
        slots = [tuple(range(k * g, (k + 1) * g)) if n_gpus and g else ()
                 for k in range(self._parallel())]
        queue = {"ex": ex, "tasks": list(enumerate(tasks)), "free": slots, "slot_of": {},
                 "jobs": [None] * len(tasks)}
        self._fill(queue)
        print(f"[{tag}] started {sum(j is not None for j in queue['jobs'])} of {len(tasks)} "
              f"local task(s)", flush=True)
        return queue["jobs"], queue if queue["tasks"] else None

    def _fill(self, queue) -> None:
        while queue["tasks"] and queue["free"]:
            i, task = queue["tasks"].pop(0)
            slot = queue["free"].pop(0)
            queue["ex"].update_parameters(timeout_min=self.opts.timeout_min,
                                          gpus_per_node=len(slot), visible_gpus=slot)
            job = queue["ex"].submit(task)
            queue["jobs"][i] = job
            queue["slot_of"][i] = slot
            self.jobs_submitted += 1

    def _write_record(self, path: Path, jobs, names, queue, n) -> None:
        """Append this launch to ``<out-root>/launches/<plan>.json`` (collect reads it)."""
        old = {}
        if path.is_file():
            try:
                old = json.loads(path.read_text())
            except (OSError, ValueError):
                old = {}
        launches = old.get("launches", []) if isinstance(old, dict) else []
        launches.append({
            "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "launcher": self.opts.launcher,
            "folder": str(Path(self.opts.out_root).resolve() / "launches" / "logs" / "%j"),
            "tasks": [{"job_id": j.job_id if j is not None else None, "runs": names[i]}
                      for i, j in enumerate(jobs)]})
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(str(path), {"command": self.opts.command, "cwd": os.getcwd(),
                               "launches": launches})
        self._record = path

    def _update_record(self, path: Path, jobs) -> None:
        """Local jobs started after the record was written get their ids in it."""
        data = json.loads(path.read_text())
        for t, j in zip(data["launches"][-1]["tasks"], jobs):
            if j is not None:
                t["job_id"] = j.job_id
        write_json(str(path), data)

    # --------------------------------------------------------------- following
    def _follow(self, jobs, names, queue, tag: str, record: Path) -> List[str]:
        """Poll until every task ended, on one progress line; start queued local tasks as
        slots free up. Returns the failed tasks' lines (runs, one-line error, log)."""
        tty = sys.stdout.isatty()
        shown, state = None, {}
        try:
            while True:
                for i, j in enumerate(jobs):
                    if j is not None and state.get(i) not in ("done", "failed"):
                        state[i] = job_state(j)
                        if queue and state[i] in ("done", "failed") and i in queue["slot_of"]:
                            queue["free"].append(queue["slot_of"].pop(i))
                if queue and queue["tasks"] and queue["free"]:
                    self._fill(queue)
                    self._update_record(record, jobs)
                    continue
                counts = {k: sum(v == k for v in state.values())
                          for k in ("done", "running", "pending", "failed")}
                counts["pending"] += sum(j is None for j in jobs)
                line = (f"[{tag}] tasks: {counts['done']} done, {counts['running']} running, "
                        f"{counts['pending']} pending, {counts['failed']} failed of {len(jobs)}")
                if line != shown:
                    print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
                    shown = line
                if counts["done"] + counts["failed"] == len(jobs):
                    break
                time.sleep(self.opts.poll_s)
        except KeyboardInterrupt:
            print(f"\n[{tag}] stopped following; the jobs go on: python -m argtca.experiments "
                  f"collect {record}", file=sys.stderr)
            raise LaunchDone(130) from None
        if tty:
            print()
        return [failure_line(", ".join(names[i]), j) for i, j in enumerate(jobs)
                if state.get(i) == "failed"]

    def _outcomes(self, plans: Sequence[Planned], root: str,
                  plugins: Sequence[str]) -> List[Outcome]:
        unresolved = [p.spec for p in plans if p.spec.out is None and p.spec.out_root is not None]
        resolve_run_dirs(unresolved, root, plugins)   # they may have run since
        out = []
        for p in plans:
            ok = p.finished or (p.spec.out is not None
                                and (p.spec.out / "summary.json").is_file())
            out.append(Outcome(p.spec, 0 if ok else 1, 0.0))
        return out

    # --------------------------------------------------------------- collect
    def _collect(self, plans: Sequence[Planned], record: Path, tag: str) -> List[Outcome]:
        """Outcomes from the run folders; the runs not finished are listed with what their
        latest task says (its state, or its one-line error and log)."""
        latest: Dict[str, object] = {}
        if record.is_file():
            data = json.loads(record.read_text())
            for launch in data.get("launches", []):
                for t in launch.get("tasks", []):
                    if not t.get("job_id"):
                        continue
                    cls = submitit.SlurmJob if launch.get("launcher") == "slurm" \
                        else submitit.LocalJob
                    job = cls(folder=launch["folder"], job_id=str(t["job_id"]))
                    for name in t["runs"]:
                        latest[name] = job
        else:
            print(f"[{tag}] no launch record {record}: the run folders alone say what finished",
                  flush=True)
        missing = [p for p in plans if not p.finished]
        for p in missing:
            job = latest.get(p.spec.name)
            if job is None:
                why = "never submitted (run the command with --launcher to submit it)"
            else:
                st = job_state(job)
                why = (f"task {job.job_id} {st}" if st in ("running", "pending") else
                       failure_line(f"task {job.job_id}", job) if st == "failed" else
                       f"task {job.job_id} ended but {p.spec.where}/summary.json is missing")
            print(f"[{tag}] not finished: {p.spec.name}: {why}", file=sys.stderr, flush=True)
        return [Outcome(p.spec, 0 if p.finished else 1, 0.0) for p in plans]
