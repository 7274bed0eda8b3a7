"""The paper's experiments, one command each (python -m argtca.experiments / scripts/table1.sh,
table2.sh, sensitivity.sh, table3.sh, tune_baselines.sh), end to end on the embedded demo at CI
size. One output tree is shared by every test (module fixture): Table 1 first, then the
ablation and the sweep reuse its ArgTCA runs and stored graph, the tuning writes the config a
second Table-1 call takes. Every number of a table is checked against the runs' records,
recomputed here (accuracy and 20-bin ECE), and against their summary.json."""
import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from experiments_cli import call as _call

REPO = Path(__file__).resolve().parents[2]
TINY = ["DATASET.NUM_IMAGES", "3", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "TRAINER.ARGTCA.GAT.EPOCHS", "2", "VERBOSE", "False", "USE_CUDA", "False"]
LABELS = ["Zero-shot CLIP", "TPT", "C-TPT", "O-TPT", "A-TPT", "TCA", "ArgTCA (div)",
          "ArgTCA (disc)"]
TUNE_GRID = ["--methods", "ctpt,tca", "--grid", "TRAINER.CTPT.LAMBDA=0,50",
             "--grid", "TRAINER.TCA.ALPHA=10", "--grid", "TRAINER.TCA.BETA=35"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("experiments")
    mp = pytest.MonkeyPatch()
    mp.setenv("ARGTCA_CACHE", str(base / "cache"))   # demo images + Phase-1 store
    mp.delenv("DATA", raising=False)
    mp.chdir(REPO)
    out, empty = base / "out", base / "empty_data"
    empty.mkdir()
    common = ["--out-root", str(out), "--quiet"]
    r = {}
    try:
        # Table 1: caltech101 is absent under the data root; demo runs the paper's methods
        # (the zoo's rows: tests/experiments/test_table1_methods.py)
        r["t1"] = _call(["table1", "caltech101", "demo", "--root", str(empty), "--seeds", "1",
                         "--methods", "paper"]
                        + common + TINY)
        div1 = folders(r["t1"][1])["argtca-div on demo, seed 1"] / "records.jsonl"
        seed1 = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in [div1]}
        # one method over seeds 1 and 2: seed 1 is only re-read
        r["t1b"] = _call(["table1", "demo", "--seeds", "1,2", "--methods", "argtca-div",
                          "--report-dir", str(out / "report/table1_2seeds")] + common + TINY)
        r["seed1_before"] = seed1
        r["t2"] = _call(["table2", "demo", "--selectors", "div"] + common + TINY)
        r["sweep"] = _call(["sweep", "demo", "--selectors", "div", "--alphas", "20",
                            "--betas", "50"] + common + TINY)
        r["t3"] = _call(["table3", "demo", "--class", "tomato", "--class", "demo:lime",
                         "--out-root", str(out)] + TINY)
        r["tune"] = _call(["tune", "demo", "--write", str(out / "tuned.yaml")] + TUNE_GRID
                          + common + TINY)
        r["t1tuned"] = _call(["table1", "demo", "--seeds", "1", "--methods", "ctpt",
                              "--baseline-config", str(out / "tuned.yaml"), "--report-dir",
                              str(out / "report/table1_tuned")] + common + TINY)
        r["t1tuned_default"] = _call(["table1", "demo", "--seeds", "1", "--methods", "ctpt",
                                      "--baseline-config", str(out / "tuned.yaml")]
                                     + common + TINY)
        r["t1tuned_clash"] = _call(["table1", "demo", "--seeds", "1", "--methods", "tpt",
                                    "--report-dir", str(out / "report/table1_tuned")]
                                   + common + TINY)
    finally:
        mp.undo()
    r["out"] = out
    return r


# ----------------------------------------------------------------------------- helpers
def _edges():
    import torch
    return [float(x) for x in torch.linspace(0, 1, 21)]   # C-TPT's ECE_Loss bin edges


def recomputed(run_dir):
    """(accuracy %, ECE %) from records.jsonl, worked out here."""
    recs = [json.loads(line) for line in (Path(run_dir) / "records.jsonl").read_text()
            .splitlines() if line.strip()]
    conf = np.array([r["conf"] for r in recs], dtype=np.float64)
    ok = np.array([r["pred"] == r["label"] for r in recs], dtype=np.float64)
    e = _edges()
    ece = 0.0
    for lo, hi in zip(e[:-1], e[1:]):
        m = (conf > lo) & (conf <= hi)
        if m.any():
            ece += abs(conf[m].mean() - ok[m].mean()) * m.mean()
    return 100 * ok.mean(), 100 * ece


