"""Stability: how much a method's numbers move from seed to seed (``stability.md`` and
``stability.csv`` of a report), from each run's records.

Per method and dataset and per metric of the table: the seeds, the mean, the sample standard
deviation (n - 1, as the table's ± std), the lowest and highest value and their distance (the
range). What a seed changes is said per row: the views an episodic method draws and, for an online
method, also the order of its stream when ``TTA.STREAM.SEED`` is -1 (the default: the order is
drawn from the run's seed, so the spread over seeds *is* the spread over stream orders); with a
fixed stream seed or ``TTA.STREAM.ORDER index`` every seed sees the same order.
"""
from __future__ import annotations

import csv
import io
import math
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .identity import stream_seed
from .runs import METRICS, MISSING

__all__ = ["spread", "stability_rows", "stability_markdown", "stability_csv", "varies_with"]


def spread(values: Sequence[float]) -> Dict[str, float]:
    """n, mean, sample std (NaN below 2 values), min, max and range of the finite values."""
    v = np.asarray([x for x in values if not math.isnan(x)], dtype=np.float64)
    if not len(v):
        return {"n": 0, "mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan,
                "range": math.nan}
    return {"n": int(len(v)), "mean": float(v.mean()),
            "std": float(v.std(ddof=1)) if len(v) > 1 else math.nan,
            "min": float(v.min()), "max": float(v.max()), "range": float(v.max() - v.min())}


def varies_with(runs) -> str:
    """What differs between the seeds of one cell: "seed" (episodic: the views it draws),
    "seed = stream order" (online, the order drawn from each seed) or "seed (stream order fixed:
    K)" / "seed (stream in file order)" (online, one order for every seed)."""
    if not any(r.online for r in runs):
        return "seed"
    kinds = set()
    for r in runs:
        seed = stream_seed(r.settings)
        kinds.add("seed (stream in file order)" if seed is None else "seed = stream order"
                  if seed < 0 else f"seed (stream order fixed: {seed})")
    return "; ".join(sorted(kinds))


def stability_rows(labels: Sequence[str], datasets: Sequence[Tuple[str, str]], cells: Dict,
                   metrics: Sequence[str]) -> List[Dict]:
    """One dict per (method, dataset, metric) present: label, dataset, metric, seeds, what a
    seed changes, and :func:`spread` of the per-run values."""
    out = []
    for lab in labels:
        for dk, name in datasets:
            c = cells.get((lab, dk))
            if c is None:
                continue
            for m in metrics:
                s = spread([r.metric(m) for r in c.runs])
                out.append(dict(s, label=lab, dataset=name, metric=m, seeds=c.seeds,
                                varies=varies_with(c.runs)))
    return out


def _fmt(v: float, decimals: int) -> str:
    return MISSING if math.isnan(v) else f"{v:.{decimals}f}"


def stability_markdown(labels, datasets, cells, metrics: Sequence[str] = ("accuracy", "ece"),
                       decimals: int = 2) -> str:
    rows = stability_rows(labels, datasets, cells, metrics)
    head = ["Method", "Dataset", "Seeds", "Seed changes"]
    for m in metrics:
        d = METRICS[m][0]
        head += [f"{d} std", f"{d} min–max", f"{d} range"]
    lines = ["# Stability over seeds", "",
             "Per method and dataset: the sample standard deviation (n − 1) over seeds, the "
             "lowest and highest value and their range, each run's value recomputed from its "
             "records. " + MISSING + " where a cell has a single seed.", "",
             "Seed changes: *seed* = the views an episodic method draws (zero-shot CLIP draws "
             "none); *seed = stream order* = an online method whose stream order is drawn from "
             "the seed (TTA.STREAM.SEED -1, the default), so the spread over seeds is the spread "
             "over stream orders; *stream order fixed* / *stream in file order* = every seed "
             "sees the same order (TTA.STREAM.SEED ≥ 0 or TTA.STREAM.ORDER index).", "",
             "| " + " | ".join(head) + " |",
             "|" + "|".join([":---", ":---", ":---", ":---"] + ["---:"] * (3 * len(metrics)))
             + "|"]
    by_cell: Dict[Tuple[str, str], Dict[str, Dict]] = {}
    for r in rows:
        by_cell.setdefault((r["label"], r["dataset"]), {})[r["metric"]] = r
    for (lab, ds), per in by_cell.items():
        first = next(iter(per.values()))
        cols = [lab, ds, ", ".join(map(str, first["seeds"])), first["varies"]]
        for m in metrics:
            r = per[m]
            lo_hi = (MISSING if r["n"] < 2 else
                     f"{_fmt(r['min'], decimals)}–{_fmt(r['max'], decimals)}")
            cols += [_fmt(r["std"], decimals), lo_hi,
                     _fmt(r["range"], decimals) if r["n"] > 1 else MISSING]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"


def stability_csv(labels, datasets, cells, metrics: Sequence[str] = ("accuracy", "ece")) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ["n", "mean", "std", "min", "max", "range"]
    w.writerow(["method", "dataset", "metric", "seeds", "seed_changes"] + cols)
    for r in stability_rows(labels, datasets, cells, metrics):
        w.writerow([r["label"], r["dataset"], r["metric"], " ".join(map(str, r["seeds"])),
                    r["varies"]] + ["" if isinstance(r[k], float) and math.isnan(r[k])
                                    else r[k] for k in cols])
    return buf.getvalue()
