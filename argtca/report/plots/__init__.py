"""Figures of the comparison report, drawn on plain arrays (no run-folder knowledge here).

Every function writes a PNG and a vector PDF beside it (same stem, for LaTeX) and returns
{file name: path} of what it wrote. Figures are ``matplotlib.figure.Figure`` objects with
constrained layout at paper scale (``layout``), rendered with Agg; pyplot's global state and
the user's backend are left alone.

* :func:`reliability_grid` -- reliability diagrams, small multiples of methods x datasets
  (accuracy per bin, the gap to the mean confidence hatched, the diagonal, ECE in each title).
* :func:`confidence_hist_grid` -- confidence histograms, correct vs incorrect, with the
  accuracy and the mean confidence marked; same grid.
* :func:`ece_chart` -- one metric per dataset per method: ``ece_radar.png`` (a radar plot),
  ``ece_heatmap.png`` above 6 methods, ``ece_bars.png`` below 3 datasets.
* :func:`sweep_plot` -- ECE and accuracy against one hyper-parameter (sensitivity figures).
* :func:`risk_coverage_grid` -- selective prediction: risk against coverage with the optimal
  curve for the same errors, AURC in each title; the reliability diagrams' grid.
"""
from argtca.report.plots.calibration import (build_figures, confidence_hist_grid, figure_pages,
                                             reliability_grid)
from argtca.report.plots.risk_coverage import risk_coverage_grid
from argtca.report.plots.summary import ece_chart, sweep_plot

__all__ = ["reliability_grid", "confidence_hist_grid", "figure_pages", "build_figures", "ece_chart",
           "sweep_plot", "risk_coverage_grid"]
