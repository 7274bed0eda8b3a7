"""The report drivers and ``python -m argtca.report``: side-by-side comparison reports from run
folders.

    python -m argtca.report RUN_DIR [RUN_DIR ...] [--out REPORT_DIR [--force]]
    python -m argtca.report RUN_DIR --metrics accuracy,ece,aurc,eaurc   # + selective prediction
    python -m argtca.report output/sweep/caltech101 --out output/report/sweep_caltech101 --sweep
    python -m argtca.report output/argtca/dtd output/ablation/dtd --out REPORT --ablation
    python -m argtca.report output/ --ood   # OOD runs (DATASET.OOD.NAME) vs their ID runs

A RUN_DIR is a run folder (``summary.json``, ``records.jsonl``, argtca runs also
``phase1.json``) or any parent of run folders (searched recursively), so runs made on different
machines can be combined by pointing at several trees.

Grouping: runs of the same method, dataset and settings form one cell; their seeds are averaged
(the number of seeds is reported). Settings = everything that can change a number: the run's
fingerprint (``config.json``: every config key but the few in run_folder.NON_RESULT_KEYS, the
test set, the input files' sha256) minus the seed (:mod:`argtca.report.identity`). Runs that
differ get the differing keys appended to the label, e.g. ``ArgTCA (div) [alpha=20]`` or
``C-TPT [split=val]``, so different settings are never averaged; rows of another split, subset,
backbone or weights are never ranked against each other. Above the table, a header says what every
run shares (split, test images, views, backbone, weights, every non-default key), what only some
rows have, and why the table is no real result (demo, subset, other weights). On the datasets
of the published tables, full test split and CLIP's weights, "Against published numbers" shows
each cell beside the paper's (argtca/report/reference/*.csv), and a zero-shot accuracy more than
1 point off prints a warning with the usual causes.

Report folder: ``--out`` (a folder holding a report of other runs is refused unless ``--force``;
a report of a subset of the same runs is updated) or, without it,
``output/report/<hash of the runs>``. ``report.json`` lists the runs a report covers.

Main mode writes ``table.md``/``table.csv``/``table.tex`` (Table-1 layout: an Acc and an ECE
row per method, datasets + Average as columns; best bold, second underlined), ``runs.csv`` (one
line per run), ``reliability.png``, ``confidence_hist.png`` (a panel per method and dataset with
records, each saying its seeds), ``ece_radar.png`` (``ece_bars.png`` below 3 datasets,
``ece_heatmap.png`` above 6 methods) and
``attributes.md``, and ``stability.md``/``stability.csv`` (per method and dataset: std, min,
max and range over seeds of the table's metrics; for online rows with TTA.STREAM.SEED -1 that is
the spread over stream orders too); with ``--std``, cells of several seeds read "mean ± std" and
``cells.csv`` lists mean, std and seeds per cell. ``--metrics ...,aurc,eaurc`` adds selective
prediction rows (area under the risk-coverage curve and its excess over the optimum, %, from the
records) and ``risk_coverage.png``. ``--sweep`` writes ``sweep_alpha.png``, ``sweep_beta.png``
and ``sweep.md``; ``--ablation`` writes ``ablation.md``.

Run folders that cannot be used are left out and listed (stderr and ``skipped.md``): broken (a
summary or records file that cannot be read), interrupted (records but no summary yet) and
incomplete (a summary of fewer images than the test set, or disagreeing with its records). Two
folders claiming the same method, dataset, seed and settings are an error naming both.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .ablation import ablation_table
from .attributes import attribute_table
from .identity import canonical, real_weights, short_hash
from .ood import is_ood_run, ood_csv, ood_markdown, ood_pairs, ood_results
from .reference import (REFERENCE_BACKBONE, comparison_markdown, full_test_size, reference_for,
                        zeroshot_warning)
from .runs import METRICS, ReportError, Run, RunProblem, _warn, find_runs
from .stability import stability_csv, stability_markdown
from .sweep import _sweep_markdown, sweep_points
from .tables import (build_table, cells_csv, group_runs, runs_csv, table_csv, table_latex,
                     table_markdown)

REPORT_RECORD = "report.json"   # which runs a report folder's report covers
DEFAULT_PARENT = Path("output") / "report"


def runs_identity(runs: Sequence[Run]) -> List[str]:
    """One line per run (method, dataset, settings, seed; not its folder), sorted."""
    return sorted({short_hash(r.identity, 16) + f":seed{r.seed}" for r in runs})


def report_key(runs: Sequence[Run], mode: str = "table") -> str:
    """A short hash of a report's kind and its runs' identities."""
    return short_hash(canonical({"mode": mode, "runs": runs_identity(runs)}))


def default_report_dir(runs: Sequence[Run], mode: str = "table", parent=None,
                       prefix: str = "") -> Path:
    """``<parent>/<prefix-><hash8>``: the same runs always get the same folder, other runs
    another."""
    name = f"{prefix}-{report_key(runs, mode)}" if prefix else report_key(runs, mode)
    return Path(parent if parent is not None else DEFAULT_PARENT) / name


MODE_FILES = {"table": "table.md", "sweep": "sweep.md", "ablation": "ablation.md",
              "ood": "ood.md"}


def claim_report_dir(out: Path, runs: Sequence[Run], mode: str, force: bool) -> None:
    """Refuse to write over a report of other runs (unless ``force``); record these runs.

    ``report.json`` lists, per kind of report (table, sweep, ablation), the runs it covers. A
    report of a subset of these runs is updated (the same experiment with more seeds or datasets
    finished); one of other runs, or report files without that record (an older report), is
    refused."""
    record = out / REPORT_RECORD
    mine = runs_identity(runs)
    reports: Dict[str, Any] = {}
    if record.is_file():
        try:
            reports = json.loads(record.read_text()).get("reports") or {}
        except (OSError, ValueError, AttributeError):
            reports = {}
    if out.is_dir() and not force:
        old = reports.get(mode)
        if old is None and (out / MODE_FILES[mode]).is_file():
            old = {}
        if old is not None and not set(old.get("runs") or ["?"]) <= set(mine):
            raise ReportError(
                f"{out} holds a {mode} report of other runs ({MODE_FILES[mode]}; its runs are "
                f"listed in {REPORT_RECORD}); not overwritten: pass --force to replace it, or "
                f"another --out (without --out the folder is named by a hash of the runs)")
    out.mkdir(parents=True, exist_ok=True)
    reports[mode] = {"key": report_key(runs, mode), "runs": mine,
                     "folders": sorted(str(r.path) for r in runs)}
    record.write_text(json.dumps({"reports": reports}, indent=1) + "\n")


def _qualifies(r: Run) -> bool:
    """A run whose numbers can be compared with published ones: default settings of its
    method, the full published test split, CLIP's published weights, the paper's backbone."""
    st = r.settings
    full = full_test_size(r.dataset_key)
    return (not r.variant and real_weights(st.get("MODEL.PRETRAINED"))
            and str(st.get("MODEL.BACKBONE.NAME")) == REFERENCE_BACKBONE
            and str(st.get("DATASET.SPLIT")) == "test"
            and int(st.get("DATASET.NUM_IMAGES", -1) or -1) <= 0
            and full is not None and r.summary.get("n") == full)


def reference_section(cells: Dict, datasets, metrics: Sequence[str], decimals: int = 2
                      ) -> Tuple[str, List[str]]:
    """The "Against published numbers" Markdown section and the zero-shot warnings."""
    rows, warnings = [], []
    for (lab, dk), c in cells.items():
        if not c.runs or not all(_qualifies(r) for r in c.runs):
            continue
        r0 = c.runs[0]
        for m in metrics:
            ref = reference_for(r0.method, r0.selector, m, dk)
            if ref is None or math.isnan(c.mean(m)):
                continue
            rows.append((lab, m, dk, c.mean(m), ref[0], ref[1], ref[2]))
            if r0.method == "zeroshot" and m == "accuracy":
                w = zeroshot_warning(c.dataset, c.mean(m), ref[0], ref[1])
                if w:
                    warnings.append(w)
    order = {dk: i for i, (dk, _) in enumerate(datasets)}
    rows.sort(key=lambda x: (order.get(x[2], 0)))
    labels = list(dict.fromkeys(lab for (lab, _) in cells))
    rows.sort(key=lambda x: (labels.index(x[0]), list(metrics).index(x[1])))
    md = comparison_markdown(rows, dict(datasets), decimals)
    if md and warnings:
        md += "\n" + "\n".join(f"**Warning**: {w}." for w in warnings) + "\n"
    return md, warnings


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


def in_distribution(runs: List[Run], paths: Sequence) -> List[Run]:
    """The runs of a results table: an OOD run (``DATASET.OOD.NAME``: its images belong to no
    class, accuracy 0 by construction) is read only by the OOD section (``--ood``)."""
    kept = [r for r in runs if not is_ood_run(r)]
    if not kept:
        raise ReportError(f"only OOD runs (DATASET.OOD.NAME) under "
                          f"{', '.join(map(str, paths))}: their numbers are read by "
                          f"python -m argtca.report ... --ood, next to their in-distribution runs")
    return kept


def make_report(paths: Sequence, out_dir=None, attributes_classes: int = 10,
                metrics: Sequence[str] = ("accuracy", "ece"), n_bins: int = 20,
                decimals: int = 2, show_std: bool = False, force: bool = False,
                default_parent=None, prefix: str = "") -> Dict[str, Path]:
    """Main comparison report; returns {name: path} of the files written. ``show_std``: cells
    of several seeds read "mean ± std" and ``cells.csv`` lists mean, std and seeds per cell.
    ``out_dir`` None: ``<default_parent>/<prefix->hash8`` named by the runs; a folder holding
    a report of other runs is refused unless ``force``."""
    from argtca.report import plots

    problems: List[RunProblem] = []
    runs = in_distribution(find_runs(paths, problems), paths)
    labels, datasets, cells = group_runs(runs)
    table = build_table(labels, datasets, cells, metrics, decimals, show_std)
    out = Path(out_dir) if out_dir is not None else default_report_dir(
        runs, "table", default_parent, prefix)
    claim_report_dir(out, runs, "table", force)
    written: Dict[str, Path] = {"report.json": out / REPORT_RECORD}
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

    ref_md, ref_warnings = reference_section(cells, datasets, metrics, decimals)
    for w in ref_warnings:
        _warn(w)
    write("table.md", table_markdown(table) + ("\n" + ref_md if ref_md else ""))
    write("table.csv", table_csv(table))
    write("table.tex", table_latex(table))
    write("runs.csv", runs_csv(runs))
    if show_std:
        write("cells.csv", cells_csv(table))
    write("attributes.md", attribute_table(runs, attributes_classes))
    # the spread over seeds (and, for online rows, over stream orders) of the table's metrics
    write("stability.md", stability_markdown(labels, datasets, cells, metrics, decimals))
    write("stability.csv", stability_csv(labels, datasets, cells, metrics))

    names = [d for _, d in datasets]
    grid: Dict[Tuple[str, str], Any] = {}
    notes: Dict[Tuple[str, str], str] = {}
    eces: Dict[Tuple[str, str], float] = {}
    for (lab, dk), c in cells.items():
        rec = c.pooled_records()
        if rec is not None:
            grid[(lab, dict(datasets)[dk])] = rec
            # the table's number: the mean over seeds of each run's ECE
            eces[(lab, dict(datasets)[dk])] = c.mean("ece")
            # the seeds behind each panel, said in the figure title only where every panel
            # of the page has as many (a cell of fewer seeds says its own)
            with_rec = sum(r.records() is not None for r in c.runs)
            notes[(lab, dict(datasets)[dk])] = (f"(mean of {with_rec} seeds)" if with_rec > 1
                                                else "(1 seed)")
    rows = [lab for lab in labels if any((lab, d) in grid for d in names)]
    if rows:
        written.update(plots.reliability_grid(
            grid, rows, names, out / "reliability.png", n_bins=n_bins, notes=notes, eces=eces,
            suptitle="Reliability diagrams (bars: the records of every seed pooled; ECE: mean "
                     "over seeds, as in table.md)"))
        written.update(plots.confidence_hist_grid(
            grid, rows, names, out / "confidence_hist.png", n_bins=n_bins))
        if {"aurc", "eaurc"} & set(metrics):   # selective prediction asked for: its curves
            aurcs = {(lab, dict(datasets)[dk]): c.mean("aurc") for (lab, dk), c in cells.items()}
            written.update(plots.risk_coverage_grid(
                grid, rows, names, out / "risk_coverage.png", aurcs=aurcs, notes=notes,
                title="Risk-coverage curves (the records of every seed pooled; AURC: mean over "
                      "seeds, as in table.md)"))
    else:
        _warn("no records.jsonl in any run: reliability and histogram plots skipped")
    radar = {lab: [cells[(lab, dk)].mean("ece") if (lab, dk) in cells else math.nan
                   for dk, _ in datasets] for lab in labels}
    written.update(plots.ece_chart(radar, names, out))
    return written


def make_sweep_report(paths: Sequence, out_dir=None, force: bool = False,
                      default_parent=None, prefix: str = "sweep",
                      missing: Sequence[tuple] = ()) -> Dict[str, Path]:
    """Sensitivity plots: ECE/accuracy against α (``sweep_alpha.png``) and β
    (``sweep_beta.png``) from the runs' TRAINER.ARGTCA.ALPHA/BETA overrides, plus sweep.md."""
    from argtca.report import plots

    problems: List[RunProblem] = []
    runs = in_distribution(find_runs(paths, problems), paths)
    out = Path(out_dir) if out_dir is not None else default_report_dir(
        runs, "sweep", default_parent, prefix)
    both = {sym: sweep_points(runs, param, missing)   # missing: failed points (sweep_points)
            for param, sym in (("ALPHA", "α"), ("BETA", "β"))}
    if not any(both.values()):
        raise ReportError(f"no tca/argtca runs under {', '.join(map(str, paths))}; "
                          "run scripts/sweep.sh first")
    claim_report_dir(out, runs, "sweep", force)
    written: Dict[str, Path] = {"report.json": out / REPORT_RECORD}
    write_skipped(out, problems, written)
    for sym, fname in (("α", "sweep_alpha.png"), ("β", "sweep_beta.png")):
        if both[sym]:
            written.update(plots.sweep_plot(both[sym], sym, out / fname,
                                            title=f"Sensitivity to {sym}"))
    (out / "sweep.md").write_text(_sweep_markdown(both))
    written["sweep.md"] = out / "sweep.md"
    return written


