import csv
import io
import json
from pathlib import Path

import pytest
from run_records import write_summary

from argtca import report
from argtca.report import (ReportError, ablation_table, attribute_table, build_table, find_runs,
                           group_runs, main, make_report, sweep_points, table_latex,
                           table_markdown)

LABELS = {"zeroshot": "CLIP", "tpt": "TPT", "ctpt": "C-TPT", "atpt": "A-TPT", "tca": "TCA"}
DATASETS = {"caltech101": "Caltech101", "imagenet": "ImageNet"}


def write_run(root: Path, method, dataset_key, seed, acc, ece, selector=None, overrides=None,
              n_records=200, phase1=None, sub=None):
    """A finished run folder: records whose accuracy and ECE are ``acc`` and ``ece`` (to the
    nearest k/n_records) and a summary of the numbers they give."""
    label = f"ArgTCA ({selector})" if method == "argtca" else LABELS[method]
    d = root / (sub or f"{method}/{dataset_key}/{selector or ''}/seed{seed}")
    d.mkdir(parents=True)
    summary = {"method": method, "selector": selector, "label": label, "trainer": method,
               "dataset": DATASETS[dataset_key], "dataset_key": dataset_key, "seed": seed,
               "backbone": "ViT-B/16", "config_hash": "x", "overrides": overrides or {}}
    write_summary(d, summary, n_records, acc, ece)
    if phase1 is not None:
        (d / "phase1.json").write_text(json.dumps({"selected": phase1}))
    return d


@pytest.fixture
def three_by_two(tmp_path):
    """CLIP / TPT / ArgTCA(div) x ImageNet / Caltech101; TPT has 2 seeds on Caltech101.
    Written in a scrambled order (and on two 'machines') to exercise sorting and merging."""
    a, b = tmp_path / "machineA", tmp_path / "machineB"
    write_run(a, "argtca", "imagenet", 1, 46.0, 4.5, selector="div")
    write_run(a, "tpt", "caltech101", 1, 92.0, 8.0)
    write_run(b, "tpt", "caltech101", 2, 94.0, 6.0)
    write_run(a, "zeroshot", "imagenet", 1, 40.0, 5.0)
    write_run(b, "argtca", "caltech101", 1, 91.0, 2.0, selector="div")
    write_run(a, "tpt", "imagenet", 1, 45.0, 9.0)
    write_run(b, "zeroshot", "caltech101", 1, 90.0, 3.0)
    return a, b


