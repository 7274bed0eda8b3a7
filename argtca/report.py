"""Side-by-side comparison reports from run folders.

    python -m argtca.report RUN_DIR [RUN_DIR ...] --out REPORT_DIR [--attributes-classes N]
    python -m argtca.report output/sweep/caltech101 --out output/report/sweep_caltech101 --sweep
    python -m argtca.report output/argtca/dtd output/ablation/dtd --out REPORT --ablation

A RUN_DIR is a run folder (``summary.json``, ``records.jsonl``, argtca runs also
``phase1.json``) or any parent of run folders (searched recursively), so runs made on different
machines can be combined by pointing at several trees.

Grouping: runs with the same display label and dataset form one cell; their seeds are averaged
(the number of seeds is reported). When runs sharing a label differ in a config override that
matters (not the seed, output dir, dataset or dataloader keys), the differing keys are appended
to the label, e.g. ``ArgTCA (div) [alpha=20]``, so different settings are never averaged.

Main mode writes ``table.md``/``table.csv``/``table.tex`` (Table-1 layout: an Acc and an ECE
row per method, datasets + Average as columns; best bold, second underlined), ``runs.csv`` (one
line per run), ``reliability.png``, ``confidence_hist.png``, ``radar_ece.png`` and
``attributes.md``. ``--sweep`` writes ``sweep_alpha.png``, ``sweep_beta.png`` and ``sweep.md``;
``--ablation`` writes ``ablation.md``.
"""
from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np


__all__ = [
    "ReportError", "Run", "Cell", "ResultsTable", "find_runs", "load_records", "group_runs",
    "build_table", "table_markdown", "table_csv", "table_latex", "runs_csv", "attribute_table",
    "sweep_points", "ablation_table", "make_report", "make_sweep_report",
    "make_ablation_report", "main",
]

MISSING = "–"
METHOD_ORDER = ["zeroshot", "tpt", "ctpt", "otpt", "atpt", "tca", "argtca"]
SELECTOR_ORDER = ["tca", "div", "disc", "joint", "random"]
DEFAULT_LABELS = {"zeroshot": "CLIP", "tpt": "TPT", "ctpt": "C-TPT", "otpt": "O-TPT",
                  "atpt": "A-TPT", "tca": "TCA", "argtca": "ArgTCA"}
METRICS = {  # name -> (display, higher is better)
    "accuracy": ("Acc", True), "ece": ("ECE", False), "adaece": ("AdaECE", False),
    "mce": ("MCE", False), "nll": ("NLL", False), "brier": ("Brier", False),
}
# canonical dataset order (CoOp / C-TPT Table 1), compared on lower-cased alphanumerics
DATASET_ORDER = ["imagenet", "caltech101", "oxfordpets", "stanfordcars", "oxfordflowers",
                 "food101", "fgvcaircraft", "sun397", "describabletextures", "eurosat", "ucf101",
                 "imagenetv2", "imagenetsketch", "imageneta", "imagenetr", "demo"]
DATASET_ALIASES = {"pets": "oxfordpets", "cars": "stanfordcars", "flowers": "oxfordflowers",
                   "flower102": "oxfordflowers", "flowers102": "oxfordflowers",
                   "oxfordflowers102": "oxfordflowers", "food": "food101",
                   "aircraft": "fgvcaircraft", "sun": "sun397", "dtd": "describabletextures",
                   "ucf": "ucf101", "sketch": "imagenetsketch"}
# overrides that never make two runs different methods
IGNORED_OVERRIDES = ("SEED", "OUTPUT_DIR", "USE_CUDA", "VERBOSE", "TRAINER.NAME",
                     "TRAINER.ARGTCA.SELECTOR")
IGNORED_PREFIXES = ("DATASET.", "DATALOADER.")
REQUIRED_SUMMARY_KEYS = ("method", "dataset", "seed", "accuracy", "ece")


class ReportError(ValueError):
    """Bad report input; the message names the file, the value and the fix."""


