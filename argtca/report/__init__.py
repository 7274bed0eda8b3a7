"""Side-by-side comparison reports from run folders.

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
from .ablation import ablation_table
from .attributes import attribute_table
from .cli import main, make_ablation_report, make_report, make_sweep_report
from .runs import ReportError, Run, find_runs, load_records
from .sweep import sweep_points
from .tables import (AVERAGE, Cell, ResultsTable, build_table, cells_csv, group_runs, runs_csv,
                     table_csv, table_latex, table_markdown)

__all__ = [
    "ReportError", "Run", "Cell", "ResultsTable", "find_runs", "load_records", "group_runs",
    "build_table", "cells_csv", "table_markdown", "table_csv", "table_latex", "runs_csv",
    "attribute_table",
    "sweep_points", "ablation_table", "make_report", "make_sweep_report",
    "make_ablation_report", "main",
]