def make_ablation_report(paths: Sequence, out_dir=None, decimals: int = 2, force: bool = False,
                         default_parent=None, prefix: str = "ablation") -> Dict[str, Path]:
    problems: List[RunProblem] = []
    runs = in_distribution(find_runs(paths, problems), paths)
    out = Path(out_dir) if out_dir is not None else default_report_dir(
        runs, "ablation", default_parent, prefix)
    text = ablation_table(runs, decimals)
    claim_report_dir(out, runs, "ablation", force)
    (out / "ablation.md").write_text(text)
    written = {"report.json": out / REPORT_RECORD, "ablation.md": out / "ablation.md"}
    write_skipped(out, problems, written)
    return written


def make_ood_report(paths: Sequence, out_dir=None, decimals: int = 2, force: bool = False,
                    default_parent=None, prefix: str = "ood",
                    metrics: Sequence[str] = ("accuracy", "ece")) -> Dict[str, Path]:
    """The ID runs' comparison report (table, stability, figures) and ``ood.md``/``ood.csv``
    in one folder (``<default_parent>/<prefix>-<hash of every run>`` without ``out_dir``)."""
    problems: List[RunProblem] = []
    runs = find_runs(paths, problems)
    pairs, alone = ood_pairs(runs)
    for r in alone:
        _warn(f"OOD run {r.path} has no in-distribution run of the same settings and seed; "
              f"left out of ood.md")
    if not pairs:
        raise ReportError(f"no pair of in-distribution and OOD runs (DATASET.OOD.NAME) under "
                          f"{', '.join(map(str, paths))}; run python -m argtca.experiments ood")
    out = Path(out_dir) if out_dir is not None else default_report_dir(
        runs, "ood", default_parent, prefix)
    id_runs = [r.path for r in runs if not is_ood_run(r)]
    written = make_report(id_runs, out, metrics=metrics, decimals=decimals, show_std=True,
                          force=force)
    claim_report_dir(out, runs, "ood", force)
    results = ood_results(pairs)
    for name, text in (("ood.md", ood_markdown(results, decimals)),
                       ("ood.csv", ood_csv(results))):
        (out / name).write_text(text)
        written[name] = out / name
    return written


