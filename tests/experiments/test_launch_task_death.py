"""A run never outlives its task (``--launcher local``): a task or its job killed with SIGKILL
mid-run stops its run within seconds, the task's log names the cause, and the same command
again resumes the run from its records. A task interrupted otherwise stops its runs' whole
process groups, and a task whose run folder is still locked by an earlier run waits for it."""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from argtca.experiments.launch import RunTask, TaskRun
from argtca.experiments.launch import tasks as tasks_mod
from experiments_cli import call as _call
from helpers_procs import reap, sigint_default

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process groups and /proc: Linux")

N_IMAGES = 8
TINY = ["DATASET.NUM_IMAGES", str(N_IMAGES), "TTA.BATCH_IMAGES", "2", "DATALOADER.NUM_WORKERS",
        "0", "VERBOSE", "False", "USE_CUDA", "False"]
# each record batch takes a second until the flag file exists (a plug-in: only the launched
# run's process does it), so that the run is mid-way when its task is killed
SLOW = '''import os, time
from argtca import run_folder
_flag = os.environ.get("ARGTCA_TEST_SLOW_UNTIL")
if _flag:
    _write = run_folder.RecordWriter.write

    def write(self, recs):
        _write(self, recs)
        if not os.path.exists(_flag):
            time.sleep(1.0)
    run_folder.RecordWriter.write = write
'''


def _children(pid: int):
    """The pids whose parent is ``pid`` (from /proc, which every Linux has)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by whoever adopted it, is not)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] \
            != "Z"
    except OSError:
        return False


def _wait_for(cond, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


@pytest.mark.parametrize("victim", ["task", "job"])
def test_sigkilled_task_stops_its_run_and_the_log_says_why(tmp_path, monkeypatch, victim):
    """``task``: the process running RunTask; ``job``: submitit's local controller, whose pid is
    the job id (``kill -9 <job id>``). Before: the run went on writing records for seconds after
    its task's death and the log was empty."""
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slow.py").write_text(SLOW)
    flag = tmp_path / "fast-now"
    monkeypatch.setenv("ARGTCA_TEST_SLOW_UNTIL", str(flag))
    cmd = ["table1", "demo", "--methods", "dmn", "--seeds", "1", "--quiet", "--plugin",
           str(tmp_path / "slow.py"), "--out-root", "jobs", "--launcher", "local",
           "--gpus-per-job", "0"] + TINY
    rc, out, err = _call(cmd)   # one task, not followed: it goes on in the background
    assert rc == 0, err
    record = json.loads(next((tmp_path / "jobs/launches").glob("*.json")).read_text())
    job = int(record["launches"][0]["tasks"][0]["job_id"])
    task = run = None
    try:
        task = _wait_for(lambda: _children(job), 120, "the task process")[0]
        run = _wait_for(lambda: _children(task), 120, "the run process")[0]
        records = tmp_path / "jobs/dmn/demo"
        recs = _wait_for(lambda: [p for p in records.glob("*/seed1/records.jsonl")
                                  if _lines(p) >= 1], 300, "the run's first record")[0]

        os.kill(job if victim == "job" else task, signal.SIGKILL)
        # seconds when idle; a loaded machine is given a minute
        _wait_for(lambda: not _alive(run), 60, "the run to stop after its task's death")
        n = _lines(recs)
        time.sleep(2.0)
        assert _lines(recs) == n < N_IMAGES   # nothing writes the records any more: stopped
        assert not (recs.parent / "summary.json").exists()
        assert not _alive(task)
    finally:   # the job, its task and its run are gone whatever happened above
        reap(pids=[x for x in (job, task, run) if x], groups=[run] if run else [])
    log = tmp_path / f"jobs/launches/logs/{job}/{job}_0_log.err"
    text = log.read_text()
    assert (f"error: dmn on demo, seed 1: stopped because its task (pid {task}) died; its "
            f"finished images are kept in its records: run the command again to resume it"
            in text), text

    if victim == "job":
        return   # the resume is the same after either death: run once
    # the same command again, followed: the run resumes from its records and ends
    flag.touch()
    rc, out, err = _call(cmd + ["--wait", "--poll-s", "0.2"])
    assert rc == 0, err
    assert "1 run(s) planned: 0 finished (re-read, not submitted), 1 to submit" in out
    after = recs.read_text().splitlines()
    assert len(after) == N_IMAGES and len({json.loads(r)["index"] for r in after}) == N_IMAGES
    assert json.loads((recs.parent / "summary.json").read_text())["n"] == N_IMAGES


# a stand-in for the run's interpreter: a "run" that starts a helper in its own process group
# which ignores SIGINT (a loader worker, say), then waits for SIGINT itself
FAKE_RUN = textwrap.dedent('''\
    #!/bin/sh
    echo "$$ $(date +%s.%N)" >> "{log}"
    sh -c 'trap "" INT; echo $$ > "{helper}"; exec sleep 60' &
    trap 'exit 130' INT
    while true; do sleep 0.1; done
''')


