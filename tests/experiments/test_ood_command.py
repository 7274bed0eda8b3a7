"""``python -m argtca.experiments ood demo --ood imagefolder``: two methods (one online) on the
embedded demo and on an ImageFolder generated here, at CI size. The OOD runs classify the OOD
images among the demo's classes (label -1); ood.md's AUROC and FPR95 are recomputed here from the
records by brute force; a second call re-reads every run and writes the same report."""
import csv
import json
from pathlib import Path

import pytest

from argtca.experiments.__main__ import main
from helpers_data import make_tree

TINY = ["DATASET.NUM_IMAGES", "5", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "VERBOSE", "False", "USE_CUDA", "False"]


def records(path):
    return [json.loads(line) for line in (Path(path) / "records.jsonl").read_text().splitlines()
            if line.strip()]


def brute_auroc(pos, neg):
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (
        len(pos) * len(neg))


def brute_fpr95(pos, neg):
    # every threshold t among the scores down to the lowest ID score; TPR nearest 0.95, the
    # lowest t on a tie; FPR = share of OOD scores >= t
    cands = sorted({s for s in pos + neg if s >= min(pos)}, reverse=True)
    rates = [(abs(sum(p >= t for p in pos) / len(pos) - 0.95), -i, t)
             for i, t in enumerate(cands)]
    t = min(rates)[2]
    return sum(n >= t for n in neg) / len(neg)


@pytest.fixture(scope="module")
def ood_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("ood")
    mp = pytest.MonkeyPatch()
    mp.setenv("ARGTCA_CACHE", str(base / "cache"))
    mp.chdir(base)
    make_tree(base / "oodimgs", counts={"static_noise": 3, "blank_wall": 3})
    argv = ["ood", "demo", "--ood", "imagefolder", "--ood-root", str(base / "oodimgs"),
            "--methods", "zeroshot,tda", "--seeds", "1", "--quiet", "--report-dir",
            str(base / "rep")] + TINY
    try:
        rc = main(argv)
        yield base, rc, argv
    finally:
        mp.undo()


def test_ood_report_from_the_records(ood_run, capsys):
    base, rc, _ = ood_run
    assert rc == 0
    rep = base / "rep"
    rows = list(csv.DictReader((rep / "ood.csv").open()))
    assert [(r["label"], r["id"], r["ood"]) for r in rows] == [
        ("Zero-shot CLIP", "Demo", "ImageFolder (OOD for Demo)"),
        ("TDA (online)", "Demo", "ImageFolder (OOD for Demo)")]
    for r in rows:
        id_recs, ood_recs = records(r["id_path"]), records(r["ood_path"])
        assert len(id_recs) == 5 and len(ood_recs) == 5      # NUM_IMAGES limits both sets
        # the OOD images: labelled -1, classified among the demo's 16 classes
        assert {x["label"] for x in ood_recs} == {-1} and all(0 <= x["pred"] < 16
                                                               for x in ood_recs)
        assert all(x["p_label"] == 0.0 for x in ood_recs)
        assert all(x["path"].startswith(str(base / "oodimgs")) for x in ood_recs)
        pos, neg = [x["conf"] for x in id_recs], [x["conf"] for x in ood_recs]
        assert float(r["auroc"]) == pytest.approx(100 * brute_auroc(pos, neg))
        assert float(r["fpr95"]) == pytest.approx(100 * brute_fpr95(pos, neg))
        assert "demo-ood-imagefolder" in r["ood_path"] and "/demo/" in r["id_path"]
    md = (rep / "ood.md").read_text()
    want = f"{float(rows[0]['auroc']):.2f}"
    assert any(line.startswith("| Zero-shot CLIP |") and want in line
               for line in md.splitlines())
    # the ID runs' own table beside it, without the OOD runs' columns
    table = (rep / "table.md").read_text()
    assert "| Method | Metric | Demo |\n" in table and "OOD" not in table   # one dataset
    assert (rep / "stability.md").is_file()


def test_second_call_rereads_every_run(ood_run, capsys):
    base, _, argv = ood_run
    before = (base / "rep" / "ood.csv").read_text()
    mp = pytest.MonkeyPatch()
    mp.setenv("ARGTCA_CACHE", str(base / "cache"))
    mp.chdir(base)
    try:
        capsys.readouterr()
        assert main(argv) == 0
    finally:
        mp.undo()
    out = capsys.readouterr().out
    assert out.count("(finished: re-read)") == 4
    assert (base / "rep" / "ood.csv").read_text() == before


def test_bad_input_one_line(tmp_path, capsys):
    assert main(["ood", "demo", "--out-root", str(tmp_path)]) == 2
    assert "--ood" in capsys.readouterr().err


def test_report_cli_pairs_the_same_runs_from_their_folders(ood_run, tmp_path):
    """``python -m argtca.report OUT --ood`` finds the pairs from the folders alone (settings
    and seed), and gives the command's numbers."""
    from argtca.report.cli import main as report_main
    base, _, _ = ood_run
    assert report_main([str(base / "output"), "--ood", "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "ood.csv").read_text() == (base / "rep" / "ood.csv").read_text()


def test_plain_report_leaves_the_ood_runs_to_the_ood_section(ood_run, tmp_path):
    """The accuracy/calibration table never shows an OOD set as a dataset column (its accuracy
    is 0 by construction): only the in-distribution demo runs, one row per method."""
    from argtca.report.cli import main as report_main
    base, _, _ = ood_run
    assert report_main([str(base / "output"), "--out", str(tmp_path / "t")]) == 0
    table = (tmp_path / "t" / "table.md").read_text()
    assert "OOD" not in table and "imagefolder" not in table.lower()
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "Demo" not in ln
            and "---" not in ln and "Method" not in ln and "**" not in ln[:6]]
    assert sum("Zero-shot CLIP" in ln for ln in rows) == 1 and sum("TDA" in ln for ln in rows) == 1
