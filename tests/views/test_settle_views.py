"""The views pipeline is settled once, with the rest of the configuration: its name follows from
TTA.VIEWS_DEVICE x VIEWS_FLOAT x VIEWS_OPS on the run's device, a contradiction is refused when
the trainer is built (before any image), and the run records the pipeline it used."""
import json

import pytest
import torch

from argtca.config import ConfigError, get_cfg_default
from argtca.views.loader import PIPELINES, settle_views
from conftest import REPO


def _cfg(device="cpu", flt="auto", ops="auto"):
    cfg = get_cfg_default()
    cfg.TTA.VIEWS_DEVICE, cfg.TTA.VIEWS_FLOAT, cfg.TTA.VIEWS_OPS = device, flt, ops
    return cfg


@pytest.mark.parametrize("where,flt,ops,on,want", [
    ("cpu", "auto", "auto", "cpu", "pil"),                  # auto: workers on the CPU
    ("cpu", "auto", "auto", "cuda", "pil+device-ops"),       # auto: the engine on CUDA
    ("cpu", "engine", "workers", "cpu", "pil+device-float"),
    ("cpu", "engine", "auto", "cpu", "pil+device-ops"),
    ("cpu", "workers", "auto", "cuda", "pil"),
    ("cpu-fast", "engine", "engine", "cuda", "cpu-fast"),
    ("gpu", "auto", "auto", "cuda", "gpu"),
])
def test_the_pipeline_follows_from_the_three_keys(where, flt, ops, on, want):
    assert settle_views(_cfg(where, flt, ops), torch.device(on)) == want
    assert want in PIPELINES


def test_a_contradiction_is_refused_when_the_trainer_is_built(tmp_path):
    from argtca.run import main
    rc = main(["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"), "--trainer",
               "zeroshot", "--output-dir", str(tmp_path / "run"), "TTA.VIEWS_FLOAT", "workers",
               "TTA.VIEWS_OPS", "engine", "USE_CUDA", "False", "DATASET.NUM_IMAGES", "2",
               "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False"])
    assert rc == 2 and not (tmp_path / "run" / "records.jsonl").exists()
    rc = main(["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"), "--trainer",
               "zeroshot", "--output-dir", str(tmp_path / "ok"), "USE_CUDA", "False",
               "DATASET.NUM_IMAGES", "2", "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False"])
    assert rc == 0
    assert json.loads((tmp_path / "ok" / "summary.json").read_text())["views_pipeline"] == "pil"
    assert "* views: pil" in (tmp_path / "ok" / "log.txt").read_text()


def test_settling_is_one_place():
    with pytest.raises(ValueError, match="TTA.VIEWS_OPS=engine needs the float stage"):
        settle_views(_cfg("cpu", "workers", "engine"), torch.device("cpu"))
    assert issubclass(ConfigError, ValueError)