def test_interrupted_task_stops_its_runs_process_groups(tmp_path):
    """Ctrl-C in the task (KeyboardInterrupt while it waits): each run's whole group ends,
    including a helper that ignores SIGINT (SIGKILL after the grace period). Before: the task
    signalled no run and the helper lived on."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_RUN.format(log=tmp_path / "started", helper=tmp_path / "helper"))
    fake.chmod(0o755)
    code = textwrap.dedent(f'''\
        from argtca.experiments.launch import RunTask, TaskRun, tasks
        tasks.STOP_GRACE_S = 1
        t = RunTask([TaskRun("r", [], None)], {str(tmp_path)!r}, python={str(fake)!r})
        t()
    ''')
    # Ctrl-C must reach the task whatever this process inherited (a background job ignores it)
    p = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)
    helper = run = None
    try:
        helper = int(_wait_for(lambda: (tmp_path / "helper").is_file()
                               and (tmp_path / "helper").read_text().strip(), 120, "the helper"))
        run = int((tmp_path / "started").read_text().split()[0])   # its group's leader
        assert _alive(helper)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        assert p.returncode != 0 and "error: the task stopped (KeyboardInterrupt); stopping " \
            "its runs: run the command again to resume them from their records" in err, err
        # SIGKILL comes STOP_GRACE_S = 1 s after SIGINT: seconds, a minute on a loaded machine
        _wait_for(lambda: not _alive(helper), 60, "the run's helper to end with its group")
    finally:   # the task, the run's group and its helper never outlive the test
        reap([p], pids=[x for x in (helper,) if x], groups=[x for x in (run,) if x])


# a run that stops on SIGINT as argtca.run does (exit 130), saying it got it
TRAPPING_RUN = textwrap.dedent('''\
    #!/bin/sh
    trap 'echo INT > "{got}"; exit 130' INT
    echo $$ > "{started}"
    while true; do sleep 0.1; done
''')


def test_a_task_that_ignores_sigint_still_stops_its_runs_by_sigint(tmp_path):
    """A task started from a background shell inherits SIGINT ignored, and so did its runs: its
    preemption stop (SIGINT, records flushed, exit 130) reached none of them and each died of
    SIGKILL after the grace period. Its runs start with SIGINT's default action now."""
    fake = tmp_path / "python"
    fake.write_text(TRAPPING_RUN.format(got=tmp_path / "got", started=tmp_path / "started"))
    fake.chmod(0o755)
    code = textwrap.dedent(f'''\
        import os, signal, threading, time
        from argtca.experiments.launch import RunTask, TaskRun, tasks
        tasks.STOP_GRACE_S = 30
        t = RunTask([TaskRun("r", [], None)], {str(tmp_path)!r}, python={str(fake)!r})

        def preempt():   # what submitit does on preemption, once the run is up
            while not os.path.exists({str(tmp_path / "started")!r}):
                time.sleep(0.05)
            time.sleep(0.5)
            t.checkpoint()
        threading.Thread(target=preempt, daemon=True).start()
        t()
    ''')
    p = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    run = None
    try:
        _, err = p.communicate(timeout=120)
        run = int((tmp_path / "started").read_text())
        assert "failed: r (exit 130)" in err, err        # SIGINT's exit, not SIGKILL's
        assert (tmp_path / "got").read_text().strip() == "INT"
    finally:
        reap([p], pids=[run] if run else [], groups=[run] if run else [])


def test_resubmitted_task_waits_for_a_run_still_holding_its_folder(tmp_path, monkeypatch):
    """An earlier run still holds the folder's lock (it is stopping): the task starts its own
    run only once the lock is free, saying why it waits; one that never frees it is one error
    line and the run is not started. Before: the new run started at once, beside the other."""
    folder = tmp_path / "run"
    folder.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom argtca.run_folder import RunLock\n"
         f"lock = RunLock({str(folder)!r}).acquire()\nprint('held', flush=True)\n"
         "time.sleep(3)\n"
         f"open({str(tmp_path / 'released')!r}, 'w').write(repr(time.time()))\n"
         "lock.release()\n"],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert holder.stdout.readline().strip() == "held"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\ndate +%s.%N > "{tmp_path / "started"}"\n')
    fake.chmod(0o755)
    task = RunTask([TaskRun("r", [], str(folder))], str(tmp_path), python=str(fake))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert task() == ["r"]
    ended = time.time()
    holder.wait(timeout=10)
    assert holder.returncode == 0
    started = float((tmp_path / "started").read_text())
    assert started <= ended and f"[task] r: waiting up to {tasks_mod.SURVIVOR_WAIT_S} s for an " \
        f"earlier run of {folder} to stop: {folder} is being written by another run (pid " \
        f"{holder.pid}" in out.getvalue()
    # the run started after the holder released the lock, not before
    assert started >= float((tmp_path / "released").read_text()), out.getvalue()

    # a lock that is never freed (within the wait): one error line, the run not started
    (tmp_path / "started").unlink()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom argtca.run_folder import RunLock\n"
         f"lock = RunLock({str(folder)!r}).acquire()\nprint('held', flush=True)\n"
         "time.sleep(30)\n"], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(tasks_mod, "SURVIVOR_WAIT_S", 1)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
                pytest.raises(RuntimeError, match=r"failed: r \(its folder is busy\)"):
            task()
        assert f"error: r: not started, an earlier run still writes its folder after 1 s: " \
               f"{folder} is being written by another run (pid {holder.pid}" in err.getvalue()
        assert not (tmp_path / "started").exists()
    finally:
        holder.kill()
        holder.wait()



def test_a_run_reaped_by_the_preemption_keeps_its_exit_status():
    """A preemption's stop (another thread, or SLURM's signal handler) reaps a run while the task
    waits on it. The task waited with ``p.wait()``, whose blocked ``waitpid`` then raised
    ``ChildProcessError`` and recorded exit 0: a preempted task said its runs had finished and
    printed nothing (seen once in CI). The task's wait now takes the status the other set."""
    import threading
    p = subprocess.Popen(["sh", "-c", "exit 130"])
    while True:   # a zombie: exited, not yet reaped
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    _, status = os.waitpid(p.pid, 0)   # the other waiter takes the status...

    def set_late():   # ...and sets it a moment later
        time.sleep(0.3)
        p.returncode = os.waitstatus_to_exitcode(status)
    threading.Thread(target=set_late).start()
    assert tasks_mod._reap(p, None) is True
    assert p.returncode == 130
