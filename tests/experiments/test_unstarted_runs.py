"""A run that fails before its first record leaves no folder behind (the corrected command may
hash to another folder and would never reuse it); a folder that was there before, or that holds
records, is never removed."""
import json
import os
from pathlib import Path

import pytest

from argtca.run import main

REPO = Path(__file__).resolve().parents[2]
# ViT-B/16 with OpenAI's weights, not cached here (offline: ARGTCA_OFFLINE, tests/conftest.py)
NO_WEIGHTS = ["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
              "--config-file", str(REPO / "configs/trainers/tpt.yaml"),
              "MODEL.BACKBONE.NAME", "ViT-B/16", "MODEL.PRETRAINED", "openai",
              "INPUT.SIZE", "(224, 224)", "DATASET.NUM_IMAGES", "2", "USE_CUDA", "False",
              "DATALOADER.NUM_WORKERS", "0"]
TINY = ["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
        "--config-file", str(REPO / "configs/trainers/tpt.yaml"),
        "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "(32, 32)", "DATASET.NUM_IMAGES", "3", "TTA.N_VIEWS", "2",
        "USE_CUDA", "False", "DATALOADER.NUM_WORKERS", "0", "TTA.BATCH_IMAGES", "1"]


@pytest.fixture(autouse=True)
def empty_hf_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty_hf" / "hub"))


def _files(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_missing_weights_leave_no_folder(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["--output-root", str(out), *NO_WEIGHTS])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: MODEL.PRETRAINED openai: offline"), err
    # before: out/tpt/demo/<hash8>/{settings.json, seed1/{config.json, run.lock}}
    assert not out.exists()


def test_only_what_the_run_made_is_removed(tmp_path, capsys):
    out = tmp_path / "out"
    other = out / "tpt" / "demo" / "0123abcd" / "seed1"   # another experiment: untouched
    other.mkdir(parents=True)
    (other / "records.jsonl").write_text('{"index": 0}\n')
    before = _files(out)
    assert main(["--output-root", str(out), *NO_WEIGHTS]) == 2
    assert _files(out) == before
    # an explicit folder that was there before stays (empty as it was)
    mine = tmp_path / "given"
    mine.mkdir()
    assert main(["--output-dir", str(mine), *NO_WEIGHTS]) == 2
    assert mine.is_dir() and _files(mine) == []
    # an explicit folder the run made goes
    assert main(["--output-dir", str(tmp_path / "new" / "run"), *NO_WEIGHTS]) == 2
    assert not (tmp_path / "new").exists()
    capsys.readouterr()


def test_a_failure_after_the_first_record_keeps_the_folder(tmp_path, capsys, monkeypatch):
    from argtca.trainers.base import TestTimeTrainer

    def fail(self, records):
        raise RuntimeError("disk on fire")
    monkeypatch.setattr(TestTimeTrainer, "after_batch", fail)
    out = tmp_path / "out"
    assert main(["--output-root", str(out), *TINY]) == 2
    assert "disk on fire" in capsys.readouterr().err
    run = [p.parent for p in out.rglob("records.jsonl")]
    assert len(run) == 1
    recs = [json.loads(x) for x in (run[0] / "records.jsonl").read_text().splitlines()]
    assert [r["index"] for r in recs] == [0]          # the finished image is kept
    assert (run[0] / "config.json").is_file() and (run[0].parent / "settings.json").is_file()
    # the same command resumes it to the end
    monkeypatch.undo()
    assert main(["--output-root", str(out), *TINY]) == 0
    assert len((run[0] / "records.jsonl").read_text().splitlines()) == 3


# rank 1 of the job cannot build its model; rank 0 can (a problem of one node, e.g. its memory)
RANK1_FAILS = '''import os
from argtca.trainers.base import TestTimeTrainer
_build = TestTimeTrainer.build_model


def build_model(self):
    if os.environ.get("RANK") == "1":
        raise RuntimeError("rank one cannot build")
    return _build(self)
TestTimeTrainer.build_model = build_model
'''


def _torchrun(tmp_path, argv, world=2):
    """``python -m argtca.run ARGV`` as the ranks of a CPU (gloo) torchrun job; their exit codes
    and outputs."""
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   HF_HUB_CACHE=str(tmp_path / "empty_hf" / "hub"),
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        procs.append(subprocess.Popen([sys.executable, "-m", "argtca.run", *argv], env=env,
                                      cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [p.returncode for p in procs], outs


def test_torchrun_job_failing_before_its_first_record_leaves_no_folder(tmp_path):
    """The distributed path keeps the rule of the one-process run: weights missing on every
    rank, or one rank alone failing to build, and the job's folders are gone (no rank waits for
    the one that failed); a job that runs leaves its folder and the experiment's settings.json."""
    out = tmp_path / "out"
    rcs, outs = _torchrun(tmp_path, ["--output-root", str(out), *NO_WEIGHTS])
    assert rcs == [2, 2], outs
    assert all("MODEL.PRETRAINED openai: offline" in o for o in outs), outs
    assert not out.exists(), _files(out)
    plugin = tmp_path / "rank1_fails.py"
    plugin.write_text(RANK1_FAILS)
    rcs, outs = _torchrun(tmp_path, ["--plugin", str(plugin), "--output-root", str(out), *TINY])
    assert rcs[0] != 0 and rcs[1] != 0, outs
    assert "rank one cannot build" in outs[1]
    assert "rank 1 of the torchrun job failed before the first image" in outs[0], outs
    assert not out.exists(), _files(out)
    # the same job without the failing rank runs, and its folders stay
    rcs, outs = _torchrun(tmp_path, ["--output-root", str(out), *TINY])
    assert rcs == [0, 0], outs
    run = [p.parent for p in out.rglob("summary.json")]
    assert len(run) == 1 and (run[0].parent / "settings.json").is_file()
    assert len((run[0] / "records.jsonl").read_text().splitlines()) == 3
