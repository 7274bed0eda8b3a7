"""Every ```bash block of README.md and docs/*.md runs, as written, on the embedded demo.

A block runs in a fresh folder of its own (the repository's ``scripts/`` and ``configs/`` linked
in, so ``bash scripts/...`` and ``configs/...`` mean what they mean in a checkout), with bash's
``-e -o pipefail``: any failing command fails the test, naming the block's file and line. It runs
offline (``ARGTCA_OFFLINE=1``) with the download cache and the demo cache in this session's tmp
folders. To stay fast, ``tests/docs/bin/python`` stands in for ``python`` and appends tiny
settings (``DOCS_TINY``) to the commands that run methods; nothing else in a block changes.
Blocks that need what CI has not are skipped with their reason (``docs_text``'s convention).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from docs_text import REPO, all_blocks

HERE = os.path.dirname(os.path.abspath(__file__))
# the same tiny settings as tests/experiments/test_experiments.py (TINY)
DOCS_TINY = ("DATASET.NUM_IMAGES 3 TTA.N_VIEWS 2 TRAINER.ARGTCA.GAT.EPOCHS 2 "
             "DATALOADER.NUM_WORKERS 0 USE_CUDA False VERBOSE False")
BASH = [b for b in all_blocks() if b.language == "bash"]


@pytest.fixture(scope="module")
def docs_env(tmp_path_factory):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATA", "PYTHON", "OUT_ROOT", "OPTS", "OUTPUT_DIR", "ATTRIBUTES", "SEED",
                        "PLUGINS", "ARGTCA_MIRROR", "FIXED_ALPHA", "FIXED_BETA")}
    env.update(PATH=os.path.join(HERE, "bin") + os.pathsep + env.get("PATH", ""),
               DOCS_PYTHON=sys.executable, DOCS_TINY=DOCS_TINY, ARGTCA_OFFLINE="1",
               PYTHONPATH=str(REPO) + (os.pathsep + env["PYTHONPATH"]
                                       if env.get("PYTHONPATH") else ""),
               # the demo images and the Phase-1 store: one cache for every block of the session
               ARGTCA_CACHE=os.environ.get("ARGTCA_CACHE")
               or str(tmp_path_factory.mktemp("argtca-cache")),
               ARGTCA_DOWNLOADS=str(tmp_path_factory.mktemp("downloads")),
               OMP_NUM_THREADS="1",
               # sweep.sh's own knobs (its header): one alpha and one beta point, not 4 + 4
               ALPHAS="10", BETAS="50")
    return env


@pytest.mark.parametrize("block", BASH, ids=[b.name for b in BASH])
def test_bash_block_runs(block, docs_env, tmp_path):
    if block.skip:
        pytest.skip(block.skip)
    for name in ("scripts", "configs"):
        (tmp_path / name).symlink_to(REPO / name)
    # the example files the docs show, where a reader has them: beside the commands
    for example in sorted((REPO / "docs" / "examples").glob("*.py")):
        (tmp_path / example.name).symlink_to(example)
    p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.source], cwd=tmp_path,
                       env=docs_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    assert p.returncode == 0, (f"{block.name}: the block failed (exit {p.returncode}):\n"
                               f"{block.source}\n--- output (last 60 lines) ---\n"
                               + "\n".join(p.stdout.splitlines()[-60:]))


def test_every_bash_block_is_run_or_says_why_not():
    """The convention holds: a bash block is runnable or carries a visible reason, and the
    runnable ones exist (the docs test is not vacuous)."""
    runnable = [b for b in BASH if not b.skip]
    # the README's demo, DEMO.md's runs, workflows.md's single runs and paper experiments
    assert len(runnable) >= 4, [b.name for b in runnable]
    assert any("scripts/argtca.sh demo div" in b.source for b in runnable
               if b.path.name == "README.md")
    assert all(b.skip.strip() for b in BASH if b.skip is not None)
