"""Hand-written run folders whose summary.json agrees with their records.jsonl, as the engine
writes them (the report recomputes every number from the records and leaves out a summary that
disagrees)."""
import json
from pathlib import Path
from typing import Dict

from argtca.metrics import compute_metrics


def record_lines(n: int, acc: float, ece: float):
    """``n`` records with accuracy ``acc`` % (rounded to the nearest k/n) and, one confidence for
    every image, an ECE of ``ece`` % (|accuracy - confidence| in one bin)."""
    k = round(acc * n / 100)
    a = k / n
    c = a + ece / 100 if a + ece / 100 <= 1 else a - ece / 100
    c = min(max(c, 1e-6), 1.0)
    out = []
    for i in range(n):
        ok = i < k
        out.append({"index": i, "path": f"img{i}.jpg", "label": i % 5,
                    "pred": i % 5 if ok else (i + 1) % 5, "conf": c,
                    "p_label": c if ok else (1 - c) / 4,
                    "brier": (1 - c) ** 2 + (0 if ok else c ** 2 + 1)})
    return out


def write_records(d: Path, n: int, acc: float, ece: float) -> Dict[str, float]:
    """Write ``d/records.jsonl`` (:func:`record_lines`) and return its metrics, the numbers
    the summary must hold."""
    recs = record_lines(n, acc, ece)
    (Path(d) / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    m = compute_metrics([r["conf"] for r in recs], [r["pred"] for r in recs],
                        [r["label"] for r in recs], p_label=[r["p_label"] for r in recs],
                        brier=[r["brier"] for r in recs], n_bins=20)
    return {k: m[k] for k in ("accuracy", "ece", "adaece", "mce", "nll", "brier")}


def write_summary(d: Path, summary: dict, n: int, acc: float, ece: float) -> dict:
    """``summary`` (its metrics replaced by what the records give) written next to them."""
    s = dict(summary, n=n, **write_records(d, n, acc, ece))
    (Path(d) / "summary.json").write_text(json.dumps(s))
    return s
