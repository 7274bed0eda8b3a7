"""Submitting the planned runs through submitit (SLURM or local jobs), following them and
collecting the report."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import submitit

from ...utils.io import write_json
from ..plan import Outcome, RunSpec, resolve_run_dirs

from .jobs import failure_line, job_state
from .options import LaunchDone, LaunchOptions
from .record import RecordedTask, log_folder, read_record
from .slurm import check_slurm, refresh_states, sbatch_lines, sbatch_parameters, submit
from .survey import Planned, group, plan_hash, plan_summary, survey
from .tasks import RunTask, TaskRun


class Launcher:
    """``runner.execute``'s stand-in (``runner.dispatching(Launcher(opts))``): survey, submit,
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
        record = Path(o.out_root).resolve() / "launches" / f"{plan_hash(specs, root, plugins)}.json"
        # bad input fails before the survey: a broken launch record, SLURM missing
        recorded = read_record(record) if o.collect and record.is_file() else None
        if o.launcher == "slurm" and not (o.dry_run or o.collect):
            check_slurm()
        if not o.collect:
            # what the runs share (weights, data, attribute files, CUDA) is checked here once,
            # before anything is submitted, as the inline runner does: a table whose weights
            # cannot be had would otherwise queue one job per run, each failing on the same
            # error. For SLURM, as on the node that will run them (a GPU node: a login node
            # without CUDA is no problem); weights, data and attribute files are looked up on
            # this machine, which shares the cluster's file system
            from ..preflight import PreflightError, preflight, preflight_message
            problems = preflight(specs, root, plugins, self._device())
            if problems:
                raise PreflightError(preflight_message(problems, len(specs), tag, ()))
        plans = survey(specs, root, plugins, self._device())
        if o.collect:   # nothing is submitted: no tasks, no GPU hours (no launcher options)
            done = sum(p.finished for p in plans)
            print(f"[{tag}] {len(plans)} run(s) planned: {done} finished, {len(plans) - done} "
                  f"not", flush=True)
            return self._collect(plans, record, recorded, tag)
        for line in plan_summary(plans, o.gpus_per_job):
            print(f"[{tag}] {line}", flush=True)
        todo = [p for p in plans if not p.finished]
        if o.dry_run:
            for p in plans:
                print(f"[{tag}] {'finished' if p.finished else 'would submit'}: {p.spec.name} "
                      f"-> {p.spec.where}")
            n = len(group(todo, o.gpus_per_job))
            if o.launcher == "slurm" and n:
                # submitit's own lines for this array: what sbatch would be given
                print(f"[{tag}] would submit " + (f"one SLURM job array of {n} tasks:" if n > 1
                                                  else "one SLURM job:"))
                for line in sbatch_lines(log_folder(record), self.slurm_parameters(), n):
                    print(f"[{tag}]   {line}")
            raise LaunchDone(0)
        if not todo:
            print(f"[{tag}] every run is finished: nothing submitted", flush=True)
            return self._outcomes(plans, root, plugins)
        tasks = [RunTask([TaskRun(p.spec.name, p.spec.argv(root, plugins),
                                  str(p.spec.out) if p.spec.out is not None else None,
                                  p.spec.out_root is not None) for p in g],
                         os.getcwd(), quiet) for g in group(todo, o.gpus_per_job)]
        names = [[p.spec.name for p in g] for g in group(todo, o.gpus_per_job)]
        folder = log_folder(record)
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
        """The array's sbatch parameters (submitit's SlurmExecutor names)."""
        return sbatch_parameters(self.opts, self._parallel())

    def _submit_slurm(self, folder: Path, tasks: List[RunTask], tag: str) -> list:
        print(f"[{tag}] submitting " + (f"{len(tasks)} tasks as a SLURM job array"
                                         if len(tasks) > 1 else "one SLURM job"), flush=True)
        jobs = submit(folder, tasks, self.slurm_parameters())   # one sbatch --array
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
            "folder": str(log_folder(path)),
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
                refresh_states(jobs)
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
    def _collect(self, plans: Sequence[Planned], record: Path,
                 recorded: Optional[List[RecordedTask]], tag: str) -> List[Outcome]:
        """Outcomes from the run folders; the runs not finished are listed with what their
        latest task says (its state, or its one-line error and log). Only the launch's own log
        folder is looked at, and a task's result file is read as plain data (jobs.read_result)."""
        latest: Dict[str, object] = {}
        if recorded is not None:
            folder = log_folder(record)   # never a folder the record names
            for t in recorded:
                if t.job_id is None:
                    continue
                cls = submitit.SlurmJob if t.launcher == "slurm" else submitit.LocalJob
                job = cls(folder=folder, job_id=t.job_id)
                for name in t.runs:
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
                try:
                    st = job_state(job)
                except Exception as e:   # noqa: BLE001 (no scheduler here: sacct missing...)
                    st = f"in an unknown state ({type(e).__name__}: {e})"
                why = (f"task {job.job_id} {st}" if st not in ("failed", "done") else
                       failure_line(f"task {job.job_id}", job) if st == "failed" else
                       f"task {job.job_id} ended but {p.spec.where}/summary.json is missing")
            print(f"[{tag}] not finished: {p.spec.name}: {why}", file=sys.stderr, flush=True)
        return [Outcome(p.spec, 0 if p.finished else 1, 0.0) for p in plans]