def summary(run_dir):
    return json.loads((Path(run_dir) / "summary.json").read_text())


def md_rows(text):
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ")]


def plain(cell):
    return cell.replace("**", "").replace("<u>", "").replace("</u>", "")


_STARTED = re.compile(r"^\[\w+\] \d+/\d+ (.+) -> (\S+)( \(finished: re-read\))?$")


def folders(text, reread=False):
    """run name -> run folder, from a command's "[tag] i/n NAME -> FOLDER" lines (``reread``:
    only those skipped as finished)."""
    out = {}
    for line in text.splitlines():
        m = _STARTED.match(line)
        if m and (m.group(3) or not reread):
            out[m.group(1)] = Path(m.group(2))
    return out


HASHED = re.compile(r"/(zeroshot|tpt|ctpt|otpt|atpt|tca|argtca)/demo/[0-9a-f]{8}/seed\d+$")


def run_dirs(tree):
    """Table 1's run folder of each label, as the command printed them."""
    f = folders(tree["t1"][1])
    names = ["zeroshot", "tpt", "ctpt", "otpt", "atpt", "tca", "argtca-div", "argtca-disc"]
    dirs = {label: f[f"{n} on demo, seed 1"] for label, n in zip(LABELS, names)}
    # <out-root>/<method>/<dataset>/<hash8>/seed<N>: every run its own experiment folder
    assert all(HASHED.search(str(d)) for d in dirs.values()) and len(set(dirs.values())) == 8
    assert all(str(d).startswith(str(tree["out"])) for d in dirs.values())
    return dirs


# ----------------------------------------------------------------------------- Table 1
def test_table1_lists_absent_datasets_first_and_runs_the_rest(tree):
    rc, out, err = tree["t1"]
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("[table1] absent (1 of 2 datasets")
    assert lines[1].startswith("[table1]   caltech101: ") and "caltech-101" in lines[1] \
        and "fix:" in lines[1]
    assert lines[2] == "[table1] present: demo"
    assert sum(line.startswith("[table1] ") and "/8 " in line for line in lines) == 8
    for d in run_dirs(tree).values():
        assert summary(d)["n"] == 3
        assert json.loads((d.parent / "settings.json").read_text())["overrides"][
            "DATASET.NUM_IMAGES"] == 3


def report_dir(out, prefix):
    """The one report folder ``<out>/report/<prefix>-<hash of the runs>``."""
    found = [p for p in (out / "report").glob(f"{prefix}-*") if len(p.name) == len(prefix) + 9]
    assert len(found) == 1, found
    return found[0]


def test_table1_numbers_equal_the_runs(tree):
    out = tree["out"]
    rep = report_dir(out, "table1")
    assert f"[table1] wrote: {rep.resolve()}/" in tree["t1"][1]
    # a CI-sized demo table says it is no real result, on the console and in table.md
    for text in (tree["t1"][1], (rep / "table.md").read_text()):
        assert "**Not comparable with published numbers**" in text
        assert "DATASET.NUM_IMAGES 3 (a subset of the test split)" in text
        assert "the embedded demo dataset" in text and "test images: Demo 3" in text
    rows = list(csv.reader((rep / "table.csv").open()))
    assert rows[0] == ["Method", "Family", "Metric", "Demo mean", "Demo std"]
    got = {(r[0], r[2]): r[3:] for r in rows[1:]}
    assert sorted({k[0] for k in got}) == sorted(LABELS)
    eces = {}
    for label, d in run_dirs(tree).items():
        acc, ece = recomputed(d)
        s = summary(d)
        assert s["accuracy"] == pytest.approx(acc, abs=1e-6)
        assert s["ece"] == pytest.approx(ece, abs=1e-4)
        # one seed: no std; one dataset: no Average
        assert got[(label, "Acc")] == [f"{acc:.2f}", ""]
        assert got[(label, "ECE")] == [f"{ece:.2f}", ""]
        eces[label] = round(ece, 2)
    # best (bold) and second (underlined) ECE in the Markdown and LaTeX tables
    ranked = sorted(set(eces.values()))
    md = dict(_with_labels(md_rows((rep / "table.md").read_text())))
    for label, v in eces.items():
        cell = md[(label, "ECE")][2]
        want = (f"**{v:.2f}**" if v == ranked[0] else f"<u>{v:.2f}</u>" if v == ranked[1]
                else f"{v:.2f}")
        assert cell == want, (label, cell, want)
    tex = (rep / "table.tex").read_text()
    assert f"\\textbf{{{ranked[0]:.2f}}}" in tex and f"\\underline{{{ranked[1]:.2f}}}" in tex


