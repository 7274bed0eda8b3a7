"""Cells (runs of one method and dataset, averaged over seeds) and the results table in Markdown,
CSV and LaTeX."""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .identity import (AUTO_KEYS, LABEL_KEYS, PROTOCOL_KEYS, config_default, fmt_value,
                       is_dataset_key, real_weights, same_value, short_name)
from .runs import (METRICS, MISSING, ReportError, Run, _assign_variants, _dataset_rank,
                   _method_sort_key, duplicate_error)

AGGREGATION = ("Cells: the mean over seeds of each run's metric (python -m argtca.report --std "
               "adds ± the sample standard deviation over seeds); the reliability diagrams draw "
               "the records of every seed pooled, and their ECE titles are the same per-seed "
               "means.")
AGGREGATION_STD = ("Cells: mean ± sample standard deviation (n − 1) over seeds of each run's "
                   "metric (the mean alone for a cell of one seed); the reliability diagrams "
                   "draw the records of every seed pooled, and their ECE titles are the "
                   "per-seed means.")


# ----------------------------------------------------------------------------- cells
@dataclass
class Cell:
    """All runs of one (label, dataset); metrics are averaged over seeds."""
    label: str
    dataset: str
    dataset_key: str
    runs: List[Run]

    @property
    def seeds(self) -> List[int]:
        return sorted(r.seed for r in self.runs)

    def mean(self, metric: str) -> float:
        v = [r.metric(metric) for r in self.runs]
        v = [x for x in v if not math.isnan(x)]
        return float(np.mean(v)) if v else math.nan

    def std(self, metric: str) -> float:
        v = [x for x in (r.metric(metric) for r in self.runs) if not math.isnan(x)]
        return float(np.std(v, ddof=1)) if len(v) > 1 else math.nan

    def pooled_records(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        recs = [r.records() for r in self.runs]
        recs = [x for x in recs if x is not None]
        if not recs:
            return None
        return (np.concatenate([x["conf"] for x in recs]),
                np.concatenate([x["correct"] for x in recs]))


def group_runs(runs: Sequence[Run]) -> Tuple[List[str], List[Tuple[str, str]], Dict]:
    """-> (labels in canonical order, [(dataset_key, display name)] in canonical order,
    {(label, dataset_key): Cell}). A seed twice in a cell (two folders claiming the same method,
    dataset, seed and settings) is an error naming both."""
    _assign_variants(runs)
    runs = sorted(runs, key=lambda r: (_method_sort_key(r), str(r.path)))
    labels: List[str] = []
    datasets: Dict[str, str] = {}
    cells: Dict[Tuple[str, str], Cell] = {}
    for r in runs:
        if r.label not in labels:
            labels.append(r.label)
        datasets.setdefault(r.dataset_key, r.dataset)
        cell = cells.setdefault((r.label, r.dataset_key),
                                Cell(r.label, r.dataset, r.dataset_key, []))
        dup = [x for x in cell.runs if x.seed == r.seed]
        if dup:
            raise duplicate_error(f"{r.label} / {r.dataset} / seed {r.seed}", dup[0], r)
        cell.runs.append(r)
    first_seen = list(datasets)
    order = sorted(first_seen, key=lambda k: (_dataset_rank(k), first_seen.index(k)))
    return labels, [(k, datasets[k]) for k in order], cells


# ----------------------------------------------------------------------------- table
AVERAGE = "__average__"


@dataclass
class ResultsTable:
    labels: List[str]
    datasets: List[Tuple[str, str]]            # (key, display name)
    metrics: List[str]
    values: Dict[Tuple[str, str, str], float]  # (label, metric, dataset_key | AVERAGE)
    marks: Dict[Tuple[str, str, str], str]     # "best" | "second"
    seeds: Dict[Tuple[str, str], List[int]]    # (label, dataset_key) -> seeds
    decimals: int = 2
    # std over seeds per (label, metric, dataset_key | AVERAGE); shown as "mean ± std" when
    # show_std and the cell has more than one seed (the Average: std over seeds of the per-seed
    # mean over datasets, when every dataset of the row has the same seeds)
    stds: Dict[Tuple[str, str, str], float] = field(default_factory=dict)
    show_std: bool = False
    # what the runs share (split, images, backbone, weights, non-default keys) and warnings that
    # the table is no real result: printed above the table
    header: List[str] = field(default_factory=list)
    protocol_groups: int = 1    # rows are ranked only against rows of the same protocol
    groups: Dict[str, str] = field(default_factory=dict)   # label -> method family

    @property
    def columns(self) -> List[str]:
        return [k for k, _ in self.datasets] + [AVERAGE]

    @property
    def headers(self) -> List[str]:
        return [d for _, d in self.datasets] + ["Average"]

    def fmt(self, label: str, metric: str, col: str) -> str:
        v = self.values.get((label, metric, col), math.nan)
        if math.isnan(v):
            return MISSING
        sd = self.stds.get((label, metric, col), math.nan) if self.show_std else math.nan
        return f"{v:.{self.decimals}f}" + ("" if math.isnan(sd) else
                                            f" ± {sd:.{self.decimals}f}")

    def seed_note(self) -> str:
        counts = {k: len(v) for k, v in self.seeds.items()}
        if not counts:
            return ""
        if len(set(counts.values())) == 1:
            n = next(iter(counts.values()))
            allseeds = sorted({s for v in self.seeds.values() for s in v})
            return (f"Every cell is one run (seed {allseeds[0]})." if n == 1 and len(allseeds) == 1
                    else f"Every cell averages {n} seed(s) (seeds seen: "
                         f"{', '.join(map(str, allseeds))}).")
        names = dict(self.datasets)
        groups: Dict[Tuple[int, ...], List[str]] = {}
        for (lab, dk), s in self.seeds.items():
            groups.setdefault(tuple(s), []).append(f"{lab} / {names[dk]}")
        common = max(groups, key=lambda g: len(groups[g]))
        lines = ["Values are means over seeds:"]
        for g, cells in sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0])):
            what = "all other cells" if g == common else "; ".join(cells)
            lines.append(f"- {len(g)} seed(s) ({', '.join(map(str, g))}): {what}")
        return "\n".join(lines)


