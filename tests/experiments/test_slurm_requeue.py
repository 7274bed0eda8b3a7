"""What SLURM does to a launch's jobs, on a real SLURM (tests/slurm/local_slurm.sh; skipped where
none answers): a job requeued (``scontrol requeue``) and preempted in the middle of TDA's stream,
a job that reaches its time limit, a task cancelled (``scancel``) and a task failing on bad
input.

Each run of TDA carries its state from image to image, so an image lost, repeated or replayed
from a wrong state changes the later records: a resumed run's ``records.jsonl`` must equal an
uninterrupted in-process run's, line for line. A plug-in holds the run at a known record (six:
TDA's state is checkpointed every four images, in batches of two) until the test has acted, so
what is interrupted is the same every time."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_slurm import (PLUGIN, TINY, call, cluster_or_skip, launch_record, n_records,
                           queued, records, report_dir, run, running_seconds, sacct, tables,
                           wait_until)

# 16 images in batches of 2, TDA's state saved every 4 images
STREAM = [x for x in TINY] + ["TTA.BATCH_IMAGES", "2", "TTA.STREAM.CHECKPOINT_IMAGES", "4"]
STREAM[STREAM.index("DATASET.NUM_IMAGES") + 1] = "16"
BASE = ["table1", "demo", "--plugin", "plug.py"]   # not --quiet: the runs' lines in the logs


class Base:
    def __init__(self, path: Path):
        self.path = path
        self.procs = []
        self.env = dict(os.environ, ARGTCA_CACHE=str(path / "cache"))
        self.env.pop("DATA", None)

    def command(self, out_root, methods, seeds):
        return BASE + ["--out-root", out_root, "--methods", methods, "--seeds", seeds]

    def launch(self, out_root, methods, seeds, hold, *extra, env=None):
        """The command with --launcher slurm --wait, in its own process (this test acts on its
        jobs meanwhile)."""
        cmd = ([sys.executable, "-m", "argtca.experiments"] + self.command(out_root, methods, seeds)
               + ["--launcher", "slurm", "--gpus-per-job", "0", "--wait", "--poll-s", "1"]
               + list(extra) + STREAM)
        p = subprocess.Popen(cmd, cwd=self.path,
                             env=dict(self.env, ARGTCA_TEST_HOLD=hold, **(env or {})),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def clean_up(self):
        """After a test, whatever happened: no launch left following, no job left held."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.procs = []
        for rec in self.path.glob("*/launches/*.json"):
            jobs = {t["job_id"] for launch in json.loads(rec.read_text())["launches"]
                    for t in launch["tasks"] if t["job_id"]}
            left = [j for j in jobs if queued(j)]
            if left:
                subprocess.run(["scancel"] + left, timeout=60)

    def folder(self, out_root, method, seed):
        return wait_until(f"{method} seed {seed}'s run folder", lambda: next(
            (self.path / out_root / method / "demo").glob(f"*/seed{seed}"), None))

    def task(self, out_root, run_name):
        def find():
            try:
                tasks = launch_record(self.path / out_root)["launches"][-1]["tasks"]
            except (StopIteration, ValueError, KeyError):
                return None
            return next(t["job_id"] for t in tasks if run_name in t["runs"])
        return wait_until(f"the launch record of {out_root}", find)

    def log(self, out_root, job, kind):
        return (self.path / out_root / "launches/logs" / job / f"{job}_0_log.{kind}").read_text()


@pytest.fixture(scope="module")
def module_base(tmp_path_factory):
    cluster_or_skip()
    b = Base(tmp_path_factory.mktemp("slurm"))
    (b.path / "plug.py").write_text(PLUGIN)
    here = os.getcwd()
    old = os.environ.get("ARGTCA_CACHE")
    os.environ["ARGTCA_CACHE"] = b.env["ARGTCA_CACHE"]
    os.chdir(b.path)
    try:   # the uninterrupted runs, in this process
        rc, out, err = call(b.command("ref", "zeroshot,tda", "1,2") + STREAM)
        assert rc == 0, err
        rc, out, err = call(b.command("ref", "zeroshot,tda", "1") + STREAM)   # re-read only
        assert rc == 0, err
        b.seed1_table = tables(report_dir(out))
    finally:
        os.chdir(here)
        if old is None:
            os.environ.pop("ARGTCA_CACHE")
        else:
            os.environ["ARGTCA_CACHE"] = old
    b.reference = {(m, s): records(next((b.path / "ref" / m / "demo").glob(f"*/seed{s}")))
                   for m in ("zeroshot", "tda") for s in (1, 2)}
    assert len(b.reference[("tda", 1)]) == 16
    return b


@pytest.fixture
def base(module_base):
    yield module_base
    module_base.clean_up()


