"""Calibration metrics with the conventions of the C-TPT / O-TPT / A-TPT / TCA code.

Conventions (all percentages are ``x100``, as the papers report them):

* **accuracy** = mean(pred == label) x 100.
* **ECE** (C-TPT ``ECE_Loss``): ``n_bins`` equal-width bins whose edges are built exactly as
  the official code builds them: the float32 values of ``torch.linspace(0, 1, n_bins + 1)``
  turned into Python floats (``.item()``). A sample is in bin ``b`` when
  ``lower_b < conf <= upper_b`` (left-open), the confidence compared as a Python float (float64)
  with those edges, as the official loop over ``.item()`` values does. So a confidence exactly
  on an edge falls where it falls in the official code, for float32 tensors (their values are the
  edges' float32 values: the lower bin) and for Python floats (0.05 is below float32(0.05) and
  goes to the lower bin; 0.35 is above float32(0.35) = 0.3499999940... and goes to the upper).
  ``ECE = sum_b |acc_b - conf_b| * n_b / N`` with ``N`` the number of *all* samples.
  Quirk kept from the reference code: ``conf == 0`` (and ``conf > 1``) falls in no bin; such a
  sample still counts in ``N`` (and in accuracy) but contributes nothing to ECE/MCE.
* **MCE**: ``max_b |acc_b - conf_b|`` over the non-empty equal-width bins (0 if all are empty).
* **AdaECE** (adaptive / equal-mass bins): the samples are sorted by confidence (stable sort,
  ties keep input order) and split into ``n_bins`` contiguous chunks whose sizes differ by at
  most one (``numpy.array_split``: the first ``N mod n_bins`` chunks get the extra sample).
  ``AdaECE = sum_chunks |acc_c - conf_c| * n_c / N``; with ``N < n_bins`` the empty chunks are
  skipped. Every sample (including ``conf == 0``) is in exactly one chunk. Unlike the
  histogram-edge variant (Mukhoti et al.), equal confidences may be split across two chunks.
* **NLL** = mean(-log(max(p_label, eps))), ``eps = 1e-12``.
* **Brier** = mean of the per-image ``sum_k (p_k - y_k)^2`` supplied by the caller.

Selective prediction (Geifman & El-Yaniv 2017; Geifman et al., ICLR 2019), from the confidence
and the correctness alone:

* **risk-coverage curve**: the images sorted by confidence, highest first; at coverage ``k/n``
  (the ``k`` most confident kept) the risk is the error rate of those ``k``.
  Ties in confidence, deterministically and independently of the record order: a threshold on
  the confidence cannot split a group of equal confidences, so within such a group of ``m``
  images holding ``e`` errors, the ``j``-th image adds ``e/m`` errors (the cumulative errors are
  interpolated linearly across the group). This is the exact mean of the curve over every order
  of the tied images; without ties it is the usual curve.
* **AURC** = mean of the risk over ``k = 1..n`` (the area under that curve, a right Riemann sum
  over the ``n`` coverages, as Geifman et al.'s code computes it).
* **E-AURC** = AURC minus the optimal AURC for the same accuracy: the AURC of a confidence that
  puts every correct image first (risk 0 up to coverage ``1 - r``, then ``(k - (n - e)) / k``),
  computed on the same ``n`` coverages, so a perfect ranking has E-AURC 0 exactly. Geifman et
  al. write the optimum in its continuous form ``r + (1 - r) ln(1 - r)`` (``r`` = the error
  rate), the limit of this sum for large ``n`` (the sum is larger by O(1/n)).

OOD detection (MCM, Ming et al. 2022; the measures of Hendrycks et al.'s code that MCM uses), the
in-distribution (ID) images positive, a higher score meaning "in-distribution":

* **AUROC** = P(score_ID > score_OOD) + 1/2 P(score_ID = score_OOD) over every (ID, OOD) pair:
  the Mann-Whitney U statistic over ``n_ID * n_OOD`` (average ranks for ties), which equals
  the area under the ROC curve.
* **FPR at 95% TPR**, MCM's rule (``fpr_and_fdr_at_recall``): the candidate thresholds ``t`` are
  the distinct scores (ID and OOD) from the highest down to the lowest ID score; at each,
  ``TPR(t)`` = share of ID scores ``>= t`` and ``FPR(t)`` = share of OOD scores ``>= t``. The
  threshold whose TPR is nearest to 0.95 (``|TPR - 0.95|`` in float64, as the official code)
  is chosen, the lowest such threshold on a tie (so every OOD image scored between two ID
  images of the chosen TPR counts as a false positive); the FPR there is returned. The TPR may
  thus fall a little below 95% (e.g. 14/15 beats 15/15).

Inputs may be Python lists, NumPy arrays or torch tensors (any device).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

__all__ = ["compute_metrics", "reliability_bins", "expected_calibration_error",
           "adaptive_ece", "bin_index", "bin_edges", "RunningCalibration", "NLL_EPS",
           "risk_coverage", "aurc", "eaurc", "ood_auroc", "fpr_at_tpr"]

NLL_EPS = 1e-12


def _as_array(x: Any, name: str) -> np.ndarray:
    if hasattr(x, "detach"):                 # torch tensor
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.dtype == object:
        raise ValueError(f"{name}: expected numbers, got an object array ({arr[:3]!r} ...)")
    return arr.reshape(-1)


def _as_conf(x: Any, name: str = "conf") -> np.ndarray:
    arr = _as_array(x, name)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)         # float16/ints/bools -> float64
    if arr.size and not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)][0]
        raise ValueError(f"{name} contains a non-finite value ({bad}); "
                         "pass probabilities in [0, 1]")
    return arr


def _check_same_length(**arrays: np.ndarray) -> int:
    lens = {k: len(v) for k, v in arrays.items()}
    if len(set(lens.values())) != 1:
        raise ValueError(f"inputs must have the same length, got {lens}")
    return next(iter(lens.values()))


def bin_edges(n_bins: int = 20) -> np.ndarray:
    """The official ECE_Loss edges: ``torch.linspace(0, 1, n_bins + 1)`` (float32) values as
    Python floats, in a float64 array."""
    import torch
    return np.array([v.item() for v in torch.linspace(0, 1, int(n_bins) + 1)], dtype=np.float64)


def bin_index(conf: Any, n_bins: int = 20) -> np.ndarray:
    """Equal-width bin of each confidence: ``b`` with ``edges[b] < conf <= edges[b+1]``
    (:func:`bin_edges`, compared in float64); -1 if none (``conf <= 0`` or ``conf > 1``)."""
    if int(n_bins) < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    c = _as_conf(conf).astype(np.float64)    # exact for float16/32 values
    edges = bin_edges(n_bins)
    idx = np.searchsorted(edges, c, side="left") - 1   # edges[idx] < c <= edges[idx+1]
    idx[(idx < 0) | (idx >= n_bins)] = -1
    return idx


def _bin_sums(conf: np.ndarray, correct: np.ndarray, n_bins: int):
    idx = bin_index(conf, n_bins)
    ok = idx >= 0
    count = np.bincount(idx[ok], minlength=n_bins).astype(np.int64)
    s_conf = np.bincount(idx[ok], weights=conf[ok].astype(np.float64), minlength=n_bins)
    s_corr = np.bincount(idx[ok], weights=correct[ok].astype(np.float64), minlength=n_bins)
    return count, s_conf, s_corr


def reliability_bins(conf: Any, correct: Any, n_bins: int = 20) -> Dict[str, np.ndarray]:
    """Per equal-width bin: ``lower``, ``upper``, ``count``, ``acc``, ``conf`` (mean accuracy
    and mean confidence in [0, 1]; NaN for empty bins). Same bin rule as the ECE."""
    c = _as_conf(conf)
    k = _as_array(correct, "correct").astype(bool)
    _check_same_length(conf=c, correct=k)
    count, s_conf, s_corr = _bin_sums(c, k, n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(count > 0, s_corr / np.maximum(count, 1), np.nan)
        mconf = np.where(count > 0, s_conf / np.maximum(count, 1), np.nan)
    edges = bin_edges(n_bins)
    return {"lower": edges[:-1], "upper": edges[1:], "count": count, "acc": acc, "conf": mconf}


def expected_calibration_error(conf: Any, correct: Any, n_bins: int = 20) -> float:
    """ECE in [0, 1] (not x100), C-TPT convention (see module docstring)."""
    c = _as_conf(conf)
    k = _as_array(correct, "correct").astype(bool)
    n = _check_same_length(conf=c, correct=k)
    if n == 0:
        raise ValueError("expected_calibration_error: no samples")
    _, s_conf, s_corr = _bin_sums(c, k, n_bins)
    return float(np.abs(s_corr - s_conf).sum() / n)


def adaptive_ece(conf: Any, correct: Any, n_bins: int = 20) -> float:
    """AdaECE in [0, 1] (equal-mass bins, see module docstring)."""
    c = _as_conf(conf).astype(np.float64)
    k = _as_array(correct, "correct").astype(np.float64)
    n = _check_same_length(conf=c, correct=k)
    if n == 0:
        raise ValueError("adaptive_ece: no samples")
    order = np.argsort(c, kind="stable")
    total = 0.0
    for chunk in np.array_split(order, n_bins):
        if len(chunk):
            total += abs(k[chunk].sum() - c[chunk].sum())
    return float(total / n)


def compute_metrics(conf: Any, pred: Any, label: Any, p_label: Any = None, brier: Any = None,
                    n_bins: int = 20) -> Dict[str, Optional[float]]:
    """Accuracy, ECE, AdaECE, MCE (all %), NLL, Brier and n for one evaluation.

    ``conf``: max probability per image; ``pred``/``label``: predicted and true class;
    ``p_label``: probability of the true class (for NLL); ``brier``: per-image Brier score.
    ``nll``/``brier`` are ``None`` when the corresponding input is not given.
    """
    c = _as_conf(conf)
    p = _as_array(pred, "pred")
    y = _as_array(label, "label")
    n = _check_same_length(conf=c, pred=p, label=y)
    if n == 0:
        raise ValueError("compute_metrics: no samples (empty conf/pred/label)")
    correct = p == y
    count, s_conf, s_corr = _bin_sums(c, correct, n_bins)
    gaps = np.abs(s_corr - s_conf)
    nonempty = count > 0
    mce = float((gaps[nonempty] / count[nonempty]).max()) if nonempty.any() else 0.0
    out: Dict[str, Optional[float]] = {
        "accuracy": 100.0 * float(correct.mean()),
        "ece": 100.0 * float(gaps.sum() / n),
        "adaece": 100.0 * adaptive_ece(c, correct, n_bins),
        "mce": 100.0 * mce,
        "nll": None,
        "brier": None,
        "n": int(n),
    }
    if p_label is not None:
        pl = _as_conf(p_label, "p_label").astype(np.float64)
        _check_same_length(conf=c, p_label=pl)
        out["nll"] = float(-np.log(np.clip(pl, NLL_EPS, None)).mean())
    if brier is not None:
        b = _as_conf(brier, "brier").astype(np.float64)
        _check_same_length(conf=c, brier=b)
        out["brier"] = float(b.mean())
    return out


class RunningCalibration:
    """Accuracy and ECE updated one image (or batch) at a time with O(n_bins) state, for a
    progress bar: ``bar.set_postfix(rc.postfix())``. Same bin rule as :func:`compute_metrics`,
    so after all updates ``rc.ece == compute_metrics(...)["ece"]`` (up to float rounding)."""

    def __init__(self, n_bins: int = 20):
        if int(n_bins) < 1:
            raise ValueError(f"n_bins must be >= 1, got {n_bins}")
        self.n_bins = int(n_bins)
        self.count = np.zeros(self.n_bins, dtype=np.int64)
        self.sum_conf = np.zeros(self.n_bins, dtype=np.float64)
        self.sum_correct = np.zeros(self.n_bins, dtype=np.float64)
        self.n = 0
        self.n_correct = 0

    def update(self, conf: Any, correct: Any) -> "RunningCalibration":
        c = _as_conf(conf)
        k = _as_array(correct, "correct").astype(bool)
        _check_same_length(conf=c, correct=k)
        cnt, s_conf, s_corr = _bin_sums(c, k, self.n_bins)
        self.count += cnt
        self.sum_conf += s_conf
        self.sum_correct += s_corr
        self.n += len(c)
        self.n_correct += int(k.sum())
        return self

    @property
    def accuracy(self) -> float:
        """Accuracy so far in % (0 before any update)."""
        return 100.0 * self.n_correct / self.n if self.n else 0.0

    @property
    def ece(self) -> float:
        """ECE so far in % (0 before any update)."""
        if not self.n:
            return 0.0
        return 100.0 * float(np.abs(self.sum_correct - self.sum_conf).sum()) / self.n

    def postfix(self) -> Dict[str, str]:
        return {"acc": f"{self.accuracy:.2f}", "ece": f"{self.ece:.2f}"}

    def __repr__(self) -> str:
        return f"RunningCalibration(n={self.n}, acc={self.accuracy:.2f}%, ece={self.ece:.2f}%)"


# ----------------------------------------------------------------------------- selective
def _sorted_errors(conf: Any, correct: Any):
    """(n, cumulative errors at k = 1..n) of the images sorted by confidence, highest first,
    ties spread evenly over their group (module docstring)."""
    c = _as_conf(conf).astype(np.float64)
    k = _as_array(correct, "correct").astype(bool)
    n = _check_same_length(conf=c, correct=k)
    if n == 0:
        raise ValueError("risk-coverage: no samples")
    order = np.argsort(-c, kind="stable")
    c, err = c[order], (~k[order]).astype(np.float64)
    # group boundaries: positions where the (sorted) confidence changes
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    ends = np.r_[starts[1:], n]
    group_err = np.add.reduceat(err, starts)
    before = np.r_[0.0, np.cumsum(group_err)[:-1]]
    cum = np.empty(n, dtype=np.float64)
    for s, e, g, b in zip(starts, ends, group_err, before):
        m = e - s
        cum[s:e] = b + g * np.arange(1, m + 1) / m
    return n, cum


def risk_coverage(conf: Any, correct: Any) -> Dict[str, np.ndarray]:
    """The risk-coverage curve: ``coverage`` (k/n, k = 1..n) and ``risk`` (error rate of the k
    most confident images, in [0, 1]); ties as in the module docstring."""
    n, cum = _sorted_errors(conf, correct)
    k = np.arange(1, n + 1, dtype=np.float64)
    return {"coverage": k / n, "risk": cum / k}


def _optimal_aurc(n: int, errors: float) -> float:
    k = np.arange(1, n + 1, dtype=np.float64)
    return float(np.mean(np.clip(k - (n - errors), 0.0, None) / k))


def aurc(conf: Any, correct: Any) -> float:
    """Area under the risk-coverage curve in [0, 1] (not x100): the mean risk over the n
    coverages."""
    return float(risk_coverage(conf, correct)["risk"].mean())


def eaurc(conf: Any, correct: Any) -> float:
    """Excess AURC in [0, 1]: :func:`aurc` minus the AURC of an optimal ranking with the same
    errors, on the same n coverages (0 for a confidence that ranks every correct image
    first)."""
    n, cum = _sorted_errors(conf, correct)
    k = np.arange(1, n + 1, dtype=np.float64)
    return float((cum / k).mean()) - _optimal_aurc(n, float(round(cum[-1])))


# ----------------------------------------------------------------------------- OOD detection
def _scores(id_scores: Any, ood_scores: Any):
    a = _as_conf(id_scores, "id_scores").astype(np.float64)
    b = _as_conf(ood_scores, "ood_scores").astype(np.float64)
    if not len(a) or not len(b):
        raise ValueError(f"OOD detection needs scores of both sets, got {len(a)} ID and "
                         f"{len(b)} OOD")
    return a, b


def ood_auroc(id_scores: Any, ood_scores: Any) -> float:
    """AUROC in [0, 1] of telling ID (positive, higher score) from OOD: the Mann-Whitney U over
    ``n_ID * n_OOD`` (ties count one half)."""
    a, b = _scores(id_scores, ood_scores)
    both = np.concatenate([a, b])
    values, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    # average rank (1-based) of each distinct value: the mean of the positions it occupies
    first = np.cumsum(counts) - counts + 1
    avg_rank = first + (counts - 1) / 2.0
    rank_sum = avg_rank[inverse[:len(a)]].sum()
    u = rank_sum - len(a) * (len(a) + 1) / 2.0
    return float(u / (len(a) * len(b)))


def fpr_at_tpr(id_scores: Any, ood_scores: Any, tpr: float = 0.95) -> float:
    """FPR in [0, 1] at the threshold whose TPR is nearest ``tpr``, MCM's rule (module
    docstring: candidate thresholds, nearest in float64, the lowest threshold on a tie)."""
    if not 0.0 < float(tpr) <= 1.0:
        raise ValueError(f"tpr must be in (0, 1], got {tpr}")
    a, b = _scores(id_scores, ood_scores)
    cands = np.unique(np.concatenate([a, b]))
    cands = cands[cands >= a.min()][::-1]               # highest first, down to the lowest ID
    a_sorted, b_sorted = np.sort(a), np.sort(b)
    tps = len(a) - np.searchsorted(a_sorted, cands, side="left")   # ID scores >= t
    fps = len(b) - np.searchsorted(b_sorted, cands, side="left")   # OOD scores >= t
    rate = tps / float(len(a))
    gap = np.abs(rate - float(tpr))
    best = np.flatnonzero(gap == gap.min())[-1]        # the lowest threshold among the nearest
    return float(fps[best] / len(b))
