"""Cells (runs of one method and dataset, averaged over seeds) and the results table in Markdown,
CSV and LaTeX."""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .header import table_header
from .identity import PROTOCOL_KEYS, short_name
from .notes import inactive_lines
from .runs import (METRICS, MISSING, ReportError, Run, _assign_variants, _dataset_rank,
                   _method_sort_key, duplicate_error)

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
    def has_average(self) -> bool:
        """An Average column only over several datasets (over one it would repeat it)."""
        return len(self.datasets) > 1

    @property
    def columns(self) -> List[str]:
        return [k for k, _ in self.datasets] + ([AVERAGE] if self.has_average else [])

    @property
    def headers(self) -> List[str]:
        return [d for _, d in self.datasets] + (["Average"] if self.has_average else [])

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
                        table_header(runs, labels, datasets, show_std)
                        + inactive_lines(runs, labels),
                        len(set(protocol.values())),
                        groups)


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
    wrap = {"md": ("**{}**", "<u>{}</u>"), "tex": ("\\textbf{{{}}}", "\\underline{{{}}}")}[style]
    rows = []
    group = None
    for lab in t.labels:
        if style == "md" and t.groups.get(lab) != group and len(set(t.groups.values())) > 1:
            group = t.groups.get(lab)
            rows.append([f"*{group}*", ""] + [""] * len(t.columns))
        for i, m in enumerate(t.metrics):
            row = [lab if i == 0 else "", METRICS[m][0]]
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
    average = (f" Average = mean over the {len(t.datasets)} datasets, {MISSING} where a method "
               f"misses a dataset." if t.has_average else "")
    lines += ["", f"{_units_note(t)} Per column, best (**bold**) and second best "
                  f"(<u>underlined</u>) = {_direction_note(t)}{_protocol_note(t)}.{average}",
              "", t.seed_note()]
    if t.show_std and t.stds and any(not math.isnan(v) for v in t.stds.values()):
        lines += ["", "mean ± std = mean and sample standard deviation (n − 1) over seeds; the "
                      "marks compare the means." + (
                          " Average's std: over seeds, of each seed's mean over the datasets."
                          if t.has_average else "")]
    return "\n".join(lines).rstrip() + "\n"


def _units_note(t: ResultsTable) -> str:
    """The units of the metrics the table shows (and only those)."""
    pct = [METRICS[m][0] for m in t.metrics if m in ("accuracy", "ece", "adaece", "mce", "aurc",
                                                      "eaurc")]
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
    """table.md as numbers: a line per method and metric, for each column its mean and its
    standard deviation over seeds (empty for one seed), rounded as the table shows them, and the
    method's family; no marks or "±" strings (cells.csv has them unrounded, with the seeds)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Method", "Family", "Metric"] + [f"{h} {x}" for h in t.headers
                                                 for x in ("mean", "std")])
    for lab in t.labels:
        for m in t.metrics:
            row = [lab, t.groups.get(lab, ""), METRICS[m][0]]
            for col in t.columns:
                v = t.values.get((lab, m, col), math.nan)
                sd = t.stds.get((lab, m, col), math.nan)
                row += ["" if math.isnan(x) else f"{x:.{t.decimals}f}" for x in (v, sd)]
            w.writerow(row)
    return buf.getvalue()


_TEX_ESCAPE = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
               "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
               "^": r"\textasciicircum{}"}


def _tex(s: str) -> str:
    return "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)


def table_latex(t: ResultsTable) -> str:
    """A booktabs tabular a paper can ``\\input``: the method families as italic group rows
    (when there are several) separated by one \\midrule, a little space between the methods
    of a family, never two rules in a row."""
    ncol = 2 + len(t.columns)
    lines = ["% requires \\usepackage{booktabs}",
             "\\begin{tabular}{ll" + "r" * len(t.columns) + "}", "\\toprule",
             " & ".join(["Method", "Metric"] + [_tex(h) for h in t.headers]) + " \\\\",
             "\\midrule"]
    rows = _table_rows(t, "tex")
    per = len(t.metrics)
    families = len(set(t.groups.get(lab) for lab in t.labels)) > 1
    for i, r in enumerate(rows):
        if i % per == 0:
            lab = t.labels[i // per]
            new = i == 0 or t.groups.get(lab) != t.groups.get(t.labels[i // per - 1])
            if new and families:
                if i:
                    lines.append("\\midrule")
                lines.append(f"\\multicolumn{{{ncol}}}{{l}}{{\\textit{{"
                             f"{_tex(t.groups.get(lab) or 'Other')}}}}} \\\\")
            elif i:
                lines.append("\\addlinespace[2pt]")
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
