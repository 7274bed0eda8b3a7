"""What a run and a table print, through the public commands: Ctrl-C inside table1 is one line
naming the command the user ran, a resumed run says where it resumed, a finished one that it is
only re-read, a single run checks its weights before any note, table1's closing lines name the
report folder and table.md first, table.csv holds numbers and table.tex is a booktabs table, no
Average over one dataset, views stated per family, ``data list`` columns, ``run --help``,
``select_attributes`` naming the classes it leaves out, ``shift`` on other sets."""
import csv
import io
import json
import re
import subprocess
import tokenize
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from argtca.experiments.__main__ import main as experiments_main
from argtca.run import main as run_main
from argtca.trainers import base as trainer_base

REPO = Path(__file__).resolve().parents[2]
TINY = ["DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED",
        "random", "INPUT.SIZE", "(32, 32)", "TTA.BATCH_IMAGES", "1"]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ARGTCA_COMMAND", raising=False)   # not called by a script
    return tmp_path


def _call(fn, argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = fn(argv)
    return rc, out.getvalue(), err.getvalue()


def test_ctrl_c_in_table1_is_one_line_naming_the_command_then_resumed_at(here, monkeypatch):
    trainer = trainer_base.TestTimeTrainer
    real = trainer.after_batch

    def interrupt_after_two(self, records):   # Ctrl-C once two images are recorded
        real(self, records)
        if len(records) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(trainer, "after_batch", interrupt_after_two)
    argv = ["table1", "demo", "--seeds", "1", "--methods", "tpt"] + TINY
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as stop, redirect_stdout(out), redirect_stderr(err):
        experiments_main(argv)
    assert stop.value.code == 130
    # one line, naming the user's command (not the inner run's) and where the images are kept
    said = [ln for ln in (out.getvalue() + err.getvalue()).splitlines()
            if "interrupt" in ln or "resume" in ln]
    assert len(said) == 1, said
    assert said[0].startswith("[table1] interrupted at tpt on demo, seed 1")
    assert said[0].endswith("python -m argtca.experiments table1 demo --seeds 1 --methods tpt "
                            + " ".join(f"'{x}'" if " " in x else x for x in TINY))
    assert re.search(r"kept in output/tpt/demo/\w{8}/seed1/records.jsonl", said[0])
    assert "python -m argtca.run" not in out.getvalue() + err.getvalue()
    monkeypatch.setattr(trainer, "after_batch", real)
    rc, out, err = _call(experiments_main, argv)
    assert rc == 0, err
    assert "argtca: resumed at 2 of 4 images (records.jsonl)" in out


def test_a_script_names_itself_and_its_variables_as_the_command(tmp_path):
    r = subprocess.run(["bash", "-c", f'. "{REPO}/scripts/_common.sh"; echo "$ARGTCA_COMMAND"',
                        "scripts/table1.sh", "demo", "--seeds", "1", "a b"],
                       env={"PATH": "/usr/bin:/bin", "DATA": "~/my data", "HOME": str(tmp_path)},
                       capture_output=True, text=True)
    assert r.stdout.strip() == r"DATA=\~/my\ data bash scripts/table1.sh demo --seeds 1 a\ b"


def test_a_finished_run_says_it_is_only_re_read(here):
    for argv in (["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
                  "--trainer", "tpt"],
                 ["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
                  "--config-file", str(REPO / "configs/trainers/argtca.yaml"),
                  "TRAINER.ARGTCA.GAT.EPOCHS", "2"]):
        argv = argv[:2] + ["--seed", "1"] + argv[2:] + TINY
        rc, out, err = _call(run_main, argv)
        assert rc == 0 and "already finished" not in out, err
        rc, out, err = _call(run_main, argv)
        assert rc == 0 and "argtca: already finished (re-read): 4 of 4 images" in out, err
        assert "[phase 1]" not in out           # nothing is computed again


def test_a_single_run_checks_its_weights_before_any_note(here):
    r = subprocess.run(["bash", str(REPO / "scripts/baseline.sh"), "demo", "zeroshot",
                        "MODEL.PRETRAINED", "/nonexistent.pt"], cwd=here,
                       capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(here),
                            "PYTHON": __import__("sys").executable,
                            "ARGTCA_CACHE": str(here / "cache")})
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "error: MODEL.PRETRAINED checkpoint not found: /nonexistent.pt; give an existing file "
        "(e.g. OpenAI's ViT-B-16.pt) or a tag such as 'openai'"]
    assert not (here / "output").exists()


def _records_acc(folder: Path) -> float:
    recs = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines() if x]
    return 100 * float(np.mean([r["pred"] == r["label"] for r in recs]))


