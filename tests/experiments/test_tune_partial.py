"""tune with failed grid points: every table names what is missing, and no value is chosen
from an incomplete grid unless --allow-partial (then tuned.yaml lists the missing points).
The runs are replaced by a stub that writes their summary.json (numbers chosen here)."""
import csv
import importlib
import json

import pytest
import yaml

from argtca.experiments.__main__ import main
from argtca.experiments.plan import Outcome, Presence, load_baseline_config

tune_mod = importlib.import_module("argtca.experiments.tune")   # the package exports tune()

# (method, setting name, seed) -> (accuracy, ece); a missing entry is a failed run
RESULTS = {("ctpt", "lambda25", 1): (70.0, 9.0), ("ctpt", "lambda25", 2): (72.0, 7.0),
           ("ctpt", "lambda50", 1): (71.0, 5.0), ("ctpt", "lambda50", 2): (71.0, 3.0),
           ("otpt", "lambda6", 1): (60.0, 8.0), ("otpt", "lambda12", 1): (60.5, 4.0)}


@pytest.fixture
def stub(monkeypatch):
    failing = set()
    ran = []

    def execute(specs, root, plugins=(), tag="", quiet=False):
        out = []
        for s in specs:
            key = (s.method, s.out.parent.name, s.seed)
            ran.append(key)
            if key in failing or key not in RESULTS:
                out.append(Outcome(s, 1, 0.0))
                continue
            acc, ece = RESULTS[key]
            s.out.mkdir(parents=True, exist_ok=True)
            (s.out / "summary.json").write_text(json.dumps({"accuracy": acc, "ece": ece,
                                                            "seed": s.seed}))
            out.append(Outcome(s, 0, 0.0))
        return out

    monkeypatch.setattr(tune_mod, "execute", execute)
    monkeypatch.setattr(tune_mod, "check_presence",
                        lambda ds, *a, **k: [Presence(ds[0], True)])
    return failing, ran


def _tune(tmp_path, *extra, seeds="1,2", grid=("TRAINER.CTPT.LAMBDA=25,50",)):
    argv = ["tune", "demo", "--seeds", seeds, "--out-root", str(tmp_path / "out"),
            "--report-dir", str(tmp_path / "rep"), "--quiet"]
    for g in grid:
        argv += ["--grid", g]
    methods = ",".join(sorted({g.split(".")[1].lower() for g in grid}))
    return main(argv + ["--methods", methods] + list(extra))


def _grid(tmp_path):
    return list(csv.DictReader((tmp_path / "rep" / "grid.csv").open()))


def test_complete_grid_chooses_as_before(tmp_path, stub, capsys):
    assert _tune(tmp_path, grid=("TRAINER.CTPT.LAMBDA=25,50", "TRAINER.OTPT.LAMBDA=6,12"),
                 seeds="1") == 0
    # seed 1: every run finishes: ctpt 25 (70.0 / 9.0) and 50 (71.0 / 5.0): within
    # 1 point, 50 has the lower ECE; otpt 6 (60.0 / 8.0), 12 (60.5 / 4.0): 12
    tuned = yaml.safe_load((tmp_path / "rep" / "tuned.yaml").read_text())
    assert tuned == {"ctpt": {"TRAINER.CTPT.LAMBDA": 50.0}, "otpt": {"TRAINER.OTPT.LAMBDA": 12.0}}
    assert "INCOMPLETE" not in (tmp_path / "rep" / "tuned.yaml").read_text()
    assert "| **missing** |" not in (tmp_path / "rep" / "grid.md").read_text()
    assert "Incomplete grid" not in (tmp_path / "rep" / "grid.md").read_text()


def test_one_failed_point_is_marked_and_the_choice_refused(tmp_path, stub, capsys):
    failing, _ = stub
    failing.update({("ctpt", "lambda50", 1), ("ctpt", "lambda50", 2)})
    rc = _tune(tmp_path)
    err = capsys.readouterr().err
    assert rc == 1
    rows = _grid(tmp_path)
    assert [(r["setting"], r["seeds"], r["failed_seeds"], r["chosen"]) for r in rows] == [
        ("TRAINER.CTPT.LAMBDA=25", "1 2", "", "0"), ("TRAINER.CTPT.LAMBDA=50", "", "1 2", "0")]
    assert rows[1]["accuracy"] == "" and rows[1]["ece"] == ""
    md = (tmp_path / "rep" / "grid.md").read_text()
    assert "| ctpt | lambda=50 (default) | — | — | (failed: 1 2) | | **missing** |" in md
    assert "**Incomplete grid**: 1 setting(s) lack runs: TRAINER.CTPT.LAMBDA=50 (every run " \
           "failed: seed 1 2)" in md
    assert "| **chosen** |" not in md
    assert not (tmp_path / "rep" / "tuned.yaml").exists()          # nothing chosen from one point
    assert "the grid is incomplete for ctpt" in err and "--allow-partial" in err


def test_a_failed_seed_makes_the_grid_incomplete_too(tmp_path, stub, capsys):
    failing, _ = stub
    failing.add(("ctpt", "lambda25", 2))
    assert _tune(tmp_path) == 1
    rows = _grid(tmp_path)
    assert rows[0]["seeds"] == "1" and rows[0]["failed_seeds"] == "2"
    assert "| 1 (failed: 2) |" in (tmp_path / "rep" / "grid.md").read_text()
    assert not (tmp_path / "rep" / "tuned.yaml").exists()


def test_allow_partial_chooses_and_the_yaml_names_the_missing_points(tmp_path, stub, capsys):
    failing, _ = stub
    failing.update({("ctpt", "lambda50", 1), ("ctpt", "lambda50", 2)})
    assert _tune(tmp_path, "--allow-partial") == 1                # runs failed: still exit 1
    text = (tmp_path / "rep" / "tuned.yaml").read_text()
    assert yaml.safe_load(text) == {"ctpt": {"TRAINER.CTPT.LAMBDA": 25.0}}
    assert "# ctpt: chosen from an INCOMPLETE grid (--allow-partial); missing points:" in text
    assert "#   TRAINER.CTPT.LAMBDA=50 (every run failed: seed 1 2)" in text
    # table1 still reads it
    assert load_baseline_config(tmp_path / "rep" / "tuned.yaml") == {
        "ctpt": ["TRAINER.CTPT.LAMBDA", "25.0"]}
    rows = _grid(tmp_path)
    assert [r["chosen"] for r in rows] == ["1", "0"]


def test_a_method_with_a_complete_grid_is_still_chosen(tmp_path, stub, capsys):
    failing, _ = stub
    failing.add(("ctpt", "lambda50", 1))
    rc = _tune(tmp_path, seeds="1", grid=("TRAINER.CTPT.LAMBDA=25,50",
                                          "TRAINER.OTPT.LAMBDA=6,12"))
    assert rc == 1
    tuned = yaml.safe_load((tmp_path / "rep" / "tuned.yaml").read_text())
    assert tuned == {"otpt": {"TRAINER.OTPT.LAMBDA": 12.0}}        # ctpt refused, otpt chosen
    assert "the grid is incomplete for ctpt" in capsys.readouterr().err
