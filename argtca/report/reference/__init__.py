"""Published numbers a reproduction is compared with, shipped as data with their sources.

* ``paper_table1.csv``: the ArgTCA paper's Table 1 (every method on its nine datasets, Acc and
  20-bin ECE, CLIP ViT-B/16), typed as printed, a citation and notes per row.
* ``clip_zeroshot.csv``: zero-shot CLIP ViT-B/16 accuracy per dataset from the TPT paper.
* ``paper_shift.csv``: the TPT paper's Table 1 (natural distribution shifts: ImageNet and -A,
  -V2, -R, -Sketch; zero-shot CLIP and TPT, CLIP ViT-B/16 accuracy), a citation and notes per
  row; a value that could not be verified is left empty (never guessed).
* ``test_splits.csv``: the number of test images and classes of each dataset's published split
  (CoOp's split files), by which a full test split is told from a subset or other data.

Keys are the ``configs/datasets`` keys (``oxford_pets``); :func:`canon` matches them with a run's
``dataset_key`` whatever its spelling.
"""
from __future__ import annotations

import csv
import functools
import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ...datasets.catalogue import canon as dataset_canon, shift_datasets, table1_datasets

HERE = Path(__file__).resolve().parent
# the ArgTCA paper's Table 1, in its column order (as the datasets declare it)
PAPER_DATASETS = table1_datasets()
# report method (and argtca selector) -> the paper's row name
PAPER_METHOD = {("tpt", None): "TPT", ("ctpt", None): "C-TPT", ("otpt", None): "O-TPT",
                ("atpt", None): "A-TPT", ("tca", None): "TCA", ("argtca", "div"): "ArgTCA-Div",
                ("argtca", "disc"): "ArgTCA-Disc"}
METRIC_OF = {"Acc": "accuracy", "ECE": "ece"}
# the TPT paper's Table 1 (natural distribution shifts), in its column order (I / A / V / R / K)
SHIFT_DATASETS = shift_datasets()
# report method -> the row name of paper_shift.csv
SHIFT_METHOD = {"zeroshot": "CLIP-ViT-B/16", "tpt": "TPT"}
# a zero-shot run this many accuracy points off the published value is worth a warning
ZEROSHOT_TOLERANCE = 1.0
# the published numbers are for this backbone
REFERENCE_BACKBONE = "ViT-B/16"
def canon(key: str) -> str:
    """The configs/datasets key of a run's ``dataset_key`` in any spelling (the datasets'
    declared aliases: argtca/datasets/catalogue.py), else a key of the shipped tables."""
    found = dataset_canon(key)
    if found != str(key).lower():
        return found
    k = re.sub(r"[^a-z0-9]", "", str(key).lower())
    by_plain = {re.sub(r"[^a-z0-9]", "", d): d for d in _test_sizes()}
    return by_plain.get(k, str(key).lower())


def _rows(name: str) -> List[Dict[str, str]]:
    with open(HERE / name, newline="") as f:
        return list(csv.DictReader(f))


@functools.lru_cache(maxsize=None)
def _test_sizes() -> Dict[str, int]:
    return {r["dataset"]: int(r["test_images"]) for r in _rows("test_splits.csv")}


@functools.lru_cache(maxsize=None)
def _classes() -> Dict[str, int]:
    return {r["dataset"]: int(r["classes"]) for r in _rows("test_splits.csv")}


def num_classes(dataset_key: str) -> Optional[int]:
    """Classes of the dataset's published split (None for datasets without one)."""
    return _classes().get(canon(dataset_key))


def full_test_size(dataset_key: str) -> Optional[int]:
    """Images in the dataset's published test split (None for datasets without one)."""
    return _test_sizes().get(canon(dataset_key))


@functools.lru_cache(maxsize=None)
def paper_table1() -> Dict[Tuple[str, str, str], Tuple[float, str, str]]:
    """(method, "accuracy" | "ece", dataset key) -> (value, citation, note)."""
    out = {}
    for r in _rows("paper_table1.csv"):
        for d in PAPER_DATASETS + ["average"]:
            out[(r["method"], METRIC_OF[r["metric"]], d)] = (float(r[d]), r["citation"],
                                                              r["note"])
    return out