def _warn(msg: str) -> None:
    print(f"report: warning: {msg}", file=sys.stderr)


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(s).lower())


def _dataset_rank(key: str) -> int:
    k = _norm(key)
    k = DATASET_ALIASES.get(k, k)
    return DATASET_ORDER.index(k) if k in DATASET_ORDER else len(DATASET_ORDER)


@functools.lru_cache(maxsize=None)
def _config_default(key: str) -> Any:
    """Default value of a dotted config key (None when unknown or the config is unavailable)."""
    try:
        from .config import get_cfg_default
    except Exception:  # pragma: no cover - config always importable in the package
        return None
    node: Any = get_cfg_default()
    for part in key.split("."):
        if not hasattr(node, "get") or part not in node:
            return None
        node = node[part]
    return node


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)):
        return f"{v:g}"
    return str(v)


# ----------------------------------------------------------------------------- runs
@dataclass
class Run:
    """One run folder: its ``summary.json`` and lazily its records and phase-1 picks."""
    path: Path
    summary: Dict[str, Any]
    variant: Tuple[Tuple[str, Any], ...] = ()      # set by group_runs
    _records: Any = field(default=None, repr=False)

    @property
    def method(self) -> str:
        return str(self.summary["method"]).lower()

    @property
    def selector(self) -> Optional[str]:
        s = self.summary.get("selector")
        return None if s in (None, "") else str(s).lower()

    @property
    def base_label(self) -> str:
        lab = self.summary.get("label")
        if lab:
            return str(lab)
        base = DEFAULT_LABELS.get(self.method, self.method)
        return f"{base} ({self.selector})" if self.selector else base

    @property
    def label(self) -> str:
        if not self.variant:
            return self.base_label
        parts = ", ".join(f"{k.split('.')[-1].lower()}={_fmt_value(v)}" for k, v in self.variant)
        return f"{self.base_label} [{parts}]"

    @property
    def dataset(self) -> str:
        return str(self.summary["dataset"])

    @property
    def dataset_key(self) -> str:
        return str(self.summary.get("dataset_key") or _norm(self.dataset))

    @property
    def seed(self) -> int:
        return int(self.summary["seed"])

    @property
    def overrides(self) -> Dict[str, Any]:
        return dict(self.summary.get("overrides") or {})

    def override(self, key: str) -> Any:
        """The run's value of a config key: its override, else the config default."""
        ov = self.overrides
        return ov[key] if key in ov else _config_default(key)

    def metric(self, name: str) -> float:
        v = self.summary.get(name)
        return float(v) if v is not None else math.nan

    def records(self) -> Optional[Dict[str, np.ndarray]]:
        if self._records is None:
            p = self.path / "records.jsonl"
            self._records = load_records(p) if p.is_file() else False
        return self._records or None

    def phase1(self) -> Optional[Dict[str, List[str]]]:
        p = self.path / "phase1.json"
        if not p.is_file():
            return None
        try:
            sel = json.loads(p.read_text()).get("selected")
        except (json.JSONDecodeError, AttributeError) as e:
            raise ReportError(f"{p}: not a JSON object with a 'selected' entry ({e}); "
                              "re-run phase 1 or delete the file") from e
        if not isinstance(sel, dict):
            raise ReportError(f"{p}: 'selected' must map class -> [attributes], got "
                              f"{type(sel).__name__}")
        return {str(k): [str(a) for a in v] for k, v in sel.items()}


def _read_summary(path: Path) -> Dict[str, Any]:
    try:
        s = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: invalid JSON ({e}); re-run or delete this run") from e
    if not isinstance(s, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(s).__name__}")
    missing = [k for k in REQUIRED_SUMMARY_KEYS if k not in s]
    if missing:
        raise ReportError(f"{path}: missing key(s) {missing}; the run folder was not written "
                          "by the argtca engine (or is incomplete)")
    return s


