"""The report drivers and ``python -m argtca.report``: side-by-side comparison reports from run
folders.

    python -m argtca.report RUN_DIR [RUN_DIR ...] --out REPORT_DIR [--attributes-classes N]
    python -m argtca.report output/sweep/caltech101 --out output/report/sweep_caltech101 --sweep
    python -m argtca.report output/argtca/dtd output/ablation/dtd --out REPORT --ablation

A RUN_DIR is a run folder (``summary.json``, ``records.jsonl``, argtca runs also
``phase1.json``) or any parent of run folders (searched recursively), so runs made on different
machines can be combined by pointing at several trees.

Grouping: runs with the same display label and dataset form one cell; their seeds are averaged
(the number of seeds is reported). When runs sharing a label differ in a config override that
matters (not the seed, output dir, dataset or dataloader keys), the differing keys are appended
to the label, e.g. ``ArgTCA (div) [alpha=20]``, so different settings are never averaged.

Main mode writes ``table.md``/``table.csv``/``table.tex`` (Table-1 layout: an Acc and an ECE
row per method, datasets + Average as columns; best bold, second underlined), ``runs.csv`` (one
line per run), ``reliability.png``, ``confidence_hist.png``, ``radar_ece.png`` and
``attributes.md``; with ``--std``, cells of several seeds read "mean ± std" and ``cells.csv``
lists mean, std and seeds per cell. ``--sweep`` writes ``sweep_alpha.png``, ``sweep_beta.png``
and ``sweep.md``; ``--ablation`` writes ``ablation.md``.

Run folders that cannot be used are left out and listed (stderr and ``skipped.md``): broken (a
summary or records file that cannot be read), interrupted (records but no summary yet) and
incomplete (a summary of fewer images than the test set, or disagreeing with its records). Two
folders claiming the same method, dataset, seed and settings are an error naming both.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .ablation import ablation_table
from .attributes import attribute_table
from .runs import METRICS, ReportError, RunProblem, _warn, find_runs
from .sweep import _sweep_markdown, sweep_points
from .tables import (build_table, cells_csv, group_runs, runs_csv, table_csv, table_latex,
                     table_markdown)


def write_skipped(out: Path, problems: List[RunProblem], written: Dict[str, Path]) -> None:
    """``skipped.md``: the run folders left out of the report and why (removed when none)."""
    path = out / "skipped.md"
    if not problems:
        if path.is_file():
            path.unlink()
        return
    lines = ["# Run folders not in this report", "",
             "| Status | Folder | Reason |", "|:---|:---|:---|"]
    for pr in sorted(problems, key=lambda p: (p.status, str(p.path))):
        reason = pr.reason.replace("|", "\\|").replace(f"{pr.path}/", "")
        lines.append(f"| {pr.status} | {pr.path} | {reason} |")
    path.write_text("\n".join(lines) + "\n")
    written["skipped.md"] = path


def make_report(paths: Sequence, out_dir, attributes_classes: int = 10,
                metrics: Sequence[str] = ("accuracy", "ece"), n_bins: int = 20,
                decimals: int = 2, show_std: bool = False) -> Dict[str, Path]:
    """Main comparison report; returns {name: path} of the files written. ``show_std``: cells
    of several seeds read "mean ± std" and ``cells.csv`` lists mean, std and seeds per cell."""
    from argtca.report import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems: List[RunProblem] = []
    runs = find_runs(paths, problems)
    labels, datasets, cells = group_runs(runs)
    table = build_table(labels, datasets, cells, metrics, decimals, show_std)
    written: Dict[str, Path] = {}
    write_skipped(out, problems, written)
    for r in runs:   # a damaged records.jsonl leaves that run out of the plots only
        try:
            r.records()
        except ReportError as e:
            _warn(f"plots leave out {r.path}: {e}")
            r._records = False

    def write(name: str, text: str) -> None:
        (out / name).write_text(text)
        written[name] = out / name

    write("table.md", table_markdown(table))
    write("table.csv", table_csv(table))
    write("table.tex", table_latex(table))
    write("runs.csv", runs_csv(runs))
    if show_std:
        write("cells.csv", cells_csv(table))
    write("attributes.md", attribute_table(runs, attributes_classes))

    names = [d for _, d in datasets]
    grid: Dict[Tuple[str, str], Any] = {}
    notes: Dict[Tuple[str, str], str] = {}
    for (lab, dk), c in cells.items():
        rec = c.pooled_records()
        if rec is not None:
            grid[(lab, dict(datasets)[dk])] = rec
            with_rec = sum(r.records() is not None for r in c.runs)
            if with_rec > 1:
                notes[(lab, dict(datasets)[dk])] = f"({with_rec} seeds pooled)"
    rows = [lab for lab in labels if any((lab, d) in grid for d in names)]
    if rows:
        written["reliability.png"] = plots.reliability_grid(
            grid, rows, names, out / "reliability.png", n_bins=n_bins, notes=notes)
        written["confidence_hist.png"] = plots.confidence_hist_grid(
            grid, rows, names, out / "confidence_hist.png", n_bins=n_bins)
    else:
        _warn("no records.jsonl in any run: reliability and histogram plots skipped")
    radar = {lab: [cells[(lab, dk)].mean("ece") if (lab, dk) in cells else math.nan
                   for dk, _ in datasets] for lab in labels}
    written["radar_ece.png"] = plots.ece_radar(radar, names, out / "radar_ece.png")
    return written


def make_sweep_report(paths: Sequence, out_dir) -> Dict[str, Path]:
    """Sensitivity plots: ECE/accuracy against α (``sweep_alpha.png``) and β
    (``sweep_beta.png``) from the runs' TRAINER.ARGTCA.ALPHA/BETA overrides, plus sweep.md."""
    from argtca.report import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems: List[RunProblem] = []
    runs = find_runs(paths, problems)
    written: Dict[str, Path] = {}
    write_skipped(out, problems, written)
    both = {}
    for param, sym, fname in (("ALPHA", "α", "sweep_alpha.png"), ("BETA", "β", "sweep_beta.png")):
        series = sweep_points(runs, param)
        both[sym] = series
        if series:
            written[fname] = plots.sweep_plot(series, sym, out / fname,
                                              title=f"Sensitivity to {sym}")
    if not any(both.values()):
        raise ReportError(f"no tca/argtca runs under {', '.join(map(str, paths))}; "
                          "run scripts/sweep.sh first")
    (out / "sweep.md").write_text(_sweep_markdown(both))
    written["sweep.md"] = out / "sweep.md"
    return written


