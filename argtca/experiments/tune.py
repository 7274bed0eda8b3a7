"""The baselines' protocol: re-tune each baseline's own weights on a validation split.

    python -m argtca.experiments tune [caltech101] [--tolerance 1.0] [--grid KEY=v1,v2 ...]

Every setting of the grid runs on ``DATASET.SPLIT val`` (``--split``); per method the setting
chosen is the one of lowest ECE among those whose accuracy is within ``--tolerance`` points of
the method's best accuracy on the grid (ties: higher accuracy, then grid order). The whole grid
goes to ``grid.md``/``grid.csv`` and the chosen values to ``tuned.yaml`` (``method: {KEY:
value}``), which ``python -m argtca.experiments table1 --baseline-config tuned.yaml`` takes.

A grid with failed runs is marked, not shrunk: a setting none of whose seeds finished is a
"missing" row in grid.md/grid.csv, one with some seeds failed names them. Choosing from an
incomplete grid would compare settings that were never all run (or not over the same seeds), so
no value is chosen for such a method unless ``--allow-partial`` is given; then ``tuned.yaml``
lists, in comments above the method, the points it was chosen without.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..trainers.catalogue import catalogue
from .command import Command, split_list
from .plan import (BASELINES, ExperimentError, RunSpec, check_opts, check_presence,
                   failure_lines, presence_lines, value_for)
from .runner import dry_run as run_dry, execute

# Each baseline's own weights and the default grid (the paper's value is in each grid).
DEFAULT_GRID: Dict[str, List[str]] = {
    "TRAINER.CTPT.LAMBDA": ["10", "25", "50", "75", "100"],
    "TRAINER.OTPT.LAMBDA": ["6", "12", "18", "24", "30"],
    "TRAINER.ATPT.LAMBDA": ["20", "40", "80", "120", "160"],
    "TRAINER.TCA.ALPHA": ["5", "10", "20"],
    "TRAINER.TCA.BETA": ["15", "25", "35", "50"],
}
# a baseline's config node -> its method key (the trainers' declarations)
NODE_TO_METHOD = {m.node.split(".", 1)[1]: m.method for m in catalogue() if m.method in BASELINES}


def parse_grid(items: Sequence[str]) -> Dict[str, List[str]]:
    """``KEY=v1,v2`` items over DEFAULT_GRID: a method named in any item gets only the keys
    given for it (its other keys stay at their defaults); ``KEY=`` drops the key."""
    given: Dict[str, List[str]] = {}
    for it in items:
        if "=" not in it:
            raise ExperimentError(f"--grid {it!r}: write KEY=v1,v2,... (e.g. "
                                  f"TRAINER.CTPT.LAMBDA=25,50)")
        k, v = it.split("=", 1)
        check_opts([k, "0"], "--grid")
        method_of(k)   # fails early on a key that is no baseline's weight
        vals = [x.strip() for x in v.replace(" ", ",").split(",") if x.strip()]
        for x in vals:
            try:
                float(x)
            except ValueError:
                raise ExperimentError(f"--grid {k}: {x!r} is not a number") from None
        given[k] = vals
    touched = {method_of(k) for k in given}
    grid = {k: v for k, v in DEFAULT_GRID.items() if method_of(k) not in touched}
    grid.update({k: v for k, v in given.items() if v})
    return grid


def method_of(key: str) -> str:
    parts = key.split(".")
    if len(parts) < 3 or parts[0] != "TRAINER" or parts[1] not in NODE_TO_METHOD:
        raise ExperimentError(f"--grid {key}: not a baseline's weight; use TRAINER.CTPT.LAMBDA, "
                              f"TRAINER.OTPT.LAMBDA, TRAINER.ATPT.LAMBDA, TRAINER.TCA.ALPHA/BETA")
    return NODE_TO_METHOD[parts[1]]


def settings(grid: Dict[str, List[str]]) -> Dict[str, List[Tuple[Tuple[str, str], ...]]]:
    """{method: [((KEY, value), ...), ...]}: the Cartesian product of each method's keys."""
    by_method: Dict[str, List[str]] = {}
    for k in grid:
        by_method.setdefault(method_of(k), []).append(k)
    return {m: [tuple(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]
            for m, keys in by_method.items()}


def setting_name(setting) -> str:
    return "_".join(f"{k.split('.')[-1].lower()}{v}" for k, v in setting)


@dataclass
class Point:
    method: str
    setting: Tuple[Tuple[str, str], ...]
    acc: float
    ece: float
    acc_std: float
    ece_std: float
    seeds: List[int]
    within: bool = False
    chosen: bool = False
    failed_seeds: Tuple[int, ...] = ()     # seeds of this setting whose run did not finish

    @property
    def missing(self) -> bool:
        return not self.seeds

    def gap(self) -> str:
        """What this point lacks, for tables and tuned.yaml ("" when complete)."""
        name = " ".join(f"{k}={v}" for k, v in self.setting)
        seeds = " ".join(map(str, self.failed_seeds))
        if self.missing:
            return f"{name} (every run failed: seed {seeds})"
        return f"{name} (seed {seeds} failed)" if self.failed_seeds else ""


def choose(points: Sequence[Point], tolerance: float) -> Point:
    """Lowest ECE among the points whose accuracy is within ``tolerance`` of the best accuracy
    (ties: higher accuracy, then the first in grid order); marks ``within``/``chosen``."""
    points = [p for p in points if not p.missing]
    best = max(p.acc for p in points)
    for p in points:
        p.within = p.acc >= best - tolerance - 1e-9
    pick = min((p for p in points if p.within), key=lambda p: (p.ece, -p.acc))
    pick.chosen = True
    return pick


# what a None ("auto") default resolves to for the M' = 2 attributes of TCA (TCA's script)
AUTO_DEFAULTS = {"TRAINER.TCA.ALPHA": 10.0, "TRAINER.TCA.BETA": 35.0}


def _defaults(setting) -> bool:
    from ..report.identity import config_default
    for k, v in setting:
        d = config_default(k)
        d = AUTO_DEFAULTS.get(k) if d is None else d
        if d is None or float(v) != float(d):
            return False
    return True


def grid_markdown(points: Sequence[Point], tolerance: float, dataset: str, split: str) -> str:
    out = [f"# Baselines tuned on {dataset} ({split} split)", "",
           f"Acc / ECE in %, mean over seeds. Rule: lowest ECE among the settings whose accuracy "
           f"is within {tolerance:g} point(s) of the method's best accuracy on the grid "
           f"(`--tolerance`). ✓ = within the tolerance, **chosen** = written to tuned.yaml, "
           f"(default) = the value in argtca/config/defaults.py, **missing** = every run of the "
           f"setting failed, (failed: k) = seed k failed.", "",
           "| Method | Setting | Acc | ECE | Seeds | Within | |",
           "|:---|:---|---:|---:|:---|:---:|:---|"]
    for p in points:
        sd = lambda v: "" if math.isnan(v) else f" ± {v:.2f}"  # noqa: E731
        name = ", ".join(f"{k.split('.')[-1].lower()}={v}" for k, v in p.setting)
        if _defaults(p.setting):
            name += " (default)"
        failed = " ".join(map(str, p.failed_seeds))
        if p.missing:
            out.append(f"| {p.method} | {name} | — | — | (failed: {failed}) | | **missing** |")
            continue
        seeds = " ".join(map(str, p.seeds)) + (f" (failed: {failed})" if failed else "")
        out.append(f"| {p.method} | {name} | {p.acc:.2f}{sd(p.acc_std)} | "
                   f"{p.ece:.2f}{sd(p.ece_std)} | {seeds} | "
                   f"{'✓' if p.within else ''} | {'**chosen**' if p.chosen else ''} |")
    gaps = [p.gap() for p in points if p.gap()]
    if gaps:
        out += ["", f"**Incomplete grid**: {len(gaps)} setting(s) lack runs: "
                + "; ".join(gaps) + "."]
    return "\n".join(out) + "\n"


def grid_csv(points: Sequence[Point]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["method", "setting", "accuracy", "ece", "accuracy_std", "ece_std", "seeds",
                "within_tolerance", "chosen", "failed_seeds"])
    for p in points:
        num = lambda v: "" if math.isnan(v) else v  # noqa: E731
        w.writerow([p.method, " ".join(f"{k}={v}" for k, v in p.setting), num(p.acc),
                    num(p.ece), num(p.acc_std), num(p.ece_std),
                    " ".join(map(str, p.seeds)), int(p.within), int(p.chosen),
                    " ".join(map(str, p.failed_seeds))])
    return buf.getvalue()


def tuned_yaml(chosen: Dict[str, Point], dataset: str, split: str, tolerance: float,
               gaps: Optional[Dict[str, List[str]]] = None) -> str:
    lines = [f"# Baselines' weights tuned on {dataset} ({split} split) by python -m "
             f"argtca.experiments tune", f"# rule: lowest ECE within {tolerance:g} accuracy "
             f"point(s) of the best; use: python -m argtca.experiments table1 "
             f"--baseline-config THIS_FILE"]
    for m, p in chosen.items():
        missing = (gaps or {}).get(m)
        if missing:
            lines.append(f"# {m}: chosen from an INCOMPLETE grid (--allow-partial); missing "
                         f"points:")
            lines += [f"#   {g}" for g in missing]
        lines.append(f"{m}:")
        for k, v in p.setting:
            lines.append(f"  {k}: {value_for(k, v)}")
    return "\n".join(lines) + "\n"


def _mean_std(v: List[float]) -> Tuple[float, float]:
    return float(np.mean(v)), (float(np.std(v, ddof=1)) if len(v) > 1 else math.nan)


def tune(dataset: str = "caltech101", seeds: Sequence[int] = (1,), grid_items: Sequence[str] = (),
         tolerance: float = 1.0, split: str = "val", root: str = "", out_root="output",
         opts: Sequence[str] = (), plugins: Sequence[str] = (), dry_run: bool = False,
         quiet: bool = False, report_dir=None, write=None, methods: Sequence[str] = (),
         allow_partial: bool = False) -> int:
    if tolerance < 0:
        raise ExperimentError(f"--tolerance {tolerance:g}: must be >= 0 (accuracy points)")
    grid = parse_grid(grid_items)
    if methods:   # only these baselines are tuned
        known = sorted({method_of(k) for k in DEFAULT_GRID})
        bad = [m for m in methods if m not in known]
        if bad:
            raise ExperimentError(f"--methods {','.join(methods)}: {bad} not tunable; choose "
                                  f"from {', '.join(known)}")
        grid = {k: v for k, v in grid.items() if method_of(k) in methods}
    out_root = Path(out_root)
    pres = check_presence([dataset], root, split=split, opts=opts,
                          need_attributes="tca" in {method_of(k) for k in grid})
    for line in presence_lines(pres, True, "tca"):
        print(f"[tune] {line}", flush=True)
    p = pres[0]
    if not p.present:
        print(f"[tune] error: {dataset} is absent: {p.why}", file=sys.stderr)
        return 2
    by_method = settings(grid)
    if p.attributes_problem:
        by_method.pop("tca", None)
    specs: List[RunSpec] = []
    where: Dict[Tuple[str, tuple], List[RunSpec]] = {}
    for m, sets in by_method.items():
        for st in sets:
            for seed in seeds:
                ov = list(opts) + ["DATASET.SPLIT", split]
                for k, v in st:
                    ov += [k, value_for(k, v)]
                s = RunSpec(m, dataset, seed, out_root / "tune" / dataset / split / m /
                            setting_name(st) / f"seed{seed}", None, ov,
                            f"{m} {setting_name(st)} on {dataset} {split}, seed {seed}")
                specs.append(s)
                where.setdefault((m, st), []).append(s)
    if dry_run:   # the grid's folders, finished ones marked, and what would be refused
        return run_dry(specs, root, plugins, "tune")
    outcomes = execute(specs, root, plugins, "tune", quiet)
    for line in failure_lines(outcomes, "tune"):
        print(line, file=sys.stderr)
    ok = {o.spec.out for o in outcomes if o.ok}
    points: List[Point] = []
    chosen: Dict[str, Point] = {}
    gaps: Dict[str, List[str]] = {}
    refused: List[str] = []
    for m, sets in by_method.items():
        pts = []
        for st in sets:
            runs = where[(m, st)]
            sums = [json.loads((s.out / "summary.json").read_text()) for s in runs
                    if s.out in ok]
            failed = tuple(sorted(s.seed for s in runs if s.out not in ok))
            if not sums:      # kept as a row: a grid never shrinks silently
                pts.append(Point(m, st, math.nan, math.nan, math.nan, math.nan, [],
                                 failed_seeds=failed))
                continue
            acc, acc_sd = _mean_std([float(x["accuracy"]) for x in sums])
            ece, ece_sd = _mean_std([float(x["ece"]) for x in sums])
            pts.append(Point(m, st, acc, ece, acc_sd, ece_sd, sorted(int(x["seed"])
                                                                     for x in sums),
                             failed_seeds=failed))
        gaps[m] = [p.gap() for p in pts if p.gap()]
        if any(not p.missing for p in pts):
            if gaps[m] and not allow_partial:
                refused.append(m)
            else:
                chosen[m] = choose(pts, tolerance)
        points += pts
    if all(p.missing for p in points):
        print("[tune] error: no run finished, nothing to choose from", file=sys.stderr)
        return 1
    rep = Path(report_dir) if report_dir else out_root / "report" / f"tune_{dataset}_{split}"
    rep.mkdir(parents=True, exist_ok=True)
    md = grid_markdown(points, tolerance, dataset, split)
    (rep / "grid.md").write_text(md)
    (rep / "grid.csv").write_text(grid_csv(points))
    print(md)
    written = [rep / "grid.md", rep / "grid.csv"]
    target = Path(write) if write else rep / "tuned.yaml"
    if refused:
        shown = "; ".join(f"{m}: {', '.join(gaps[m])}" for m in refused)
        print(f"[tune] error: the grid is incomplete for {', '.join(refused)} ({shown}); no "
              f"value is chosen from it. Run the same command again (finished runs are only "
              f"re-read) or pass --allow-partial to choose among the settings that finished",
              file=sys.stderr)
    if chosen:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(tuned_yaml(chosen, dataset, split, tolerance, gaps))
        print(target.read_text())
        written.append(target)
    elif target.is_file():   # an older choice must not pass for this grid's
        print(f"[tune] note: {target} is from an earlier tune and was not rewritten: nothing "
              f"was chosen this time", file=sys.stderr)
    print(f"[tune] wrote: {', '.join(map(str, written))}")
    return 0 if len(ok) == len(outcomes) else 1


def _add_arguments(p) -> None:
    p.add_argument("--split", default="val", help="split evaluated (default val)")
    p.add_argument("--tolerance", type=float, default=1.0,
                   help="accuracy points below the best that still qualify (default 1.0); "
                   "among those the lowest ECE is chosen")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=v1,v2",
                   help="a method's grid, e.g. TRAINER.CTPT.LAMBDA=25,50 (repeat; a method "
                   "named here gets only the keys given; default grids in argtca/experiments/"
                   "tune.py)")
    p.add_argument("--methods", default="", help="baselines to tune (default: those with a "
                   "default grid in argtca/experiments/tune.py)")
    p.add_argument("--write", default=None, metavar="YAML",
                   help="where to write the chosen values (default <report-dir>/tuned.yaml)")
    p.add_argument("--allow-partial", action="store_true",
                   help="choose even where some grid points failed (tuned.yaml names them)")


def _run(args, datasets: List[str], common) -> int:
    if len(datasets) > 1:
        raise ExperimentError(f"tune takes one dataset, got {datasets}")
    # no dataset named: tune()'s default, caltech101
    return tune(datasets[0] if datasets else "caltech101", grid_items=args.grid,
                tolerance=args.tolerance, split=args.split, write=args.write,
                methods=[m.lower() for m in split_list(args.methods)],
                allow_partial=args.allow_partial, **common)


TUNE_COMMAND = Command("tune", "re-tune the baselines' weights on a validation split", "1",
                       _add_arguments, _run)
