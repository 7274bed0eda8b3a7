"""Records that are not finite (issue 39, item 3): a run whose records.jsonl holds a NaN or
infinite confidence, p_label or Brier score, one out of its range, or a class that is not an
integer, is left out of ``python -m argtca.report TREE`` and named with its line in skipped.md;
the other runs are reported (before: the whole report ended in a traceback)."""
import json
import subprocess
import sys
from pathlib import Path

from test_report import write_run
from test_report_robust import _skipped

REPO = Path(__file__).resolve().parents[2]

# folder -> (line edited (1-based), key, JSON text written for its value, what the reason says)
BAD = {
    "nan_conf": (3, "conf", "NaN", "conf=nan is not a finite number"),
    "inf_p_label": (1, "p_label", "Infinity", "p_label=inf is not a finite number"),
    "neg_inf_brier": (7, "brier", "-Infinity", "brier=-inf is not a finite number"),
    "conf_above_one": (2, "conf", "1.5", "conf=1.5 is outside [0, 1]"),
    "brier_above_two": (5, "brier", "2.5", "brier=2.5 is outside [0, 2]"),
    "nan_pred": (4, "pred", "NaN", "pred=nan is not an integer"),
    "huge_label": (6, "label", "1e400", "label=inf is not an integer"),
    "string_p_label": (8, "p_label", '"0.3"', "p_label='0.3' is not a number"),
}


def _edit(path: Path, line: int, key: str, text: str) -> None:
    """Line ``line`` of records.jsonl with ``key``'s value written as the JSON text ``text``
    (json.dumps itself writes NaN / Infinity for non-finite floats, as a killed or edited
    writer would leave them)."""
    lines = path.read_text().splitlines()
    rec = json.loads(lines[line - 1])
    rec[key] = "@@"
    lines[line - 1] = json.dumps(rec).replace('"@@"', text)
    path.write_text("\n".join(lines) + "\n")


def test_report_leaves_out_runs_whose_records_are_not_finite(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "zeroshot", "imagenet", 1, 50.0, 2.0, n_records=40)
    write_run(root, "tpt", "imagenet", 1, 55.0, 9.0, n_records=40)
    methods = ["ctpt", "atpt", "tca"]
    for i, (sub, (line, key, text, _)) in enumerate(BAD.items()):
        # every bad folder is a method of its own: nothing else could leave it out
        d = write_run(root, methods[i % 3], "caltech101", i + 1, 60.0, 3.0, n_records=40,
                      sub=sub)
        _edit(d / "records.jsonl", line, key, text)
    out = tmp_path / "rep"
    p = subprocess.run([sys.executable, "-m", "argtca.report", str(root), "--out", str(out)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    table = (out / "table.md").read_text()
    # the finite runs, with the numbers their records were written to give (k/n = 20/40, 22/40)
    row = {ln.split("|")[1].strip(): ln for ln in table.splitlines() if ln.startswith("| ")}
    assert "50.00" in row["CLIP"] and "55.00" in row["TPT"], table
    assert not any(label in table for label in ("C-TPT", "A-TPT", "TCA", "Caltech101"))
    sk = _skipped(out)
    assert set(sk) == set(BAD), sk
    for sub, (line, key, text, reason) in BAD.items():
        assert sk[sub].startswith("| broken |"), sk[sub]
        assert f"records.jsonl:{line}: {reason}" in sk[sub], sk[sub]
    assert f"left out: {len(BAD)} run folder(s)" in p.stdout
    warn = [x for x in p.stderr.splitlines() if "skipped broken" in x]
    assert len(warn) == len(BAD), p.stderr