def test_requeued_then_preempted_mid_stream_resumes_to_the_uninterrupted_records(base):
    """Held at its sixth record, the job is requeued (``scontrol requeue``: SLURM sends SIGTERM
    and starts it again); held at its tenth in the next attempt, it is preempted by a job of the
    partition above (SLURM sends the job's own signal, USR2: submitit checkpoints the task and
    requeues it). Each attempt resumes from TDA's last saved state."""
    go1, go2 = base.path / "go-requeue", base.path / "go-preempt"
    p = base.launch("rq", "tda", "1", f"tda:1:6:{go1};tda:1:10:{go2}")
    folder = base.folder("rq", "tda", 1)
    wait_until("six records", lambda: n_records(folder) == 6 or p.poll() is not None)
    job = base.task("rq", "tda on demo, seed 1")
    run("scontrol", "requeue", job)
    # the run stops (SIGTERM from SLURM) before the next attempt may run on
    wait_until("the run's stop", lambda: "stopped by SIGTERM" in base.log("rq", job, "err"))
    go1.touch()
    wait_until("ten records", lambda: n_records(folder) == 10 or p.poll() is not None)
    assert p.poll() is None, f"the launch ended with its job requeued: {p.communicate()}"
    # a job of the `urgent` partition that needs every CPU of the node: SLURM preempts this one
    urgent = run("sbatch", "--parsable", "-p", "urgent", "-c", str(os.cpu_count()), "-o",
                 os.devnull, "--wrap", "true").strip()
    wait_until("the requeue", lambda: base.log("rq", job, "out").count("Requeued job") == 1)
    go2.touch()
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert records(folder) == base.reference[("tda", 1)]
    assert [r["State"] for r in sacct(job, duplicates=True)] == ["REQUEUED", "REQUEUED",
                                                                  "COMPLETED"]
    [u] = sacct(urgent)
    assert u["State"] == "COMPLETED" and u["Partition"] == "urgent"
    log = base.log("rq", job, "out")
    assert "Caught signal SIGUSR2 on" in log and "this job is preempted" in log
    for at in (4, 8):   # TDA's state saved every 4 images: records past it are made again
        assert (f"argtca: 2 records after the last stream checkpoint (image {at} of the stream) "
                f"are made again, from the saved state") in log
        assert f"argtca: stream resumed at image {at} of 16 from stream_state.pt" in log
    # the launch followed it through, every spell of it: each requeue leaves the job pending
    # for 5 s and more (the cluster's cred_expire), and --wait reads sacct every --poll-s (1 s).
    # At least one pending spell per requeue, alternating with running, never a failure, then
    # done: CI on a loaded 2-core host once saw three spells for sacct's two requeues (a state
    # read between them as running; not reproduced here with the host loaded or idle, where
    # sacct reads RUNNING, REQUEUED, PENDING, RUNNING each time). The records and sacct's
    # states above are what the requeues must keep exact.
    states = [ln.split(": ", 1)[1] for ln in out.splitlines() if ln.startswith("[table1] tasks:")]
    pending, running = (f"0 done, {r} running, {1 - r} pending, 0 failed of 1" for r in (0, 1))
    done = "1 done, 0 running, 0 pending, 0 failed of 1"
    after_start = states[states[:1] == [pending]:]   # it may start before the first look
    spells = (len(after_start) - 2) // 2
    assert spells >= 2 and after_start == [running, pending] * spells + [running, done], states


def test_time_limit_checkpoints_on_the_warning_and_requeues(base):
    """The job's time limit is cut while its run is held mid-stream: SLURM sends submitit's
    warning signal (USR2, 90 s before the limit, at its next time check, at most 30 s later),
    the task stops its run at a batch boundary and requeues itself; the run resumes. (submitit
    tells a time-out from a preemption by its own clock against --timeout-min, so this limit,
    cut by scontrol, reads as a preemption in its log: the same checkpoint and requeue, only
    not counted against submitit's three requeues for time-outs.)"""
    go = base.path / "go-timeout"
    p = base.launch("tl", "tda", "2", f"tda:2:6:{go}", "--timeout-min", "20")
    folder = base.folder("tl", "tda", 2)
    wait_until("six records", lambda: n_records(folder) == 6 or p.poll() is not None)
    job = base.task("tl", "tda on demo, seed 2")
    # a limit 40 to 100 s away: the warning comes at SLURM's next check (<= 90 s left) or the one
    # after, always ahead of the limit itself
    minutes = math.ceil((running_seconds(job) + 40) / 60)
    run("scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}")
    wait_until("the requeue", lambda: f"Requeued job {job}" in base.log("tl", job, "err")
               + base.log("tl", job, "out"), timeout=150)
    run("scontrol", "update", f"JobId={job}", "TimeLimit=20")   # the next attempt runs through
    go.touch()
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert records(folder) == base.reference[("tda", 2)]
    logs = base.log("tl", job, "err") + base.log("tl", job, "out")
    assert "Caught signal SIGUSR2" in logs and "Calling checkpoint method" in logs
    assert "error: tda on demo, seed 2: stopped" not in logs   # SIGINT from the task, no SIGTERM
    assert "argtca: stream resumed at image 4 of 16 from stream_state.pt" in logs
    assert [r["State"] for r in sacct(job, duplicates=True)] == ["REQUEUED", "COMPLETED"]


