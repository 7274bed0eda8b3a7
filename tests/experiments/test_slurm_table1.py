"""``table1 --launcher slurm`` against a real SLURM (slurmctld, slurmd, slurmdbd: start one with
tests/slurm/local_slurm.sh; skipped where none answers): the demo's Table 1 over two methods and
two seeds as one job array, its dry run, its throttle, and what a job's runs see.

What is checked comes from SLURM itself (sacct's rows, the submission file sbatch was given) and
from the runs' own processes (a plug-in writes what each one sees), never from the launcher's
account of itself."""
import json
import sys

import pytest

from helpers_slurm import (PLUGIN, TINY, call, cluster_or_skip, launch_record, report_dir,
                           sacct, tables, when)

PLAN = ["table1", "demo", "--methods", "zeroshot,tda", "--seeds", "1,2", "--quiet"]
SLURM = ["--launcher", "slurm", "--partition", "debug", "--gpus-per-job", "0",
         "--cpus-per-gpu", "1", "--timeout-min", "20", "--array-parallelism", "1"]


@pytest.fixture
def here(tmp_path, monkeypatch):
    cluster_or_skip()
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_table1_as_one_throttled_array_equals_the_inline_table(here):
    rc, out, err = call(PLAN + ["--out-root", "inline"] + TINY)
    assert rc == 0, err
    inline = tables(report_dir(out))

    # the dry run: the array's sbatch lines, nothing submitted
    rc, out, err = call(PLAN + ["--out-root", "jobs"] + SLURM + ["--dry-run"] + TINY)
    assert rc == 0, err
    assert "[table1] would submit one SLURM job array of 4 tasks:" in out
    dry = [ln.split("   ", 1)[1] for ln in out.splitlines() if ln.startswith("[table1]   #SBATCH")]
    for line in ("#SBATCH --array=0-3%1", "#SBATCH --partition=debug", "#SBATCH --time=20",
                 "#SBATCH --cpus-per-task=1", "#SBATCH --signal=USR2@90"):
        assert line in dry, (line, dry)
    assert not any("gpus" in ln or "gres" in ln for ln in dry), dry   # a CPU array
    assert not (here / "jobs").exists()

    rc, out, err = call(PLAN + ["--out-root", "jobs"] + SLURM + ["--wait", "--poll-s", "1"] + TINY)
    assert rc == 0, err
    assert "[table1] tasks: 4 done, 0 running, 0 pending, 0 failed of 4" in out
    # one array of one task per run, in plan order
    tasks = launch_record(here / "jobs")["launches"][0]["tasks"]
    array = tasks[0]["job_id"].split("_")[0]
    assert [t["job_id"] for t in tasks] == [f"{array}_{i}" for i in range(4)]
    assert [t["runs"] for t in tasks] == [[f"{m} on demo, seed {s}"] for s in (1, 2)
                                          for m in ("zeroshot", "tda")]
    # what sbatch was given is what the dry run printed
    script = (here / f"jobs/launches/logs/{array}/{array}_submission.sh").read_text()
    assert [ln for ln in script.splitlines() if ln.startswith("#SBATCH ")] == dry
    # SLURM's account: four tasks of the array, each completed on one CPU of the partition, and
    # never two at once (the throttle: the node has two CPUs, so without it two would overlap)
    rows = sorted(sacct(array), key=lambda r: r["Start"])
    assert sorted(r["JobID"] for r in rows) == [f"{array}_{i}" for i in range(4)], rows
    assert all(r["State"] == "COMPLETED" and r["Partition"] == "debug" and r["AllocCPUS"] == "1"
               for r in rows), rows
    for a, b in zip(rows, rows[1:]):
        assert when(b["Start"]) >= when(a["End"]), (a, b)
    # the table, cell for cell
    assert tables(report_dir(out)) == inline


def test_a_job_sees_the_submitting_shell_and_one_gpu_per_run(here, monkeypatch):
    """Two runs in one task of two GPUs (--gpus-per-job 2; the local cluster's GPUs are
    stand-ins, so the runs use the CPU): each run gets one of the GPUs SLURM allocated, and
    $ARGTCA_CACHE, $DATA, $ARGTCA_PLUGINS, the --plugin file, the python and the folder of the
    submitting shell, its relative paths naming the same files there (the run folders under
    the relative --out-root, the demo images under the relative $ARGTCA_CACHE)."""
    work = here / "work"
    (work / "plug").mkdir(parents=True)
    (work / "data").mkdir()
    (work / "plug" / "probe.py").write_text(PLUGIN)
    seen_dir = here / "seen"
    seen_dir.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("ARGTCA_CACHE", "cache")   # relative to the submitting folder
    monkeypatch.setenv("DATA", "data")
    monkeypatch.setenv("ARGTCA_PLUGINS", "plug/probe.py")
    monkeypatch.setenv("ARGTCA_TEST_ENV_DIR", str(seen_dir))
    rc, out, err = call(["table1", "demo", "--methods", "zeroshot", "--seeds", "1,2", "--quiet",
                         "--out-root", "out", "--plugin", "plug/probe.py", "--launcher", "slurm",
                         "--gpus-per-job", "2", "--wait", "--poll-s", "1"] + TINY)
    assert rc == 0, err
    assert "2 to submit in 1 task(s) of 2 GPU(s)" in out
    tasks = launch_record(work / "out")["launches"][0]["tasks"]
    assert [t["runs"] for t in tasks] == [["zeroshot on demo, seed 1", "zeroshot on demo, seed 2"]]
    job = tasks[0]["job_id"]   # one task: a plain job, not an array
    [row] = sacct(job)
    assert row["State"] == "COMPLETED" and "gres/gpu=2" in row["AllocTRES"], row
    seen = [json.loads((seen_dir / f"zeroshot-{s}.json").read_text()) for s in (1, 2)]
    assert sorted(s["CUDA_VISIBLE_DEVICES"] for s in seen) == ["0", "1"], seen
    for s in seen:
        assert s["SLURM_JOB_ID"] == job
        assert s["python"] == sys.executable
        assert s["cwd"] == str(work)
        assert s["ARGTCA_CACHE"] == "cache" and s["ARGTCA_PLUGINS"] == "plug/probe.py"
        assert s["DATA"] == "data" and s["root"] == ""   # the demo reads no data root
        assert s["plugin"] == "plug/probe.py"
        assert s["plugin_file"] == str(work / "plug" / "probe.py")
    # the demo images the runs read are the ones the submitting shell's $ARGTCA_CACHE names
    recs = next((work / "out/zeroshot/demo").glob("*/seed1/records.jsonl")).read_text()
    image = work / json.loads(recs.splitlines()[0])["path"]   # (an absolute path stays one)
    assert image.is_file() and work / "cache" in image.resolve().parents, image
