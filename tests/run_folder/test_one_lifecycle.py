"""One run lifecycle (issue 41, item 1): every way a run executes — one process, a torchrun job
(two gloo ranks on the CPU), an online method's stream — goes through the one
:class:`argtca.run_folder.RunSession`, and the guarantees of docs/guarantees.md hold through it:
a run stopped mid-way resumes to the records of an uninterrupted one, a second run on a folder a
session holds is refused by its lock, and a run that fails before its first record leaves no
folder behind (while one stopped by Ctrl-C, or one that has records, keeps its folder)."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import argtca.trainers  # noqa: F401  (registers the methods)
from argtca.registry import TRAINER_REGISTRY
from argtca.run_folder import RunLockedError, RunSession, load_records
from argtca.trainers import base as trainer_base
from conftest import tiny_cfg
from helpers_data import make_caltech

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
N = 12   # images: 3 classes x 4


class Killed(BaseException):
    """A run stopped from outside (SIGKILL, Ctrl-C): no ``Exception``, so nothing is cleaned."""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_caltech(tmp_path_factory.mktemp("lifecycle") / "data", per_class=4)


@pytest.fixture
def sessions(monkeypatch):
    """(out_dir, rank, rank_files) of every RunSession entered in this process."""
    seen = []
    enter = RunSession.__enter__

    def spy(self):
        seen.append((self.out_dir, self.rank, self.rank_files))
        return enter(self)

    monkeypatch.setattr(RunSession, "__enter__", spy)
    return seen


def _over(data, out, method="TPT"):
    return {"TRAINER.NAME": method, "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
            "OUTPUT_DIR": str(out), "TTA.N_VIEWS": 4, "TTA.BATCH_IMAGES": 2, "SEED": 3,
            "TTA.STREAM.CHECKPOINT_IMAGES": 4}


def _trainer(over):
    cfg = tiny_cfg(**over)
    cfg.freeze()
    return TRAINER_REGISTRY.get(over["TRAINER.NAME"])(cfg)


def _killed_after(trainer_cls, over, n, monkeypatch):
    """A run of ``over`` stopped from outside once ``n`` records are written."""
    orig = trainer_cls.after_batch

    def after_batch(self, records):
        orig(self, records)
        if len(records) >= n:
            raise Killed()

    with monkeypatch.context() as mp:
        mp.setattr(trainer_cls, "after_batch", after_batch)
        with pytest.raises(Killed):
            _trainer(over).test()


def _fails_before_its_first_record(over, sessions):
    """A run of ``over`` whose model cannot be built: it had entered its session (the folder,
    config.json and the lock made) when it failed."""
    t = _trainer(over)

    def build_model():
        raise RuntimeError("the model cannot be built here")
    t.build_model = build_model
    with pytest.raises(RuntimeError, match="cannot be built"):
        t.test()
    assert sessions[-1][0] == over["OUTPUT_DIR"]


def _same(a, b):
    key = ("index", "path", "label", "pred")
    a = sorted(a, key=lambda r: r["index"])
    b = sorted(b, key=lambda r: r["index"])
    assert [tuple(r[k] for k in key) for r in a] == [tuple(r[k] for k in key) for r in b]
    assert all(abs(x["conf"] - y["conf"]) < 1e-5 for x, y in zip(a, b))


# ----------------------------------------------------------------------------- the object alone
def test_the_session_alone_holds_the_folder_and_removes_an_unstarted_runs(tmp_path):
    bare = SimpleNamespace(test=[], root="")
    fp = {"SEED": 1}
    out = tmp_path / "exp" / "abcd1234" / "seed1"
    with RunSession(str(out), bare, lambda: fp, settings=lambda: {"experiment": "abcd1234"}) as s:
        assert s.records == [] and s.fingerprint == fp
        assert json.loads((out / "config.json").read_text()) == fp
        assert (out.parent / "settings.json").is_file()
        with pytest.raises(RunLockedError, match="being written by another run"):
            with RunSession(str(out), bare, lambda: fp):
                pass
    with RunSession(str(out), bare, lambda: fp):   # released on the way out: taken again
        pass
    # an error before the first record: what this run made goes, up to the first folder that
    # was there before; Ctrl-C (a run to resume) keeps it
    fresh = tmp_path / "new" / "abcd1234" / "seed1"

    def unreadable():
        raise OSError(2, "cannot read MODEL.PRETRAINED", "/nowhere")
    with pytest.raises(OSError):
        with RunSession(str(fresh), bare, unreadable, settings=lambda: {}):
            pass
    assert not (tmp_path / "new").exists()
    with pytest.raises(Killed):
        with RunSession(str(fresh), bare, lambda: fp):
            raise Killed()
    assert (fresh / "config.json").is_file()


# ----------------------------------------------------------------------------- one process
def test_one_process_run_resumes_is_locked_and_leaves_no_unstarted_folder(
        data, tmp_path, sessions, monkeypatch):
    full = _trainer(_over(data, tmp_path / "full"))
    full.test()
    assert sessions == [(str(tmp_path / "full"), 0, False)]
    want = load_records(str(tmp_path / "full" / "records.jsonl"))
    assert len(want) == N

    cut = _over(data, tmp_path / "cut")
    _killed_after(trainer_base.TestTimeTrainer, cut, 4, monkeypatch)
    assert len(load_records(str(tmp_path / "cut" / "records.jsonl"))) == 4
    # a second run while a session holds the folder is refused, and leaves it as it was
    t = _trainer(cut)
    with t.run_session(t.output_dir()) as held:
        assert len(held.records) == 4
        with pytest.raises(RunLockedError):
            _trainer(cut).test()
    assert len(load_records(str(tmp_path / "cut" / "records.jsonl"))) == 4
    _trainer(cut).test()   # the resume
    _same(load_records(str(tmp_path / "cut" / "records.jsonl")), want)

    _fails_before_its_first_record(_over(data, tmp_path / "no" / "such" / "run"), sessions)
    assert not (tmp_path / "no").exists()


# ----------------------------------------------------------------------------- a stream
def test_a_stream_resumes_is_locked_and_leaves_no_unstarted_folder(
        data, tmp_path, sessions, monkeypatch):
    from argtca.trainers.zoo import StreamTrainer
    full = _trainer(_over(data, tmp_path / "full", "TDA"))
    assert isinstance(full, StreamTrainer)
    full.test()
    want = (tmp_path / "full" / "records.jsonl").read_text()
    assert len(want.splitlines()) == N

    cut = _over(data, tmp_path / "cut", "TDA")
    _killed_after(StreamTrainer, cut, 6, monkeypatch)   # its state saved at image 4
    t = _trainer(cut)
    with t.run_session(t.output_dir()) as held:
        assert len(held.records) == 6
        with pytest.raises(RunLockedError):
            _trainer(cut).test()
    _trainer(cut).test()   # resumes from the state at 4, makes 4 and 5 again
    # byte for byte: the stream's records are in stream order, never rewritten by index
    assert (tmp_path / "cut" / "records.jsonl").read_text() == want
    assert all(s[1:] == (0, False) for s in sessions) and len(sessions) == 5

    _fails_before_its_first_record(_over(data, tmp_path / "no" / "such" / "run", "TDA"),
                                   sessions)
    assert not (tmp_path / "no").exists()


# ----------------------------------------------------------------------------- torchrun
_WORKER = r'''
import os, sys, json
sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
import torch
torch.set_num_threads(1)
from conftest import tiny_cfg
import argtca.trainers
from argtca.registry import TRAINER_REGISTRY
from argtca.run_folder import RunSession
from argtca.trainers.base import TestTimeTrainer
from argtca.trainers.distributed import distributed_test
enter = RunSession.__enter__
def spy(self):
    print("SESSION", os.environ["RANK"], self.rank, self.rank_files, flush=True)
    return enter(self)
RunSession.__enter__ = spy
build = TestTimeTrainer.build_model
def build_model(self):
    if os.environ["RANK"] == os.environ.get("FAIL_RANK"):
        raise RuntimeError("this rank cannot build")
    return build(self)
TestTimeTrainer.build_model = build_model
cfg = tiny_cfg(**json.loads(sys.argv[1]))
cfg.freeze()
summary = distributed_test(TRAINER_REGISTRY.get("TPT")(cfg))
print("RANK", os.environ["RANK"], "N", summary["n"], flush=True)
'''


def _ranks(tmp_path, over, world=2, **env):
    """``over``'s run as the ranks of a CPU (gloo) torchrun job: their exit codes and outputs."""
    script = tmp_path / "worker.py"
    script.write_text(_WORKER.format(repo=str(REPO), tests=str(TESTS)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        e = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", **env)
        procs.append(subprocess.Popen([sys.executable, str(script), json.dumps(over)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    try:
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [p.returncode for p in procs], outs


def _job(data, out):
    # the ranks resume this process's config.json and hash argtca's code when they start, later
    # than this process did: an edit of argtca in between (a shared checkout) must not refuse it
    return dict(_over(data, out), **{"RUN.CODE_CHANGE": "allow"})


def test_a_torchrun_job_resumes_is_locked_and_leaves_no_unstarted_folder(data, tmp_path):
    one = _trainer(_over(data, tmp_path / "one"))
    one.test()
    want = load_records(str(tmp_path / "one" / "records.jsonl"))

    # a job stopped mid-way: each rank had written some of its images, rank 1 torn mid-line
    out = tmp_path / "two"
    t = _trainer(_job(data, out))
    with t.run_session(t.output_dir()):   # writes config.json, as the job's rank 0 did
        pass
    by_index = {r["index"]: r for r in want}
    for rank, done in ((0, [0, 2, 4]), (1, [1, 3])):
        with open(out / f"records.rank{rank}.jsonl", "w") as f:
            f.write("".join(json.dumps(by_index[i]) + "\n" for i in done))
            if rank == 1:
                f.write('{"index": 5, "pr')
    over = _job(data, out)
    # a second job while a session holds the folder: refused on rank 0 for every rank
    with t.run_session(t.output_dir()):
        rcs, outs = _ranks(tmp_path, over)
        assert rcs[0] != 0 and rcs[1] != 0, outs
        assert "being written by another run" in outs[0], outs
        assert "SESSION 0 0 True" in outs[0] and "SESSION 1 1 True" in outs[1], outs
    assert len(list(out.glob("records.rank*"))) == 2   # nothing lost
    # the resume: rank 0 folds the rank files in (the torn line dropped), the ranks do the rest
    rcs, outs = _ranks(tmp_path, over)
    assert rcs == [0, 0], outs
    assert "RANK 1 N 12" in outs[1]
    _same(load_records(str(out / "records.jsonl")), want)
    assert not list(out.glob("records.rank*"))

    # one rank fails to build before the first record: the job's folders are gone
    rcs, outs = _ranks(tmp_path, _over(data, tmp_path / "no" / "such" / "run"), FAIL_RANK="1")
    assert rcs[0] != 0 and rcs[1] != 0, outs
    assert "rank 1 of the torchrun job failed before the first image" in outs[0], outs
    assert not (tmp_path / "no").exists()
