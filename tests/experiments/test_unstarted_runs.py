"""A run that fails before its first record leaves no folder behind (the corrected command may
hash to another folder and would never reuse it); a folder that was there before, or that holds
records, is never removed."""
import json
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
