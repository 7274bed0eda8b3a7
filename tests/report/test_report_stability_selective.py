"""The report's stability section (spread over seeds, and over stream orders for online rows) and
its selective-prediction rows and figure (AURC, E-AURC, risk-coverage curves), on hand-written
run folders whose numbers are worked out here."""
import csv
import io
import json
from pathlib import Path

import matplotlib
import pytest

from argtca.metrics import compute_metrics
from argtca.report.cli import main as report_main, make_report
from argtca.report.plots.layout import MAX_COLS, paper_style
from argtca.report.plots.risk_coverage import risk_coverage_figures
from test_figures import DATASETS, METHODS, assert_fits, cells, panels_per_row
from test_report import md_rows, write_run

matplotlib.use("Agg")


def write_records_run(root: Path, method, label, seed, conf, correct, family="episodic",
                      overrides=None, dataset_key="caltech101", dataset="Caltech101"):
    """A finished run folder whose records have exactly ``conf`` and ``correct``."""
    d = root / f"{method}/{dataset_key}/{json.dumps(overrides or {}, sort_keys=True)}/seed{seed}"
    d.mkdir(parents=True)
    recs = [{"index": i, "path": f"img{i}.jpg", "label": 0, "pred": 0 if ok else 1, "conf": c,
             "p_label": c if ok else 1 - c, "brier": 0.1} for i, (c, ok) in
            enumerate(zip(conf, correct))]
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    m = compute_metrics(conf, [r["pred"] for r in recs], [0] * len(recs),
                        p_label=[r["p_label"] for r in recs], brier=[0.1] * len(recs))
    summary = {"method": method, "selector": None, "label": label, "family": family,
               "trainer": method, "dataset": dataset, "dataset_key": dataset_key, "seed": seed,
               "overrides": overrides or {}, "n": len(recs),
               **{k: m[k] for k in ("accuracy", "ece", "adaece", "mce", "nll", "brier")}}
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_stability_spread_over_seeds_and_stream_orders(tmp_path):
    runs = tmp_path / "runs"
    # TPT on Caltech101, 3 seeds of 10 images: accuracy 40 / 50 / 60 %, one confidence per run
    # 0.05 above the accuracy and ECE exactly 5 / 7 / 9 (one bin: |acc - conf|)
    for seed, acc, ece in ((1, 40.0, 5.0), (2, 50.0, 7.0), (3, 60.0, 9.0)):
        write_run(runs, "tpt", "caltech101", seed, acc, ece, n_records=10)
    write_run(runs, "zeroshot", "caltech101", 1, 30.0, 4.0, n_records=10)   # one seed
    # TDA (online): seeds 1 and 2 with the default stream seed (-1: the order follows the
    # seed) -> accuracy 50 / 80; and seeds 1, 2 with one fixed stream order (seed 7)
    conf = [0.9] * 10
    write_records_run(runs, "tda", "TDA (online)", 1, conf, [1] * 5 + [0] * 5, "online")
    write_records_run(runs, "tda", "TDA (online)", 2, conf, [1] * 8 + [0] * 2, "online")
    for seed in (1, 2):
        write_records_run(runs, "tda", "TDA (online)", seed, conf, [1] * 6 + [0] * 4, "online",
                          overrides={"TTA.STREAM.SEED": 7})
    out = tmp_path / "rep"
    written = make_report([runs], out)
    assert {"stability.md", "stability.csv"} <= set(written)
    md = (out / "stability.md").read_text()
    rows = {tuple(c.strip() for c in r.strip("|").split("|")[:2]): [
        c.strip() for c in r.strip("|").split("|")] for r in md_rows(md)[1:]}
    # TPT: accuracy 40, 50, 60: sample std 10, range 20; ECE 5, 7, 9: std 2, range 4
    assert rows[("TPT", "Caltech101")][2:] == ["1, 2, 3", "seed", "10.00", "40.00–60.00",
                                               "20.00", "2.00", "5.00–9.00", "4.00"]
    assert rows[("CLIP", "Caltech101")][2:] == ["1", "seed", "–", "–", "–", "–", "–", "–"]
    # TDA, order from the seed: 50 and 80 -> std |80 - 50| / sqrt(2) = 21.21; ECE = 90 - acc
    # (one bin): 40 and 10 -> the same std and range
    tda = rows[("TDA (online)", "Caltech101")]
    assert tda[2:] == ["1, 2", "seed = stream order", "21.21", "50.00–80.00", "30.00",
                       "21.21", "10.00–40.00", "30.00"]
    fixed = [v for k, v in rows.items() if k[0].startswith("TDA (online) [")]
    assert len(fixed) == 1 and fixed[0][3] == "seed (stream order fixed: 7)"
    assert fixed[0][4:7] == ["0.00", "60.00–60.00", "0.00"]
    lines = list(csv.DictReader(io.StringIO((out / "stability.csv").read_text())))
    tpt_acc = next(x for x in lines if x["method"] == "TPT" and x["metric"] == "accuracy")
    assert (tpt_acc["seeds"], float(tpt_acc["mean"]), float(tpt_acc["std"]),
            float(tpt_acc["range"])) == ("1 2 3", pytest.approx(50.0), pytest.approx(10.0),
                                         pytest.approx(20.0))
    # the default report has no selective rows and no risk-coverage figure
    assert "risk_coverage.png" not in written and "AURC" not in (out / "table.md").read_text()


