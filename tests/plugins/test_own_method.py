"""Your own method as a plug-in (docs/own-method.md): the file the page shows, copied to a folder
of the test's own, runs through table1 and the report, ``python -m argtca.run``,
``scripts/baseline.sh`` and CoOp's train.py with no other change, and its numbers are checked
against zero-shot CLIP's records.

The method is "zero-shot CLIP at temperature T" (T = 2 by default): softmax(z / T) of the zero-shot
logits z. So, image by image, with p = softmax(z) the zero-shot probabilities and q = softmax(z/2):
the prediction is the same (argmax z), and q_i / q_j = sqrt(p_i / p_j) for any two classes, i.e.
q = sqrt(p) / S with S = sum_k sqrt(p_k); sum_k q_k^2 = 1 / S^2, which the record's Brier score
gives (brier = sum q^2 - 2 q_label + 1). At T = 1 the method must reproduce zero-shot's records."""
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "zs_temperature.py"
TINY = ["DATASET.NUM_IMAGES", "16", "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False",
        "USE_CUDA", "False"]


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]]
                                                       if env.get("PYTHONPATH") else []))
    env["OMP_NUM_THREADS"] = "1"
    env.pop("ARGTCA_DEBUG", None)
    env.update(extra)
    return env


def _run(argv, cwd, **env):
    return subprocess.run(argv, cwd=cwd, env=_env(**env), capture_output=True, text=True,
                          timeout=900)