def _with_labels(rows):
    """Markdown rows -> ((label, metric), row); the ECE row has an empty label cell."""
    out, label = [], None
    for r in rows[1:]:
        label = r[0] or label
        out.append(((label, r[1]), r))
    return out


def test_table1_mean_std_over_seeds_and_finished_runs_reread(tree):
    rc, out, err = tree["t1b"]
    assert rc == 0, err
    o = tree["out"]
    for p, (data, mtime) in tree["seed1_before"].items():   # finished runs are only re-read
        assert p.read_bytes() == data and p.stat().st_mtime_ns == mtime
    # seed 1 is Table 1's folder, skipped as finished; seed 2 is its sibling (one experiment)
    exp = run_dirs(tree)["ArgTCA (div)"].parent
    assert folders(out, reread=True) == {"argtca-div on demo, seed 1": exp / "seed1"}
    assert folders(out)["argtca-div on demo, seed 2"] == exp / "seed2"
    md = dict(_with_labels(md_rows((o / "report/table1_2seeds/table.md").read_text())))
    for label in ("ArgTCA (div)",):
        for metric, i in (("Acc", 0), ("ECE", 1)):
            v = [recomputed(exp / f"seed{s}")[i] for s in (1, 2)]
            want = f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}"
            row = md[(label, metric)]
            # one dataset: no Average column repeating it
            assert [plain(c) for c in row[2:]] == [want], (label, metric, row)
    cells = list(csv.DictReader((o / "report/table1_2seeds/cells.csv").open()))
    c = [x for x in cells if x["method"] == "ArgTCA (div)" and x["metric"] == "ece"
         and x["dataset"] == "Demo"][0]
    e = [summary(exp / f"seed{s}")["ece"] for s in (1, 2)]
    assert float(c["mean"]) == pytest.approx(np.mean(e)) and c["seeds"] == "1 2"
    assert float(c["std"]) == pytest.approx(np.std(e, ddof=1))
    assert "$\\pm$" in (o / "report/table1_2seeds/table.tex").read_text()


# ----------------------------------------------------------------------------- Table 2
def test_table2_ablation_reuses_runs_and_stored_graphs(tree):
    rc, out, err = tree["t2"]
    assert rc == 0, err
    o = tree["out"]
    # the full run is Table 1's, only re-read (its stored graph too)
    assert "[table2] 1/4 argtca-div on demo, seed 1 -> " in out
    rows = md_rows((report_dir(o, "table2") / "ablation.md").read_text())
    assert rows[0] == ["Variant", "div Acc", "div ECE"]
    f = folders(out)
    where = {"full": f["argtca-div on demo, seed 1"],
             "zero edges": f["argtca-div zero edges on demo, seed 1"],
             "raw EOS": f["argtca-div raw EOS on demo, seed 1"],
             "random": f["argtca-random on demo, seed 1"]}
    assert where["full"] == run_dirs(tree)["ArgTCA (div)"]
    assert folders(out, reread=True) == {"argtca-div on demo, seed 1": where["full"]}
    assert len(set(where.values())) == 4 and all(HASHED.search(str(d)) for d in where.values())
    assert [r[0] for r in rows[1:]] == list(where)
    for r in rows[1:]:
        acc, ece = recomputed(where[r[0]])
        assert [plain(c) for c in r[1:]] == [f"{acc:.2f}", f"{ece:.2f}"], r
    assert summary(o / where["zero edges"])["trainer_cfg"]["TRAINER.ARGTCA.EDGES"] == "none"
    assert summary(o / where["raw EOS"])["trainer_cfg"]["TRAINER.ARGTCA.EMBEDDINGS"] == "raw"
    p1 = {k: json.loads((d / "phase1.json").read_text()) for k, d in where.items()}
    disc = json.loads((run_dirs(tree)["ArgTCA (disc)"] / "phase1.json").read_text())
    # one stored graph per edge setting: div trained it, disc reused the same one
    assert p1["full"]["store_key"] == disc["store_key"] and disc["reused"]
    assert not p1["full"]["reused"]
    assert p1["zero edges"]["store_key"] != p1["full"]["store_key"]


