"""Side-by-side comparison reports from run folders (``python -m argtca.report``, usage in
:mod:`argtca.report.cli`)."""
from .ablation import ablation_table
from .attributes import attribute_table
from .cli import (default_report_dir, main, make_ablation_report, make_report,
                  make_sweep_report)
from .records import ReportError, load_records
from .runs import Run, find_runs
from .sweep import sweep_points
from .tables import (AVERAGE, Cell, ResultsTable, build_table, cells_csv, group_runs, runs_csv,
                     table_csv, table_latex, table_markdown)

__all__ = [
    "AVERAGE", "ReportError", "Run", "Cell", "ResultsTable", "find_runs", "load_records",
    "group_runs", "default_report_dir",
    "build_table", "cells_csv", "table_markdown", "table_csv", "table_latex", "runs_csv",
    "attribute_table",
    "sweep_points", "ablation_table", "make_report", "make_sweep_report",
    "make_ablation_report", "main",
]