def make_ablation_report(paths: Sequence, out_dir, decimals: int = 2) -> Dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems: List[RunProblem] = []
    runs = find_runs(paths, problems)
    (out / "ablation.md").write_text(ablation_table(runs, decimals))
    written = {"ablation.md": out / "ablation.md"}
    write_skipped(out, problems, written)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m argtca.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR",
                    help="run folders or parents of run folders (searched recursively)")
    ap.add_argument("--out", required=True, help="report folder (created)")
    ap.add_argument("--attributes-classes", type=int, default=10,
                    help="sample classes shown in attributes.md (default 10)")
    ap.add_argument("--metrics", default="accuracy,ece",
                    help=f"table rows per method, from {','.join(METRICS)} (default accuracy,ece)")
    ap.add_argument("--n-bins", type=int, default=20, help="calibration bins (default 20)")
    ap.add_argument("--decimals", type=int, default=2)
    ap.add_argument("--std", action="store_true",
                    help="cells of several seeds as mean ± std (and cells.csv)")
    ap.add_argument("--sweep", action="store_true", help="sensitivity plots (α, β) only")
    ap.add_argument("--ablation", action="store_true", help="ablation table only")
    a = ap.parse_args(argv)
    try:
        written: Dict[str, Path] = {}
        if a.sweep:
            written.update(make_sweep_report(a.runs, a.out))
        if a.ablation:
            written.update(make_ablation_report(a.runs, a.out, a.decimals))
        if not (a.sweep or a.ablation):
            metrics = [m.strip().lower() for m in a.metrics.split(",") if m.strip()]
            written.update(make_report(a.runs, a.out, a.attributes_classes, metrics,
                                       a.n_bins, a.decimals, a.std))
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:   # e.g. a read-only or full --out folder
        print(f"report: error: cannot write {e.filename or a.out}: {e.strerror or e}; choose "
              f"another --out", file=sys.stderr)
        return 2
    for name in ("table.md", "ablation.md", "sweep.md"):
        if name in written:
            print(Path(written[name]).read_text())
    if "skipped.md" in written:
        n = Path(written["skipped.md"]).read_text().count("\n| ") - 1
        print(f"left out: {n} run folder(s), listed in {written['skipped.md']}")
    print("wrote: " + ", ".join(str(p) for p in written.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