def find_runs(paths: Iterable) -> List[Run]:
    """Run folders under ``paths`` (run folders, their parents, or summary.json files)."""
    found: Dict[Path, Run] = {}
    for p in map(Path, paths):
        if not p.exists():
            raise ReportError(f"{p}: no such file or directory; pass run folders or their "
                              "parents")
        files = [p] if p.is_file() else sorted(p.rglob("summary.json"))
        for f in files:
            if f.name != "summary.json":
                raise ReportError(f"{f}: expected a run folder or a summary.json file")
            d = f.parent.resolve()
            if d not in found:
                found[d] = Run(d, _read_summary(f))
    if not found:
        raise ReportError(f"no summary.json under {', '.join(map(str, paths))}; "
                          "run the methods first (scripts/compare.sh)")
    return list(found.values())


def load_records(path) -> Dict[str, np.ndarray]:
    """``records.jsonl`` -> arrays ``conf``, ``pred``, ``label``, ``correct`` and, when every
    line has them, ``p_label`` and ``brier``."""
    path = Path(path)
    cols: Dict[str, list] = {k: [] for k in ("conf", "pred", "label", "p_label", "brier")}
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                for k in ("conf", "pred", "label"):
                    cols[k].append(r[k])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ReportError(f"{path}:{ln}: bad record ({e!r}); each line must be a JSON "
                                  "object with conf, pred and label") from e
            for k in ("p_label", "brier"):
                cols[k].append(r.get(k))
    out = {"conf": np.asarray(cols["conf"], dtype=np.float64),
           "pred": np.asarray(cols["pred"], dtype=np.int64),
           "label": np.asarray(cols["label"], dtype=np.int64)}
    out["correct"] = out["pred"] == out["label"]
    for k in ("p_label", "brier"):
        if cols[k] and all(v is not None for v in cols[k]):
            out[k] = np.asarray(cols[k], dtype=np.float64)
    return out


def _relevant_overrides(run: Run) -> Dict[str, Any]:
    return {k: v for k, v in run.overrides.items()
            if k not in IGNORED_OVERRIDES and not k.startswith(IGNORED_PREFIXES)}


def _assign_variants(runs: Sequence[Run]) -> None:
    """Set ``run.variant`` to the overrides in which runs of the same base label differ (those
    where the run has the config default are left out, so the default run keeps its label)."""
    by_label: Dict[str, List[Run]] = {}
    for r in runs:
        by_label.setdefault(r.base_label, []).append(r)
    for group in by_label.values():
        rel = [_relevant_overrides(r) for r in group]
        keys = sorted(set().union(*rel))
        varying = []
        for k in keys:
            first = group[0].override(k)
            if any(not _same(r.override(k), first) for r in group[1:]):
                varying.append(k)
        for r in group:   # a run at the config default keeps the plain label for that key
            r.variant = tuple((k, r.override(k)) for k in varying
                              if _config_default(k) is None or not _same(r.override(k),
                                                                         _config_default(k)))


def _same(a: Any, b: Any) -> bool:
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return float(a) == float(b)
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _value_key(v: Any):
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) \
        else (1, 0.0, str(v))