@functools.lru_cache(maxsize=None)
def clip_zeroshot() -> Dict[str, Tuple[float, str]]:
    """dataset key -> (zero-shot CLIP ViT-B/16 accuracy %, citation)."""
    return {r["dataset"]: (float(r["accuracy"]), r["citation"]) for r in _rows("clip_zeroshot.csv")}


@functools.lru_cache(maxsize=None)
def paper_shift() -> Dict[Tuple[str, str, str], Tuple[float, str, str]]:
    """(row name, "accuracy", dataset key | "average" | "ood_average") -> (value, citation,
    note), from the TPT paper's Table 1; cells left empty in the CSV (not verified) are absent."""
    out = {}
    for r in _rows("paper_shift.csv"):
        for d in SHIFT_DATASETS + ["average", "ood_average"]:
            if str(r[d]).strip():
                out[(r["method"], METRIC_OF[r["metric"]], d)] = (float(r[d]), r["citation"],
                                                                  r["note"])
    return out


def reference_for(method: str, selector: Optional[str], metric: str, dataset_key: str
                  ) -> Optional[Tuple[float, str, str]]:
    """The published value (value, citation, note) for a method on a dataset, or None."""
    d = canon(dataset_key)
    if method == "zeroshot":
        hit = clip_zeroshot().get(d) if metric == "accuracy" else None
        if hit:
            return hit[0], hit[1], ""
    if d in SHIFT_DATASETS and method in SHIFT_METHOD:
        return paper_shift().get((SHIFT_METHOD[method], metric, d))
    if method == "zeroshot":
        return None
    name = PAPER_METHOD.get((method, selector if method == "argtca" else None))
    return paper_table1().get((name, metric, d)) if name else None


def zeroshot_warning(dataset: str, value: float, ref: float, citation: str) -> Optional[str]:
    """A line when a zero-shot accuracy is more than ZEROSHOT_TOLERANCE points off the
    published one, naming the usual causes."""
    if math.isnan(value) or abs(value - ref) <= ZEROSHOT_TOLERANCE:
        return None
    return (f"zero-shot CLIP on {dataset}: accuracy {value:.2f} vs {ref:.2f} published "
            f"({citation}), {value - ref:+.2f} points. Usual causes: the weights "
            f"(MODEL.PRETRAINED must be OpenAI's {REFERENCE_BACKBONE}: openai or that file), "
            f"resize/interpolation (INPUT.SIZE 224, INPUT.INTERPOLATION bicubic, CLIP's mean "
            f"and std), the split (CoOp's split file for this dataset), the prompt template "
            f"(TRAINER.ZEROSHOTCLIP.TEMPLATE)")


def comparison_markdown(rows: Sequence[Tuple[str, str, str, float, float, str, str]],
                        dataset_names: Dict[str, str], decimals: int = 2) -> str:
    """``rows``: (label, metric, dataset key, ours, reference, citation, note) -> the section
    "Against published numbers": ours / reference (ours − reference) per cell."""
    if not rows:
        return ""
    from ..runs import METRICS
    cols = list(dict.fromkeys(r[2] for r in rows))
    cells: Dict[Tuple[str, str], Dict[str, str]] = {}
    for lab, m, dk, ours, ref, _, _ in rows:
        cells.setdefault((lab, m), {})[dk] = (f"{ours:.{decimals}f} / {ref:.{decimals}f} "
                                              f"({ours - ref:+.{decimals}f})")
    out = ["## Against published numbers", "",
           "Cell: ours / published (ours − published), for rows at default settings on a "
           "dataset's full published test split with CLIP's published weights.", "",
           "| Method | Metric | " + " | ".join(dataset_names.get(c, c) for c in cols) + " |",
           "|:---|:---|" + "|".join(["---:"] * len(cols)) + "|"]
    last = None
    for (lab, m), per in cells.items():
        out.append(f"| {lab if lab != last else ''} | {METRICS[m][0]} | "
                   + " | ".join(per.get(c, "–") for c in cols) + " |")
        last = lab
    out += ["", "Sources:"]
    for cit in dict.fromkeys(r[5] for r in rows):
        out.append(f"- {cit}")
    for n in dict.fromkeys(r[6] for r in rows if r[6]):
        out.append(f"- note: {n}")
    return "\n".join(out) + "\n"
