"""The experiments' runs through submitit (``--launcher local|slurm``): a 4-run Table 1 on the
demo run as submitit local jobs, one run killed mid-run (SIGKILL after its first record) and
its task resubmitted by running the command again: the finished runs are not submitted again,
the killed run resumes from its records, and the report equals the in-process runner's. Also
the dry run's numbers, the failed-task listing, the SLURM array (submitit's mocked sbatch) and
the requeue of a preempted task."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import submitit
from submitit.core.utils import cloudpickle_dump

from argtca.experiments.__main__ import without_launch_options
from argtca.experiments.launch import (RunTask, TaskRun, failure_line, job_state,
                                       last_error_line)
from experiments_cli import call as _call
from helpers_procs import reap

REPO = Path(__file__).resolve().parents[2]
TINY = ["DATASET.NUM_IMAGES", "3", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "VERBOSE", "False", "USE_CUDA", "False"]
PLAN = ["table1", "demo", "--methods", "zeroshot,tpt", "--seeds", "1,2", "--quiet"]
# killed once: tpt, seed 2, right after its first record is on disk (a plug-in, so that only
# the launched run's process does it; the marker file makes it happen once)
KILLER = '''import os, signal, sys
from argtca import run_folder
_marker = os.environ.get("ARGTCA_TEST_KILL_ONCE")
_argv = sys.argv
if (_marker and not os.path.exists(_marker) and "--seed" in _argv
        and _argv[_argv.index("--seed") + 1] == "2"
        and any(a.endswith("tpt.yaml") for a in _argv)):
    _write = run_folder.RecordWriter.write

    def write(self, recs):
        _write(self, recs)
        open(_marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    run_folder.RecordWriter.write = write
'''


def _report(text):
    """The report folder a command printed ("[table1] wrote: DIR/report.json, ...")."""
    line = [ln for ln in text.splitlines() if ln.startswith("[table1] wrote: ")][-1]
    return Path(line.split("wrote: ", 1)[1].split(",")[0]).parent


def _tables(rep):
    return {n: (rep / n).read_text() for n in ("table.csv", "table.md", "cells.csv")}


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER)
    return tmp_path, ["--plugin", str(killer)]


def test_local_jobs_killed_task_resubmitted_report_equals_inline(env, monkeypatch):
    tmp, plugin = env
    # the in-process runner (the plug-in does nothing here: no marker variable)
    rc, out, err = _call(PLAN + plugin + ["--out-root", str(tmp / "inline")] + TINY)
    assert rc == 0, err
    inline = _tables(_report(out))

    monkeypatch.setenv("ARGTCA_TEST_KILL_ONCE", str(tmp / "killed"))
    cmd = PLAN + plugin + ["--out-root", "jobs", "--launcher", "local", "--wait",
                           "--array-parallelism", "2", "--poll-s", "0.2"] + TINY
    rc, out, err = _call(cmd)
    assert rc == 1 and (tmp / "killed").is_file(), err
    assert "4 run(s) planned: 0 finished (re-read, not submitted), 4 to submit in 4 task(s)" \
        in out
    assert "[table1] tasks: 3 done, 0 running, 0 pending, 1 failed of 4" in out
    # the failed task: its runs, the last "error:" line of its stderr and that file
    records = json.loads(next((tmp / "jobs/launches").glob("*.json")).read_text())
    assert records["command"] == without_launch_options(cmd)
    first = records["launches"][0]["tasks"]
    assert [t["runs"] for t in first] == [["zeroshot on demo, seed 1"], ["tpt on demo, seed 1"],
                                          ["zeroshot on demo, seed 2"], ["tpt on demo, seed 2"]]
    log = Path(records["launches"][0]["folder"].replace("%j", first[3]["job_id"])) / \
        f"{first[3]['job_id']}_0_log.err"
    want = ("error: tpt on demo, seed 2: the run was killed (SIGKILL); run the command again "
            "to resume it from its records")
    assert f"[table1] failed: tpt on demo, seed 2: {want} (log: {log})" in err
    assert last_error_line(log) == want
    killed = next((tmp / "jobs/tpt/demo").glob("*/seed2"))
    before = (killed / "records.jsonl").read_text()
    assert len(before.splitlines()) == 1 and not (killed / "summary.json").exists()

    # the same command again: only the killed run's task is submitted; it resumes
    rc, out, err = _call(cmd)
    assert rc == 0, err
    assert "4 run(s) planned: 3 finished (re-read, not submitted), 1 to submit in 1 task(s)" \
        in out
    records = json.loads(next((tmp / "jobs/launches").glob("*.json")).read_text())
    assert [t["runs"] for t in records["launches"][1]["tasks"]] == [["tpt on demo, seed 2"]]
    after = (killed / "records.jsonl").read_text()
    assert after.startswith(before) and len(after.splitlines()) == 3
    assert json.loads((killed / "summary.json").read_text())["n"] == 3
    rep = _report(out)
    assert _tables(rep) == inline

    # collect: from the launch record, and from the out-root and the command's arguments
    # (this plan loads a --plugin file: collect refuses to import code an editable record names
    # and says to give the command; the plan without it is collected from its record below)
    rec = next((tmp / "jobs/launches").glob("*.json"))
    monkeypatch.chdir(REPO)   # the record names the folder the command ran in
    rc, out, err = _call(["collect", str(rec)])
    assert rc == 2 and "never imports code" in err and "killer.py" in err
    monkeypatch.chdir(tmp)
    rc, out, err = _call(["collect"] + PLAN + plugin + ["--out-root", "jobs"] + TINY)
    assert rc == 0 and "4 run(s) planned: 4 finished" in out, err


def test_dry_run_numbers_and_nothing_submitted(env, monkeypatch):
    tmp, _ = env
    # measured GPU rates (made by hand; $ARGTCA_RATES names the file): TPT on the demo 0.05 s an
    # image after a 2 s start, zero-shot 0.01 s after 0.5 s
    from argtca.experiments.rates import derive
    rows = [derive({"method": m, "dataset": "demo", "backbone": "argtca-demo-clip",
                    "views": "cpu", "classes": 16, "n": 32, "loop_s": 1.0, "run_s": run,
                    "steady_img_per_s": steady})
            for m, run, steady in (("tpt", 2 + 32 * 0.05, 20.0), ("zeroshot", 0.5 + 0.32, 100))]
    rates = tmp / "gpu-rates.json"
    rates.write_text(json.dumps({"machine": {"device": "cuda", "card": "NVIDIA H100 80GB HBM3",
                                             "cores": 16, "date": "2026-12-06"}, "rows": rows}))
    monkeypatch.setenv("ARGTCA_RATES", str(rates))
    rc, out, err = _call(["table1", "demo", "--methods", "tpt,zeroshot", "--seeds", "1,2,3",
                          "--out-root", "o", "--launcher", "slurm", "--dry-run",
                          "--gpus-per-job", "2"] + TINY)
    assert rc == 0, err
    # 2 methods x 3 seeds, 3 images each: 3 x ((2 + 3 x 0.05) + (0.5 + 3 x 0.01)) = 8.04 s
    gpu_s = 3 * ((2 + 3 * 0.05) + (0.5 + 3 * 0.01))
    assert "[table1] 6 run(s) planned: 0 finished (re-read, not submitted), 6 to submit in 3 " \
           "task(s) of 2 GPU(s)" in out
    assert f"[table1] to submit: 18 test images, {gpu_s / 3600:.2f} GPU hours " \
           f"({gpu_s:.0f} GPU s)" in out
    assert f"rates: {rates} (NVIDIA H100 80GB HBM3, 16 cores" in out
    assert sum("would submit: " in ln for ln in out.splitlines()) == 6
    assert not (tmp / "o").exists()   # nothing submitted, no record, no run folder


def test_slurm_array_parameters_and_record(env):
    """One sbatch job array (submitit's mocked SLURM): the options under submitit's names, one
    task per run, the job id and the collect command printed."""
    from submitit.slurm.test_slurm import mocked_slurm
    tmp, _ = env
    with mocked_slurm():
        rc, out, err = _call(PLAN + ["--out-root", "o", "--launcher", "slurm", "--partition",
                                     "gpu", "--account", "lab", "--gpus-per-job", "1",
                                     "--cpus-per-gpu", "6", "--timeout-min", "240",
                                     "--array-parallelism", "3"] + TINY)
    assert rc == 0, err
    rec = next((tmp / "o/launches").glob("*.json"))
    assert "[table1] submitted 4 task(s): job 12; logs in " in out
    assert f"python -m argtca.experiments collect {rec}" in out
    sbatch = (tmp / "o/launches/logs/12/12_submission.sh").read_text()
    for line in ("#SBATCH --array=0-3%3", "#SBATCH --partition=gpu", "#SBATCH --account=lab",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=6",
                 "#SBATCH --time=240", "#SBATCH --signal=USR2@"):
        assert line in sbatch, line
    data = json.loads(rec.read_text())
    tasks = data["launches"][0]["tasks"]
    assert [t["job_id"] for t in tasks] == ["12_0", "12_1", "12_2", "12_3"]
    assert data["launches"][0]["launcher"] == "slurm"
    pkl = tmp / "o/launches/logs/12_3/12_3_submitted.pkl"
    task = submitit.core.utils.DelayedSubmission.load(pkl).function
    assert isinstance(task, RunTask) and [r.name for r in task.runs] == ["tpt on demo, seed 2"]
    assert "--seed" in task.runs[0].argv and task.runs[0].out.endswith("/seed2")


def test_failed_task_listing(tmp_path):
    folder = tmp_path / "logs" / "%j"
    job = submitit.LocalJob(folder=folder, job_id="4242")
    job.paths.folder.mkdir(parents=True)
    job.paths.stderr.write_text(
        "submitit INFO starting\nerror: first problem\nsome output\n"
        "error: DATASET.ROOT /x: no such folder; pass --root\nTraceback (most recent call "
        "last):\nRuntimeError: failed: tpt on demo, seed 1 (exit 2)\n")
    assert last_error_line(job.paths.stderr) == \
        "error: DATASET.ROOT /x: no such folder; pass --root"
    assert failure_line("tpt on demo, seed 1", job) == (
        f"tpt on demo, seed 1: error: DATASET.ROOT /x: no such folder; pass --root "
        f"(log: {tmp_path}/logs/4242/4242_0_log.err)")
    cloudpickle_dump(("error", "Traceback ..."), job.paths.result_pickle)
    assert job_state(job) == "failed"
    cloudpickle_dump(("success", ["tpt on demo, seed 1"]), job.paths.result_pickle)
    assert job_state(job) == "done"
    (tmp_path / "empty.err").write_text("")
    assert last_error_line(tmp_path / "empty.err") == "(empty log)"


def test_preempted_task_stops_its_runs_and_requeues_itself(tmp_path):
    """checkpoint(): the runs get SIGINT (a run flushes its records and exits 130) and the
    task itself is resubmitted, without this attempt's processes."""
    task = RunTask([TaskRun("tpt on demo, seed 1", ["--seed", "1"], str(tmp_path / "r"))],
                   str(tmp_path))
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    # its own SIGINT handler: the stand-in stops on SIGINT however pytest was started
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        task._procs = [(task.runs[0], p)]
        again = task.checkpoint()
        assert p.returncode == 130   # SIGINT's exit (SIGKILL, after the grace period: -9)
    finally:
        reap([p])
    assert isinstance(again, submitit.helpers.DelayedSubmission) and again.function is task
    assert task.__getstate__()["_procs"] == [] and task.runs[0].name == "tpt on demo, seed 1"


def test_launcher_options_checked_and_left_out_of_the_record():
    assert without_launch_options(
        ["table1", "demo", "--launcher", "slurm", "--partition=gpu", "--wait", "--seeds", "1",
         "--timeout-min", "30", "TTA.N_VIEWS", "2"]) == ["table1", "demo", "--seeds", "1",
                                                          "TTA.N_VIEWS", "2"]
    rc, out, err = _call(["table1", "demo", "--partition", "gpu", "--launcher", "local",
                          "--dry-run"])
    assert rc == 2 and "--partition gpu: a SLURM option; add --launcher slurm" in err
    rc, out, err = _call(["table1", "demo", "--launcher", "slurm", "--timeout-min", "0"])
    assert rc == 2 and "--timeout-min 0: must be >= 1" in err
    rc, out, err = _call(["collect", "/nonexistent/plan.json"])
    assert rc == 2 and "not a launch record" in err