def md_rows(text):
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_table_marks_and_averages(three_by_two, tmp_path):
    runs = find_runs(three_by_two)
    assert len(runs) == 7
    labels, datasets, cells = group_runs(runs)
    assert labels == ["CLIP", "TPT", "ArgTCA (div)"]             # canonical method order
    assert [d for _, d in datasets] == ["ImageNet", "Caltech101"]   # canonical dataset order
    assert cells[("TPT", "caltech101")].seeds == [1, 2]
    t = build_table(labels, datasets, cells)
    # by hand: TPT Caltech101 = mean of the two seeds
    tpt_cal_acc, tpt_cal_ece = (92.0 + 94.0) / 2, (8.0 + 6.0) / 2
    assert t.values[("TPT", "accuracy", "caltech101")] == pytest.approx(tpt_cal_acc)
    avg = {"CLIP": ((40.0 + 90.0) / 2, (5.0 + 3.0) / 2),
           "TPT": ((45.0 + tpt_cal_acc) / 2, (9.0 + tpt_cal_ece) / 2),
           "ArgTCA (div)": ((46.0 + 91.0) / 2, (4.5 + 2.0) / 2)}
    for lab, (acc, ece) in avg.items():
        assert t.values[(lab, "accuracy", report.AVERAGE)] == pytest.approx(acc)
        assert t.values[(lab, "ece", report.AVERAGE)] == pytest.approx(ece)

    md = table_markdown(t)
    rows = md_rows(md)
    assert rows[0] == "| Method | Metric | ImageNet | Caltech101 | Average |"
    # ImageNet acc: 46 > 45 > 40; Caltech acc: 93 > 91 > 90; Avg acc: 69 > 68.5 > 65
    # ImageNet ECE: 4.5 < 5 < 9;  Caltech ECE: 2 < 3 < 7;    Avg ECE: 3.25 < 4 < 8
    assert rows[1:] == [   # rows grouped by method family
        "| *Zero-shot* |  |  |  |  |",
        "| CLIP | Acc | 40.00 | 90.00 | 65.00 |",
        "|  | ECE | <u>5.00</u> | <u>3.00</u> | <u>4.00</u> |",
        "| *TPT family* |  |  |  |  |",
        "| TPT | Acc | <u>45.00</u> | **93.00** | **69.00** |",
        "|  | ECE | 9.00 | 7.00 | 8.00 |",
        "| *ArgTCA* |  |  |  |  |",
        "| ArgTCA (div) | Acc | **46.00** | <u>91.00</u> | <u>68.50</u> |",
        "|  | ECE | **4.50** | **2.00** | **3.25** |",
    ]
    assert "- 2 seed(s) (1, 2): TPT / Caltech101\n" in md
    assert "- 1 seed(s) (1): all other cells" in md

    tex = table_latex(t)
    assert "TPT & Acc & \\underline{45.00} & \\textbf{93.00} & \\textbf{69.00} \\\\" in tex
    assert "ArgTCA (div) & Acc" in tex and "\\toprule" in tex and "\\bottomrule" in tex

    out = tmp_path / "rep"
    written = make_report(three_by_two, out)
    rows_csv = list(csv.reader(io.StringIO((out / "table.csv").read_text())))
    assert rows_csv[0] == ["Method", "Family", "Metric", "ImageNet mean", "ImageNet std",
                           "Caltech101 mean", "Caltech101 std", "Average mean", "Average std"]
    # numbers only: TPT's two Caltech101 seeds (92, 94) have a std, sqrt(2) = 1.41; its
    # Average none (ImageNet has one seed)
    assert rows_csv[3] == ["TPT", "TPT family", "Acc", "45.00", "", "93.00", "1.41", "69.00",
                           ""]
    assert rows_csv[6] == ["ArgTCA (div)", "ArgTCA", "ECE", "4.50", "", "2.00", "", "3.25", ""]
    assert (out / "table.md").read_text() == md
    runs_lines = (out / "runs.csv").read_text().strip().splitlines()
    assert len(runs_lines) == 1 + 7
    for name in ("reliability.png", "confidence_hist.png", "ece_bars.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
        assert written[name] == out / name


def test_missing_cells_and_variants(three_by_two, tmp_path):
    a, _ = three_by_two
    write_run(a, "atpt", "imagenet", 1, 10.0, 1.0)          # no Caltech101 run
    write_run(a, "argtca", "imagenet", 1, 47.0, 4.0, selector="div",
              overrides={"TRAINER.ARGTCA.ALPHA": 20.0, "SEED": 1},
              sub="sweepish/a20")
    labels, datasets, cells = group_runs(find_runs([tmp_path]))
    assert labels == ["CLIP", "TPT", "A-TPT", "ArgTCA (div)", "ArgTCA (div) [alpha=20]"]
    t = build_table(labels, datasets, cells)
    rows = md_rows(table_markdown(t))
    # A-TPT has no Caltech101 -> missing cell and missing average; still best ImageNet ECE
    assert "| A-TPT | Acc | 10.00 | – | – |" in rows
    assert "|  | ECE | **1.00** | – | – |" in rows
    # the alpha=20 run is its own row (not averaged with the default run as a 'seed')
    assert cells[("ArgTCA (div)", "imagenet")].seeds == [1]
    assert t.values[("ArgTCA (div) [alpha=20]", "accuracy", "imagenet")] == 47.0


def test_ties_share_marks(tmp_path):
    write_run(tmp_path, "zeroshot", "imagenet", 1, 50.0, 2.0)
    write_run(tmp_path, "tpt", "imagenet", 1, 50.001, 2.0)  # same when rounded to 2 decimals
    write_run(tmp_path, "tca", "imagenet", 1, 49.0, 3.0)
    t = build_table(*group_runs(find_runs([tmp_path])))
    assert t.marks[("CLIP", "accuracy", "imagenet")] == "best"
    assert t.marks[("TPT", "accuracy", "imagenet")] == "best"
    assert t.marks[("TCA", "accuracy", "imagenet")] == "second"
    assert t.marks[("TPT", "ece", "imagenet")] == "best"


def test_attribute_table(tmp_path):
    picks = {
        "tca": {"cat": ["furry", "small"], "dog": ["loyal", "barks"], "owl": ["wings", "night"]},
        "div": {"cat": ["furry", "whiskers"], "dog": ["tail", "paws"], "owl": ["wings", "night"]},
        "disc": {"cat": ["meows", "purrs"], "dog": ["loyal", "barks"], "owl": ["beak", "night"]},
    }
    for sel, p in picks.items():
        write_run(tmp_path, "argtca", "caltech101", 1, 90.0, 3.0, selector=sel, phase1=p)
    runs = find_runs([tmp_path])
    group_runs(runs)
    md = attribute_table(runs, n_classes=2)
    rows = md_rows(md)
    assert rows[0] == ("| Class | ArgTCA (tca) (seed 1) | ArgTCA (div) (seed 1) | "
                       "ArgTCA (disc) (seed 1) |")
    # 2 evenly spaced classes of 3 -> the first and the last
    assert "| cat | furry, small | furry, whiskers | meows, purrs |" in rows
    assert "| owl | wings, night | wings, night | beak, night |" in rows
    assert not any(r.startswith("| dog |") for r in rows)
    # overlap tca-div: cat 1/2, dog 0, owl 1 -> 50%; tca-disc: 0, 1, 1/2 -> 50%;
    # div-disc: 0, 0, 1/2 -> 17%
    assert "| tca | 100% | 50% | 50% |" in rows
    assert "| div | 50% | 100% | 17% |" in rows


def test_sweep_points_and_plots(tmp_path):
    vals = {(5.0, 35.0): (60.0, 6.0), (10.0, 35.0): (61.0, 4.0), (20.0, 35.0): (62.0, 5.0),
            (10.0, 15.0): (59.0, 7.0), (10.0, 25.0): (60.0, 5.5)}
    for (a, b), (acc, ece) in vals.items():
        ov = {"TRAINER.ARGTCA.ALPHA": a, "TRAINER.ARGTCA.BETA": b}
        if (a, b) == (10.0, 35.0):
            ov = {}                                           # defaults left implicit
        write_run(tmp_path, "argtca", "caltech101", 1, acc, ece, selector="div", overrides=ov,
                  sub=f"a{a:g}_b{b:g}")
    write_run(tmp_path, "argtca", "caltech101", 2, 64.0, 8.0, selector="div",
              overrides={"TRAINER.ARGTCA.ALPHA": 5.0, "TRAINER.ARGTCA.BETA": 35.0},
              sub="a5_b35_seed2")
    runs = find_runs([tmp_path])
    sa = sweep_points(runs, "ALPHA")
    assert list(sa) == ["Caltech101"]
    (name, s), = sa["Caltech101"].items()
    assert name == "ArgTCA (div) (β=35)"
    assert s["x"].tolist() == [5.0, 10.0, 20.0]
    assert s["ece"].tolist() == pytest.approx([(6.0 + 8.0) / 2, 4.0, 5.0])
    assert s["acc"].tolist() == pytest.approx([(60.0 + 64.0) / 2, 61.0, 62.0])
    assert s["n_seeds"].tolist() == [2, 1, 1]
    (name_b, sb), = sweep_points(runs, "BETA")["Caltech101"].items()
    assert name_b == "ArgTCA (div) (α=10)"
    assert sb["x"].tolist() == [15.0, 25.0, 35.0]
    assert sb["ece"].tolist() == pytest.approx([7.0, 5.5, 4.0])
    assert main([str(tmp_path), "--out", str(tmp_path / "rep"), "--sweep"]) == 0
    for f in ("sweep_alpha.png", "sweep_beta.png"):
        assert (tmp_path / "rep" / f).stat().st_size > 10_000
    assert "61.00 / 4.00" in (tmp_path / "rep" / "sweep.md").read_text()


def test_ablation_table(tmp_path):
    E, M, S = "TRAINER.ARGTCA.EDGES", "TRAINER.ARGTCA.EMBEDDINGS", "TRAINER.ARGTCA.SELECTOR"
    spec = [("div", {}, 60.0, 3.0), ("disc", {}, 61.0, 2.5),
            ("div", {E: "none"}, 58.0, 4.0), ("disc", {E: "none"}, 59.0, 3.5),
            ("div", {M: "raw"}, 57.0, 5.0), ("disc", {M: "raw"}, 62.0, 6.0),
            ("random", {S: "random"}, 55.0, 7.0)]
    for i, (sel, ov, acc, ece) in enumerate(spec):
        write_run(tmp_path, "argtca", "imagenet", 1, acc, ece, selector=sel, overrides=ov,
                  sub=f"run{i}")
    write_run(tmp_path, "argtca", "imagenet", 2, 62.0, 4.0, selector="div", sub="run_full_s2")
    md = ablation_table(find_runs([tmp_path]))
    rows = md_rows(md)
    assert rows[0] == "| Variant | div Acc | div ECE | disc Acc | disc ECE |"
    # full/div averages seeds 1 and 2: acc (60+62)/2 = 61, ece (3+4)/2 = 3.5
    assert rows[1] == "| full | **61.00** | **3.50** [2] | 61.00 | **2.50** |"
    assert rows[2] == "| zero edges | 58.00 | 4.00 | 59.00 | 3.50 |"
    assert rows[3] == "| raw EOS | 57.00 | 5.00 | **62.00** | 6.00 |"
    assert rows[4] == "| random | 55.00 | 7.00 | 55.00 | 7.00 |"


def test_errors(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        find_runs([tmp_path / "nope"])
    with pytest.raises(ReportError, match="no summary.json"):
        find_runs([tmp_path])
    d = tmp_path / "bad"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"method": "tpt"}))
    with pytest.raises(ReportError, match="missing key"):
        find_runs([tmp_path])
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2