def test_aurc_rows_and_risk_coverage_figure(tmp_path):
    runs = tmp_path / "runs"
    # the by-hand example of test_selective_ood_metrics: AURC 24.67 %, E-AURC 11.67 %
    write_records_run(runs, "tpt", "TPT", 1, [0.9, 0.8, 0.8, 0.6, 0.5], [1, 0, 1, 1, 0])
    # a perfect ranking, 1 error of 5: risks 0, 0, 0, 0, 1/5 -> AURC 4 %, E-AURC 0
    write_records_run(runs, "zeroshot", "CLIP", 1, [0.9, 0.8, 0.7, 0.6, 0.5], [1, 1, 1, 1, 0])
    out = tmp_path / "rep"
    assert report_main([str(runs), "--out", str(out), "--metrics",
                        "accuracy,aurc,eaurc"]) == 0
    table = md_rows((out / "table.md").read_text())
    assert table[1:] == ["| CLIP | Acc | **80.00** |",          # one dataset: no Average
                         "|  | AURC | **4.00** |",
                         "|  | E-AURC | **0.00** |",
                         "| TPT | Acc | <u>60.00</u> |",
                         "|  | AURC | <u>24.67</u> |",
                         "|  | E-AURC | <u>11.67</u> |"]
    assert "AURC and E-AURC in %" in (out / "table.md").read_text()
    assert (out / "risk_coverage.png").stat().st_size > 10_000
    assert (out / "risk_coverage.pdf").read_bytes()[:5] == b"%PDF-"


def test_risk_coverage_pages_fit_the_paper_for_16_methods():
    for ds in (DATASETS[:1], DATASETS[:3]):
        grid = cells(METHODS, ds)
        figs = risk_coverage_figures(grid, METHODS, ds, title="Risk-coverage curves (every "
                                     "seed pooled; AURC: mean over seeds, as in table.md)")
        assert len(figs) == len(ds)     # one page per dataset, the reliability diagrams' pages
        with paper_style():
            for stem, fig in figs:
                assert_fits(fig, stem)
                assert panels_per_row(fig) <= MAX_COLS
    # a few methods x datasets: one figure, a row per dataset; each title its AURC; no panel
    # where a method has no records
    grid = {(m, d): ([0.9, 0.8, 0.8, 0.6, 0.5], [1, 0, 1, 1, 0]) for m in ("A", "B")
            for d in ("X", "Y")}
    grid[("B", "Y")] = None
    (stem, fig), = risk_coverage_figures(grid, ["A", "B"], ["X", "Y"], title="RC")
    with paper_style():
        assert_fits(fig, stem)
    assert [ax.get_title() for ax in fig.get_axes()] == [
        "A\nAURC 24.67%", "B\nAURC 24.67%", "A\nAURC 24.67%"]