def _method_sort_key(run: Run):
    m = run.method
    mr = METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER)
    s = run.selector or ""
    sr = SELECTOR_ORDER.index(s) if s in SELECTOR_ORDER else len(SELECTOR_ORDER)
    return (mr, sr, s, run.base_label, tuple((k, _value_key(v)) for k, v in run.variant))


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
    {(label, dataset_key): Cell}). A repeated seed within a cell keeps the first run only."""
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
            _warn(f"{r.label} / {r.dataset}: seed {r.seed} appears twice ({dup[0].path} and "
                  f"{r.path}); using the first")
            continue
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

    @property
    def columns(self) -> List[str]:
        return [k for k, _ in self.datasets] + [AVERAGE]

    @property
    def headers(self) -> List[str]:
        return [d for _, d in self.datasets] + ["Average"]

    def fmt(self, label: str, metric: str, col: str) -> str:
        v = self.values.get((label, metric, col), math.nan)
        return MISSING if math.isnan(v) else f"{v:.{self.decimals}f}"

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
                metrics: Sequence[str] = ("accuracy", "ece"), decimals: int = 2
                ) -> ResultsTable:
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
    marks: Dict[Tuple[str, str, str], str] = {}
    for m in metrics:
        higher = METRICS[m][1]
        for col in [dk for dk, _ in datasets] + [AVERAGE]:
            shown = {lab: round(values.get((lab, m, col), math.nan), decimals) for lab in labels}
            shown = {k: v for k, v in shown.items() if not math.isnan(v)}
            ranked = sorted(set(shown.values()), reverse=higher)
            for lab, v in shown.items():
                if v == ranked[0]:
                    marks[(lab, m, col)] = "best"
                elif len(ranked) > 1 and v == ranked[1]:
                    marks[(lab, m, col)] = "second"
    return ResultsTable(list(labels), list(datasets), list(metrics), values, marks, seeds,
                        decimals)


def _table_rows(t: ResultsTable, style: str) -> List[List[str]]:
    wrap = {"md": ("**{}**", "<u>{}</u>"), "tex": ("\\textbf{{{}}}", "\\underline{{{}}}"),
            "csv": ("{}", "{}")}[style]
    rows = []
    for lab in t.labels:
        for i, m in enumerate(t.metrics):
            row = [lab if i == 0 or style == "csv" else "", METRICS[m][0]]
            for col in t.columns:
                s = t.fmt(lab, m, col)
                if style == "tex" and s == MISSING:
                    s = "--"
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
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join([":---", ":---"] + ["---:"] * len(t.columns)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in _table_rows(t, "md")]
    lines += ["", f"Acc, ECE, AdaECE and MCE in %. Per column, best (**bold**) and second best "
                  f"(<u>underlined</u>) = {_direction_note(t)}. Average = mean over the "
                  f"{len(t.datasets)} dataset(s), {MISSING} where a method misses a dataset.",
              "", t.seed_note()]
    return "\n".join(lines).rstrip() + "\n"


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
            lines.append("\\midrule")
        lines.append(" & ".join([_tex(r[0]), _tex(r[1])] + r[2:]) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


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


# ----------------------------------------------------------------------------- attributes
def _overlap(a: Sequence[str], b: Sequence[str]) -> float:
    """Share of picks in common: |A ∩ B| / max(|A|, |B|) (case-insensitive)."""
    sa, sb = {x.lower() for x in a}, {x.lower() for x in b}
    return len(sa & sb) / max(len(sa), len(sb), 1)


def attribute_table(runs: Sequence[Run], n_classes: int = 10) -> str:
    """Markdown: per dataset, the phase-1 picks of the argtca selectors (tca, div, disc, then
    any other) for ``n_classes`` evenly spaced classes, plus the pairwise overlap over all
    classes. One run per selector: the one without a variant suffix and the lowest seed."""
    chosen: Dict[str, Dict[str, Tuple[Run, Dict[str, List[str]]]]] = {}
    for r in sorted(runs, key=lambda r: (len(r.variant), r.seed, str(r.path))):
        if r.method not in ("argtca", "tca"):
            continue
        sel = r.selector or ("tca" if r.method == "tca" else None)
        if sel is None or sel in chosen.get(r.dataset_key, {}):
            continue
        picks = r.phase1()
        if picks is None:
            continue
        chosen.setdefault(r.dataset_key, {})[sel] = (r, picks)
    out = ["# Attributes selected per class", ""]
    if not chosen:
        out.append("No phase1.json found in the given runs (only argtca runs write one).")
        return "\n".join(out) + "\n"
    out.append("Picks of phase 1 for evenly spaced sample classes. *Overlap* = share of picks "
               "two selectors have in common, |A ∩ B| / max(|A|, |B|), averaged over all "
               "classes both selected for.")
    for dk in sorted(chosen, key=lambda k: (_dataset_rank(k), k)):
        sels = sorted(chosen[dk], key=lambda s: (SELECTOR_ORDER.index(s)
                                                 if s in SELECTOR_ORDER else 99, s))
        first_run = chosen[dk][sels[0]][0]
        classes: List[str] = []
        for s in sels:
            for c in chosen[dk][s][1]:
                if c not in classes:
                    classes.append(c)
        idx = sorted(set(np.linspace(0, len(classes) - 1, min(n_classes, len(classes)))
                         .round().astype(int).tolist())) if classes else []
        heads = []
        for s in sels:
            r = chosen[dk][s][0]
            heads.append(f"{r.base_label} (seed {r.seed})")
        out += ["", f"## {first_run.dataset} ({len(classes)} classes, {len(idx)} shown)", "",
                "| Class | " + " | ".join(heads) + " |",
                "|:---|" + "|".join([":---"] * len(sels)) + "|"]
        for i in idx:
            c = classes[i]
            cells = [", ".join(chosen[dk][s][1][c]) if c in chosen[dk][s][1] else MISSING
                     for s in sels]
            out.append(f"| {c} | " + " | ".join(cells) + " |")
        if len(sels) > 1:
            out += ["", "Overlap of picks over all classes:", "",
                    "| | " + " | ".join(sels) + " |", "|:---|" + "|".join(["---:"] * len(sels))
                    + "|"]
            for a in sels:
                row = []
                for b in sels:
                    pa, pb = chosen[dk][a][1], chosen[dk][b][1]
                    common = [c for c in pa if c in pb]
                    row.append(f"{100 * np.mean([_overlap(pa[c], pb[c]) for c in common]):.0f}%"
                               if common else MISSING)
                out.append(f"| {a} | " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- sweep
def _trainer_node(method: str) -> Optional[str]:
    return {"argtca": "ARGTCA", "tca": "TCA"}.get(method)


def sweep_points(runs: Sequence[Run], param: str
                 ) -> Dict[str, Dict[str, Dict[str, np.ndarray]]]:
    """ECE/accuracy against ``param`` ("ALPHA" or "BETA") for the tca/argtca runs, as
    ``{dataset: {line label: {"x", "ece", "ece_std", "acc", "acc_std", "n_seeds"}}}``.

    One line per method label (without variant suffix) and dataset. The other parameter is held
    at the value that has the most distinct ``param`` values in that line (ties: the config
    default), and the line label says which (e.g. ``ArgTCA (div) (β=35)``). Seeds are averaged
    (std over seeds when more than one)."""
    other = {"ALPHA": "BETA", "BETA": "ALPHA"}[param]
    sym = {"ALPHA": "α", "BETA": "β"}[other]
    groups: Dict[Tuple[str, str], List[Run]] = {}
    for r in sorted(runs, key=lambda r: (_dataset_rank(r.dataset_key), r.dataset_key,
                                         _method_sort_key(r)[:4])):
        if _trainer_node(r.method):
            groups.setdefault((r.dataset, r.base_label), []).append(r)
    out: Dict[str, Dict[str, Dict[str, np.ndarray]]] = {}
    for (ds, lab), rs in groups.items():
        node = _trainer_node(rs[0].method)
        pk, ok = f"TRAINER.{node}.{param}", f"TRAINER.{node}.{other}"
        by_other: Dict[float, Dict[float, List[Run]]] = {}
        for r in rs:
            try:
                xo, xp = float(r.override(ok)), float(r.override(pk))
            except (TypeError, ValueError):
                raise ReportError(f"{r.path / 'summary.json'}: {pk}={r.override(pk)!r}, "
                                  f"{ok}={r.override(ok)!r} are not numbers") from None
            by_other.setdefault(xo, {}).setdefault(xp, []).append(r)
        default_other = _config_default(ok)
        fixed = max(by_other, key=lambda o: (len(by_other[o]), o == default_other, -o))
        pts = by_other[fixed]
        xs = sorted(pts)
        cells = []
        for x in xs:
            seen: Dict[int, Run] = {}
            for r in pts[x]:
                seen.setdefault(r.seed, r)
            cells.append(Cell(lab, ds, ds, list(seen.values())))
        out.setdefault(ds, {})[f"{lab} ({sym}={fixed:g})"] = {
            "x": np.asarray(xs, dtype=float),
            "ece": np.asarray([c.mean("ece") for c in cells]),
            "ece_std": np.asarray([c.std("ece") for c in cells]),
            "acc": np.asarray([c.mean("accuracy") for c in cells]),
            "acc_std": np.asarray([c.std("accuracy") for c in cells]),
            "n_seeds": np.asarray([len(c.runs) for c in cells]),
        }
    return out


def _sweep_markdown(by_param: Dict[str, Dict[str, Dict[str, Dict[str, np.ndarray]]]]) -> str:
    out = ["# Sensitivity", "", "Cells: accuracy / ECE (%); [k] = mean over k seeds.", ""]
    for sym, per_ds in by_param.items():
        out += [f"## {sym}", ""]
        if not per_ds:
            out += ["No tca/argtca runs.", ""]
            continue
        xs = sorted({x for lines in per_ds.values() for s in lines.values()
                     for x in s["x"].tolist()})
        out += ["| Dataset | Method | " + " | ".join(f"{sym}={x:g}" for x in xs) + " |",
                "|:---|:---|" + "|".join(["---:"] * len(xs)) + "|"]
        for ds, lines in per_ds.items():
            for name, s in lines.items():
                row = []
                for x in xs:
                    hit = np.nonzero(s["x"] == x)[0]
                    if not len(hit):
                        row.append(MISSING)
                        continue
                    i = hit[0]
                    ns = int(s["n_seeds"][i])
                    row.append(f"{s['acc'][i]:.2f} / {s['ece'][i]:.2f}"
                               + (f" [{ns}]" if ns > 1 else ""))
                out.append(f"| {ds} | {name} | " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


# ----------------------------------------------------------------------------- ablation
ABLATION_ROWS = ["full", "zero edges", "raw EOS", "random"]


def _ablation_variant(r: Run) -> str:
    if r.selector == "random":
        return "random"
    emb = str(r.override("TRAINER.ARGTCA.EMBEDDINGS") or "gat").lower()
    edges = str(r.override("TRAINER.ARGTCA.EDGES") or "full").lower()
    if emb == "raw":
        return "raw EOS"
    if edges == "none":
        return "zero edges"
    if edges == "full":
        return "full"
    return f"edges {edges}"


def ablation_table(runs: Sequence[Run], decimals: int = 2) -> str:
    """Markdown per dataset: rows full / zero edges / raw EOS / random (+ other edge sets),
    columns = selectors (div, disc, then others) x (Acc, ECE). The random selector ignores the
    objective, so its (one) run fills every column. Best ECE (lowest) and Acc (highest) of
    each column in bold."""
    arg = [r for r in runs if r.method == "argtca"]
    out = ["# Ablation", ""]
    if not arg:
        return "\n".join(out + ["No argtca runs found."]) + "\n"
    out.append("Acc / ECE in %, mean over seeds ([k] = k seeds). Rows: **full** = GAT "
               "embeddings on the full graph; **zero edges** = TRAINER.ARGTCA.EDGES none; "
               "**raw EOS** = TRAINER.ARGTCA.EMBEDDINGS raw (selection on the CLIP text "
               "embeddings, no graph); **random** = TRAINER.ARGTCA.SELECTOR random (independent "
               "of the objective: the same runs are shown under every column).")
    ablated = ("TRAINER.ARGTCA.EDGES", "TRAINER.ARGTCA.EMBEDDINGS")
    sig = {}
    for r in arg:
        rel = {k: v for k, v in _relevant_overrides(r).items() if k not in ablated}
        sig.setdefault(json.dumps(rel, sort_keys=True, default=str), r)
    if len(sig) > 1:
        _warn("ablation runs differ in other overrides too (" + "; ".join(
            f"{r.path}: {k or '{}'}" for k, r in sig.items()) + "); the rows may not be "
            "comparable")
    by_ds: Dict[str, List[Run]] = {}
    for r in arg:
        by_ds.setdefault(r.dataset_key, []).append(r)
    for dk in sorted(by_ds, key=lambda k: (_dataset_rank(k), k)):
        rs = by_ds[dk]
        groups: Dict[Tuple[str, str], Dict[int, Run]] = {}
        for r in sorted(rs, key=lambda r: str(r.path)):
            col = "*" if r.selector == "random" else (r.selector or "?")
            g = groups.setdefault((_ablation_variant(r), col), {})
            if r.seed in g:
                _warn(f"ablation {r.dataset}: {_ablation_variant(r)}/{col} seed {r.seed} twice "
                      f"({g[r.seed].path}, {r.path}); using the first")
                continue
            g[r.seed] = r
        cols = sorted({c for _, c in groups if c != "*"},
                      key=lambda s: (SELECTOR_ORDER.index(s) if s in SELECTOR_ORDER else 99, s))
        if not cols:
            cols = ["div", "disc"]
        rows = ABLATION_ROWS + sorted({v for v, _ in groups} - set(ABLATION_ROWS))
        vals: Dict[Tuple[str, str, str], float] = {}
        nseeds: Dict[Tuple[str, str], int] = {}
        for v in rows:
            for c in cols:
                g = groups.get((v, "*" if v == "random" else c))
                if g:
                    cell = Cell(v, rs[0].dataset, dk, list(g.values()))
                    vals[(v, c, "accuracy")] = cell.mean("accuracy")
                    vals[(v, c, "ece")] = cell.mean("ece")
                    nseeds[(v, c)] = len(g)
        best = {}
        for c in cols:
            for m, higher in (("accuracy", True), ("ece", False)):
                vs = [round(vals[(v, c, m)], decimals) for v in rows if (v, c, m) in vals]
                if vs:
                    best[(c, m)] = max(vs) if higher else min(vs)
        out += ["", f"## {rs[0].dataset}", "",
                "| Variant | " + " | ".join(f"{c} Acc | {c} ECE" for c in cols) + " |",
                "|:---|" + "|".join(["---:"] * (2 * len(cols))) + "|"]
        for v in rows:
            if not any((v, c) in nseeds for c in cols) and v not in ABLATION_ROWS:
                continue
            row = []
            for c in cols:
                for m in ("accuracy", "ece"):
                    if (v, c, m) not in vals:
                        row.append(MISSING)
                        continue
                    x = vals[(v, c, m)]
                    s = f"{x:.{decimals}f}"
                    if round(x, decimals) == best[(c, m)]:
                        s = f"**{s}**"
                    if m == "ece" and nseeds[(v, c)] > 1:
                        s += f" [{nseeds[(v, c)]}]"
                    row.append(s)
            out.append(f"| {v} | " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- drivers
def make_report(paths: Sequence, out_dir, attributes_classes: int = 10,
                metrics: Sequence[str] = ("accuracy", "ece"), n_bins: int = 20,
                decimals: int = 2) -> Dict[str, Path]:
    """Main comparison report; returns {name: path} of the files written."""
    from . import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = find_runs(paths)
    labels, datasets, cells = group_runs(runs)
    table = build_table(labels, datasets, cells, metrics, decimals)
    written: Dict[str, Path] = {}

    def write(name: str, text: str) -> None:
        (out / name).write_text(text)
        written[name] = out / name

    write("table.md", table_markdown(table))
    write("table.csv", table_csv(table))
    write("table.tex", table_latex(table))
    write("runs.csv", runs_csv(runs))
    write("attributes.md", attribute_table(runs, attributes_classes))

    names = [d for _, d in datasets]
    grid: Dict[Tuple[str, str], Any] = {}
    notes: Dict[Tuple[str, str], str] = {}
    for (lab, dk), c in cells.items():
        rec = c.pooled_records()
        if rec is not None:
            grid[(lab, dict(datasets)[dk])] = rec
            with_rec = sum(r.records() is not None for r in c.runs)
            if with_rec > 1:
                notes[(lab, dict(datasets)[dk])] = f"({with_rec} seeds pooled)"
    rows = [lab for lab in labels if any((lab, d) in grid for d in names)]
    if rows:
        written["reliability.png"] = plots.reliability_grid(
            grid, rows, names, out / "reliability.png", n_bins=n_bins, notes=notes)
        written["confidence_hist.png"] = plots.confidence_hist_grid(
            grid, rows, names, out / "confidence_hist.png", n_bins=n_bins)
    else:
        _warn("no records.jsonl in any run: reliability and histogram plots skipped")
    radar = {lab: [cells[(lab, dk)].mean("ece") if (lab, dk) in cells else math.nan
                   for dk, _ in datasets] for lab in labels}
    written["radar_ece.png"] = plots.ece_radar(radar, names, out / "radar_ece.png")
    return written


def make_sweep_report(paths: Sequence, out_dir) -> Dict[str, Path]:
    """Sensitivity plots: ECE/accuracy against α (``sweep_alpha.png``) and β
    (``sweep_beta.png``) from the runs' TRAINER.ARGTCA.ALPHA/BETA overrides, plus sweep.md."""
    from . import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = find_runs(paths)
    written: Dict[str, Path] = {}
    both = {}
    for param, sym, fname in (("ALPHA", "α", "sweep_alpha.png"), ("BETA", "β", "sweep_beta.png")):
        series = sweep_points(runs, param)
        both[sym] = series
        if series:
            written[fname] = plots.sweep_plot(series, sym, out / fname,
                                              title=f"Sensitivity to {sym}")
    if not any(both.values()):
        raise ReportError(f"no tca/argtca runs under {', '.join(map(str, paths))}; "
                          "run scripts/sweep.sh first")
    (out / "sweep.md").write_text(_sweep_markdown(both))
    written["sweep.md"] = out / "sweep.md"
    return written


