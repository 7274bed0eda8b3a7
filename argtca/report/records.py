"""A run's records (``records.jsonl``) and the numbers the report reads from them.

The report never shows a number it has not recomputed: every metric of a run (accuracy, ECE with
20 bins, AdaECE, MCE, NLL, Brier; :func:`argtca.metrics.compute_metrics`, as the run computed
them) is worked out from its records, and a ``summary.json`` whose numbers disagree (an edited
or misplaced file) is named and the run left out (:func:`summary_disagreement`)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

# the metrics a summary.json holds, all recomputed from the records
RECORD_METRICS = ("accuracy", "ece", "adaece", "mce", "nll", "brier")
# metrics only the report computes (from the records: no summary.json holds them), in %
SELECTIVE_METRICS = ("aurc", "eaurc")
# summary.json is written from the same records with the same code: only float rounding of
# the JSON text may differ
TOLERANCE = 1e-6
N_BINS = 20   # the run's own ECE bins (trainers/base.py finish)


class ReportError(ValueError):
    """Bad report input; the message names the file, the value and the fix."""


def _integral(v) -> bool:
    return not isinstance(v, bool) and (isinstance(v, int) or (
        isinstance(v, float) and v.is_integer()))


def _value_problem(r: Dict[str, Any]) -> Optional[str]:
    """Why a number of record ``r`` that the report reads cannot be used (None when each can):
    pred and label integers, an index (when given) an integer, conf / p_label / brier finite and
    in range (:func:`argtca.run_folder.records.number_problem`)."""
    from argtca.run_folder.records import number_problem
    for k in ("pred", "label"):
        if not _integral(r[k]):
            return f"{k}={r[k]!r} is not an integer"
    if r.get("index") is not None and (isinstance(r["index"], bool)
                                       or not isinstance(r["index"], int)):
        return f"index={r['index']!r} is not an integer"
    return number_problem(r)


def load_records(path) -> Dict[str, np.ndarray]:
    """``records.jsonl`` -> arrays ``conf``, ``pred``, ``label``, ``correct`` and, when every
    line has them, ``index``, ``p_label`` and ``brier``. An unterminated last line (a run killed
    mid-write) is ignored; any other bad line, and any line holding a number the report cannot
    use (a NaN or infinite confidence, p_label or Brier score, one out of its range, a class
    that is not an integer), is an error naming it: the run is left out, the others reported."""
    path = Path(path)
    cols: Dict[str, list] = {k: [] for k in ("conf", "pred", "label", "index", "p_label",
                                             "brier")}
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise ReportError(f"{path}: cannot be read ({e.strerror})") from None
    lines = text.split("\n")
    for ln, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            vals = [r[k] for k in ("conf", "pred", "label")]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                raise TypeError(f"non-numeric value in {vals}")
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            if ln == len(lines):   # torn last line of a killed run
                continue
            raise ReportError(f"{path}:{ln}: bad record ({e!r}); each line must be a JSON "
                              "object with conf, pred and label") from e
        problem = _value_problem(r)
        if problem is not None:
            raise ReportError(f"{path}:{ln}: {problem}, a number no metric can be computed "
                              f"from (an edited file, or a run before records were checked); "
                              f"run it again in a fresh folder, or restore the file")
        for k, v in zip(("conf", "pred", "label"), vals):
            cols[k].append(v)
        for k in ("index", "p_label", "brier"):
            cols[k].append(r.get(k))
    out = {"conf": np.asarray(cols["conf"], dtype=np.float64),
           "pred": np.asarray(cols["pred"], dtype=np.int64),
           "label": np.asarray(cols["label"], dtype=np.int64)}
    out["correct"] = out["pred"] == out["label"]
    if cols["index"] and all(isinstance(v, int) for v in cols["index"]):
        out["index"] = np.asarray(cols["index"], dtype=np.int64)
    for k in ("p_label", "brier"):
        if cols[k] and all(v is not None for v in cols[k]):
            out[k] = np.asarray(cols[k], dtype=np.float64)
    return out


def record_metrics(records: Dict[str, np.ndarray], n_bins: int = N_BINS
                   ) -> Dict[str, float]:
    """Every metric of :data:`RECORD_METRICS` from a run's records, in image-index order (as the
    run computed them: AdaECE's stable sort depends on it); NLL and Brier are NaN for records
    without ``p_label`` / ``brier``. Also AURC and E-AURC x100 (:data:`SELECTIVE_METRICS`; they
    do not depend on the order)."""
    from argtca.metrics import aurc, compute_metrics, eaurc
    order = np.argsort(records["index"], kind="stable") if "index" in records else \
        np.arange(len(records["conf"]))

    def col(k):
        return records[k][order] if k in records else None

    m = compute_metrics(col("conf"), col("pred"), col("label"), p_label=col("p_label"),
                        brier=col("brier"), n_bins=n_bins)
    out = {k: math.nan if m[k] is None else float(m[k]) for k in RECORD_METRICS}
    out["aurc"] = 100.0 * aurc(records["conf"], records["correct"])
    out["eaurc"] = 100.0 * eaurc(records["conf"], records["correct"])
    return out


def summary_disagreement(summary: Dict[str, Any], metrics: Dict[str, float]) -> List[str]:
    """One phrase per metric whose summary.json value is not the one its records give."""
    out = []
    for k in RECORD_METRICS:
        if k not in summary or summary[k] is None:
            continue
        v = summary[k]
        try:
            said = float(v)
        except (TypeError, ValueError):
            out.append(f"{k} {v!r} (records.jsonl gives {metrics[k]:.6g})")
            continue
        got = metrics[k]
        if math.isnan(got) or math.isnan(said):
            if not (math.isnan(got) and math.isnan(said)):
                out.append(f"{k} {said:.6g} where records.jsonl gives "
                           f"{'none' if math.isnan(got) else f'{got:.6g}'}")
            continue
        if abs(said - got) > TOLERANCE * max(1.0, abs(got)):
            out.append(f"{k} {said:.6g} where records.jsonl gives {got:.6g}")
    return out