def build_table(labels: Sequence[str], datasets: Sequence[Tuple[str, str]], cells: Dict,
                metrics: Sequence[str] = ("accuracy", "ece"), decimals: int = 2,
                show_std: bool = False) -> ResultsTable:
    """Seed-averaged values per (method, metric, dataset), the Average over datasets (only when
    the method has every dataset of the table, else missing) and the best/second marks per
    column, decided on the values as displayed (rounded to ``decimals``; ties share a mark)."""
    for m in metrics:
        if m not in METRICS:
            raise ReportError(f"unknown metric {m!r}; choose from {', '.join(METRICS)}")
    values: Dict[Tuple[str, str, str], float] = {}
    seeds: Dict[Tuple[str, str], List[int]] = {}
    for lab in labels:
        for dk, _ in datasets:
            c = cells.get((lab, dk))
            if c is None:
                continue
            seeds[(lab, dk)] = c.seeds
            for m in metrics:
                values[(lab, m, dk)] = c.mean(m)
        for m in metrics:
            per = [values.get((lab, m, dk), math.nan) for dk, _ in datasets]
            values[(lab, m, AVERAGE)] = float(np.mean(per)) if not any(
                math.isnan(x) for x in per) else math.nan
    # rows of another split, subset, backbone or weights are never ranked against each other
    protocol = {lab: next(c.runs[0].protocol for (l2, _), c in cells.items() if l2 == lab)
                for lab in labels if any(l2 == lab for l2, _ in cells)}
    marks: Dict[Tuple[str, str, str], str] = {}
    for m in metrics:
        higher = METRICS[m][1]
        for col in [dk for dk, _ in datasets] + [AVERAGE]:
            for group in set(protocol.values()):
                shown = {lab: round(values.get((lab, m, col), math.nan), decimals)
                         for lab in labels if protocol.get(lab) == group}
                shown = {k: v for k, v in shown.items() if not math.isnan(v)}
                ranked = sorted(set(shown.values()), reverse=higher)
                for lab, v in shown.items():
                    if v == ranked[0]:
                        marks[(lab, m, col)] = "best"
                    elif len(ranked) > 1 and v == ranked[1]:
                        marks[(lab, m, col)] = "second"
    runs = [r for c in cells.values() for r in c.runs]
    groups = {r.label: r.group for r in runs}
    return ResultsTable(list(labels), list(datasets), list(metrics), values, marks, seeds,
                        decimals, _seed_stds(labels, datasets, cells, metrics), show_std,
                        table_header(runs, labels, datasets, show_std),
                        len(set(protocol.values())),
                        groups)


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
    """Views per image, for the "Every run" line: one number when every run used it, "each
    method's default" when every run used its method's own (else: empty, and the rows that used
    another number are listed with their settings)."""
    k = "TTA.N_VIEWS"
    values = {fmt_value(r.settings.get(k)) for r in runs}
    own = [r for r in runs if not same_value(r.settings.get(k), r.default(k))]
    if len(values) == 1:
        v = next(iter(values))
        if not own:
            return f"views {v}"
        if len(own) == len(runs):
            return f"views {v} (not the methods' defaults)"
        labs = sorted({r.label for r in own}, key=[r.label for r in runs].index)
        return f"views {v} (not the method's default for {', '.join(labs)})"
    if not own:
        return "views: each method's default (configs/trainers)"
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