def make_ablation_report(paths: Sequence, out_dir, decimals: int = 2) -> Dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = find_runs(paths)
    (out / "ablation.md").write_text(ablation_table(runs, decimals))
    return {"ablation.md": out / "ablation.md"}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m argtca.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR",
                    help="run folders or parents of run folders (searched recursively)")
    ap.add_argument("--out", required=True, help="report folder (created)")
    ap.add_argument("--attributes-classes", type=int, default=10,
                    help="sample classes shown in attributes.md (default 10)")
    ap.add_argument("--metrics", default="accuracy,ece",
                    help=f"table rows per method, from {','.join(METRICS)} (default accuracy,ece)")
    ap.add_argument("--n-bins", type=int, default=20, help="calibration bins (default 20)")
    ap.add_argument("--decimals", type=int, default=2)
    ap.add_argument("--sweep", action="store_true", help="sensitivity plots (α, β) only")
    ap.add_argument("--ablation", action="store_true", help="ablation table only")
    a = ap.parse_args(argv)
    try:
        written: Dict[str, Path] = {}
        if a.sweep:
            written.update(make_sweep_report(a.runs, a.out))
        if a.ablation:
            written.update(make_ablation_report(a.runs, a.out, a.decimals))
        if not (a.sweep or a.ablation):
            metrics = [m.strip().lower() for m in a.metrics.split(",") if m.strip()]
            written.update(make_report(a.runs, a.out, a.attributes_classes, metrics,
                                       a.n_bins, a.decimals))
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    for name in ("table.md", "ablation.md", "sweep.md"):
        if name in written:
            print(Path(written[name]).read_text())
    print("wrote: " + ", ".join(str(p) for p in written.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
