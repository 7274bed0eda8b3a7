"""OOD detection section of a report (``ood.md``, ``ood.csv``), from the records alone.

An OOD run (``DATASET.OOD.NAME`` set: argtca/datasets/ood.py) is paired with the in-distribution
(ID) run of the same method, seed and settings (every key but the ``DATASET.OOD.*`` ones, the test
set, the split file its images come from and the stream order drawn over them). Per pair, the
score of an image is its maximum softmax probability (``conf`` of its record), ID images
positive: AUROC and FPR at 95% TPR (:func:`argtca.metrics.ood_auroc`,
:func:`argtca.metrics.fpr_at_tpr`: MCM's measures), in %. Per method and (ID, OOD) pair: the
mean over seeds, ± the sample std where there are several.
"""
from __future__ import annotations

import csv
import io
import math
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..run_folder import STREAM_ORDER_KEY
from .identity import FILE_HASH_PREFIX, canonical
from .notes import shared_classes_lines
from .runs import MISSING, Run, _method_sort_key

__all__ = ["is_ood_run", "ood_pairs", "ood_results", "ood_markdown", "ood_csv"]


def is_ood_run(r: Run) -> bool:
    return bool(str(r.settings.get("DATASET.OOD.NAME") or "").strip())


# what tells the test images apart: the OOD node, the test set, the split file the images come
# from and the stream order drawn over them; every other key pairs an OOD run with its ID run
_IMAGE_KEYS = ("DATASET.OOD.", "TEST_SET.")
_IMAGE_ONLY = (STREAM_ORDER_KEY, FILE_HASH_PREFIX + "SPLIT_FILE")


def _pair_key(r: Run) -> str:
    keep = {k: v for k, v in r.settings.items()
            if not k.startswith(_IMAGE_KEYS) and k not in _IMAGE_ONLY}
    return canonical(dict(keep, **{"report.label": r.base_label, "report.seed": r.seed}))


def ood_pairs(runs: Sequence[Run]) -> Tuple[List[Tuple[Run, Run]], List[Run]]:
    """(ID run, OOD run) pairs, and the OOD runs without their ID run."""
    by_key: Dict[str, Run] = {}
    for r in runs:
        if not is_ood_run(r):
            by_key.setdefault(_pair_key(r), r)
    pairs, alone = [], []
    for r in runs:
        if is_ood_run(r):
            partner = by_key.get(_pair_key(r))
            (pairs.append((partner, r)) if partner is not None else alone.append(r))
    return pairs, alone


def ood_results(pairs: Sequence[Tuple[Run, Run]]) -> List[Dict]:
    """One dict per pair: label, ID and OOD dataset names, seed, AUROC and FPR95 (%)."""
    from argtca.metrics import fpr_at_tpr, ood_auroc
    out = []
    for id_run, ood_run in pairs:
        a, b = id_run.records()["conf"], ood_run.records()["conf"]
        out.append({"label": id_run.base_label, "id": id_run.dataset, "ood": ood_run.dataset,
                    "ood_name": str(ood_run.settings.get("DATASET.OOD.NAME")),
                    "seed": id_run.seed, "n_id": len(a), "n_ood": len(b),
                    "auroc": 100.0 * ood_auroc(a, b), "fpr95": 100.0 * fpr_at_tpr(a, b),
                    "sort": _method_sort_key(id_run), "id_path": str(id_run.path),
                    "ood_path": str(ood_run.path),
                    # the ID class names the OOD set names too (its run found them)
                    "shared": list(ood_run.summary.get("ood_shared_classes") or [])})
    return out


def _cells(results: Sequence[Dict]):
    labels = list(dict.fromkeys(r["label"] for r in sorted(results, key=lambda r: r["sort"])))
    cols = list(dict.fromkeys((r["id"], r["ood"]) for r in results))
    cells: Dict[Tuple[str, Tuple[str, str]], List[Dict]] = {}
    for r in results:
        cells.setdefault((r["label"], (r["id"], r["ood"])), []).append(r)
    return labels, cols, cells


def _stat(rs: Sequence[Dict], k: str) -> Tuple[float, float]:
    v = [r[k] for r in rs]
    return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else math.nan


def ood_markdown(results: Sequence[Dict], decimals: int = 2) -> str:
    labels, cols, cells = _cells(results)
    lines = ["# OOD detection", "",
             "Score: each image's maximum softmax probability under the adapted model, over the "
             "in-distribution classes (MCM; TTA-VLM), in-distribution images positive. AUROC "
             "(higher is better) and FPR at 95% TPR (lower is better; MCM's threshold rule: the "
             "TPR nearest 95%), in %, from the records of a run on each set; mean ± sample std "
             "over seeds where a cell has several. Best per column **bold**. An online method "
             "adapts over each set's stream separately.", ""]
    head = ["Method"]
    names = {(r["id"], r["ood"]): f"{r['id']} vs {r['ood_name']}" for r in results}
    for c in cols:
        head += [f"{names[c]} AUROC", f"{names[c]} FPR95"]
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join([":---"] + ["---:"] * 2 * len(cols))
              + "|"]
    best = {}
    for c in cols:
        for k, hi in (("auroc", True), ("fpr95", False)):
            vals = [round(_stat(cells[(lab, c)], k)[0], decimals) for lab in labels
                    if (lab, c) in cells]
            best[(c, k)] = (max if hi else min)(vals) if vals else None
    for lab in labels:
        row = [lab]
        for c in cols:
            for k in ("auroc", "fpr95"):
                rs = cells.get((lab, c))
                if not rs:
                    row.append(MISSING)
                    continue
                m, sd = _stat(rs, k)
                s = f"{m:.{decimals}f}" + ("" if math.isnan(sd) else f" ± {sd:.{decimals}f}")
                row.append(f"**{s}**" if round(m, decimals) == best[(c, k)] else s)
        lines.append("| " + " | ".join(row) + " |")
    seeds = sorted({r["seed"] for r in results})
    sizes = sorted({(r["id"], r["n_id"], r["ood"], r["n_ood"]) for r in results})
    lines += ["", f"Seeds: {', '.join(map(str, seeds))}. Images: " + "; ".join(
        f"{i} {ni} vs {o} {no}" for i, ni, o, no in sizes) + "."]
    lines += [x for line in shared_classes_lines(results) for x in ("", line)]
    return "\n".join(lines) + "\n"


def ood_csv(results: Sequence[Dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ["label", "id", "ood", "seed", "n_id", "n_ood", "auroc", "fpr95", "id_path",
            "ood_path"]
    w.writerow(cols)
    for r in sorted(results, key=lambda r: (r["sort"], r["id"], r["ood"], r["seed"])):
        w.writerow([r[k] for k in cols])
    return buf.getvalue()