def test_bad_record_line_names_file(tmp_path):
    d = write_run(tmp_path, "tpt", "imagenet", 1, 50.0, 5.0)
    with open(d / "records.jsonl", "a") as f:
        f.write('{"conf": 0.5}\n')
    # read when the run is found (its numbers come from the records): the folder is left out
    with pytest.raises(ReportError, match=r"records.jsonl:201: bad record"):
        find_runs([tmp_path])


def test_ece_bars_and_single_dataset_cli(tmp_path):
    write_run(tmp_path, "zeroshot", "imagenet", 1, 50.0, 2.0)
    write_run(tmp_path, "tpt", "imagenet", 1, 52.0, 9.0)
    out = tmp_path / "rep"
    assert main([str(tmp_path), "--out", str(out), "--metrics", "accuracy,ece,nll"]) == 0
    assert (out / "ece_bars.png").stat().st_size > 5_000
    # one dataset: no Average column repeating it
    assert "| TPT | Acc | **52.00** |\n" in (out / "table.md").read_text()
    assert "|  | NLL |" in (out / "table.md").read_text()
    assert "No phase1.json" in (out / "attributes.md").read_text()


STUB = r'''
import json, os, sys
from pathlib import Path
kind, ds, what, *kv = sys.argv[1:]
seed = int(os.environ["SEED"])
with open("calls.log", "a") as f:
    f.write(" ".join([kind, ds, what] + kv) + f" | OPTS={os.environ.get('OPTS', '')}"
            f" | OUTPUT_DIR={os.environ.get('OUTPUT_DIR', '')}\n")
ov = {k: (float(v) if v.replace(".", "").isdigit() else v) for k, v in zip(kv[::2], kv[1::2])}
if kind == "baseline":
    out, method, sel = Path(f"output/{what}/{ds}/seed{seed}"), what, None
else:
    out = Path(os.environ.get("OUTPUT_DIR") or f"output/argtca/{ds}/{what}/seed{seed}")
    method, sel = "argtca", what
    if sel == "random":
        ov["TRAINER.ARGTCA.SELECTOR"] = "random"
# the run's contract: a finished folder of the same settings is reused, another is refused
if (out / "summary.json").exists():
    old = json.loads((out / "summary.json").read_text()).get("overrides", {})
    if old != ov:
        keys = sorted(k for k in set(old) | set(ov) if old.get(k) != ov.get(k))
        print(f"error: {out} holds results of a different configuration ({keys})",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(0)
# a recognisable value per run: one right answer, ece = 1 + number of overrides
out.mkdir(parents=True, exist_ok=True)
conf = 1 - (1.0 + len(ov)) / 100
(out / "records.jsonl").write_text(json.dumps({"index": 0, "label": 0, "pred": 0,
                                               "conf": conf}) + "\n")
(out / "summary.json").write_text(json.dumps({
    "method": method, "selector": sel, "label": f"ArgTCA ({sel})" if sel else what.upper(),
    "dataset": "Caltech101", "dataset_key": ds, "seed": seed, "n": 1,
    "accuracy": 100.0, "ece": 1.0 + len(ov), "overrides": ov}))
'''


