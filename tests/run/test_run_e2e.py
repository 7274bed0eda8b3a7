"""End-to-end runs of every method through the CLI on a generated CoOp-layout dataset with a tiny
CLIP: records, summary, CoOp result lines, determinism, resume, and bad input."""
import json
import os

import pytest

from argtca.run import main
from helpers_data import ATTRS, make_caltech, write_attributes

TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "8", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False",
        "VERBOSE", "False", "TRAINER.ARGTCA.GAT.EPOCHS", "3"]


def _args(root, out, method, *extra, attr=None):
    a = ["--root", str(root), "--output-dir", str(out), "--seed", "1",
         "--dataset-config-file", "configs/datasets/caltech101.yaml",
         "--config-file", f"configs/trainers/{method}.yaml"] + TINY
    if attr:
        a += ["DATASET.ATTRIBUTE_FILE", str(attr)]
    return a + list(extra)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    make_caltech(root)
    attr = write_attributes(root / "attrs.json")
    return root, attr


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _records(out):
    with open(out / "records.jsonl") as f:
        return [json.loads(l) for l in f if l.strip()]


@pytest.mark.parametrize("method", ["zeroshot", "tpt", "ctpt", "otpt", "atpt", "tca", "argtca"])
def test_each_method_end_to_end(data, tmp_path, capsys, method):
    root, attr = data
    out = tmp_path / method
    assert main(_args(root, out, method, attr=attr)) == 0
    printed = capsys.readouterr().out
    assert "* accuracy:" in printed and "* ece:" in printed
    recs = _records(out)
    assert [r["index"] for r in recs] == list(range(6))
    assert {r["label"] for r in recs} == {0, 1, 2}
    s = json.loads((out / "summary.json").read_text())
    assert s["n"] == 6 and s["method"] == method
    acc = 100 * sum(r["pred"] == r["label"] for r in recs) / 6
    assert abs(s["accuracy"] - acc) < 1e-9
    assert f"* accuracy: {acc:.2f}%" in printed
    t = s["timing"]   # the loop's timeline, on the console too
    assert t["loop_s"] == s["seconds_this_session"] and t["first_batch_s"] <= t["loop_s"]
    assert f"* time: 6 images in {t['loop_s']:.1f} s" in printed
    for r in recs:
        assert 0 < r["conf"] <= 1 and 0 <= r["p_label"] <= r["conf"] + 1e-9
    if method == "argtca":
        p1 = json.loads((out / "phase1.json").read_text())
        assert all(len(v) == 2 for v in p1["selected"].values())
    # nothing written into the data root
    assert not any(p.name in ("records.jsonl", "summary.json", "split_fewshot")
                   for p in root.rglob("*"))


def test_same_seed_twice_gives_identical_records(data, tmp_path):
    root, attr = data
    assert main(_args(root, tmp_path / "a", "tpt")) == 0
    assert main(_args(root, tmp_path / "b", "tpt")) == 0
    ra, rb = _records(tmp_path / "a"), _records(tmp_path / "b")
    assert ra == rb
    c = _args(root, tmp_path / "c", "tpt")
    c[c.index("--seed") + 1] = "2"
    assert main(c) == 0
    assert [r["conf"] for r in _records(tmp_path / "c")] != [r["conf"] for r in ra]


def test_killed_run_resumes_to_the_same_summary(data, tmp_path, monkeypatch):
    root, attr = data
    full = tmp_path / "full"
    assert main(_args(root, full, "tca", attr=attr)) == 0
    part = tmp_path / "part"
    # kill the run after 4 images: the engine raises on its 5th call
    from argtca.engine import reference
    calls = {"n": 0}
    orig = reference.ReferenceEngine.__call__

    def dying(self, views, paths=None):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return orig(self, views, paths)
    monkeypatch.setattr(reference.ReferenceEngine, "__call__", dying)
    assert main(_args(root, part, "tca", attr=attr)) == 130   # Ctrl-C: one line, exit 130
    assert len(_records(part)) == 4 and not (part / "summary.json").exists()
    monkeypatch.setattr(reference.ReferenceEngine, "__call__", orig)
    with open(part / "records.jsonl", "a") as f:
        f.write('{"index": 4, "pa')  # a torn last line, as a kill mid-write leaves it
    assert main(_args(root, part, "tca", attr=attr)) == 0
    s_full = json.loads((full / "summary.json").read_text())
    s_part = json.loads((part / "summary.json").read_text())
    for k in ("n", "accuracy", "ece", "adaece", "mce", "nll", "brier", "config_hash"):
        assert s_full[k] == s_part[k], k
    assert _records(full) == sorted(_records(part), key=lambda r: r["index"])


def test_different_configuration_in_same_dir_is_refused(data, tmp_path, capsys):
    root, attr = data
    out = tmp_path / "x"
    assert main(_args(root, out, "ctpt")) == 0
    assert main(_args(root, out, "ctpt", "TRAINER.CTPT.LAMBDA", "20.0")) == 2
    err = capsys.readouterr().err
    assert "TRAINER.CTPT.LAMBDA" in err and str(out) in err


def _err(capsys):
    return capsys.readouterr().err


