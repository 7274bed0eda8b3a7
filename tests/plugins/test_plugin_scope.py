"""A plug-in's code enters only the runs it provides code to: adding a plug-in method to a
finished table re-runs none of the finished rows, and ``--methods all`` includes it."""
import os
import subprocess
import sys

from conftest import REPO

TINY = ["DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False"]
PLUGIN = str(REPO / "docs" / "examples" / "zs_temperature.py")


def _table1(out, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "argtca.experiments", "table1", "demo",
                           "--seeds", "1", "--quiet", "--out-root", str(out), *args, *TINY],
                          capture_output=True, text=True, env=env, cwd=str(out), timeout=900)


def test_adding_a_plugin_method_runs_only_its_rows(tmp_path):
    r = _table1(tmp_path, "--methods", "zeroshot,tda")
    assert r.returncode == 0, r.stderr
    r = _table1(tmp_path, "--methods", "all", "--plugin", PLUGIN, "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("[table1] ")]
    done = [ln for ln in lines if "finished (re-read):" in ln]
    todo = [ln for ln in lines if "would run:" in ln]
    # the two finished rows are found again with the plug-in loaded
    assert sorted(ln.split("finished (re-read): ")[1].split(" on ")[0] for ln in done) == \
        ["tda", "zeroshot"], done
    # "all" is every registered method, the loaded plug-in's too
    assert any("zs_temp" in ln for ln in todo), todo
    from argtca.trainers.catalogue import method_sets
    n_all = len(method_sets()["all"]) + 1                # + the plug-in's row
    assert len(done) + len(todo) == n_all, (len(done), len(todo), n_all)
    # a plug-in method's own run is the one that holds the plug-in's file by content
    r = _table1(tmp_path, "--methods", "zs_temp,zeroshot", "--plugin", PLUGIN)
    assert r.returncode == 0, r.stderr
    config = next(tmp_path.glob("zs_temp/demo/*/seed1/config.json")).read_text()
    assert "FILE_SHA256.PLUGIN.zs_temperature" in config
    assert "PLUGIN" not in next(tmp_path.glob("zeroshot/demo/*/seed1/config.json")).read_text()


def test_a_run_an_earlier_version_fingerprinted_with_a_plugin_is_still_found(tmp_path):
    """Before, every --plugin file entered every run of the command: such a finished folder (its
    config.json naming the plug-in, under another <hash8>) is found and re-read, not run again,
    and its config.json is brought up to date once, saying so."""
    import hashlib
    import json
    import shutil
    r = _table1(tmp_path, "--methods", "zeroshot")
    assert r.returncode == 0, r.stderr
    run = next(tmp_path.glob("zeroshot/demo/*/seed1"))
    config = json.loads((run / "config.json").read_text())
    config["FILE_SHA256.PLUGIN.zs_temperature"] = hashlib.sha256(
        open(PLUGIN, "rb").read()).hexdigest()
    (run / "config.json").write_text(json.dumps(config))
    old = run.parent.parent / "0ld0ld00" / "seed1"      # where the earlier version put it
    old.parent.mkdir()
    shutil.move(str(run), str(old))
    r = _table1(tmp_path, "--methods", "zeroshot", "--plugin", PLUGIN, "--dry-run")
    assert "finished (re-read): zeroshot" in r.stdout and "0 to run" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-m", "argtca.run", "--plugin", PLUGIN, "--trainer",
                        "zeroshot", "--dataset-config-file",
                        str(REPO / "configs/datasets/demo.yaml"), "--output-root",
                        str(tmp_path), *TINY], capture_output=True, text=True, cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600)
    assert r.returncode == 0, r.stderr
    assert str(old) in r.stdout and "dropped from it and its records kept" in r.stderr, r.stderr
    assert "PLUGIN" not in (old / "config.json").read_text()
    assert json.loads((old / "summary.json").read_text())["images_this_session"] == 0
