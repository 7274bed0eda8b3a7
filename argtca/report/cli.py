"""The report drivers and ``python -m argtca.report``."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import __doc__ as _DOC
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
    from .. import plots

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
    from .. import plots

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
    ap = argparse.ArgumentParser(prog="python -m argtca.report", description=_DOC,
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
