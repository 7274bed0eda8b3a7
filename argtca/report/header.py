"""The lines above a results table: what every run shares, what the user set (apart from what
"auto" resolved and from each method's own defaults), the stream order of the online rows, how
cells are aggregated, and why a table is no real result."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from .identity import (AUTO_KEYS, LABEL_KEYS, fmt_value, is_dataset_key, real_weights,
                       same_value, stream_seed)
from .runs import Run

AGGREGATION = ("Cells: the mean over seeds of each run's metric (python -m argtca.report --std "
               "adds ± the sample standard deviation over seeds); the reliability diagrams draw "
               "the records of every seed pooled, and their ECE titles are the same per-seed "
               "means.")
AGGREGATION_STD = ("Cells: mean ± sample standard deviation (n − 1) over seeds of each run's "
                   "metric (the mean alone for a cell of one seed); the reliability diagrams "
                   "draw the records of every seed pooled, and their ECE titles are the "
                   "per-seed means.")


def _fmt_key(k: str, v) -> str:
    return f"{k}={fmt_value(v)}"


def not_real_reasons(runs: Sequence[Run]) -> List[str]:
    """Why these runs cannot be compared with published numbers (empty when they can be)."""
    from .reference import full_test_size
    why: List[str] = []
    weights = sorted({str(r.settings.get("MODEL.PRETRAINED")) for r in runs
                      if not real_weights(r.settings.get("MODEL.PRETRAINED"))})
    if weights:
        why.append(f"weights {', '.join(weights)} (not CLIP's published weights: set "
                   f"MODEL.PRETRAINED openai or a weights file)")
    subset = sorted({int(r.settings.get("DATASET.NUM_IMAGES", -1)) for r in runs
                     if int(r.settings.get("DATASET.NUM_IMAGES", -1) or -1) > 0})
    if subset:
        why.append(f"DATASET.NUM_IMAGES {', '.join(map(str, subset))} (a subset of the "
                   f"test split)")
    splits = sorted({str(r.settings.get("DATASET.SPLIT")) for r in runs} - {"test"})
    if splits:
        why.append(f"split {', '.join(splits)} (published numbers are on the test split)")
    demo = sorted({r.dataset for r in runs if str(r.dataset_key).lower() == "demo"})
    if demo:
        why.append("the embedded demo dataset (synthetic images, a tiny CLIP)")
    short = sorted({f"{r.dataset} {r.summary.get('n')} of {full_test_size(r.dataset_key)}"
                    for r in runs if full_test_size(r.dataset_key) and isinstance(
                        r.summary.get("n"), int) and r.summary["n"] != full_test_size(
                        r.dataset_key) and not subset})
    if short:
        why.append(f"test sets of another size than the published split ({'; '.join(short)} "
                   f"images: other data or split files)")
    return why


def table_header(runs: Sequence[Run], labels: Sequence[str],
                 datasets: Sequence[Tuple[str, str]], show_std: bool = False) -> List[str]:
    """Lines above the table: what every run shares (split, images per dataset, views, backbone,
    weights), what the user set (every key that differs from the method's own default:
    argtca's defaults under ``configs/trainers/<method>.yaml``) for every run or for some rows,
    the values "auto" resolved (one short line), how cells are aggregated, and a warning when
    the table is no real result (demo, subset, other weights)."""
    if not runs:
        return []
    lines = []

    def shared(k):
        v = runs[0].settings.get(k)
        return v if all(same_value(r.settings.get(k), v) for r in runs[1:]) else _VARIES

    named = {k for r in runs for k, _ in r.variant}   # keys some row label names
    main = [("DATASET.SPLIT", "split"), ("MODEL.BACKBONE.NAME", "backbone"),
            ("MODEL.PRETRAINED", "weights"), ("RUN.DEVICE_TYPE", "device")]
    parts = []
    varies = []
    shown = set(LABEL_KEYS)
    for k, name in main:
        v = shared(k)
        if v is _VARIES:
            if k in named:
                varies.append(name)
                shown.add(k)
        elif v is not None:
            parts.append(f"{name} {fmt_value(v)}")
            shown.add(k)
    views = _views_note(runs)
    if views:
        parts.insert(1, views)
        shown.add("TTA.N_VIEWS")
    names = dict(datasets)
    sizes = []
    for dk, _ in datasets:
        ns = sorted({r.summary.get("n") for r in runs if r.dataset_key == dk
                     and isinstance(r.summary.get("n"), int)})
        sizes.append(f"{names[dk]} {'/'.join(map(str, ns)) or '?'}")
    parts.append("test images: " + ", ".join(sizes))
    lines.append("Every run: " + " · ".join(parts) + ".")
    if varies:
        lines.append(f"Differ between rows (named in the row labels): {', '.join(varies)}.")
    keys = sorted(k for k in set().union(*(r.settings for r in runs))
                  if k not in shown and not is_dataset_key(k))
    common = [k for k in keys if shared(k) is not _VARIES and all(r.user_set(k) for r in runs)]
    if common:
        lines.append("Set for every run (not the methods' defaults): "
                     + ", ".join(_fmt_key(k, shared(k)) for k in common) + ".")
    per_row = []
    for lab in labels:
        rs = [r for r in runs if r.label == lab]
        if not rs:
            continue
        variant = {k for r in rs for k, _ in r.variant}
        own = [k for k in keys if k not in common and k not in variant
               and all(same_value(r.settings.get(k), rs[0].settings.get(k)) for r in rs)
               and rs[0].user_set(k)]
        if own:
            per_row.append(f"{lab}: " + ", ".join(_fmt_key(k, rs[0].settings.get(k))
                                                  for k in own))
    if per_row:
        lines.append("Set for some rows only (not their method's default): "
                     + "; ".join(per_row) + ".")
    code = code_note(runs, labels)
    if code:
        lines.append(code)
    resolved = _resolved_note(runs, labels)
    if resolved:
        lines.append(resolved)
    stream = stream_note(runs)
    if stream:
        lines.append(stream)
    lines.append(AGGREGATION_STD if show_std else AGGREGATION)
    why = not_real_reasons(runs)
    if why:
        lines.append("**Not comparable with published numbers**: " + "; ".join(why) + ".")
    return lines


def _views_note(runs: Sequence[Run]) -> str:
    """Views per image, for the "Every run" line, per family present: the zero-shot family
    computes on the test image alone (its TTA.N_VIEWS is never used), the others on TTA.N_VIEWS
    views: one number when every such run used it, "each method's default" when every one used
    its method's own (else: empty, and the rows that used another number are listed with their
    settings)."""
    k = "TTA.N_VIEWS"
    alone = [r for r in runs if r.family == "zero-shot"]
    viewing = [r for r in runs if r.family != "zero-shot"]
    if not viewing:
        return "views 1 (zero-shot: the test image alone)"
    zero = [f"{alone[0].group}: 1, the test image alone"] if alone else []
    values = {fmt_value(r.settings.get(k)) for r in viewing}
    own = [r for r in viewing if not same_value(r.settings.get(k), r.default(k))]

    def note(head: str, *why: str) -> str:
        return head + (f" ({'; '.join([*why, *zero])})" if why or zero else "")
    if len(values) == 1:
        v = next(iter(values))
        if not own:
            return note(f"views {v}")
        if len(own) == len(viewing):
            return note(f"views {v}", "not the methods' defaults")
        labs = sorted({r.label for r in own}, key=[r.label for r in viewing].index)
        return note(f"views {v}", f"not the method's default for {', '.join(labs)}")
    if not own:
        return note("views: each method's default (configs/trainers)")
    return ""


def _resolved_note(runs: Sequence[Run], labels: Sequence[str]) -> str:
    """One short line: what "auto" resolved to (TTA.ENGINE, TTA.COMPILE), grouped by value."""
    parts = []
    for k in AUTO_KEYS:
        by_value: Dict[str, List[str]] = {}
        for lab in labels:
            rs = [r for r in runs if r.label == lab and r.auto_resolved(k)]
            vals = {fmt_value(r.settings.get(k)) for r in rs}
            if len(vals) == 1:
                by_value.setdefault(next(iter(vals)), []).append(lab)
        if len(by_value) == 1:
            parts.append(f"{k} {next(iter(by_value))}")
        elif by_value:
            parts.append(f"{k} " + ", ".join(f"{v} ({', '.join(labs)})"
                                             for v, labs in sorted(by_value.items())))
    return ("Resolved from auto: " + "; ".join(parts) + ".") if parts else ""


_VARIES = object()


def code_note(runs: Sequence[Run], labels: Sequence[str]) -> str:
    """The code that made the runs (argtca/utils/code.py): one version for every run, or which
    rows each version made. Runs of two versions are never one cell (their labels differ); a
    run resumed under other code (RUN.CODE_CHANGE allow) is named."""
    from ..utils.code import RESUMED_KEY, code_id
    by_code: Dict[str, List[str]] = {}
    for lab in labels:
        for r in runs:
            if r.label == lab:
                cid = code_id(r.settings)
                if r.settings.get(RESUMED_KEY):
                    cid += " resumed under " + ", ".join(
                        code_id(c) for c in r.settings[RESUMED_KEY])
                if lab not in by_code.setdefault(cid, []):
                    by_code[cid].append(lab)
    if len(by_code) == 1:
        return f"Code: every run by {next(iter(by_code))}."
    return (f"Code: the rows come from {len(by_code)} versions of the code (a cell never pools "
            f"two): " + "; ".join(f"{cid}: {', '.join(labs)}" for cid, labs in by_code.items())
            + ".")


def stream_note(runs: Sequence[Run]) -> str:
    """What the online rows saw: one stream over the test set, in which order (their numbers
    depend on it)."""
    online = [r for r in runs if r.online]
    if not online:
        return ""
    orders = set()
    for r in online:
        seed = stream_seed(r.settings)
        orders.add("the split file's order" if seed is None else
                   "shuffled by each seed" if seed < 0 else f"shuffled by stream seed {seed}")
    return ("Rows marked (online) carry their state from image to image over one stream of the "
            "test set (one process, no torchrun split); stream order: "
            + "; ".join(sorted(orders)) + " (TTA.STREAM). Their numbers depend on that order.")