def stream_note(runs: Sequence[Run]) -> str:
    """What the online rows saw: one stream over the test set, in which order (their numbers
    depend on it)."""
    online = [r for r in runs if r.online]
    if not online:
        return ""
    orders = set()
    for r in online:
        order = str(r.settings.get("TTA.STREAM.ORDER", config_default("TTA.STREAM.ORDER")))
        seed = r.settings.get("TTA.STREAM.SEED", config_default("TTA.STREAM.SEED"))
        if order == "index":
            orders.add("the split file's order")
        elif seed is None or int(seed) < 0:
            orders.add("shuffled by each seed")
        else:
            orders.add(f"shuffled by stream seed {int(seed)}")
    return ("Rows marked (online) carry their state from image to image over one stream of the "
            "test set (one process, no torchrun split); stream order: "
            + "; ".join(sorted(orders)) + " (TTA.STREAM). Their numbers depend on that order.")


def _seed_stds(labels, datasets, cells, metrics) -> Dict[Tuple[str, str, str], float]:
    """Sample std (ddof 1) over seeds per cell; for the Average, the std over seeds of the
    per-seed mean over the datasets (only when every dataset of the row has the same seeds)."""
    out: Dict[Tuple[str, str, str], float] = {}
    for lab in labels:
        row = [cells.get((lab, dk)) for dk, _ in datasets]
        for m in metrics:
            for (dk, _), c in zip(datasets, row):
                if c is not None:
                    out[(lab, m, dk)] = c.std(m)
            if any(c is None for c in row) or len({tuple(c.seeds) for c in row}) != 1:
                continue
            seeds = row[0].seeds
            if len(seeds) < 2 or len(set(seeds)) != len(seeds):
                continue
            per_seed = [np.mean([next(r.metric(m) for r in c.runs if r.seed == s) for c in row])
                        for s in seeds]
            if not any(math.isnan(x) for x in per_seed):
                out[(lab, m, AVERAGE)] = float(np.std(per_seed, ddof=1))
    return out


def _table_rows(t: ResultsTable, style: str) -> List[List[str]]:
    wrap = {"md": ("**{}**", "<u>{}</u>"), "tex": ("\\textbf{{{}}}", "\\underline{{{}}}"),
            "csv": ("{}", "{}")}[style]
    rows = []
    group = None
    for lab in t.labels:
        if style == "md" and t.groups.get(lab) != group and len(set(t.groups.values())) > 1:
            group = t.groups.get(lab)
            rows.append([f"*{group}*", ""] + [""] * len(t.columns))
        for i, m in enumerate(t.metrics):
            row = [lab if i == 0 or style == "csv" else "", METRICS[m][0]]
            for col in t.columns:
                s = t.fmt(lab, m, col)
                if style == "tex" and s == MISSING:
                    s = "--"
                if style == "tex":
                    s = s.replace(" ± ", " $\\pm$ ")
                mark = t.marks.get((lab, m, col))
                if mark == "best":
                    s = wrap[0].format(s)
                elif mark == "second":
                    s = wrap[1].format(s)
                row.append(s)
            rows.append(row)
    return rows


def _direction_note(t: ResultsTable) -> str:
    up = [METRICS[m][0] for m in t.metrics if METRICS[m][1]]
    down = [METRICS[m][0] for m in t.metrics if not METRICS[m][1]]
    parts = []
    if up:
        parts.append(f"highest {'/'.join(up)}")
    if down:
        parts.append(f"lowest {'/'.join(down)}")
    return " and ".join(parts)