def test_cancelled_task_and_bad_input_one_line_each_then_collect(base):
    """Four tasks; one run finds bad input (a run folder holding records without their
    config.json) and one task is cancelled mid-stream: the launch ends with one line per failed
    run, and collect makes the table of the runs that finished (seed 1's)."""
    env_cwd = dict(cwd=base.path, env=base.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True)
    dry = subprocess.run([sys.executable, "-m", "argtca.experiments"]
                         + base.command("cx", "zeroshot,tda", "1,2")
                         + ["--launcher", "slurm", "--gpus-per-job", "0", "--dry-run"] + STREAM,
                         **env_cwd)
    assert dry.returncode == 0, dry.stderr
    bad = base.path / next(ln.split(" -> ")[1] for ln in dry.stdout.splitlines()
                           if "would submit: zeroshot on demo, seed 2 -> " in ln)
    bad.mkdir(parents=True)
    (bad / "records.jsonl").write_text('{"index": 0, "label": 1, "pred": 1}\n')

    p = base.launch("cx", "zeroshot,tda", "1,2", f"tda:2:2:{base.path / 'never'}")
    folder = base.folder("cx", "tda", 2)
    wait_until("two records", lambda: n_records(folder) == 2 or p.poll() is not None)
    job = base.task("cx", "tda on demo, seed 2")
    run("scancel", job)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1, err
    failed = [ln for ln in err.splitlines() if ln.startswith("[table1] failed: ")]
    assert len(failed) == 2, err
    zs = next(ln for ln in failed if "zeroshot on demo, seed 2: " in ln)
    assert (f"error: {bad.relative_to(base.path)}/records.jsonl holds records but "
            f"{bad.relative_to(base.path)}/config.json (the fingerprint") in zs
    assert zs.endswith("_0_log.err)")
    tda = next(ln for ln in failed if "tda on demo, seed 2: " in ln)
    assert "error: tda on demo, seed 2: stopped by SIGTERM (SLURM ends its job" in tda
    assert tda.endswith(f"logs/{job}/{job}_0_log.err)")
    states = {r["JobID"]: r["State"] for r in sacct(job.split("_")[0])}
    zs_job = base.task("cx", "zeroshot on demo, seed 2")
    assert states.pop(job).startswith("CANCELLED") and states.pop(zs_job) == "FAILED", states
    assert set(states.values()) == {"COMPLETED"} and len(states) == 2, states

    # collect: the command's arguments (its --plugin keeps the record form out)
    col = subprocess.run([sys.executable, "-m", "argtca.experiments", "collect"]
                         + base.command("cx", "zeroshot,tda", "1,2") + STREAM, **env_cwd)
    missing = [ln for ln in col.stderr.splitlines() if ln.startswith("[table1] not finished: ")]
    assert len(missing) == 2, col.stderr
    assert missing[0].startswith(f"[table1] not finished: zeroshot on demo, seed 2: task "
                                 f"{zs_job}: error: {bad.relative_to(base.path)}/records.jsonl "
                                 f"holds "), missing
    assert missing[1].startswith(f"[table1] not finished: tda on demo, seed 2: task {job}: error: "
                                 f"tda on demo, seed 2: stopped by SIGTERM"), missing
    assert f"; SLURM ended task {job} (CANCELLED) (log: " in missing[1]
    got = tables(report_dir(col.stdout))
    for name in ("table.csv", "cells.csv"):
        assert got[name] == base.seed1_table[name], name


def test_without_accounting_the_states_come_from_squeue(base):
    """A cluster without accounting: ``sacct`` fails (a stand-in first on the launch's PATH),
    so submitit knows no state. The launch reads them from ``squeue``: the job requeued while
    its interrupted attempt's error result is on disk is still followed, not reported failed."""
    shim = base.path / "no-accounting"
    shim.mkdir(exist_ok=True)
    calls = base.path / "sacct-calls"
    (shim / "sacct").write_text(f"#!/bin/sh\necho called >> {calls}\necho 'sacct: error: "
                                f"Slurm accounting storage is disabled' >&2\nexit 1\n")
    (shim / "sacct").chmod(0o755)
    go = base.path / "go-noacct"
    p = base.launch("na", "tda", "2", f"tda:2:6:{go}",
                    env={"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"})
    folder = base.folder("na", "tda", 2)
    wait_until("six records", lambda: n_records(folder) == 6 or p.poll() is not None)
    job = base.task("na", "tda on demo, seed 2")
    run("scontrol", "requeue", job)
    wait_until("the run's stop", lambda: "stopped by SIGTERM" in base.log("na", job, "err"))
    wait_until("the stopped attempt's result", lambda: (
        base.path / "na/launches/logs" / job / f"{job}_0_result.pkl").is_file())
    go.touch()
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert records(folder) == base.reference[("tda", 2)]
    assert calls.is_file()   # submitit asked sacct and got nothing
    states = [ln.split(": ", 1)[1] for ln in out.splitlines() if ln.startswith("[table1] tasks:")]
    assert states[-1] == "1 done, 0 running, 0 pending, 0 failed of 1", states
