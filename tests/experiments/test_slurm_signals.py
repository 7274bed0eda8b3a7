"""A launch task under SLURM's signals, without a cluster: submitit's handler of the warning
signal (preemption, time limit) runs the task's ``checkpoint`` while the task waits on its runs,
and submitit's own message when a task timed out more often than it is requeued becomes one line
that says how to resume. (tests/experiments/test_slurm_requeue.py does both on a real SLURM.)"""
import signal
import subprocess
import sys
import textwrap
import traceback

import submitit
from submitit.core.job_environment import SignalHandler
from submitit.core.utils import DelayedSubmission, UncompletedJobError, cloudpickle_dump
from submitit.slurm.slurm import SlurmJobEnvironment

from argtca.experiments.launch import RunTask, TaskRun, failure_line
from argtca.experiments.launch.options import STOP_GRACE_S


def test_checkpoint_in_the_signal_handler_that_interrupts_the_wait_on_a_run():
    """The task waits on its run (``Popen.wait``) when SLURM's USR2 arrives; submitit's handler
    calls ``checkpoint``, which stops the run (SIGINT: it exits 130) and must see it end. Waiting
    there with ``Popen.wait`` blocked for good on the lock the interrupted wait holds (the task
    then ran into its time limit and was never requeued)."""
    code = textwrap.dedent("""
        import os, signal, subprocess, sys, threading
        from argtca.experiments.launch import RunTask, TaskRun
        task = RunTask([TaskRun("r", [])], ".")
        run = ("import signal, sys, time\\n"
               "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\\n"
               "print('ready', flush=True)\\ntime.sleep(60)\\n")
        p = subprocess.Popen([sys.executable, "-c", run], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
        assert p.stdout.readline().strip() == "ready"
        task._procs = [(task.runs[0], p)]

        def on_usr2(signum, frame):   # what submitit's handler does first
            again = task.checkpoint()
            print("checkpointed", p.returncode, again.function is task, flush=True)
            sys.exit(3)

        signal.signal(signal.SIGUSR2, on_usr2)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR2)).start()
        p.wait()   # the task's wait on its runs
    """)
    # the old code waited STOP_GRACE_S for the run, then for good: give up well before
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=STOP_GRACE_S - 30)
    assert r.returncode == 3 and "checkpointed 130 True" in r.stdout, r.stdout


def test_timed_out_too_many_times_is_one_line_that_says_how_to_resume(tmp_path, monkeypatch):
    """submitit's handler of the warning signal on a task whose requeues for time-outs are used
    up: the task checkpoints (its runs stop, records kept) and submitit ends it with its own
    error; the launch's line for it says what to do."""
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    job = submitit.SlurmJob(folder=tmp_path / "logs" / "%j", job_id="4242_1")
    job.paths.folder.mkdir(parents=True)
    task = RunTask([TaskRun("tda on demo, seed 2", ["--seed", "2"])], str(tmp_path))
    delayed = DelayedSubmission(task)
    delayed.set_timeout(timeout_min=1, max_num_timeout=0)   # the last of its time-outs
    handler = SignalHandler(SlurmJobEnvironment(), job.paths, delayed)
    try:
        handler.checkpoint_and_try_requeue(signal.SIGUSR2)
        raise AssertionError("submitit requeued a task out of time-outs")
    except UncompletedJobError:   # what process_job then writes: the task's result
        cloudpickle_dump(("error", traceback.format_exc()), job.paths.result_pickle)
    job.paths.stderr.write_text("interrupted: the finished images are kept in ...\n")
    assert failure_line("tda on demo, seed 2", job) == (
        "tda on demo, seed 2: error: task 4242_1 reached its time limit on every attempt "
        "(submitit requeues a task 3 times); its runs' finished images are kept: raise "
        f"--timeout-min and run the command again to resume them (log: {job.paths.stderr})")
