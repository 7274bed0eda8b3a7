"""A sweep with a failed point: the point stays on its line as a gap (NaN), sweep.md says
**failed**, the legend names it; through `python -m argtca.experiments sweep` too."""
import importlib

import numpy as np

from argtca.experiments.plan import Outcome, Presence
from argtca.report import find_runs, sweep_points
from argtca.report.cli import make_sweep_report
from run_records import write_summary
from test_report import write_run

tables = importlib.import_module("argtca.experiments.tables")

VALS = {(5.0, 35.0): (60.0, 6.0), (10.0, 35.0): (61.0, 4.0), (40.0, 35.0): (63.0, 7.0),
        (10.0, 15.0): (59.0, 7.0)}


def _runs(tmp_path):
    for (a, b), (acc, ece) in VALS.items():
        write_run(tmp_path, "argtca", "caltech101", 1, acc, ece, selector="div",
                  overrides={"TRAINER.ARGTCA.ALPHA": a, "TRAINER.ARGTCA.BETA": b},
                  sub=f"a{a:g}_b{b:g}")
    return find_runs([tmp_path])


def test_a_failed_point_stays_on_its_line(tmp_path):
    runs = _runs(tmp_path)
    missing = [("caltech101", "argtca", "div", 20.0, 35.0),     # on the α line (β = 35)
               ("caltech101", "argtca", "disc", 20.0, 35.0),    # another line: not this one
               ("caltech101", "argtca", "div", 10.0, 50.0)]     # on the β line (α = 10)
    (name, s), = sweep_points(runs, "ALPHA", missing)["Caltech101"].items()
    assert name == "ArgTCA (div) (β=35) (missing: α=20)"
    assert s["x"].tolist() == [5.0, 10.0, 20.0, 40.0]
    assert s["missing"].tolist() == [False, False, True, False]
    assert s["acc"][[0, 1, 3]].tolist() == [60.0, 61.0, 63.0] and np.isnan(s["acc"][2])
    assert np.isnan(s["ece"][2]) and s["n_seeds"].tolist() == [1, 1, 0, 1]
    (name_b, sb), = sweep_points(runs, "BETA", missing)["Caltech101"].items()
    assert name_b == "ArgTCA (div) (α=10) (missing: β=50)"
    assert sb["x"].tolist() == [15.0, 35.0, 50.0]
    # without missing points: as before
    (plain, s0), = sweep_points(runs, "ALPHA")["Caltech101"].items()
    assert plain == "ArgTCA (div) (β=35)" and s0["x"].tolist() == [5.0, 10.0, 40.0]
    written = make_sweep_report([tmp_path], tmp_path / "rep", missing=missing)
    md = written["sweep.md"].read_text()
    row = next(r for r in md.splitlines() if "(missing: α=20)" in r)
    assert row.split("|")[3:7] == [" 60.00 / 6.00 ", " 61.00 / 4.00 ", " **failed** ",
                                   " 63.00 / 7.00 "]
    assert written["sweep_alpha.png"].stat().st_size > 5_000


def test_experiments_sweep_passes_its_failed_points_to_the_report(tmp_path, monkeypatch,
                                                                   capsys):
    def execute(specs, root, plugins=(), tag="", quiet=False, **kw):
        out = []
        for s in specs:
            ov = dict(zip(s.overrides[::2], s.overrides[1::2]))
            a, b = float(ov["TRAINER.ARGTCA.ALPHA"]), float(ov["TRAINER.ARGTCA.BETA"])
            if (a, b) == (20.0, 35.0):
                out.append(Outcome(s, 1, 0.0))
                continue
            acc, ece = VALS.get((a, b), (50.0, 5.0))
            s.out = s.out_root / f"a{a}_b{b}"   # the folder the real run would pick
            s.out.mkdir(parents=True)
            write_summary(s.out, {
                "method": "argtca", "selector": s.selector, "label": "ArgTCA (div)",
                "trainer": "argtca", "dataset": "Caltech101", "dataset_key": s.dataset,
                "seed": s.seed, "backbone": "ViT-B/16", "config_hash": "x",
                "overrides": {"TRAINER.ARGTCA.ALPHA": a, "TRAINER.ARGTCA.BETA": b}},
                100, acc, ece)
            out.append(Outcome(s, 0, 0.0))
        return out

    monkeypatch.setattr(tables, "execute", execute)
    monkeypatch.setattr(tables, "_present", lambda ds, *a, **k: [Presence(ds[0], True)])
    rc = tables.sweep(["caltech101"], selectors=["div"], alphas=["5", "10", "20", "40"],
                      betas=["15", "35"], out_root=tmp_path / "out",
                      report_dir=tmp_path / "rep")
    assert rc == 1                                       # a run failed
    md = (tmp_path / "rep" / "sweep.md").read_text()
    row = next(r for r in md.splitlines() if "(missing: α=20)" in r)
    assert "**failed**" in row
    assert "1 of 5 run(s) failed" in capsys.readouterr().err
