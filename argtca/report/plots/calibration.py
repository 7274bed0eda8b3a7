"""Reliability diagrams and confidence histograms as small multiples, methods x datasets.

Which figures a report gets (``path`` = ``<folder>/<stem>.png``; a PDF beside every PNG):

Only the (method, dataset) panels with records are drawn: a method or dataset without any gets
no panel, row or page, and a dataset's panels are packed in the methods' order.

* one dataset: ``<stem>.png``, a panel per method wrapped at most 5 a row (16 methods: 4x4);
* one method: ``<stem>.png``, a panel per dataset, wrapped the same way;
* a few of both (at most 5 panels a dataset, at most min(5, that + 1) datasets):
  ``<stem>.png``, one row of method panels per dataset;
* otherwise one figure per dataset, ``<stem>_<dataset>.png``, each laid out as the
  one-dataset figure (so the same method sits in the same place on every page).

So a figure never holds more than 5 panels a row, and its aspect ratio stays within about
1:2 and 2:1 (up to 75 methods; tests/report/test_figures.py checks 1:3..3:1).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from argtca.metrics import expected_calibration_error, reliability_bins
from argtca.report.plots.layout import (ACC_COLOR, CORRECT_COLOR, GAP_COLOR, PANEL_IN,
                                        WRONG_COLOR, Cell, Key, cell_figures, cell_panels,
                                        figure_pages, panel_title, same_y, save_figures,
                                        shared_legend)

# the gap between a bin's accuracy and its mean confidence: a light hatched red that stays
# readable over the accuracy bar (an under-confident bin) and over the white background
# (no outline: a step patch would draw it along empty bins too)
GAP_STYLE = dict(facecolor=(*to_rgb(GAP_COLOR), 0.22), hatch="////",
                 hatchcolor=(*to_rgb(GAP_COLOR), 0.8), edgecolor=GAP_COLOR, linewidth=0)

__all__ = ["reliability_grid", "confidence_hist_grid", "figure_pages", "build_figures"]


def build_figures(kind: str, cells: Mapping[Key, Cell], methods: Sequence[str],
                  datasets: Sequence[str], stem: str, n_bins: int = 20, title: str = "",
                  notes: Optional[Mapping[Key, str]] = None,
                  eces: Optional[Mapping[Key, float]] = None) -> List[Tuple[str, Figure]]:
    """The figures of :func:`reliability_grid` (``kind`` "reliability") or
    :func:`confidence_hist_grid` ("hist"), unsaved: ``[(file stem, figure), ...]``."""
    if kind not in ("reliability", "hist"):
        raise ValueError(f"build_figures: kind {kind!r} is neither 'reliability' nor 'hist'")
    if kind == "hist":
        return cell_figures(cells, methods, datasets, stem, title, 0.8 * PANEL_IN,
                            lambda blocks, axes, _: _hist_page(cells, blocks, axes, n_bins))
    eces = eces or {}
    return cell_figures(cells, methods, datasets, stem, title, PANEL_IN,
                        lambda blocks, axes, left: _reliability_page(cells, blocks, axes,
                                                                     n_bins, left, eces),
                        notes or {})


def _reliability_page(cells, blocks, axes, n_bins, notes, eces) -> None:
    for block_axes in axes:
        for ax in block_axes:
            ax.set_ylim(0, 1)
            ax.set_aspect("equal")
            ax.set_yticks([0, 0.5, 1], ["0", "0.5", "1"])
            ax.plot([0, 1], [0, 1], ls="--", color="0.25", lw=0.9, zorder=4)
    for key, label, ax, cell in cell_panels(cells, blocks, axes, "confidence", "accuracy"):
        conf, correct = cell
        b = reliability_bins(conf, correct, n_bins)
        ok = b["count"] > 0
        edges = np.append(b["lower"], b["upper"][-1])
        acc = np.where(ok, b["acc"], 0.0)
        mconf = np.where(ok, b["conf"], acc)      # an empty bin: no gap either
        # one step patch per series (not a Rectangle per bin: 16 panels x 40 bars made
        # the figure slow to build); white bin separators inside the accuracy bars
        ax.stairs(acc, edges, fill=True, color=ACC_COLOR, lw=0, zorder=2)
        ax.vlines(edges[1:-1], 0, np.minimum(acc[:-1], acc[1:]), color="white", lw=0.4,
                  zorder=2)
        ax.stairs(np.maximum(acc, mconf), edges, baseline=np.minimum(acc, mconf),
                  fill=True, **GAP_STYLE, zorder=3)
        ece = eces.get(key)
        if ece is None or not np.isfinite(ece):
            ece = 100 * expected_calibration_error(conf, correct, n_bins)
        note = notes.get(key, "")
        panel_title(ax, label, f"ECE {ece:.2f}%" + (f" {note}" if note else ""))
    shared_legend(axes[0][0].get_figure(root=True), [
        Patch(color=ACC_COLOR, label="accuracy per bin"),
        Patch(**GAP_STYLE, label="gap to mean confidence"),
        Line2D([0], [0], ls="--", color="0.25", lw=0.9, label="perfect calibration")])


def _hist_page(cells, blocks, axes, n_bins) -> None:
    edges = np.linspace(0, 1, n_bins + 1)
    drawn = []
    for key, label, ax, cell in cell_panels(cells, blocks, axes, "confidence", "% of samples"):
        conf = np.asarray(cell[0], dtype=np.float64)
        correct = np.asarray(cell[1], dtype=bool)
        n = len(conf)
        h_ok = 100 * np.histogram(conf[correct], bins=edges)[0] / n
        h_bad = 100 * np.histogram(conf[~correct], bins=edges)[0] / n
        ax.stairs(h_ok, edges, fill=True, color=CORRECT_COLOR, lw=0)
        ax.stairs(h_ok + h_bad, edges, baseline=h_ok, fill=True, color=WRONG_COLOR,
                  alpha=0.8, lw=0)
        ax.vlines(edges[1:-1], 0, np.minimum(h_ok + h_bad, np.roll(h_ok + h_bad, -1))[:-1],
                  color="white", lw=0.4)
        acc, mconf = correct.mean(), conf.mean()
        ax.axvline(acc, color="k", ls="--", lw=1.0)
        ax.axvline(mconf, color="k", ls=":", lw=1.3)
        panel_title(ax, label, f"acc {100 * acc:.1f}% · conf {100 * mconf:.1f}%")
        drawn.append(float((h_ok + h_bad).max()))
    same_y(axes, 1.08 * max(drawn) if drawn else 1.0)
    shared_legend(axes[0][0].get_figure(root=True), [
        Patch(color=CORRECT_COLOR, label="correct"),
        Patch(color=WRONG_COLOR, alpha=0.8, label="incorrect"),
        Line2D([0], [0], ls="--", color="k", lw=1.0, label="accuracy"),
        Line2D([0], [0], ls=":", color="k", lw=1.3, label="mean confidence")])


def reliability_grid(cells: Mapping[Key, Cell], rows: Sequence[str], cols: Sequence[str],
                     path, n_bins: int = 20, notes: Optional[Mapping[Key, str]] = None,
                     suptitle: str = "Reliability diagrams",
                     eces: Optional[Mapping[Key, float]] = None) -> Dict[str, Path]:
    """``cells[(method, dataset)] = (conf, correct)``; ``rows`` are the methods, ``cols`` the
    datasets. Writes the figures of the module docstring; returns {file name: path} of every
    PNG and PDF written (and deletes this stem's figures of an earlier report that no longer
    apply).

    Blue bars: accuracy of each equal-width confidence bin. Red hatched bars: the gap between
    the bin's accuracy and its mean confidence. Dashed line: perfect calibration. Each panel's
    title gives the ECE (%) of its samples, or ``eces[(method, dataset)]`` where given (the
    caller's aggregation, e.g. the mean over seeds a table shows; the title should say which),
    followed by ``notes[(method, dataset)]`` (said once in the figure's title when every panel
    has the same note).
    """
    return save_figures(build_figures("reliability", cells, rows, cols, Path(path).stem, n_bins,
                                   suptitle, notes, eces), path)


def confidence_hist_grid(cells: Mapping[Key, Cell], rows: Sequence[str], cols: Sequence[str],
                         path, n_bins: int = 20,
                         suptitle: str = "Confidence of correct vs incorrect predictions"
                         ) -> Dict[str, Path]:
    """Stacked histogram (share of all samples, %) of the confidence of correct (green) and
    incorrect (red) predictions per (method, dataset); dashed line = accuracy, dotted line =
    mean confidence (their distance is the overconfidence). One y scale per figure. Same
    figures and return value as :func:`reliability_grid`."""
    return save_figures(build_figures("hist", cells, rows, cols, Path(path).stem, n_bins,
                                   suptitle), path)
