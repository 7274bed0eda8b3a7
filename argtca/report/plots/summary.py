"""Figures of one number per (method, dataset): the ECE chart (a radar, a heatmap or bars, and
named so) and the α/β sensitivity sweeps. Each returns {file name: path} of its PNG and the PDF
beside it."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Dict, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from argtca.report.plots.layout import (PANEL_IN, STYLE, chars_per_line, colors, figure_title,
                                        paper_style, remove_stale, save, shared_legend, wrap)

__all__ = ["ece_chart", "ece_kind", "sweep_plot"]


RADAR_LINES = 6     # methods one radar shows readably; more get a heatmap
ECE_KINDS = ("bars", "radar", "heatmap")


def ece_kind(n_methods: int, n_datasets: int) -> str:
    """Which chart :func:`ece_chart` draws: bars below 3 datasets (a radar needs 3 axes), a
    heatmap above RADAR_LINES methods (too many lines for a radar), else a radar."""
    if n_datasets < 3:
        return "bars"
    return "radar" if n_methods <= RADAR_LINES else "heatmap"


def ece_figure(values: Mapping[str, Sequence[float]], datasets: Sequence[str],
               metric: str = "ECE (%)", title: str = "Calibration per dataset") -> Figure:
    """The figure of :func:`ece_chart`, unsaved."""
    draw = {"bars": _bars, "radar": _radar, "heatmap": _heatmap}[
        ece_kind(len(values), len(datasets))]
    with paper_style():
        return draw(values, datasets, metric, title)


def ece_chart(values: Mapping[str, Sequence[float]], datasets: Sequence[str], folder,
              metric: str = "ECE (%)", title: str = "Calibration per dataset",
              stem: str = "ece") -> Dict[str, Path]:
    """``values[method] = [value per dataset]`` (NaN = missing), drawn as :func:`ece_kind` says
    and named for it: ``<folder>/ece_bars.png``, ``ece_radar.png`` or ``ece_heatmap.png`` (PDF
    beside). A radar plot has one axis per dataset; the heatmap is methods x datasets with the
    values written in; the bars are a row per method. The other kinds' files of an earlier
    report in ``folder`` are deleted (an updated report may change kind), as is the
    ``radar_ece.png`` earlier versions wrote whatever the kind."""
    folder = Path(folder)
    kind = ece_kind(len(values), len(datasets))
    fig = ece_figure(values, datasets, metric, title)
    with paper_style():
        written = save(fig, folder / f"{stem}_{kind}.png")
    for other in (*(k for k in ECE_KINDS if k != kind), None):
        remove_stale(folder / (f"{stem}_{other}.png" if other else "radar_ece.png"), [])
    return written


def _bars(values, datasets, metric, title) -> Figure:
    methods = list(values)
    n_m, n_d = len(methods), len(datasets)
    # a long plug-in label is wrapped to 2.2 in of the figure's 5.5 (else it squeezes the bars
    # and pushes the x label off the canvas), and its row is as tall as its lines
    names = [wrap(m, chars_per_line(2.2, STYLE["ytick.labelsize"])) for m in methods]
    rows_in = sum(max(0.16 + 0.12 * n_d, 0.13 * (n.count("\n") + 1)) for n in names)
    fig = Figure(figsize=(5.5, max(2.2, 0.9 + rows_in)), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(n_m)
    h = 0.8 / n_d
    d_colors = ["#3b6fb6", "#e08a2c"]
    top = np.nanmax([v for m in methods for v in values[m]] + [0.0])
    for k, d in enumerate(datasets):
        v = np.array([values[m][k] for m in methods], dtype=float)
        bars = ax.barh(y - 0.4 + h * (k + 0.5), np.nan_to_num(v), height=h,
                       color=d_colors[k % 2], label=d)
        ax.bar_label(bars, labels=[f"{t:.2f}" if np.isfinite(t) else "–" for t in v],
                     fontsize=6.5, padding=2)
    ax.set_yticks(y, names)
    ax.margins(y=0.01)
    ax.invert_yaxis()                          # the table's order, top to bottom
    ax.set_xlim(0, 1.15 * top if top > 0 else 1)
    ax.set_xlabel(f"{metric}, lower is better")
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    if n_d > 1:
        fig.legend(loc="outside lower center", ncols=n_d, frameon=False)
    name = f" on {datasets[0]}" if n_d == 1 else ""
    fig.suptitle(figure_title(f"{title}{name} (bars: a radar plot needs at least 3 datasets, "
                              f"got {n_d})", 5.5))
    return fig


def _radar(values, datasets, metric, title) -> Figure:
    methods = list(values)
    cols = colors(len(methods))
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.add_subplot(projection="polar")
    rmax = 1.1 * np.nanmax([v for m in methods for v in values[m]] + [1e-9])
    angles = _radar_axes(ax, datasets, rmax, 8)
    closed = np.concatenate([angles, angles[:1]])
    for k, m in enumerate(methods):
        # a legend entry at most ~1.7 in wide: a long plug-in label must not squeeze the radar
        ax.plot(closed, _closed(values[m]), color=cols[k], lw=1.3, marker="o", ms=2.5,
                label=wrap(m, chars_per_line(1.7, STYLE["legend.fontsize"])))
        if len(methods) <= 4 and np.all(np.isfinite(values[m])):
            ax.fill(closed, _closed(values[m]), color=cols[k], alpha=0.08)
    ax.tick_params(axis="y", labelsize=6.5, labelcolor="0.35")
    fig.legend(loc="outside right center", frameon=False,
               ncols=1 if len(methods) <= 18 else 2)
    fig.suptitle(figure_title(f"{title}: {metric}, lower is better (closer to the centre)",
                              6.5))
    return fig


def _radar_axes(ax, datasets, rmax, fontsize: float) -> np.ndarray:
    angles = np.linspace(0, 2 * np.pi, len(datasets), endpoint=False)
    ax.set_xticks(angles, [_wrap_name(d) for d in datasets], fontsize=fontsize)
    ax.tick_params(axis="x", pad=2)
    for lab, a in zip(ax.get_xticklabels(), angles):   # keep long names outside the circle
        c = np.cos(a)
        lab.set_horizontalalignment("left" if c > 0.1 else "right" if c < -0.1 else "center")
    ax.set_rlabel_position(90 / len(datasets))
    ax.set_ylim(0, rmax)
    ax.spines["polar"].set_linewidth(0.6)
    ax.grid(lw=0.5, alpha=0.6)
    return angles


def _closed(v) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    return np.concatenate([v, v[:1]])


def _heatmap(values, datasets, metric, title) -> Figure:
    """Methods x datasets, each cell's value written in it: what a radar of more than a few
    lines cannot show readably."""
    methods = list(values)
    v = np.array([values[m] for m in methods], dtype=float)
    names_in = max(len(m) for m in methods) * 0.62 * 8 / 72     # the y tick labels
    width = names_in + 1.4 + 0.6 * len(datasets)
    fig = Figure(figsize=(width, max(1.3 + 0.22 * len(methods), width / 2.5)),
                 layout="constrained")
    ax = fig.add_subplot()
    finite = v[np.isfinite(v)]
    hi = float(finite.max()) if finite.size else 1.0
    im = ax.imshow(np.ma.masked_invalid(v), cmap="YlOrRd", vmin=0, vmax=hi or 1.0,
                   aspect="auto")
    for (i, j), x in np.ndenumerate(v):
        light = not np.isfinite(x) or x < 0.6 * hi
        ax.text(j, i, f"{x:.2f}" if np.isfinite(x) else "–", ha="center", va="center",
                fontsize=6.5, color="black" if light else "white")
    ax.set_xticks(range(len(datasets)), datasets, rotation=35, ha="left",
                  rotation_mode="anchor")
    ax.set_yticks(range(len(methods)), methods)
    ax.tick_params(top=True, labeltop=True, bottom=False, labelbottom=False, length=0)
    ax.spines[:].set_visible(False)
    fig.colorbar(im, ax=ax, shrink=0.6, pad=0.01).set_label(metric)
    fig.suptitle(figure_title(f"{title}: {metric}, lower is better (a radar plot of "
                              f"{len(methods)} methods would be unreadable)",
                              fig.get_figwidth()))
    return fig


def _wrap_name(name: str, width: int = 14) -> str:
    """Break a long CamelCase / snake_case dataset name over two lines."""
    if len(name) <= width:
        return name
    parts = re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])|[^A-Za-z0-9]+", name)
    best, cut = None, 0
    for i in range(1, len(parts)):
        left = "".join(parts[:i])
        score = abs(len(left) - len(name) / 2)
        if best is None or score < best:
            best, cut = score, i
    if not cut:
        return name
    return "".join(parts[:cut]).rstrip("_- ") + "\n" + "".join(parts[cut:]).lstrip("_- ")


def sweep_plot(series: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]], xlabel: str,
               path, title: str = "") -> Dict[str, Path]:
    """Writes :func:`sweep_figure` as PNG + PDF."""
    fig = sweep_figure(series, xlabel, title)
    with paper_style():
        return save(fig, path)


def sweep_figure(series: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]], xlabel: str,
                 title: str = "") -> Figure:
    """``series[dataset][line] = {"x", "ece", "acc"[, "ece_std", "acc_std"]}``.

    A column per dataset (at most 4 a row, wrapped): ECE against x above, accuracy against x
    below (side by side for one dataset), one line per method; error bars (std over seeds)
    where finite. The x axis is logarithmic (base 2) when the values are positive and span a
    factor of 4 or more (e.g. α = 5, 10, 20, 40)."""
    datasets = list(series)
    lines = list(dict.fromkeys(n for d in datasets for n in series[d]))
    line_colors = dict(zip(lines, colors(len(lines))))
    xs_all = sorted({float(x) for d in datasets for s in series[d].values() for x in s["x"]})
    log = bool(xs_all) and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 4
    one = len(datasets) == 1          # then ECE and accuracy side by side
    ncols = 2 if one else (len(datasets) if len(datasets) <= 4
                           else min(4, math.ceil(math.sqrt(len(datasets)))))
    n_blocks = math.ceil(len(datasets) / ncols)
    with paper_style():
        fig = Figure(figsize=(ncols * (PANEL_IN + 0.45) + 0.5,
                              (1 if one else 2) * n_blocks * (0.75 * PANEL_IN + 0.45) + 0.9),
                     layout="constrained")
        grid = fig.subplots(1 if one else 2 * n_blocks, ncols, squeeze=False)
        for k in range(1 if one else n_blocks * ncols):
            b, j = divmod(k, ncols)
            top, bottom = (grid[0, 0], grid[0, 1]) if one else (grid[2 * b, j],
                                                                 grid[2 * b + 1, j])
            if k >= len(datasets):
                top.remove()
                bottom.remove()
                continue
            d = datasets[k]
            for ax, key, yl in ((top, "ece", "ECE (%) ↓"), (bottom, "acc", "accuracy (%) ↑")):
                for name, s in series[d].items():
                    x = np.asarray(s["x"], dtype=float)
                    o = np.argsort(x)
                    y = np.asarray(s[key], dtype=float)[o]
                    err = np.asarray(s.get(f"{key}_std", np.full(len(x), np.nan)),
                                     dtype=float)[o]
                    ax.errorbar(x[o], y, yerr=np.where(np.isfinite(err), err, 0.0)
                                if np.isfinite(err).any() else None, color=line_colors[name],
                                marker="o", ms=3.5, lw=1.2, capsize=2, elinewidth=0.8)
                if log:
                    ax.set_xscale("log", base=2)
                ax.set_xticks(xs_all, [f"{t:g}" for t in xs_all])
                ax.minorticks_off()
                ax.grid(alpha=0.3)
                if j == 0 or one:
                    ax.set_ylabel(yl)
                if one:
                    ax.set_title(d)
                    ax.set_xlabel(xlabel)
            if not one:
                top.set_title(d)
                top.tick_params(labelbottom=False)
                bottom.set_xlabel(xlabel)
        handles = [Line2D([0], [0], color=line_colors[n], marker="o", ms=3.5, lw=1.2, label=n)
                   for n in lines]
        shared_legend(fig, handles)
        if title:
            fig.suptitle(figure_title(title, fig.get_figwidth()))
    return fig