# ----------------------------------------------------------------------------- sweep
def test_sweep_figures_and_table(tree):
    rc, out, err = tree["sweep"]
    assert rc == 0, err
    o = tree["out"]
    rep = report_dir(o, "sweep")
    for f in ("sweep_alpha.png", "sweep_beta.png"):
        assert (rep / f).stat().st_size > 5_000
    text = (rep / "sweep.md").read_text()
    alpha, beta = text.split("## β")
    f = folders(out)

    def at(a, b):
        return f[f"argtca-div alpha={a} beta={b} on demo, seed 1"]

    def cell(a, b):
        acc, ece = recomputed(at(a, b))
        return f"{acc:.2f} / {ece:.2f}"
    # α line at β = 35 and β line at α = 10 (one point each at this size)
    a_rows = md_rows(alpha)
    assert a_rows[0][2:] == ["α=20"]
    assert a_rows[1][1] == "ArgTCA (div) (β=35)" and a_rows[1][2:] == [cell(20, 35)]
    b_rows = md_rows(beta)
    assert b_rows[0][2:] == ["β=50"]
    assert b_rows[1][1] == "ArgTCA (div) (α=10)" and b_rows[1][2:] == [cell(10, 50)]
    assert summary(at(20, 35))["trainer_cfg"]["TRAINER.ARGTCA.ALPHA"] == 20.0
    assert at(20, 35) != at(10, 50) and HASHED.search(str(at(20, 35)))


# ----------------------------------------------------------------------------- Table 3
def test_table3_attributes_of_chosen_classes(tree):
    rc, out, err = tree["t3"]
    assert rc == 0, err
    o = tree["out"]
    rows = md_rows((o / "report/table3/demo.md").read_text())
    assert rows[0] == ["class", "tca", "div", "disc"]
    assert [r[0] for r in rows[1:]] == ["tomato", "lime"]
    attrs = json.loads((REPO / "argtca/demo/assets/demo_attributes.json").read_text())
    dirs = run_dirs(tree)
    div = json.loads((dirs["ArgTCA (div)"] / "phase1.json").read_text())["selected"]
    disc = json.loads((dirs["ArgTCA (disc)"] / "phase1.json").read_text())["selected"]
    for r in rows[1:]:
        c = r[0]
        assert r[1] == ", ".join(attrs[c].split()[:2])      # TCA: the file's first two
        assert r[2] == ", ".join(div[c]) and r[3] == ", ".join(disc[c])   # the runs' picks
    assert "## demo" in (o / "report/table3/table3.md").read_text()


