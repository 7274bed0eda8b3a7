"""Figures of the comparison report, drawn on plain arrays (no run-folder knowledge here).

Everything uses ``matplotlib.figure.Figure`` directly, which renders with the Agg backend and
leaves pyplot's global state (and the user's interactive backend) alone.

* :func:`reliability_grid`  -- methods x datasets reliability diagrams (accuracy per bin, gap to
  the diagonal shaded, diagonal drawn on top, ECE in each title).
* :func:`confidence_hist_grid` -- methods x datasets confidence histograms, correct vs incorrect.
* :func:`ece_radar` -- a radar plot of one metric per dataset per method; grouped bars when
  fewer than 3 datasets (the title says so).
* :func:`sweep_plot` -- ECE and accuracy against one hyper-parameter (sensitivity figures).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping, Optional, Sequence, Tuple

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.lines import Line2D

from argtca.metrics import expected_calibration_error, reliability_bins

__all__ = ["reliability_grid", "confidence_hist_grid", "ece_radar", "sweep_plot"]

Cell = Optional[Tuple[np.ndarray, np.ndarray]]   # (conf, correct) or None when no records

ACC_COLOR = "#3b6fb6"
GAP_COLOR = "#d62728"
CORRECT_COLOR = "#2ca02c"
WRONG_COLOR = "#d62728"


def _colors(n: int):
    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _grid_figure(n_rows: int, n_cols: int, cell_in: float = 2.5) -> Tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(max(cell_in * n_cols + 1.0, 4.0), cell_in * n_rows + 1.1 +
                          (0.5 if n_cols == 1 else 0.0)), layout="constrained")
    axes = np.asarray(fig.subplots(n_rows, n_cols, squeeze=False))
    return fig, axes


def _save(fig: Figure, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _label_grid(axes: np.ndarray, rows: Sequence[str], cols: Sequence[str], ylabel: str) -> None:
    for i, r in enumerate(rows):
        axes[i, 0].set_ylabel(f"{r}\n{ylabel}", fontsize=9)
    for j in range(len(cols)):
        for i in range(len(rows)):
            if i != len(rows) - 1:
                axes[i, j].tick_params(labelbottom=False)
            if j != 0:
                axes[i, j].tick_params(labelleft=False)


def _empty(ax, title: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes,
            color="0.5", fontsize=9)


def reliability_grid(cells: Mapping[Tuple[str, str], Cell], rows: Sequence[str],
                     cols: Sequence[str], path, n_bins: int = 20,
                     notes: Optional[Mapping[Tuple[str, str], str]] = None,
                     suptitle: str = "Reliability diagrams",
                     eces: Optional[Mapping[Tuple[str, str], float]] = None) -> Path:
    """``cells[(row, col)] = (conf, correct)``; rows are methods, cols datasets.

    Blue bars: accuracy of each equal-width confidence bin. Red hatched bars: the gap between the
    bin's accuracy and its mean confidence (drawn over the blue bar, hence purple, where the
    bin is under-confident). Dashed black line: perfect calibration. The title
    of each panel gives the ECE (%) of the panel's samples, or ``eces[(row, col)]`` where given
    (the caller's aggregation, e.g. the mean over seeds a table shows; the suptitle should say
    which); ``notes[(row, col)]`` is appended.
    """
    fig, axes = _grid_figure(len(rows), len(cols))
    width = 1.0 / n_bins
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            ax = axes[i, j]
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_aspect("equal")
            ax.set_xticks([0, 0.5, 1])
            ax.set_yticks([0, 0.5, 1])
            ax.tick_params(labelsize=8)
            head = f"{c}\n" if i == 0 else ""
            cell = cells.get((r, c))
            if cell is None or len(cell[0]) == 0:
                _empty(ax, head + "ECE –")
                ax.plot([0, 1], [0, 1], ls="--", color="k", lw=1)
                continue
            conf, correct = cell
            b = reliability_bins(conf, correct, n_bins)
            ok = b["count"] > 0
            acc = np.where(ok, b["acc"], 0.0)
            mconf = np.where(ok, b["conf"], 0.0)
            ax.bar(b["lower"][ok], acc[ok], width=width, align="edge", color=ACC_COLOR,
                   edgecolor="white", linewidth=0.4, zorder=2)
            lo = np.minimum(acc, mconf)[ok]
            ax.bar(b["lower"][ok], np.abs(mconf - acc)[ok], bottom=lo, width=width,
                   align="edge", color=GAP_COLOR, alpha=0.35, hatch="///",
                   edgecolor=GAP_COLOR, linewidth=0.4, zorder=3)
            ax.plot([0, 1], [0, 1], ls="--", color="k", lw=1.1, zorder=4)
            ece = (eces or {}).get((r, c))
            if ece is None:
                ece = 100 * expected_calibration_error(conf, correct, n_bins)
            note = (notes or {}).get((r, c), "")
            ax.set_title(f"{head}ECE {ece:.2f}%" + (f" {note}" if note else ""), fontsize=9)
    _label_grid(axes, rows, cols, "accuracy")
    for j in range(len(cols)):
        axes[-1, j].set_xlabel("confidence", fontsize=9)
    handles = [Patch(color=ACC_COLOR, label="accuracy per bin"),
               Patch(facecolor=GAP_COLOR, alpha=0.35, hatch="///", edgecolor=GAP_COLOR,
                     label="gap |acc − conf|"),
               Line2D([0], [0], ls="--", color="k", label="perfect calibration")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3 if len(cols) > 1 else 1,
               fontsize=9, frameon=False)
    fig.suptitle(suptitle, fontsize=11)
    return _save(fig, path)


def confidence_hist_grid(cells: Mapping[Tuple[str, str], Cell], rows: Sequence[str],
                         cols: Sequence[str], path, n_bins: int = 20,
                         suptitle: str = "Confidence of correct vs incorrect predictions"
                         ) -> Path:
    """Stacked histogram (share of all samples, %) of the confidence of correct (green) and
    incorrect (red) predictions per (method, dataset); dashed line = accuracy, dotted line =
    mean confidence."""
    fig, axes = _grid_figure(len(rows), len(cols))
    edges = np.linspace(0, 1, n_bins + 1)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            ax = axes[i, j]
            ax.set_xlim(0, 1)
            ax.set_xticks([0, 0.5, 1])
            ax.tick_params(labelsize=8)
            head = f"{c}\n" if i == 0 else ""
            cell = cells.get((r, c))
            if cell is None or len(cell[0]) == 0:
                _empty(ax, head + "–")
                continue
            conf = np.asarray(cell[0], dtype=np.float64)
            correct = np.asarray(cell[1], dtype=bool)
            n = len(conf)
            h_ok, _ = np.histogram(conf[correct], bins=edges)
            h_bad, _ = np.histogram(conf[~correct], bins=edges)
            w = edges[1] - edges[0]
            ax.bar(edges[:-1], 100 * h_ok / n, width=w, align="edge", color=CORRECT_COLOR,
                   edgecolor="white", linewidth=0.4)
            ax.bar(edges[:-1], 100 * h_bad / n, bottom=100 * h_ok / n, width=w, align="edge",
                   color=WRONG_COLOR, alpha=0.8, edgecolor="white", linewidth=0.4)
            acc, mconf = correct.mean(), conf.mean()
            ax.axvline(acc, color="k", ls="--", lw=1.1)
            ax.axvline(mconf, color="k", ls=":", lw=1.4)
            ax.set_title(f"{head}acc {100 * acc:.1f}% · conf {100 * mconf:.1f}%", fontsize=9)
    _label_grid(axes, rows, cols, "% of samples")
    # the y ranges differ between panels; keep their own tick labels
    for ax in axes.ravel():
        ax.tick_params(labelleft=True)
    for j in range(len(cols)):
        axes[-1, j].set_xlabel("confidence", fontsize=9)
    handles = [Patch(color=CORRECT_COLOR, label="correct"),
               Patch(color=WRONG_COLOR, alpha=0.8, label="incorrect"),
               Line2D([0], [0], ls="--", color="k", label="accuracy"),
               Line2D([0], [0], ls=":", color="k", lw=1.4, label="mean confidence")]
    fig.legend(handles=handles, loc="outside lower center", ncols=4 if len(cols) > 1 else 2,
               fontsize=9, frameon=False)
    fig.suptitle(suptitle, fontsize=11)
    return _save(fig, path)


def ece_radar(values: Mapping[str, Sequence[float]], datasets: Sequence[str], path,
              metric: str = "ECE (%)", title: str = "Calibration per dataset") -> Path:
    """``values[method] = [value per dataset]`` (NaN = missing). Radar plot with one axis per
    dataset; with fewer than 3 datasets a grouped bar chart (and the title says so)."""
    methods = list(values)
    colors = _colors(len(methods))
    n_d = len(datasets)
    if n_d < 3:
        fig = Figure(figsize=(max(5.0, 1.2 + 0.5 * len(methods) * n_d + 1.5 * n_d), 4.2),
                     layout="constrained")
        ax = fig.add_subplot()
        x = np.arange(n_d)
        w = 0.8 / max(len(methods), 1)
        for k, m in enumerate(methods):
            v = np.asarray(values[m], dtype=float)
            bars = ax.bar(x - 0.4 + w * (k + 0.5), np.nan_to_num(v), width=w, color=colors[k],
                          label=m)
            ax.bar_label(bars, labels=[f"{t:.1f}" if np.isfinite(t) else "–" for t in v],
                         fontsize=7, padding=1)
        ax.set_xticks(x, datasets)
        ax.set_ylabel(metric)
        ax.margins(y=0.12)
        fig.legend(loc="outside right upper", fontsize=8, frameon=False)
        ax.set_title(f"{title}\n(grouped bars: a radar plot needs ≥ 3 datasets, "
                     f"got {n_d})", fontsize=10)
        return _save(fig, path)

    # manual layout: constrained layout ignores the outward-aligned polar tick labels
    fig = Figure(figsize=(10.5, 7.0))
    ax = fig.add_axes((0.17, 0.07, 0.54, 0.8), projection="polar")
    angles = np.linspace(0, 2 * np.pi, n_d, endpoint=False)
    closed = np.concatenate([angles, angles[:1]])
    for k, m in enumerate(methods):
        v = np.asarray(values[m], dtype=float)
        vc = np.concatenate([v, v[:1]])
        ax.plot(closed, vc, color=colors[k], lw=1.6, marker="o", ms=3.5, label=m)
        if len(methods) <= 4 and np.all(np.isfinite(v)):
            ax.fill(closed, vc, color=colors[k], alpha=0.08)
    ax.set_xticks(angles, [_wrap_name(d) for d in datasets], fontsize=9)
    ax.tick_params(axis="x", pad=6)
    for lab, a in zip(ax.get_xticklabels(), angles):   # keep long names outside the circle
        c = np.cos(a)
        lab.set_horizontalalignment("left" if c > 0.1 else "right" if c < -0.1 else "center")
    ax.tick_params(axis="y", labelsize=8, labelcolor="0.35")
    ax.set_rlabel_position(90 / n_d)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{title}: {metric}, lower is better (closer to the centre)", fontsize=11,
                 pad=22)
    fig.legend(loc="upper left", bbox_to_anchor=(0.78, 0.92), fontsize=9, frameon=False)
    return _save(fig, path)


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
               path, title: str = "") -> Path:
    """``series[dataset][line] = {"x", "ece", "acc"[, "ece_std", "acc_std"]}``.

    One row per dataset: ECE against x (left) and accuracy against x (right), one line per
    method; error bars (std over seeds) where finite. The x axis is logarithmic (base 2) when
    the values are positive and span a factor of 4 or more (e.g. α = 5, 10, 20, 40)."""
    datasets = list(series)
    lines = list(dict.fromkeys(n for d in datasets for n in series[d]))
    colors = dict(zip(lines, _colors(len(lines))))
    fig = Figure(figsize=(9.5, 3.0 * len(datasets) + 1.2), layout="constrained")
    axes = np.asarray(fig.subplots(len(datasets), 2, squeeze=False))
    xs_all = sorted({float(x) for d in datasets for s in series[d].values() for x in s["x"]})
    log = bool(xs_all) and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 4
    for i, d in enumerate(datasets):
        for ax, key, yl in ((axes[i, 0], "ece", "ECE (%) ↓"), (axes[i, 1], "acc",
                                                               "accuracy (%) ↑")):
            for name, s in series[d].items():
                x = np.asarray(s["x"], dtype=float)
                o = np.argsort(x)
                y = np.asarray(s[key], dtype=float)[o]
                err = np.asarray(s.get(f"{key}_std", np.full(len(x), np.nan)), dtype=float)[o]
                ax.errorbar(x[o], y, yerr=np.where(np.isfinite(err), err, 0.0)
                            if np.isfinite(err).any() else None, color=colors[name],
                            marker="o", ms=5, lw=1.6, capsize=3)
            if log:
                ax.set_xscale("log", base=2)
            ax.set_xticks(xs_all, [f"{t:g}" for t in xs_all])
            ax.minorticks_off()
            ax.set_ylabel(yl)
            ax.grid(alpha=0.3)
            ax.set_title(d, fontsize=10)
            if i == len(datasets) - 1:
                ax.set_xlabel(xlabel)
    handles = [Line2D([0], [0], color=colors[n], marker="o", lw=1.6, label=n) for n in lines]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(lines)),
               fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return _save(fig, path)
