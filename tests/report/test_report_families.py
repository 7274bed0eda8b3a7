"""Tables group their rows by method family (TPT family, training-free, online, ArgTCA), mark the
online rows and say which stream order they saw."""
import json
from pathlib import Path

from run_records import write_summary

from argtca.report import build_table, find_runs, group_runs, table_markdown
from argtca.report.tables import table_latex


def _run(root: Path, sub: str, method: str, label: str, acc: float, family=None, config=None):
    d = root / sub
    d.mkdir(parents=True)
    cfg = {"SEED": 1, "DATASET.NAME": "Caltech101", "TEST_SET.N_IMAGES": 60,
           "TEST_SET.ITEMS_SHA256": "items", "RUN.DEVICE_TYPE": "cuda"}
    cfg.update(config or {})
    (d / "config.json").write_text(json.dumps(cfg))
    summary = {"method": method, "selector": None, "label": label, "dataset": "Caltech101",
               "dataset_key": "caltech101", "seed": 1}
    if family:
        summary["family"] = family
    write_summary(d, summary, 60, acc, 5.0)


def _table(root):
    labels, datasets, cells = group_runs(find_runs([root]))
    return build_table(labels, datasets, cells)


def test_rows_are_grouped_by_family_and_online_rows_say_their_order(tmp_path):
    # written in an order unlike the table's
    _run(tmp_path, "tda", "tda", "TDA (online)", 70.0, "online")
    _run(tmp_path, "zero", "zero", "ZERO", 66.0, "training-free")
    _run(tmp_path, "tpt", "tpt", "TPT", 65.0)
    _run(tmp_path, "rtpt", "rtpt", "R-TPT", 67.0)
    t = _table(tmp_path)
    assert t.labels == ["TPT", "R-TPT", "ZERO", "TDA (online)"]
    md = table_markdown(t)
    rows = [ln.split("|")[1].strip() for ln in md.splitlines() if ln.startswith("| ")]
    assert rows == ["Method", "*TPT family*", "TPT", "", "R-TPT", "", "*Training-free*", "ZERO",
                    "", "*Online*", "TDA (online)", ""]
    assert "stream order: shuffled by each seed (TTA.STREAM)" in md
    tex = table_latex(t)
    # booktabs: a group row per family, one rule between families (none doubled), a little
    # space between the methods of a family
    assert "\\midrule\\midrule" not in tex and tex.count("\\midrule") == 1 + 2
    groups = [ln for ln in tex.splitlines() if ln.startswith("\\multicolumn")]
    assert groups == ["\\multicolumn{3}{l}{\\textit{%s}} \\\\" % g
                      for g in ("TPT family", "Training-free", "Online")]
    assert tex.count("\\addlinespace") == 1                  # TPT | R-TPT


def test_a_fixed_stream_seed_or_the_index_order_is_named(tmp_path):
    _run(tmp_path, "a", "tda", "TDA (online)", 70.0, "online", {"TTA.STREAM.SEED": 7})
    _run(tmp_path, "b", "dpe", "DPE (online)", 71.0, "online", {"TTA.STREAM.ORDER": "index"})
    md = table_markdown(_table(tmp_path))
    assert "shuffled by stream seed 7; the split file's order (TTA.STREAM)" in md


def test_a_table_of_one_family_has_no_group_rows(tmp_path):
    _run(tmp_path, "tpt", "tpt", "TPT", 65.0)
    _run(tmp_path, "ctpt", "ctpt", "C-TPT", 66.0)
    md = table_markdown(_table(tmp_path))
    assert "*TPT family*" not in md and "online" not in md