# ----------------------------------------------------------------------------- tuning
def test_tune_grid_rule_and_config_for_table1(tree):
    rc, out, err = tree["tune"]
    assert rc == 0, err
    o = tree["out"]
    rep = o / "report/tune_demo_val"
    grid = list(csv.DictReader((rep / "grid.csv").open()))
    assert [(g["method"], g["setting"]) for g in grid] == [
        ("ctpt", "TRAINER.CTPT.LAMBDA=0"), ("ctpt", "TRAINER.CTPT.LAMBDA=50"),
        ("tca", "TRAINER.TCA.ALPHA=10 TRAINER.TCA.BETA=35")]
    test_ids = {json.loads(line)["path"] for line in
                (run_dirs(tree)["Zero-shot CLIP"] / "records.jsonl").read_text().splitlines()}
    assert set(yaml.safe_load((o / "tuned.yaml").read_text())) == {"ctpt", "tca"}
    for g in grid:
        name = "_".join(f"{kv.split('=')[0].split('.')[-1].lower()}{kv.split('=')[1]}"
                        for kv in g["setting"].split())
        d = o / "tune/demo/val" / g["method"] / name / "seed1"
        s = summary(d)
        assert s["overrides"]["DATASET.SPLIT"] == "val"
        paths = {json.loads(line)["path"] for line in
                 (d / "records.jsonl").read_text().splitlines()}
        assert paths and not paths & test_ids   # evaluated on validation images only
        acc, ece = recomputed(d)
        assert float(g["accuracy"]) == pytest.approx(acc) and float(g["ece"]) == \
            pytest.approx(ece, abs=1e-4)
    # the rule, worked out here: lowest ECE among accuracies within 1 point of the best
    c = [g for g in grid if g["method"] == "ctpt"]
    best = max(float(g["accuracy"]) for g in c)
    ok = [g for g in c if float(g["accuracy"]) >= best - 1.0]
    pick = min(ok, key=lambda g: (float(g["ece"]), -float(g["accuracy"])))
    assert [g["chosen"] for g in c] == ["1" if g is pick else "0" for g in c]
    lam = float(pick["setting"].split("=")[1])
    tuned = yaml.safe_load((o / "tuned.yaml").read_text())
    assert tuned["ctpt"] == {"TRAINER.CTPT.LAMBDA": lam}
    assert tuned["tca"] == {"TRAINER.TCA.ALPHA": 10.0, "TRAINER.TCA.BETA": 35.0}
    assert "**chosen**" in (rep / "grid.md").read_text()
    # Table 1 with the tuned config: C-TPT runs the chosen lambda on the test split
    rc, out, err = tree["t1tuned"]
    assert rc == 0, err
    d = folders(out)["ctpt on demo, seed 1"]
    assert d.parent != run_dirs(tree)["C-TPT"].parent   # other weights: another experiment
    assert summary(d)["trainer_cfg"]["TRAINER.CTPT.LAMBDA"] == lam
    assert summary(d).get("overrides", {}).get("DATASET.SPLIT", "test") == "test"
    rows = list(csv.reader((o / "report/table1_tuned/table.csv").open()))
    acc, ece = recomputed(d)
    assert rows[1][3] == f"{acc:.2f}" and rows[2][3] == f"{ece:.2f}"
    # the tuned table never lands in (or overwrites) the default table's folder
    assert report_dir(o, "table1") != o / "report/table1_tuned"
    rc, out, err = tree["t1tuned_default"]
    assert rc == 0, err
    assert (report_dir(o, "table1-tuned") / "table.md").is_file()
    # an explicit report folder of other runs is refused (the runs stay), unless --force
    rc, out, err = tree["t1tuned_clash"]
    assert rc == 2 and "holds a table report of other runs" in err and "--force" in err


def test_table1_plan_and_default_datasets(tmp_path, monkeypatch):
    # only this test's folders: not the caller's output/ (a reader who ran the README has one)
    # nor a data root of theirs
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATA", raising=False)
    out_root = tmp_path / "out"
    from argtca.experiments import TABLE1_DATASETS
    from argtca.experiments.plan import TABLE1_EXTENSION
    assert TABLE1_DATASETS == ["caltech101", "oxford_pets", "stanford_cars", "oxford_flowers",
                               "food101", "fgvc_aircraft", "dtd", "eurosat", "ucf101"]
    assert TABLE1_EXTENSION == ["imagenet", "sun397"]
    # measured rates (a rate file of python -m argtca.bench table1, made by hand here): TPT on
    # the Caltech101 stand-in 64 images, loop 8 s, the whole run 10 s, 10 img/s after the first
    # batch -> 0.1 s an image and 3.6 s of start a run; zero-shot 0.01 s an image, 1 s of start
    from argtca.experiments.rates import derive
    rows = [derive({"method": m, "dataset": "caltech101", "backbone": "ViT-B/16", "views": "cpu",
                    "classes": 100, "n": 64, "loop_s": loop, "run_s": run, "commit": "abc1234",
                    "steady_img_per_s": steady})
            for m, loop, run, steady in (("tpt", 8.0, 10.0, 10.0), ("zeroshot", 1.0, 1.64, 100))]
    rates = tmp_path.parent / f"{tmp_path.name}-rates.json"
    rates.write_text(json.dumps({"machine": {"device": "cpu", "card": "cpu", "cores": 2,
                                             "date": "2026-12-06"}, "rows": rows}))
    rc, out, err = _call(["table1", "--plan", "--seeds", "1,2", "--methods", "tpt,zeroshot",
                          "--out-root", str(out_root), "--rates", str(rates),
                          "TTA.VIEWS_DEVICE", "cpu", "USE_CUDA", "False"])
    assert rc == 0, err
    lines = out.splitlines()
    assert not any("imagenet" in x or "sun397" in x for x in lines)
    cal = next(x for x in lines if x.startswith("[table1] caltech101")).split()
    # 2 methods x 2 seeds; 2465 images: 2 x ((3.6 + 246.5) + (1 + 24.65)) = 551.5 s = 9 min
    assert cal[2:7] == ["4", "2465", str(4 * 2465), "100", "9"]
    # Food101 (101 classes, not measured) at Caltech101's rate: 2 x (3.6 + 3030 + 1 + 303) s
    food = next(x for x in lines if x.startswith("[table1] food101")).split()
    assert food[2:8] == ["4", "30300", str(4 * 30300), "101", "1.9", "h"]
    assert "[table1] 63846 test images per method and seed" in lines
    assert f"[table1] rates: {rates} (cpu, 2 cores, commit abc1234, 2026-12-06; 64 images per " \
           f"method and dataset)" in lines
    assert "[table1] time below: CPU exact views (TPT's PIL pipeline) on the CPU (no CUDA here)" \
        in out
    assert list(tmp_path.iterdir()) == []   # --plan writes nothing, no report folder either
    rc, out, err = _call(["table1", "--plan", "--extended", "--seeds", "1",
                          "--out-root", str(out_root)])
    assert rc == 0 and "[table1] imagenet" in out and "[table1] sun397" in out


