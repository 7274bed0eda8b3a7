"""The tests' side of a real SLURM (tests/slurm/local_slurm.sh): skip where none answers, read
squeue and sacct, wait for jobs, and the plug-ins the SLURM tests give the runs."""
from __future__ import annotations

import contextlib
import functools
import io
import json
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Dict, List

import pytest

REPO = Path(__file__).resolve().parents[1]
START = ("sudo bash tests/slurm/local_slurm.sh install && sudo bash tests/slurm/local_slurm.sh "
         "start")
# the tiny settings (.ci/run's TINY, with 8 images and 4 views)
TINY = ["DATASET.NUM_IMAGES", "8", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "VERBOSE", "False"]

# A plug-in for the runs of a SLURM test. ``$ARGTCA_TEST_HOLD`` = "<config stem>:<seed>:<n>:<go
# file>" (several: separated by ";"): that run holds once <n> records are written (inside the
# write, after it: the state of an online method is saved only once the write returns) until <go
# file> exists, so that a test acts on it at a known point of its stream.
# ``$ARGTCA_TEST_ENV_DIR``: each run writes what its process sees to
# <dir>/<config stem>-<seed>.json. Only the runs' processes do either: the test sets these
# variables for its launch alone.
PLUGIN = '''import json, os, sys, time
from argtca import run_folder
_a = sys.argv


def _opt(flag):
    return _a[_a.index(flag) + 1] if flag in _a else None


_cfg = os.path.basename(_opt("--config-file") or "").rsplit(".", 1)[0]
_holds = [h.split(":", 3) for h in os.environ.get("ARGTCA_TEST_HOLD", "").split(";") if h]
_holds = [(int(n), go) for stem, seed, n, go in _holds if (stem, seed) == (_cfg, _opt("--seed"))]
if _holds:
    _write = run_folder.RecordWriter.write

    def write(self, recs):
        _write(self, recs)
        with open(self.path) as f:
            n = sum(1 for _ in f)
        while any(n >= at and not os.path.exists(go) for at, go in _holds):
            time.sleep(0.1)
    run_folder.RecordWriter.write = write
_env_dir = os.environ.get("ARGTCA_TEST_ENV_DIR")
if _env_dir:
    seen = {k: os.environ.get(k) for k in ("ARGTCA_CACHE", "ARGTCA_PLUGINS", "DATA",
                                           "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID",
                                           "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")}
    seen.update(python=sys.executable, cwd=os.getcwd(), root=_opt("--root"),
                plugin=_opt("--plugin"), plugin_file=os.path.abspath(__file__))
    with open(os.path.join(_env_dir, f"{_cfg}-{_opt('--seed')}.json"), "w") as f:
        json.dump(seen, f)
'''


def call(argv):
    """``python -m argtca.experiments ARGV`` in this process: (exit status, stdout, stderr)."""
    from argtca.experiments.__main__ import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def report_dir(text: str) -> Path:
    """The report folder a command printed ("[table1] wrote: DIR/report.json, ...")."""
    line = [ln for ln in text.splitlines() if ln.startswith("[table1] wrote: ")][-1]
    return Path(line.split("wrote: ", 1)[1].split(",")[0]).parent


def tables(rep: Path) -> Dict[str, str]:
    return {n: (rep / n).read_text() for n in ("table.csv", "table.md", "cells.csv")}


def launch_record(out_root: Path) -> dict:
    return json.loads(next((Path(out_root) / "launches").glob("*.json")).read_text())


def cluster_or_skip() -> None:
    """Skip (one line: how to start one) unless a SLURM controller answers with a usable node."""
    why = _no_cluster()
    if why:
        pytest.skip(f"{why}; start the local one: {START}")


@functools.lru_cache(maxsize=1)
def _no_cluster() -> str:
    """Why the SLURM tests cannot run here ("" when they can), asked once per session (a
    controller that does not answer takes seconds to say so)."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "SLURM is not installed here"
    try:
        p = subprocess.run(["sinfo", "-h", "-o", "%R %T"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "no SLURM controller answers (sinfo timed out)"
    rows = [ln.split() for ln in p.stdout.splitlines() if len(ln.split()) == 2]
    if p.returncode != 0 or not any(s.rstrip("*~#") in ("idle", "mixed", "allocated",
                                                        "completing") for _, s in rows):
        return f"no usable SLURM cluster (sinfo: {' '.join(p.stdout.split())[:120] or 'no node'})"
    parts = {r.rstrip("*") for r, _ in rows}
    if not {"debug", "urgent"} <= parts:
        return (f"this SLURM is not tests/slurm/local_slurm.sh's (partitions "
                f"{', '.join(sorted(parts))}, not debug and urgent)")
    return ""


def run(*cmd: str) -> str:
    return subprocess.run(list(cmd), check=True, stdout=subprocess.PIPE, text=True,
                          timeout=60).stdout


def sacct(job: str, duplicates: bool = False) -> List[Dict[str, str]]:
    """sacct's rows of ``job`` (an array job: every task), steps left out."""
    fields = "JobID,JobName,Partition,State,Start,End,AllocCPUS,AllocTRES,ExitCode"
    out = run("sacct", "-j", job, "-P", "-o", fields, *(["-D"] if duplicates else []))
    lines = out.strip().splitlines()
    rows = [dict(zip(lines[0].split("|"), ln.split("|"))) for ln in lines[1:]]
    return [r for r in rows if "." not in r["JobID"]]


def when(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S")


def queued(job: str) -> List[str]:
    """squeue's job ids of ``job`` still pending or running."""
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, timeout=60).stdout
    return [ln.split()[0] for ln in out.splitlines()
            if ln.split() and ln.split()[1] not in ("COMPLETED", "CANCELLED", "FAILED")]


def wait_until(what: str, check, timeout: float = 240, every: float = 0.2):
    t0 = time.time()
    while True:
        v = check()
        if v:
            return v
        if time.time() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def records(folder: Path) -> List[dict]:
    p = Path(folder) / "records.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.is_file() else []


def n_records(folder: Path) -> int:
    p = Path(folder) / "records.jsonl"
    return p.read_text().count("\n") if p.is_file() else 0


def running_seconds(task: str) -> float:
    """How long ``task`` has been running, as squeue says ([d-][h:]m:s)."""
    t = run("squeue", "-h", "-j", task, "-o", "%M").strip()
    days, _, hms = t.rpartition("-")
    parts = [int(x) for x in hms.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return (int(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]
