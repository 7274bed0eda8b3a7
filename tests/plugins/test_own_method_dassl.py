"""The docs' plug-in method (docs/own-method.md) under CoOp's real train.py: ``$ARGTCA_PLUGINS``
names the file, the one added import line registers it into Dassl with its config node, and its
records equal ``python -m argtca.run --plugin``'s. Skipped, saying why, without Dassl or CoOp's
sources (tests/dassl_plugin/test_dassl.py's conditions)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path


from helpers_dassl import COOP, coop_env

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "zs_temperature.py"
DEMO_YAML = str(REPO / "configs" / "datasets" / "demo.yaml")
# zeroshot.yaml states the input keys (interpolation, CLIP's mean/std) Dassl's defaults differ in
INPUTS_YAML = str(REPO / "configs" / "trainers" / "zeroshot.yaml")
SMALL = ["DATASET.NUM_IMAGES", "8", "USE_CUDA", "False", "DATALOADER.NUM_WORKERS", "0",
         "VERBOSE", "False", "TRAINER.ZS_TEMP.TEMPERATURE", "3.0"]


def _records(folder):
    recs = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines() if x]
    return sorted(recs, key=lambda r: r["index"])


def test_coop_train_py_runs_the_plugin_method(tmp_path):
    env = coop_env()
    plugin = tmp_path / "my_code" / EXAMPLE.name
    plugin.parent.mkdir()
    shutil.copyfile(EXAMPLE, plugin)
    argv = ["--seed", "1", "--trainer", "ZS_TEMP", "--dataset-config-file", DEMO_YAML,
            "--config-file", INPUTS_YAML, "--output-dir", str(tmp_path / "coop")] + SMALL
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"order": "after", "train_py": str(COOP / "train.py"),
                                "runs": [{"name": "zs_temp", "argv": argv}]}))
    p = subprocess.run([sys.executable, str(REPO / "tests" / "helpers_dassl.py"), str(spec),
                        str(tmp_path / "result.json")], cwd=tmp_path,
                       env=dict(env, ARGTCA_PLUGINS=str(plugin)), capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((tmp_path / "result.json").read_text())
    run = res["runs"]["zs_temp"]
    assert run["ok"], f"{run.get('type')}: {run.get('message')}\n{run.get('traceback')}"
    assert res["snapshots"]["argtca"]["TRAINER"]["ZS_TEMP"] == \
        "argtca.dassl_plugin.trainers.ZS_TEMP"
    # the same run through argtca's own command line
    q = subprocess.run([sys.executable, "-m", "argtca.run", "--plugin", str(plugin), "--seed", "1",
                        "--trainer", "zs_temp", "--dataset-config-file", DEMO_YAML,
                        "--output-dir", str(tmp_path / "ref")] + SMALL, cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert q.returncode == 0, q.stderr[-3000:]
    got, ref = _records(tmp_path / "coop"), _records(tmp_path / "ref")
    assert len(got) == len(ref) == 8
    for x, y in zip(got, ref):
        assert (x["index"], x["label"], x["pred"]) == (y["index"], y["label"], y["pred"])
        assert abs(x["conf"] - y["conf"]) <= 1e-6 and abs(x["p_label"] - y["p_label"]) <= 1e-6
    s = json.loads((tmp_path / "coop" / "summary.json").read_text())
    assert (s["method"], s["family"], s["trainer_cfg"]) == \
        ("zs_temp", "training-free", {"TRAINER.ZS_TEMP.TEMPERATURE": 3.0})
    # the plug-in file by content, as under argtca.run --plugin
    fp = json.loads((tmp_path / "coop" / "config.json").read_text())
    ref_fp = json.loads((tmp_path / "ref" / "config.json").read_text())
    assert fp["FILE_SHA256.PLUGIN.zs_temperature"] == ref_fp["FILE_SHA256.PLUGIN.zs_temperature"]
    assert fp["PROVIDER.ADAPTER"] == ref_fp["PROVIDER.ADAPTER"]
