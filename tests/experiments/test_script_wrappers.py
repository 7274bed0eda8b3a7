"""scripts/sweep.sh and scripts/ablation.sh are the Python commands (``python -m
argtca.experiments sweep`` / ``table2``) for one dataset: their arguments and environment map onto
the command's, and their runs land in the folders every command shares."""
import os
import subprocess
import sys

from conftest import REPO
from helpers_data import make_caltech, write_attributes

TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "32", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
        "VERBOSE", "False", "TTA.N_VIEWS", "4", "TRAINER.ARGTCA.GAT.EPOCHS", "2"]


def _env(tmp_path, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
               ARGTCA_CACHE=str(tmp_path / "cache"), **kw)
    for k in ("OUTPUT_DIR", "SEED", "OPTS", "OUT_ROOT", "DATA", "ATTRIBUTES", "PLUGINS",
              "ALPHAS", "BETAS", "FIXED_ALPHA", "FIXED_BETA"):
        if k not in kw:
            env.pop(k, None)
    return env


def _argv_of(tmp_path, script, *args, **env):
    """The arguments the script hands to Python (a stub that only writes them down)."""
    log = tmp_path / "argv.txt"
    stub = tmp_path / "python"
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "{log}"\n')
    stub.chmod(0o755)
    p = subprocess.run(["bash", str(REPO / "scripts" / script), *args], cwd=tmp_path,
                       env=_env(tmp_path, PYTHON=str(stub), **env), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return log.read_text().splitlines()


def test_sweep_script_is_the_sweep_command(tmp_path):
    (tmp_path / "attrs.json").write_text("{}")
    argv = _argv_of(tmp_path, "sweep.sh", "caltech101", "div", "--dry-run", SEED="2",
                    ALPHAS="5 20", BETAS="15", FIXED_ALPHA="20", FIXED_BETA="25",
                    OUT_ROOT="rel", DATA="d", ATTRIBUTES="attrs.json", OPTS="TTA.N_VIEWS 8")
    assert argv == ["-m", "argtca.experiments", "sweep", "caltech101", "--selectors", "div",
                    "--seeds", "2", "--alphas", "5 20", "--betas", "15", "--fixed-alpha", "20",
                    "--fixed-beta", "25", "--out-root", f"{tmp_path}/rel", "--dry-run",
                    "TTA.N_VIEWS", "8", "DATASET.ATTRIBUTE_FILE", f"{tmp_path}/attrs.json"]
    # the documented defaults
    argv = _argv_of(tmp_path, "sweep.sh", "demo", "disc")
    assert argv == ["-m", "argtca.experiments", "sweep", "demo", "--selectors", "disc",
                    "--seeds", "1", "--alphas", "5 10 20 40", "--betas", "15 25 35 50",
                    "--fixed-alpha", "10", "--fixed-beta", "35", "--out-root",
                    f"{tmp_path}/output"]


def test_ablation_script_is_the_table2_command(tmp_path):
    argv = _argv_of(tmp_path, "ablation.sh", "caltech101", "TTA.N_VIEWS", "16", SEED="3",
                    OUT_ROOT="n16", OPTS="TTA.N_VIEWS 8")
    assert argv == ["-m", "argtca.experiments", "table2", "caltech101", "--seeds", "3",
                    "--out-root", f"{tmp_path}/n16", "TTA.N_VIEWS", "16", "TTA.N_VIEWS", "8"]
    assert _argv_of(tmp_path, "ablation.sh", "demo") == [
        "-m", "argtca.experiments", "table2", "demo", "--seeds", "1", "--out-root",
        f"{tmp_path}/output"]


def test_usage_and_odd_opts_are_one_clear_error(tmp_path):
    for script, args in (("sweep.sh", ["caltech101"]), ("ablation.sh", [])):
        p = subprocess.run(["bash", str(REPO / "scripts" / script), *args], cwd=tmp_path,
                           env=_env(tmp_path), capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith("usage:"), p.stderr
    p = subprocess.run(["bash", str(REPO / "scripts" / "sweep.sh"), "caltech101", "div"],
                       cwd=tmp_path, env=_env(tmp_path, OPTS="TTA.N_VIEWS"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "OPTS must be KEY VALUE pairs" in p.stderr


def test_sweep_script_runs_land_where_the_python_command_finds_them(tmp_path):
    data = make_caltech(tmp_path / "data")
    attrs = write_attributes(tmp_path / "attrs.json")
    env = _env(tmp_path, PYTHON=sys.executable, DATA=str(data), ATTRIBUTES=str(attrs),
               ALPHAS="10", BETAS="35", OUT_ROOT="out", OPTS=" ".join(TINY))
    p = subprocess.run(["bash", str(REPO / "scripts" / "sweep.sh"), "caltech101", "div"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    runs = sorted((tmp_path / "out").rglob("records.jsonl"))
    # one point (10, 35), in the shared layout <out-root>/argtca/<dataset>/<hash8>/seed1
    assert len(runs) == 1 and len((runs[0].read_text()).splitlines()) == 6
    rel = runs[0].parent.relative_to(tmp_path / "out").parts
    assert rel[:2] == ("argtca", "caltech101") and len(rel[2]) == 8 and rel[3] == "seed1"
    assert len(list((tmp_path / "out" / "report").glob("sweep-*/sweep.md"))) == 1
    # the Python command with the same settings finds that run finished
    p = subprocess.run([sys.executable, "-m", "argtca.experiments", "sweep", "caltech101",
                        "--root", str(data), "--selectors", "div", "--alphas", "10", "--betas",
                        "35", "--out-root", "out", "--dry-run", *TINY,
                        "DATASET.ATTRIBUTE_FILE", str(attrs)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "1 of 1 run(s) finished" in p.stdout
    assert f"-> out/{'/'.join(rel)} " in p.stdout
