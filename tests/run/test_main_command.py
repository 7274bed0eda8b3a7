"""`DATA=... bash scripts/argtca.sh caltech101 div` with no attribute file given: the TCA authors'
file is fetched (from a local HTTP server standing in for GitHub) and the run completes; without
DATA the error says how to get the data."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from helpers_http import FileServer as _Server

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "VERBOSE", "False", "TRAINER.ARGTCA.GAT.EPOCHS", "2"]


def _env(tmp_path, **extra):
    env = dict(os.environ, PYTHON=sys.executable, ARGTCA_CACHE=str(tmp_path / "cache"),
               ARGTCA_DOWNLOADS=str(tmp_path / "downloads"), **extra)
    env.pop("ARGTCA_OFFLINE", None)
    return env


def test_bare_command_fetches_the_attribute_file(tmp_path, shared_data):
    attrs_dir = shared_data / "tca_attributes"
    names = list(json.loads((attrs_dir / "Caltech101_2_V.json").read_text()))[:3]
    root = tmp_path / "data"
    base = root / "caltech-101"
    rows = []
    for label, name in enumerate(names):
        for i in range(2):
            rel = f"{name.replace(' ', '_')}/image_{i:04d}.jpg"
            p = base / "101_ObjectCategories" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            arr = np.random.default_rng(10 * label + i).integers(0, 256, (24, 24, 3),
                                                                 dtype=np.uint8)
            Image.fromarray(arr).save(p)
            rows.append([rel, label, name])
    (base / "split_zhou_Caltech101.json").write_text(json.dumps({"train": [], "val": [],
                                                                 "test": rows}))
    srv = _Server(attrs_dir)
    try:
        out = tmp_path / "out"
        r = subprocess.run(["bash", "scripts/argtca.sh", "caltech101", "div", *TINY], cwd=REPO,
                           env=_env(tmp_path, DATA=str(root), OUTPUT_DIR=str(out),
                                    ARGTCA_MIRROR=srv.url),
                           capture_output=True, text=True, timeout=600)
    finally:
        srv.close()
    assert r.returncode == 0, r.stdout + r.stderr
    assert srv.requests == ["/Caltech101_2_V.json"]
    cached = tmp_path / "downloads" / "attributes" / "Caltech101_2_V.json"
    assert cached.read_bytes() == (attrs_dir / "Caltech101_2_V.json").read_bytes()
    picks = json.loads((out / "phase1.json").read_text())["selected"]
    assert sorted(picks) == sorted(names) and all(len(v) == 2 for v in picks.values())
    assert len([l for l in (out / "records.jsonl").read_text().splitlines() if l.strip()]) == 6


def test_without_data_says_how_to_get_it(tmp_path):
    env = _env(tmp_path)
    env.pop("DATA", None)
    r = subprocess.run(["bash", "scripts/argtca.sh", "caltech101", "div"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    for part in ("$DATA is not set", "python -m argtca.data check caltech101",
                 "python -m argtca.data download caltech101", "python -m argtca.data list"):
        assert part in r.stderr, part