def _stub_repo(tmp_path):
    import shutil
    import sys
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    src = Path(__file__).resolve().parents[2] / "scripts"
    for name in ("compare.sh", "_common.sh"):
        if (src / name).is_file():   # _common.sh: what the scripts share
            shutil.copy(src / name, repo / "scripts" / name)
    (repo / "stub.py").write_text(STUB)
    for name, kind in (("baseline.sh", "baseline"), ("argtca.sh", "argtca")):
        (repo / "scripts" / name).write_text(
            f'#!/usr/bin/env bash\nset -euo pipefail\n"{sys.executable}" stub.py {kind} "$@"\n')
    return repo


def _bash(repo, *args, **env):
    import os
    import subprocess
    import sys
    e = dict(os.environ, PYTHON=sys.executable,
             PYTHONPATH=str(Path(__file__).resolve().parents[2]), **env)
    e.pop("OUTPUT_DIR", None)
    return subprocess.run(["bash", *args], cwd=repo, env=e, capture_output=True, text=True,
                          timeout=120)


def test_compare_script_rejects_odd_opts(tmp_path):
    repo = _stub_repo(tmp_path)
    p = _bash(repo, "scripts/compare.sh", "caltech101", OPTS="TTA.N_VIEWS")
    assert p.returncode == 2 and "KEY VALUE pairs" in p.stderr
    p = _bash(repo, "scripts/compare.sh")
    assert p.returncode == 2 and "usage" in p.stderr