def table_markdown(t: ResultsTable) -> str:
    head = ["Method", "Metric"] + t.headers
    lines = [x for h in t.header for x in (h, "")]
    lines += ["| " + " | ".join(head) + " |",
             "|" + "|".join([":---", ":---"] + ["---:"] * len(t.columns)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in _table_rows(t, "md")]
    lines += ["", f"{_units_note(t)} Per column, best (**bold**) and second best "
                  f"(<u>underlined</u>) = {_direction_note(t)}{_protocol_note(t)}. Average = "
                  f"mean over the "
                  f"{len(t.datasets)} dataset(s), {MISSING} where a method misses a dataset.",
              "", t.seed_note()]
    if t.show_std and t.stds and any(not math.isnan(v) for v in t.stds.values()):
        lines += ["", "mean ± std = mean and sample standard deviation (n − 1) over seeds; the "
                      "marks compare the means. Average's std: over seeds, of each seed's "
                      "mean over the datasets."]
    return "\n".join(lines).rstrip() + "\n"


def _units_note(t: ResultsTable) -> str:
    """The units of the metrics the table shows (and only those)."""
    pct = [METRICS[m][0] for m in t.metrics if m in ("accuracy", "ece", "adaece", "mce")]
    other = [METRICS[m][0] for m in t.metrics if m in ("nll", "brier")]
    parts = []
    if pct:
        names = pct[0] if len(pct) == 1 else ", ".join(pct[:-1]) + " and " + pct[-1]
        parts.append(f"{names} in %")
    if other:
        parts.append(" and ".join(other) + " per image (mean)")
    return "; ".join(parts) + "."


def _protocol_note(t: ResultsTable) -> str:
    return (", among rows of the same " + "/".join(short_name(k) for k in PROTOCOL_KEYS)
            if t.protocol_groups > 1 else "")


def table_csv(t: ResultsTable) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Method", "Metric"] + t.headers)
    w.writerows(_table_rows(t, "csv"))
    return buf.getvalue()


_TEX_ESCAPE = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
               "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
               "^": r"\textasciicircum{}"}


def _tex(s: str) -> str:
    return "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)


def table_latex(t: ResultsTable) -> str:
    lines = ["% requires \\usepackage{booktabs}",
             "\\begin{tabular}{ll" + "r" * len(t.columns) + "}", "\\toprule",
             " & ".join(["Method", "Metric"] + [_tex(h) for h in t.headers]) + " \\\\",
             "\\midrule"]
    rows = _table_rows(t, "tex")
    per = len(t.metrics)
    for i, r in enumerate(rows):
        if i and i % per == 0:
            # a double rule between method families
            lab = t.labels[i // per]
            same = t.groups.get(lab) == t.groups.get(t.labels[i // per - 1])
            lines.append("\\midrule" if same else "\\midrule\\midrule")
        lines.append(" & ".join([_tex(r[0]), _tex(r[1])] + r[2:]) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def cells_csv(t: ResultsTable) -> str:
    """One line per (method, metric, column): mean, std over seeds, seeds and mark, unrounded
    (the machine-readable companion of table.csv)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["method", "metric", "dataset", "mean", "std", "n_seeds", "seeds", "mark"])
    names = dict(t.datasets)
    for lab in t.labels:
        for m in t.metrics:
            for col in t.columns:
                v = t.values.get((lab, m, col), math.nan)
                if math.isnan(v):
                    continue
                sd = t.stds.get((lab, m, col), math.nan)
                if col == AVERAGE:
                    ss = sorted({s for (l2, _), v2 in t.seeds.items() if l2 == lab for s in v2})
                else:
                    ss = t.seeds.get((lab, col), [])
                w.writerow([lab, m, names.get(col, "Average"), v, "" if math.isnan(sd) else sd,
                            len(ss), " ".join(map(str, ss)), t.marks.get((lab, m, col), "")])
    return buf.getvalue()


def runs_csv(runs: Sequence[Run]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ["label", "method", "selector", "dataset", "seed", "n"] + list(METRICS) + ["path"]
    w.writerow(cols)
    for r in sorted(runs, key=lambda r: (_method_sort_key(r), _dataset_rank(r.dataset_key),
                                         r.seed)):
        w.writerow([r.label, r.method, r.selector or "", r.dataset, r.seed,
                    r.summary.get("n", "")] +
                   ["" if math.isnan(r.metric(m)) else r.metric(m) for m in METRICS] +
                   [str(r.path)])
    return buf.getvalue()