def test_demo_plan_uses_its_sizes_and_this_machines_rates(tmp_path, monkeypatch):
    """table1 demo --plan on a machine without CUDA: the demo's 320 images and 16 classes (no
    published split: its image list), the CPU's stored rates (benchmarks/rates, chosen by
    device), every method's time from them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARGTCA_RATES", raising=False)
    rc, out, err = _call(["table1", "demo", "--plan", "--out-root", str(tmp_path / "o"),
                          "TTA.VIEWS_DEVICE", "cpu", "USE_CUDA", "False"])
    assert rc == 0, err
    from argtca.experiments.rates import rates_dir, run_seconds
    from argtca.experiments.plan import METHODS
    f = sorted(rates_dir().glob("cpu-*cores.json"))
    assert f, "no CPU rate file in benchmarks/rates"
    cpu = [p for p in f if p.name == "cpu-2cores.json"] or f
    rows = json.loads(cpu[0].read_text())["rows"]
    demo = {r["method"]: r for r in rows if r["dataset"] == "demo" and not r.get("settings")}
    assert set(demo) == set(METHODS)            # every method of the table measured on the demo
    s = 3 * sum(run_seconds(demo[m], 320) for m in METHODS)
    cells = next(x for x in out.splitlines() if x.startswith("[table1] demo")).split()
    assert cells[2:6] == ["66", "320", str(66 * 320), "16"]
    assert " ".join(cells[6:]) == (f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min")
    assert f"[table1] rates: benchmarks/rates/{cpu[0].name} (cpu, " in out
    assert "?" not in " ".join(cells) and "no measured rate" not in out


def test_choose_rule_by_hand():
    from argtca.experiments.tune import Point, choose
    pts = [Point("ctpt", (("K", str(i)),), acc, ece, math.nan, math.nan, [1])
           for i, (acc, ece) in enumerate([(70.0, 5.0), (69.5, 3.0), (68.9, 1.0), (69.5, 3.0)])]
    assert choose(pts, 1.0) is pts[1]           # 68.9 is out; a tie keeps grid order
    assert [p.within for p in pts] == [True, True, False, True]
    for p in pts:
        p.chosen = False
    assert choose(pts, 1.1) is pts[2]
    for p in pts:
        p.chosen = False
    assert choose(pts, 0.0) is pts[0]


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("argv, needle", [
    (["table1", "demo", "TTA.N_VIEWS"], "KEY VALUE pairs"),
    (["table1", "demo", "TTA.NO_SUCH", "1"], "unknown config key TTA.NO_SUCH"),
    (["table1", "demo", "--methods", "tpt,nope"], "unknown method 'nope'"),
    (["table1", "nope_ds"], "no configs/datasets/nope_ds.yaml"),
    (["tune", "demo", "--grid", "TTA.LR=1"], "not a baseline's weight"),
    (["tune", "demo", "--grid", "TRAINER.CTPT.LAMBDA=a"], "'a' is not a number"),
    (["table2", "--root", "/nonexistent/data"], "nothing to run: no dataset is present"),
])
def test_bad_input_is_one_line(argv, needle):
    rc, out, err = _call(argv + ["--dry-run"])
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_bad_baseline_config(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("ctpt:\n  TRAINER.CTPT.LAMBDAX: 1\n")
    rc, out, err = _call(["table1", "demo", "--dry-run", "--baseline-config", str(bad)])
    assert rc == 2 and str(bad) in err and "TRAINER.CTPT.LAMBDAX" in err
    bad.write_text("nomethod:\n  TRAINER.CTPT.LAMBDA: 1\n")
    rc, out, err = _call(["table1", "demo", "--dry-run", "--baseline-config", str(bad)])
    assert rc == 2 and "unknown method 'nomethod'" in err


def test_scripts_pass_options_and_opts(tmp_path):
    """The shell wrappers: arguments and $OPTS reach every planned run (dry run: nothing runs)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHON=sys.executable,
               OPTS="TTA.N_VIEWS 8", ARGTCA_CACHE=str(tmp_path / "c"))
    env.pop("DATA", None)
    p = subprocess.run(["bash", "scripts/table1.sh", "demo", "--seeds", "1", "--dry-run",
                        "--out-root", str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    runs = [ln for ln in p.stdout.splitlines() if "would run" in ln]
    from argtca.trainers.catalogue import method_sets
    assert len(runs) == len(method_sets()["all"]) >= 19
    assert all(ln.endswith("(TTA.N_VIEWS 8)") for ln in runs)
    assert re.search(f"argtca-disc on demo, seed 1 -> {tmp_path}/argtca/demo/[0-9a-f]{{8}}/seed1 ",
                     runs[-1])


def test_execute_goes_on_after_a_failure_and_stops_on_ctrl_c(tmp_path, capsys):
    """A failed run is listed and the others still run; Ctrl-C (exit 130) stops the batch."""
    from argtca.experiments.plan import RunSpec, failure_lines
    from argtca.experiments.runner import execute
    specs = [RunSpec("tpt", "demo", 1, tmp_path / n) for n in ("a", "b", "c")]
    calls = []

    def runner(argv):
        out = Path(argv[argv.index("--output-dir") + 1])
        calls.append(out.name)
        if out.name == "b":
            return 2
        out.mkdir()
        (out / "summary.json").write_text("{}")
        return 0
    outcomes = execute(specs, "", runner=runner, tag="t")
    assert calls == ["a", "b", "c"] and [o.ok for o in outcomes] == [True, False, True]
    lines = failure_lines(outcomes, "t")
    assert lines[0].startswith("[t] 1 of 3 run(s) failed") and lines[1].endswith(
        f"exit 2, {tmp_path / 'b'}")
    assert "[t] error: tpt on demo, seed 1 failed (exit 2" in capsys.readouterr().err
    calls.clear()
    with pytest.raises(SystemExit) as e:
        execute([RunSpec("tpt", "demo", 1, tmp_path / "x")] + specs, "",
                runner=lambda argv: calls.append(1) or 130, tag="t")
    assert e.value.code == 130 and calls == [1]
    assert "interrupted" in capsys.readouterr().err


def test_execute_skips_finished_runs_and_checks_the_rest_before_any(tmp_path, capsys):
    """A hash-keyed folder holding config.json and summary.json is not started again (nor
    checked); a run that cannot be set up (here: no data) stops every run before the first
    starts, with one message naming the problem, its fix and the run."""
    from argtca.experiments.plan import RunSpec
    from argtca.experiments.runner import execute
    from argtca.experiments.preflight import PreflightError
    done = tmp_path / "tpt/demo/0123abcd/seed1"
    done.mkdir(parents=True)
    for f in ("config.json", "summary.json"):
        (done / f).write_text("{}")
    no_data = tmp_path / "no_data"
    specs = [RunSpec("tpt", "demo", 1, done, out_root=tmp_path),
             RunSpec("tpt", "caltech101", 1, out_root=tmp_path)]
    calls = []
    with pytest.raises(PreflightError) as e:
        execute(specs, str(no_data), tag="t", runner=lambda argv: calls.append(argv) or 2)
    msg = str(e.value)
    assert calls == [] and msg.startswith("[t] error: no run started:")
    assert f"data root {no_data}" in msg and "(tpt on caltech101, seed 1)" in msg
    assert msg.count("data root") == 1 and specs[1].out is None
    outcomes = execute(specs[:1], str(no_data), tag="t",
                       runner=lambda argv: calls.append(argv) or 2)
    assert calls == [] and [o.ok for o in outcomes] == [True]
    assert f"[t] 1/1 tpt on demo, seed 1 -> {done} (finished: re-read)" in capsys.readouterr().out