MAIN_FILES = ("table.md", "ablation.md", "sweep.md", "shift.md", "ood.md")


def wrote_lines(written: Dict[str, Path], tag: str = "") -> List[str]:
    """What a report wrote, in two lines: its main file (``table.md``, else ``ablation.md``,
    ...) with the report folder, then the other files by name (a figure's PNG and PDF as one
    ``name.png/.pdf``); a file outside the folder keeps its full path."""
    pre = f"[{tag}] " if tag else ""
    paths = {n: Path(p).resolve() for n, p in written.items()}
    main = next((n for n in MAIN_FILES if n in paths), None)
    folder = (paths[main].parent if main else
              Path(next(iter(paths.values()))).parent if paths else Path("."))
    rest = []
    for n, p in paths.items():
        if n == main or (p.suffix == ".pdf" and p.with_suffix(".png").name in paths):
            continue
        name = p.name if p.parent == folder else str(p)
        if p.suffix == ".png" and p.with_suffix(".pdf").name in paths:
            name += "/.pdf"
        rest.append(name)
    first = f"{pre}wrote: {paths[main]}" if main else f"{pre}wrote: {folder}/"
    return [first, f"{pre}  and in {folder}/: {', '.join(rest)}"] if rest else [first]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m argtca.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR",
                    help="run folders or parents of run folders (searched recursively)")
    ap.add_argument("--out", default=None,
                    help="report folder (created; one holding a report of other runs is refused "
                         "unless --force). Default: output/report/<hash of the runs>")
    ap.add_argument("--force", action="store_true",
                    help="replace a report of other runs in --out")
    ap.add_argument("--attributes-classes", type=int, default=10,
                    help="sample classes shown in attributes.md (default 10)")
    ap.add_argument("--metrics", default="accuracy,ece",
                    help=f"table rows per method, from {','.join(METRICS)} (default accuracy,"
                    f"ece; aurc or eaurc also draws risk_coverage.png)")
    ap.add_argument("--n-bins", type=int, default=20, help="calibration bins (default 20)")
    ap.add_argument("--decimals", type=int, default=2)
    ap.add_argument("--std", action="store_true",
                    help="cells of several seeds as mean ± std (and cells.csv)")
    ap.add_argument("--sweep", action="store_true", help="sensitivity plots (α, β) only")
    ap.add_argument("--ablation", action="store_true", help="ablation table only")
    ap.add_argument("--ood", action="store_true", help="OOD detection: ood.md/ood.csv (AUROC, "
                    "FPR95) of the OOD runs (DATASET.OOD.NAME) against their in-distribution "
                    "runs, beside the in-distribution runs' table")
    a = ap.parse_args(argv)
    try:
        written: Dict[str, Path] = {}
        if a.sweep:
            written.update(make_sweep_report(a.runs, a.out, a.force))
        if a.ablation:
            written.update(make_ablation_report(a.runs, a.out, a.decimals, a.force))
        if a.ood:
            metrics = [m.strip().lower() for m in a.metrics.split(",") if m.strip()]
            written.update(make_ood_report(a.runs, a.out, a.decimals, a.force, metrics=metrics))
        elif not (a.sweep or a.ablation):
            metrics = [m.strip().lower() for m in a.metrics.split(",") if m.strip()]
            written.update(make_report(a.runs, a.out, a.attributes_classes, metrics,
                                       a.n_bins, a.decimals, a.std, a.force))
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:   # e.g. a read-only or full --out folder
        print(f"report: error: cannot write {e.filename or a.out}: {e.strerror or e}; choose "
              f"another --out", file=sys.stderr)
        return 2
    for name in ("table.md", "ablation.md", "sweep.md", "ood.md"):
        if name in written:
            print(Path(written[name]).read_text())
    if "skipped.md" in written:
        n = Path(written["skipped.md"]).read_text().count("\n| ") - 1
        print(f"left out: {n} run folder(s), listed in {written['skipped.md']}")
    print("\n".join(wrote_lines(written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
