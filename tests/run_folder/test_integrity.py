"""A run folder's records provably belong to its data and settings (issue 8): the fingerprint
covers the test set, records are checked when read, one writer per folder, non-finite predictions
are never written, and every failure is one line with an exit code (2 bad input, 130 Ctrl-C).
Real processes for the concurrent writer, Ctrl-C, SIGKILL and a full disk."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from argtca.run_folder import (RunFolderError, check_records, load_records, write_records)
from argtca.run import main
from helpers_data import make_caltech
from helpers_procs import reap, sigint_default

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "32", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
        "VERBOSE", "False"]


def _args(root, out, method="tpt", *extra, views=8):
    return (["--root", str(root), "--output-dir", str(out), "--seed", "1",
             "--dataset-config-file", "configs/datasets/caltech101.yaml",
             "--config-file", f"configs/trainers/{method}.yaml"] + TINY
            + ["TTA.N_VIEWS", str(views)] + list(extra))


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(REPO)


@pytest.fixture
def data(tmp_path):
    return make_caltech(tmp_path / "data")


def _records(out):
    return [json.loads(line) for line in (Path(out) / "records.jsonl").read_text().splitlines()
            if line.strip()]


def _split_path(root):
    return Path(root) / "caltech-101" / "split_zhou_Caltech101.json"


def _err_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# ------------------------------------------------------------------------- fingerprint (3, 4)
def test_rewritten_split_file_is_refused_not_reused(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(data, out)) == 0
    fp = json.loads((out / "config.json").read_text())
    assert fp["TEST_SET.N_IMAGES"] == 6 and len(fp["TEST_SET.ITEMS_SHA256"]) == 16
    before = (out / "records.jsonl").read_text()
    # same root, same config, another test set: images 0 and 2 (other classes) swap places
    split = json.loads(_split_path(data).read_text())
    split["test"][0], split["test"][2] = split["test"][2], split["test"][0]
    _split_path(data).write_text(json.dumps(split))
    capsys.readouterr()
    assert main(_args(data, out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "test set changed" in err[0]
    assert "TEST_SET.ITEMS_SHA256" in err[0] and str(out) in err[0]
    assert (out / "records.jsonl").read_text() == before     # finished work untouched


def test_each_reused_record_must_be_the_datasets_item(data, tmp_path, capsys):
    """An older config.json without the test-set keys is accepted, but every reused record is
    checked against the dataset's item at its index."""
    out = tmp_path / "run"
    assert main(_args(data, out)) == 0
    fp = json.loads((out / "config.json").read_text())
    legacy = {k: v for k, v in fp.items() if not k.startswith("TEST_SET.")}
    (out / "config.json").write_text(json.dumps(legacy))
    # the upgraded fingerprint is written back when the records match
    assert main(_args(data, out)) == 0
    assert json.loads((out / "config.json").read_text()) == fp
    # records that belong to other images: index 1 now holds the path of image 4
    recs = _records(out)
    recs[1]["path"], recs[1]["label"] = recs[4]["path"], recs[4]["label"]
    write_records(str(out / "records.jsonl"), recs[:3])
    (out / "config.json").write_text(json.dumps(legacy))
    capsys.readouterr()
    assert main(_args(data, out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "record of image 1" in err[0] and "test set changed" in err[0]
    assert Path(recs[4]["path"]).name in err[0]


def test_records_without_config_json_are_refused(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(data, out)) == 0
    (out / "config.json").unlink()
    before = (out / "records.jsonl").read_text()
    capsys.readouterr()
    assert main(_args(data, out, "tpt", "TTA.LR", "0.01")) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "config.json" in err[0] and "missing" in err[0]
    assert "start over" in err[0]
    assert (out / "records.jsonl").read_text() == before and not (out / "config.json").exists()


def test_corrupt_config_json_and_summary_json(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(data, out)) == 0
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text('{"accuracy": 1')     # the run re-derives it from records
    assert main(_args(data, out)) == 0
    assert json.loads((out / "summary.json").read_text())["accuracy"] == summary["accuracy"]
    (out / "config.json").write_bytes(b'{"SEED": 1,')
    capsys.readouterr()
    assert main(_args(data, out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "config.json" in err[0] and "not valid JSON" in err[0]


# ------------------------------------------------------------------------- records when read
def _rec(i, pred=0, label=0, conf=0.5, path=None, **more):
    return json.dumps({"index": i, "path": path or f"img{i}.jpg", "label": label, "pred": pred,
                       "conf": conf, **more})


def test_torn_last_line_is_repaired_garbage_elsewhere_is_an_error(tmp_path):
    p = tmp_path / "records.jsonl"
    p.write_text(_rec(0) + "\n" + _rec(1) + "\n" + '{"index": 2, "pa')
    assert [r["index"] for r in load_records(str(p))] == [0, 1]
    assert p.read_text() == _rec(0) + "\n" + _rec(1) + "\n"              # repaired
    # a complete record that lost only its newline is kept (and the newline restored)
    p.write_text(_rec(0) + "\n" + _rec(1))
    assert [r["index"] for r in load_records(str(p))] == [0, 1]
    assert p.read_text().endswith("}\n")
    # garbage in the middle: an error naming the line, nothing rewritten
    bad = _rec(0) + "\nhello world\n" + _rec(1) + "\n"
    p.write_text(bad)
    with pytest.raises(RunFolderError, match=r"records.jsonl:2: not a record"):
        load_records(str(p))
    assert p.read_text() == bad
    # a JSON line that is not a record, even as the last complete line
    p.write_text(_rec(0) + "\n" + '{"index": 1, "conf": 0.5}\n')
    with pytest.raises(RunFolderError, match=r":2: not a record \(missing pred, label\)"):
        load_records(str(p))
    p.write_text(_rec(0) + "\n" + '{"index": "1", "pred": 0, "label": 0, "conf": 0.5}\n')
    with pytest.raises(RunFolderError, match="index='1' is not an integer"):
        load_records(str(p))


def test_duplicates_are_deduplicated_or_refused(tmp_path):
    p = tmp_path / "records.jsonl"
    p.write_text("\n".join([_rec(0), _rec(1, conf=0.7), _rec(0), _rec(1, conf=0.7 + 1e-7)])
                 + "\n")
    assert [(r["index"], r["conf"]) for r in load_records(str(p))] == [(0, 0.5), (1, 0.7)]
    assert len(p.read_text().splitlines()) == 2                      # file de-duplicated
    p.write_text("\n".join([_rec(0), _rec(1), _rec(0, pred=2)]) + "\n")
    with pytest.raises(RunFolderError, match="index 0 is recorded twice with different results"):
        load_records(str(p))


def test_non_finite_confidence_is_refused_when_read(tmp_path):
    """Every number the metrics read (conf, p_label, brier): a NaN or infinity, or one out of
    its range, is refused when the records are read (a resume), naming the line."""
    p = tmp_path / "records.jsonl"
    for key, value, says in (("conf", float("nan"), "conf=nan is not a finite number"),
                             ("p_label", float("inf"), "p_label=inf is not a finite number"),
                             ("brier", float("-inf"), "brier=-inf is not a finite number"),
                             ("conf", 1.25, r"conf=1.25 is outside \[0, 1\]"),
                             ("brier", 2.5, r"brier=2.5 is outside \[0, 2\]")):
        p.write_text(_rec(0) + "\n" + _rec(1, **{key: value}) + "\n")
        with pytest.raises(RunFolderError, match=r"records.jsonl:2: image index 1 \(img1.jpg\): "
                                                 + says):
            load_records(str(p))
    p.write_text(_rec(0, p_label=0.5, brier=1.5) + "\n" + _rec(1, p_label=1.0, brier=2.0) + "\n")
    assert len(load_records(str(p))) == 2   # the ends of the ranges are numbers


def test_check_records_index_range_path_and_label():
    from argtca.datasets.base import DatasetBase, Datum
    ds = DatasetBase([Datum("/data/c/a/1.jpg", 0, "a"), Datum("/data/c/b/2.jpg", 1, "b")],
                     ["a", "b"], root="/data")
    ok = [{"index": 0, "path": "/data/c/a/1.jpg", "label": 0},
          {"index": 1, "path": "/elsewhere/c/b/2.jpg", "label": 1}]    # data folder moved: ok
    check_records(ok, ds, "r.jsonl")
    with pytest.raises(RunFolderError, match="index 2 is outside the test set of 2"):
        check_records([{"index": 2, "path": "x", "label": 0}], ds, "r.jsonl")
    with pytest.raises(RunFolderError, match="record of image 1"):
        check_records([{"index": 1, "path": "/data/c/b/2.jpg", "label": 0}], ds, "r.jsonl")
    with pytest.raises(RunFolderError, match="record of image 0"):
        check_records([{"index": 0, "path": "/data/c/b/2.jpg", "label": 0}], ds, "r.jsonl")


def test_garbage_record_line_through_the_cli(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(data, out)) == 0
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines[:2] + ["<<<merge conflict>>>"] + lines[2:])
                                       + "\n")
    capsys.readouterr()
    assert main(_args(data, out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "records.jsonl:3: not a record" in err[0]


# ------------------------------------------------------------------------- non-finite (7)
@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_non_finite_prediction_is_refused_before_writing(data, tmp_path, capsys, engine):
    """One AdamW step of size 1e30 from a finite loss: the prediction is NaN; nothing recorded."""
    out = tmp_path / engine
    rc = main(_args(data, out, "tpt", "TTA.LR", "1e30", "TTA.ENGINE", engine,
                    "TTA.BATCH_IMAGES", "2"))
    err = _err_lines(capsys)
    assert rc == 2 and len(err) == 1
    assert "non-finite prediction on image" in err[0] and ".jpg" in err[0]
    assert "TTA.LR=1e+30" in err[0] and "TTA.STEPS=1" in err[0]
    assert not (out / "records.jsonl").exists() or _records(out) == []
    # the folder is not poisoned: the same folder with a sane setting is refused only for the
    # changed key, and a fresh folder runs
    assert main(_args(data, tmp_path / "sane", "tpt", "TTA.ENGINE", engine)) == 0


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_non_finite_tuning_loss_names_image_terms_and_settings(data, tmp_path, engine,
                                                               one_thread, monkeypatch):
    from argtca.engine import objectives
    from argtca.engine.reference import NonFiniteLossError
    from argtca.registry import TRAINER_REGISTRY
    import argtca.trainers  # noqa: F401
    from conftest import tiny_cfg
    # a regulariser that overflows (as an extreme weight or fp16 would; the config refuses
    # non-finite weights at load time, so the term itself is made to overflow)
    monkeypatch.setattr(objectives.CTPTObjective, "regularizer",
                        lambda self, text: -objectives.atfd(text) * float("inf"))
    cfg = tiny_cfg(**{"TRAINER.NAME": "CTPT", "DATASET.NAME": "Caltech101",
                      "DATASET.ROOT": str(data), "OUTPUT_DIR": str(tmp_path / "o"),
                      "TTA.N_VIEWS": 4, "TTA.ENGINE": engine, "TTA.BATCH_IMAGES": 3})
    cfg.freeze()
    with pytest.raises(NonFiniteLossError) as e:
        TRAINER_REGISTRY.get("CTPT")(cfg).test()
    msg = str(e.value)
    assert "image_0000.jpg" in msg and "red_apple" in msg                # the first image
    assert "at tuning step 1" in msg and "entropy term" in msg and "regulariser -inf" in msg
    assert "LAMBDA=50.0" in msg and "TTA.LR=" in msg
    assert not (tmp_path / "o" / "records.jsonl").exists() or _records(tmp_path / "o") == []


# ------------------------------------------------------------------------- real processes
def _popen(args, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    kw = dict(dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE), **kw)
    return subprocess.Popen([sys.executable, "-c", "import sys, torch; torch.set_num_threads(1);"
                             " from argtca.run import main; sys.exit(main(sys.argv[1:]))", *args],
                            cwd=REPO, env=env, text=True, **kw)


def _wait_for_records(out, n, proc, timeout=300):
    t0 = time.time()
    rec = Path(out) / "records.jsonl"
    while time.time() - t0 < timeout:
        if rec.is_file() and rec.read_text().count("\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended early: {proc.communicate()}")
        time.sleep(0.005)
    raise AssertionError("no records in time")


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """30 images (a run lasts seconds) and their uninterrupted run, shared by the tests below."""
    import torch
    tmp = tmp_path_factory.mktemp("big")
    data = make_caltech(tmp / "data", per_class=10)
    n = torch.get_num_threads()
    torch.set_num_threads(1)     # as the subprocesses (OMP_NUM_THREADS=1): identical floats
    try:
        assert main(_args(data, tmp / "full", views=16)) == 0
    finally:
        torch.set_num_threads(n)
    return data, tmp / "full"


def _assert_same_run(a, b):
    ra, rb = _records(a), sorted(_records(b), key=lambda r: r["index"])
    assert [r["index"] for r in rb] == list(range(len(ra)))
    assert ra == rb
    sa, sb = (json.loads((Path(d) / "summary.json").read_text()) for d in (a, b))
    for k in ("n", "accuracy", "ece", "adaece", "mce", "nll", "brier", "config_hash"):
        assert sa[k] == sb[k], k


def test_second_writer_refused_and_ctrl_c_is_one_line(big, tmp_path, one_thread):
    big_data, full = big
    out = tmp_path / "run"
    # Ctrl-C must reach A whatever this process inherited (a background job ignores SIGINT)
    a = _popen(_args(big_data, out, views=16), preexec_fn=sigint_default)
    b = None
    try:
        _wait_for_records(out, 1, a)
        a.send_signal(signal.SIGSTOP)             # A holds the lock, mid-run
        lock = json.loads((out / "run.lock").read_text())
        assert lock["pid"] == a.pid
        b = _popen(_args(big_data, out, views=16))
        _, err_b = b.communicate(timeout=300)
        assert b.returncode == 2, err_b
        lines = [x for x in err_b.splitlines() if x.strip() and "WARNING" not in x]
        assert len(lines) == 1 and f"pid {a.pid}" in lines[0] and "another run" in lines[0]
        assert lock["host"] in lines[0] and f"--output-dir {out}" in lines[0]
        a.send_signal(signal.SIGINT)              # Ctrl-C, delivered when A continues
        a.send_signal(signal.SIGCONT)
        _, err_a = a.communicate(timeout=300)
    finally:   # neither run outlives the test (SIGKILL ends a stopped process too)
        reap([a, b])
    assert a.returncode == 130, err_a
    lines = [x for x in err_a.splitlines() if x.strip() and "WARNING" not in x]
    assert len(lines) == 1 and "Traceback" not in err_a
    assert lines[0].startswith("interrupted:") and "resume" in lines[0]
    assert f"--output-dir {out}" in lines[0] and str(out / "records.jsonl") in lines[0]
    n = len(_records(out))
    assert 1 <= n < 30 and not (out / "summary.json").exists()
    assert len({r["index"] for r in _records(out)}) == n                 # one line per image
    assert main(_args(big_data, out, views=16)) == 0                      # resumes
    _assert_same_run(full, out)


def test_sigkill_mid_run_then_resume_is_exact(big, tmp_path, one_thread):
    big_data, full = big
    out = tmp_path / "run"
    p = _popen(_args(big_data, out, views=16))
    try:
        _wait_for_records(out, 2, p)
    finally:
        p.kill()                                  # SIGKILL: no cleanup, the lock file stays
        p.communicate()
    assert p.returncode == -signal.SIGKILL
    assert json.loads((out / "run.lock").read_text())["pid"] == p.pid
    assert 2 <= len(_records(out)) < 30 and not (out / "summary.json").exists()
    with open(out / "records.jsonl", "a") as f:
        f.write('{"index": 29, "pa')              # as if killed mid-write
    assert main(_args(big_data, out, views=16)) == 0    # the dead owner's lock is gone
    _assert_same_run(full, out)


def test_full_disk_is_one_line_and_keeps_finished_records(big, tmp_path, one_thread):
    """A file-size limit (RLIMIT_FSIZE) makes writes fail as on a full disk (EFBIG)."""
    import resource
    big_data, full = big
    out = tmp_path / "run"
    out.mkdir()
    # config.json and run.lock fit, records.jsonl reaches the limit after a few images
    size = len((full / "config.json").read_bytes()) + 400

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    p = _popen(_args(big_data, out, views=16), preexec_fn=limit)
    _, err = p.communicate(timeout=120)
    lines = [x for x in err.splitlines() if x.strip() and "WARNING" not in x]
    assert p.returncode == 2, err
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith(f"error: cannot write {out / 'records.jsonl'}")
    assert "resume" in lines[0]
    kept = load_records(str(out / "records.jsonl"))
    assert 1 <= len(kept) < 30
    assert main(_args(big_data, out, views=16)) == 0
    _assert_same_run(full, out)


# ------------------------------------------------------------------------- exit status
def test_unwritable_output_folder_is_one_line(data, capsys):
    """/sys refuses new folders even to root (a read-only folder does not stop root)."""
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("no /sys here")
    assert main(_args(data, "/sys/argtca_test_out")) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("error: cannot write /sys/argtca_test_out")
    assert "writable" in err[0]


def test_internal_error_exit_1_with_traceback(data, tmp_path, capsys, monkeypatch):
    from argtca.engine import reference

    def broken(self, views, paths=None):
        return 1 / 0
    monkeypatch.setattr(reference.ReferenceEngine, "__call__", broken)
    assert main(_args(data, tmp_path / "o")) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert err.strip().splitlines()[-1].startswith("error: internal error (ZeroDivisionError")


def test_a_cuda_folder_is_not_resumed_on_the_cpu(tmp_path):
    """The fingerprint records the device type (fp16 autocast on CUDA, fp32 on the CPU): a folder
    started on one is refused on the other, naming RUN.DEVICE_TYPE."""
    from argtca.config import get_cfg_default
    from argtca.datasets.base import DatasetBase, Datum
    from argtca.run_folder import (ConfigMismatchError, check_or_write_fingerprint,
                                   run_fingerprint)
    ds = DatasetBase([Datum("/d/a.jpg", 0, "a"), Datum("/d/b.jpg", 1, "b")], ["a", "b"], root="/d")
    cfg = get_cfg_default()
    out = str(tmp_path / "run")
    os.makedirs(out)
    check_or_write_fingerprint(out, run_fingerprint(cfg, ds, "cuda"))
    write_records(os.path.join(out, "records.jsonl"),
                  [{"index": 0, "path": "/d/a.jpg", "label": 0, "pred": 0, "conf": 0.9}])
    check_or_write_fingerprint(out, run_fingerprint(cfg, ds, "cuda"))   # same device: accepted
    with pytest.raises(ConfigMismatchError, match="RUN.DEVICE_TYPE"):
        check_or_write_fingerprint(out, run_fingerprint(cfg, ds, "cpu"))


# ------------------------------------------------------------------------- the lock is the run's
@pytest.mark.parametrize("method", ["tpt", "argtca"])
def test_sigkill_with_loader_workers_resumes_at_once(big, tmp_path, one_thread, method):
    """Loader workers fork after the lock is taken; killed with SIGKILL, the main process leaves
    them alive for a few seconds. The lock must not outlive the main process: the resume, started
    at once, runs and ends with exactly the uninterrupted run's records."""
    from helpers_data import write_attributes
    big_data, full = big
    extra = []
    if method == "argtca":
        attrs = write_attributes(tmp_path / "attrs.json")
        extra = ["DATASET.ATTRIBUTE_FILE", str(attrs), "TRAINER.ARGTCA.GAT.EPOCHS", "2"]
        full = tmp_path / "full"
        assert main(_args(big_data, full, method, *extra, views=16)) == 0
    workers = ["DATALOADER.NUM_WORKERS", "2"]
    out = tmp_path / "run"
    # output to a file: reading a pipe to its end would wait for the workers holding it
    with open(tmp_path / "log.txt", "w") as log:
        p = _popen(_args(big_data, out, method, *extra, *workers, views=16), stdout=log,
                   stderr=log)
    try:
        _wait_for_records(out, 2, p)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == -signal.SIGKILL
    assert json.loads((out / "run.lock").read_text())["pid"] == p.pid
    assert main(_args(big_data, out, method, *extra, *workers, views=16)) == 0
    _assert_same_run(full, out)


def _hold_lock(path):
    """A process holding an OS lock on ``path`` (as a loader worker of an older argtca did)."""
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_lock_named_after_a_dead_run_is_taken_over_a_live_one_refused(tmp_path, capsys):
    import socket
    from argtca.run_folder import RunLock, RunLockedError
    out = tmp_path / "run"
    out.mkdir()
    lock = out / "run.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = _hold_lock(lock)
    live = None
    try:
        lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(),
                                    "started": "earlier", "command": "python -m argtca.run"}))
        with RunLock(str(out)):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
        err = capsys.readouterr().err
        assert f"pid {dead.pid}" in err and "no longer running" in err and "taking over" in err
        # a holder that is alive is never taken over
        live = _hold_lock(lock)
        lock.write_text(json.dumps({"pid": live.pid, "host": socket.gethostname(),
                                    "started": "now", "command": "python -m argtca.run"}))
        with pytest.raises(RunLockedError, match=f"another run \\(pid {live.pid} on "):
            RunLock(str(out)).acquire()
        # another host's run: its pid means nothing here, refused
        lock.write_text(json.dumps({"pid": dead.pid, "host": "elsewhere", "started": "now",
                                    "command": "x"}))
        with pytest.raises(RunLockedError, match=f"pid {dead.pid} on elsewhere"):
            RunLock(str(out)).acquire()
    finally:
        for p in (orphan, live):
            if p is not None:
                p.kill()
                p.wait()


def test_a_key_added_to_the_config_later_at_its_default_does_not_block_resume(tmp_path):
    """A folder written before a config key existed (its config.json lacks the key) resumes when
    the key is at its default; a non-default value is a different configuration."""
    from argtca.config import get_cfg_default
    from argtca.run_folder import (ConfigMismatchError, check_or_write_fingerprint,
                                   result_fingerprint)
    cfg = get_cfg_default()
    fp = result_fingerprint(cfg)
    out = tmp_path / "run"
    out.mkdir()
    older = {k: v for k, v in json.loads(json.dumps(fp, default=str)).items()
             if not k.startswith("TTA.FAST.")}
    assert len(older) < len(fp)                       # the TTA.FAST.* keys are the new ones
    (out / "config.json").write_text(json.dumps(older))
    (out / "records.jsonl").write_text(
        json.dumps({"index": 0, "path": "a.jpg", "label": 0, "pred": 0, "conf": 0.5}) + "\n")
    check_or_write_fingerprint(str(out), fp)          # resumes, and records the keys from now on
    assert json.loads((out / "config.json").read_text())["TTA.FAST.HALF_IMAGE"] is True
    (out / "config.json").write_text(json.dumps(older))
    cfg.defrost()
    cfg.TTA.FAST.HALF_IMAGE = not cfg.TTA.FAST.HALF_IMAGE
    with pytest.raises(ConfigMismatchError, match="TTA.FAST.HALF_IMAGE"):
        check_or_write_fingerprint(str(out), result_fingerprint(cfg))