def _records(folder):
    recs = [json.loads(x) for x in (Path(folder) / "records.jsonl").read_text().splitlines()
            if x.strip()]
    return sorted(recs, key=lambda r: r["index"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """table1 on the demo (zero-shot CLIP and the plug-in), then the plug-in at T = 1."""
    base = tmp_path_factory.mktemp("own_method")
    mine = base / "my_code"
    mine.mkdir()
    plugin = mine / EXAMPLE.name
    shutil.copyfile(EXAMPLE, plugin)            # the exact file the page shows
    out = base / "out"
    p = _run([sys.executable, "-m", "argtca.experiments", "table1", "demo", "--seeds", "1",
              "--methods", "zeroshot,zs_temp", "--plugin", str(plugin), "--out-root", str(out),
              "--quiet"] + TINY, cwd=base)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    folders = {}
    for line in p.stdout.splitlines():
        if " on demo, seed 1 -> " in line:
            name = line.split("] ", 1)[1].split(" on demo")[0].split(" ", 1)[-1]
            folders[name] = Path(line.rsplit(" -> ", 1)[1].split(" (")[0])
    t1 = base / "t1"
    q = _run([sys.executable, "-m", "argtca.run", "--plugin", str(plugin), "--trainer", "zs_temp",
              "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"), "--output-dir",
              str(t1), "TRAINER.ZS_TEMP.TEMPERATURE", "1.0"] + TINY, cwd=base)
    assert q.returncode == 0, q.stderr[-3000:]
    return {"base": base, "plugin": plugin, "out": out, "stdout": p.stdout, "folders": folders,
            "t1": t1}


def test_table1_runs_it_and_the_report_shows_it_under_its_family(runs):
    f = runs["folders"]
    assert set(f) == {"zeroshot", "zs_temp"}
    s = json.loads((f["zs_temp"] / "summary.json").read_text())
    assert (s["method"], s["family"], s["label"], s["trainer"]) == \
        ("zs_temp", "training-free", "Zero-shot CLIP, T=2", "ZS_TEMP")
    assert s["trainer_cfg"] == {"TRAINER.ZS_TEMP.TEMPERATURE": 2.0}   # its node, declared by it
    table = next((runs["out"] / "report").glob("table1-*/table.md")).read_text()
    rows = [r for r in table.splitlines() if r.startswith("|")]
    heads = [i for i, r in enumerate(rows) if r.startswith("| *")]
    groups = {rows[i].split("*")[1]: rows[i + 1:j] for i, j in zip(heads, heads[1:] + [None])}
    assert list(groups) == ["Zero-shot", "Training-free"]   # the families' order
    assert groups["Training-free"][0].startswith(
        "| Zero-shot CLIP, T=2 (plug-in zs_temperature) | Acc |")
    assert groups["Zero-shot"][0].startswith("| Zero-shot CLIP | Acc |")


def test_its_numbers_are_zero_shot_at_temperature_two(runs):
    zs, mine = _records(runs["folders"]["zeroshot"]), _records(runs["folders"]["zs_temp"])
    assert len(zs) == len(mine) == 16
    assert [r["index"] for r in zs] == [r["index"] for r in mine]
    # temperature does not move the argmax: the same predictions, the same accuracy
    assert [r["pred"] for r in zs] == [r["pred"] for r in mine]
    acc = [json.loads((runs["folders"][m] / "summary.json").read_text())["accuracy"]
           for m in ("zeroshot", "zs_temp")]
    assert acc[0] == acc[1]
    assert any(r["pred"] != r["label"] for r in zs)   # the ratio check below is not 1 == 1 only
    for z, q in zip(zs, mine):
        # q_pred / q_label = sqrt(p_pred / p_label)
        assert q["conf"] / q["p_label"] == pytest.approx(math.sqrt(z["conf"] / z["p_label"]),
                                                         rel=1e-4)
        # q = sqrt(p) / S, 1 / S^2 = sum q^2 = brier - 1 + 2 q_label
        inv_s2 = q["brier"] - 1 + 2 * q["p_label"]
        assert q["conf"] == pytest.approx(math.sqrt(z["conf"] * inv_s2), rel=1e-4)
        assert q["p_label"] == pytest.approx(math.sqrt(z["p_label"] * inv_s2), rel=1e-4)
        assert q["conf"] < z["conf"] or z["conf"] > 0.999   # flatter (16 classes)


def test_at_temperature_one_it_is_zero_shot_clip(runs):
    zs, t1 = _records(runs["folders"]["zeroshot"]), _records(runs["t1"])
    for z, q in zip(zs, t1):
        assert (z["index"], z["pred"]) == (q["index"], q["pred"])
        assert q["conf"] == pytest.approx(z["conf"], abs=1e-5)
        assert q["p_label"] == pytest.approx(z["p_label"], abs=1e-5)


def test_it_is_in_the_fingerprint_by_content(runs):
    fp = json.loads((runs["folders"]["zs_temp"] / "config.json").read_text())
    plugin = runs["plugin"]
    assert fp["FILE_SHA256.PLUGIN.zs_temperature"] == \
        hashlib.sha256(plugin.read_bytes()).hexdigest()
    for kind in ("METHOD", "ADAPTER"):
        assert fp[f"PROVIDER.{kind}"] == f"_argtca_plugins.zs_temperature ({plugin})"
    assert fp["TRAINER.ZS_TEMP.TEMPERATURE"] == 2.0
    # zero-shot's run of the same command does not carry the plug-in's node
    zfp = json.loads((runs["folders"]["zeroshot"] / "config.json").read_text())
    assert not any(k.startswith("TRAINER.ZS_TEMP.") for k in zfp)
    assert not any(k.startswith("PROVIDER.") for k in zfp)
    # the same file with other contents is another experiment; a folder of the old one is refused
    edited = runs["base"] / "edited" / plugin.name
    edited.parent.mkdir()
    edited.write_text(plugin.read_text() + "\n# an edit\n")
    p = _run([sys.executable, "-m", "argtca.run", "--plugin", str(edited), "--trainer", "zs_temp",
              "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"), "--output-dir",
              str(runs["t1"]), "TRAINER.ZS_TEMP.TEMPERATURE", "1.0"] + TINY, cwd=runs["base"])
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("error: ")
    assert str(edited) in p.stderr and len(_records(runs["t1"])) == 16


def test_baseline_sh_runs_it_from_plugins(runs, tmp_path):
    out = tmp_path / "run"
    p = _run(["bash", str(REPO / "scripts" / "baseline.sh"), "demo", "zs_temp"] + TINY,
             cwd=tmp_path, PLUGINS=str(runs["plugin"]), OUTPUT_DIR=str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    # the same settings as table1's run: the same records
    assert _records(out) == _records(runs["folders"]["zs_temp"])
    # without the plug-in the method is unknown: one line listing the methods
    p = _run(["bash", str(REPO / "scripts" / "baseline.sh"), "demo", "zs_temp"] + TINY,
             cwd=tmp_path, OUTPUT_DIR=str(tmp_path / "other"))
    assert p.returncode == 2
    assert p.stderr.startswith("error: METHOD must be one of zeroshot ") and "zs_temp'" in p.stderr


def test_the_docs_page_shows_the_file_the_tests_run():
    page = (REPO / "docs" / "own-method.md").read_text()
    block = page.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE.read_text()
    readme = (REPO / "README.md").read_text()
    assert "[docs/own-method.md](docs/own-method.md)" in readme
