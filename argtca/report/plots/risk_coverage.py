"""Risk-coverage curves (selective prediction) as small multiples, methods x datasets, on the
grid and pages of the reliability diagrams (:func:`argtca.report.plots.layout.figure_pages`:
at most 5 panels a row, one figure per dataset when there are many methods).

Each panel: the risk (error rate, %) of the images kept against the coverage (the share kept,
most confident first; :func:`argtca.metrics.risk_coverage`, ties spread over their group), the
optimal curve for the same errors dashed (every correct image first), the AURC in the title.
One y scale per dataset (the methods of a dataset compare at a glance, and a dataset whose risk
stays under 3 % is not a flat line under another's 60 %).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from argtca.metrics import aurc, risk_coverage
from argtca.report.plots.layout import (ACC_COLOR, PANEL_IN, Cell, Key, cell_figures,
                                        cell_panels, panel_title, save_figures, shared_legend,
                                        y_per_dataset)

__all__ = ["risk_coverage_figures", "risk_coverage_grid", "optimal_risk"]

OPTIMAL_COLOR = "0.35"


def optimal_risk(n: int, errors: int) -> np.ndarray:
    """The risk at coverage k/n (k = 1..n) of a ranking that puts every correct image first."""
    k = np.arange(1, n + 1, dtype=np.float64)
    return np.clip(k - (n - errors), 0.0, None) / k


def risk_coverage_figures(cells: Mapping[Key, Cell], methods: Sequence[str],
                          datasets: Sequence[str], stem: str = "risk_coverage",
                          title: str = "Risk-coverage curves",
                          aurcs: Optional[Mapping[Key, float]] = None,
                          notes: Optional[Mapping[Key, str]] = None
                          ) -> List[Tuple[str, Figure]]:
    """The figures of :func:`risk_coverage_grid`, unsaved: ``[(file stem, figure), ...]``."""
    aurcs = aurcs or {}
    return cell_figures(cells, methods, datasets, stem, title, 0.85 * PANEL_IN,
                        lambda blocks, axes, left: _page(cells, blocks, axes, aurcs, left),
                        notes or {})


def _page(cells, blocks, axes, aurcs, notes) -> None:
    tops = []
    for key, label, ax, cell in cell_panels(cells, blocks, axes, "coverage", "risk (% errors)"):
        conf, correct = cell
        rc = risk_coverage(conf, correct)
        cov = np.r_[0.0, rc["coverage"]]
        risk = 100 * np.r_[rc["risk"][0], rc["risk"]]
        errors = int(round(len(conf) - np.asarray(correct, dtype=bool).sum()))
        best = 100 * optimal_risk(len(conf), errors)
        ax.plot(cov, risk, color=ACC_COLOR, lw=1.2)
        ax.plot(cov, np.r_[best[0], best], color=OPTIMAL_COLOR, lw=0.9, ls="--")
        tops.append((ax, key[1], float(risk.max())))
        area = aurcs.get(key)
        if area is None or not np.isfinite(area):
            area = 100 * aurc(conf, correct)
        note = notes.get(key, "")
        panel_title(ax, label, f"AURC {area:.2f}%" + (f" {note}" if note else ""))
    y_per_dataset(tops)
    shared_legend(axes[0][0].get_figure(root=True), [
        Line2D([0], [0], color=ACC_COLOR, lw=1.2, label="risk of the images kept"),
        Line2D([0], [0], color=OPTIMAL_COLOR, lw=0.9, ls="--",
               label="optimal order (same errors)")])


def risk_coverage_grid(cells: Mapping[Key, Cell], rows: Sequence[str], cols: Sequence[str],
                       path, title: str = "Risk-coverage curves",
                       aurcs: Optional[Mapping[Key, float]] = None,
                       notes: Optional[Mapping[Key, str]] = None) -> Dict[str, Path]:
    """``cells[(method, dataset)] = (conf, correct)``; ``rows`` the methods, ``cols`` the
    datasets. Writes the PNG and PDF of every page (the reliability diagrams' pages) and returns
    {file name: path}; this stem's pages of an earlier report that no longer apply are deleted.
    Each title gives the AURC (%) of the panel's records, or ``aurcs[(method, dataset)]`` where
    given (e.g. the table's mean over seeds; ``title`` should say which)."""
    return save_figures(risk_coverage_figures(cells, rows, cols, Path(path).stem, title, aurcs,
                                           notes), path)