def test_table1_prints_the_report_folder_numbers_and_a_paper_table(here):
    rc, out, err = _call(experiments_main, ["table1", "demo", "--seeds", "1,2", "--quiet",
                                            "--methods", "zeroshot,tpt"] + TINY)
    assert rc == 0, err
    rep = next((here / "output" / "report").glob("table1-*")).resolve()
    wrote = [ln for ln in out.splitlines() if ln.startswith("[table1] ")][-2:]
    assert wrote[0] == f"[table1] wrote: {rep}/table.md"
    assert wrote[1].startswith(f"[table1]   and in {rep}/: report.json, table.csv, table.tex")
    assert "reliability.png/.pdf" in wrote[1] and str(rep) not in wrote[1].split(": ", 1)[1]
    # table.csv: numbers, mean and std over the two seeds, each recomputed from the records
    rows = list(csv.DictReader(io.StringIO((rep / "table.csv").read_text())))
    assert list(rows[0]) == ["Method", "Family", "Metric", "Demo mean", "Demo std"]
    for label, method in (("Zero-shot CLIP", "zeroshot"), ("TPT", "tpt")):
        accs = [_records_acc(p) for p in sorted((here / "output" / method / "demo").glob(
            "*/seed*"))]
        row = next(r for r in rows if r["Method"] == label and r["Metric"] == "Acc")
        assert float(row["Demo mean"]) == pytest.approx(np.mean(accs), abs=0.005)
        assert float(row["Demo std"]) == pytest.approx(np.std(accs, ddof=1), abs=0.005)
    # one dataset: no Average column anywhere
    md = (rep / "table.md").read_text()
    assert "| Method | Metric | Demo |\n" in md and "Average" not in md
    # table.tex: booktabs, a group row per family, never two rules in a row
    tex = (rep / "table.tex").read_text().splitlines()
    assert tex[1] == r"\begin{tabular}{llr}" and tex[3] == r"Method & Metric & Demo \\"
    assert r"\multicolumn{3}{l}{\textit{Zero-shot}} \\" in tex
    assert r"\multicolumn{3}{l}{\textit{TPT family}} \\" in tex
    rules = [i for i, ln in enumerate(tex) if ln.endswith("rule") or ln.startswith(r"\addl")]
    assert all(b - a > 1 for a, b in zip(rules, rules[1:])), tex
    assert all(ln.count("&") == 2 for ln in tex if ln.endswith(r"\\") and "multicol" not in ln)
    # views per family: zero-shot computes on the image alone, TPT on its 2 views
    assert "views 2 (not the methods' defaults; Zero-shot: 1, the test image alone)" in md


def test_a_zero_shot_table_does_not_say_64_views(here):
    rc, out, err = _call(experiments_main, ["table1", "demo", "--seeds", "1", "--quiet",
                                            "--methods", "zeroshot"] + TINY)
    assert rc == 0, err
    assert "views 1 (zero-shot: the test image alone)" in out and "views 2" not in out


def test_data_list_columns_hold_long_names_and_the_demo():
    from argtca.data.__main__ import main
    rc, out, _ = _call(main, ["list"])
    lines = out.splitlines()
    assert rc == 0 and lines[1].split()[:2] == ["demo", "embedded"]
    table = lines[:-1]
    start = lines[0].index("layout")           # the layout column: the same offset on each line
    for ln in table[1:]:
        assert ln[start - 2:start] == "  " and ln[start] != " ", ln
    assert any(len(ln) > start + 60 for ln in table)   # a long layout does not shift the others


def test_run_help_keeps_its_line_continuations():
    r = subprocess.run([__import__("sys").executable, "-m", "argtca.run", "--help"],
                       capture_output=True, text=True, cwd=REPO)
    assert "configs/datasets/caltech101.yaml \\\n        --config-file" in r.stdout


def test_no_docstring_or_string_swallows_a_line_continuation():
    """A backslash at the end of a line inside a plain (not raw) string literal joins two lines
    (the usage example of ``run --help`` lost its backslash this way)."""
    odd = re.compile(r"(?<!\\)(?:\\\\)*\\\n")
    bad = []
    for path in sorted((REPO / "argtca").rglob("*.py")):
        with open(path, "rb") as f:
            for tok in tokenize.tokenize(f.readline):
                if tok.type != tokenize.STRING:
                    continue
                prefix = re.match(r"[A-Za-z]*", tok.string).group().lower()
                if "r" not in prefix and odd.search(tok.string):
                    bad.append(f"{path.relative_to(REPO)}:{tok.start[0]}")
    assert not bad, bad


def test_select_attributes_says_which_classes_it_leaves_out(here):
    from argtca.experiments.select_attributes import main
    rc, out, err = _call(main, ["demo", "--selectors", "tca"])
    assert rc == 0, err
    rows = [ln for ln in out.splitlines() if " | " in ln][1:]
    assert len(rows) == 5
    assert out.splitlines()[-1] == (
        "(5 of 16 classes of Demo shown; --num-classes 16 shows every class, --class NAME "
        "(repeatable) the ones you name; the others: basketball, coin, cookie, donut, brick, "
        "stop sign, yield sign, dice, ...)")
    rc, out, err = _call(main, ["demo", "--selectors", "tca", "--num-classes", "16"])
    assert rc == 0 and "classes of Demo shown" not in out


def test_shift_on_other_sets_carries_no_imagenet_number(here):
    rc, out, err = _call(experiments_main, ["shift", "demo", "--seeds", "1", "--quiet",
                                            "--methods", "zeroshot"] + TINY)
    assert rc == 0, err
    md = (next((here / "output" / "report").glob("shift-*")) / "shift.md").read_text()
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert table[0] == "| Method | Source | Demo |"      # table.md's name; no average of one
    assert [ln.split(" | ")[1] for ln in table[1:]] == ["ours"]   # no published row
    assert "59.11" not in md and "published" not in md.split("\n\n", 2)[1]
