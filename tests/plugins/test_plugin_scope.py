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
