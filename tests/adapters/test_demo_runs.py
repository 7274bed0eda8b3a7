"""Every method of the field the paper does not run (the catalogue's non-paper rows: the
training-free and online methods, R-TPT, RLCF and TTL, and any new one) runs end to end on the
embedded demo through ``python -m argtca.run`` with its own trainer config, far above chance,
and writes every metric."""
import json

import pytest

from argtca.run import main
from argtca.trainers.catalogue import catalogue, method_config_args, method_info
from conftest import REPO

METHODS = [m.method for m in catalogue() if not m.paper and m.rows]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method", METHODS)
def test_demo_run(method, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / method
    # 64 images (a class-balanced prefix: 4 per class) and 16 views keep each under a minute
    rc = main(["--dataset-config-file", "configs/datasets/demo.yaml",
               *method_config_args(method), "--output-dir", str(out),
               "DATASET.NUM_IMAGES", "64", "TTA.N_VIEWS", "16", "USE_CUDA", "False",
               "VERBOSE", "False", "DATALOADER.NUM_WORKERS", "0"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["n"] == 64 and s["trainer"] == method_info(method).trainer
    # 16 classes: chance is 6.25 %; stated margin: at least 5x chance
    assert s["accuracy"] >= 5 * 6.25, s
    for key in ("ece", "adaece", "mce", "nll", "brier"):
        assert 0 <= s[key] < float("inf"), (key, s)