def test_bad_inputs_give_one_clear_error(data, tmp_path, capsys):
    root, attr = data
    # missing root
    assert main(_args(tmp_path / "nope", tmp_path / "o1", "tpt")) == 2
    assert "nope" in _err(capsys)
    # unknown trainer / dataset / selector / objective
    assert main(_args(root, tmp_path / "o2", "tpt", "TRAINER.NAME", "Bogus")) == 2
    e = _err(capsys)
    assert "Bogus" in e and "ArgTCA" in e
    assert main(_args(root, tmp_path / "o3", "tpt", "DATASET.NAME", "Bogus")) == 2
    assert "Caltech101" in _err(capsys)
    assert main(_args(root, tmp_path / "o4", "argtca", "TRAINER.ARGTCA.SELECTOR", "bogus",
                      attr=attr)) == 2
    assert "div" in _err(capsys)
    # attribute file: absent, class missing (all named), too few attributes
    assert main(_args(root, tmp_path / "o5", "tca")) == 2
    assert "ATTRIBUTE_FILE" in _err(capsys)
    bad = dict(ATTRS); del bad["red apple"]; del bad["blue car"]
    p = write_attributes(tmp_path / "missing.json", bad)
    assert main(_args(root, tmp_path / "o6", "tca", attr=p)) == 2
    e = _err(capsys)
    assert "red apple" in e and "blue car" in e and str(p) in e
    few = dict(ATTRS); few["green leaf"] = "green"
    p = write_attributes(tmp_path / "few.json", few)
    assert main(_args(root, tmp_path / "o7", "tca", attr=p)) == 2
    assert "green leaf" in _err(capsys)
    # missing image: named at load time
    img = next((root / "caltech-101" / "101_ObjectCategories" / "blue_car").glob("*.jpg"))
    img.rename(img.with_suffix(".bak"))
    try:
        assert main(_args(root, tmp_path / "o8", "tpt")) == 2
        assert img.name in _err(capsys)
    finally:
        img.with_suffix(".bak").rename(img)
    # M' > M
    assert main(_args(root, tmp_path / "o9", "argtca", "TRAINER.ARGTCA.NUM_ATTRIBUTES", "11",
                      attr=attr)) == 2
    assert "NUM_ATTRIBUTES" in _err(capsys)
    # no output directory was created for any refused run
    assert not any((tmp_path / f"o{i}" / "records.jsonl").exists() for i in range(1, 10))


@pytest.mark.parametrize("selector", ["tca", "div", "disc", "random", "joint"])
def test_argtca_each_selector_end_to_end(data, tmp_path, selector):
    root, attr = data
    out = tmp_path / selector
    assert main(_args(root, out, "argtca", "TRAINER.ARGTCA.SELECTOR", selector, attr=attr)) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["selector"] == selector and s["n"] == 6
    p1 = json.loads((out / "phase1.json").read_text())
    cands = {c: ATTRS[c].split()[:10] for c in ATTRS}
    for c, picked in p1["selected"].items():
        assert len(picked) == 2 and len(set(picked)) == 2 and set(picked) <= set(cands[c])
    if selector == "tca":  # TCA's ranking: the first M' in file order
        assert p1["selected"] == {c: cands[c][:2] for c in cands}
    # a second run on the same folder reuses phase 1 (same key) and the finished records
    assert main(_args(root, out, "argtca", "TRAINER.ARGTCA.SELECTOR", selector, attr=attr)) == 0
    assert json.loads((out / "phase1.json").read_text())["selected"] == p1["selected"]


@pytest.mark.parametrize("method", ["tpt", "tca"])
def test_fast_engine_through_cli_matches_reference(data, tmp_path, method):
    root, attr = data
    a = tmp_path / "ref"
    b = tmp_path / "fast"
    assert main(_args(root, a, method, attr=attr)) == 0
    assert main(_args(root, b, method, "TTA.ENGINE", "fast", "TTA.BATCH_IMAGES", "4",
                      attr=attr)) == 0
    ra, rb = _records(a), _records(b)
    assert [r["index"] for r in rb] == [r["index"] for r in ra]
    assert [r["pred"] for r in rb] == [r["pred"] for r in ra]
    assert max(abs(x["conf"] - y["conf"]) for x, y in zip(ra, rb)) < 1e-4


def test_gpu_views_path_runs_on_cpu_too(data, tmp_path):
    root, attr = data
    out = tmp_path / "gv"
    assert main(_args(root, out, "tpt", "TTA.ENGINE", "fast", "TTA.VIEWS_DEVICE", "gpu")) == 0
    assert len(_records(out)) == 6


def test_log_txt_parses_with_coops_regex(data, tmp_path):
    import re
    root, attr = data
    out = tmp_path / "log"
    assert main(_args(root, out, "ctpt")) == 0
    text = (out / "log.txt").read_text()
    s = json.loads((out / "summary.json").read_text())
    after = text.split("=> result")[-1]  # parse_test_res.py --test-log: after its end signal
    acc = float(re.search(r"\* accuracy: ([\.\deE+-]+)%", after).group(1))
    ece = float(re.search(r"\* ece: ([\.\deE+-]+)%", after).group(1))
    assert abs(acc - s["accuracy"]) < 0.006 and abs(ece - s["ece"]) < 0.006


def test_unknown_or_mistyped_config_keys_are_one_clear_error(data, tmp_path, capsys):
    root, attr = data
    assert main(_args(root, tmp_path / "k1", "tpt", "TTA.BOGUS", "1")) == 2
    assert "TTA.BOGUS" in capsys.readouterr().err
    assert main(_args(root, tmp_path / "k2", "tpt", "TTA.LR", "fast")) == 2
    assert "LR" in capsys.readouterr().err
