"""Sensitivity to TCA/ArgTCA's alpha and beta: the points of the sweep plots and sweep.md."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .identity import canonical, config_default, fmt_value, short_name
from .runs import (MISSING, ReportError, Run, _dataset_rank, _differing, _method_sort_key,
                   duplicate_error)
from .tables import Cell


def _trainer_node(method: str) -> Optional[str]:
    return {"argtca": "ARGTCA", "tca": "TCA"}.get(method)


def sweep_points(runs: Sequence[Run], param: str, missing: Sequence[tuple] = ()
                 ) -> Dict[str, Dict[str, Dict[str, np.ndarray]]]:
    """ECE/accuracy against ``param`` ("ALPHA" or "BETA") for the tca/argtca runs, as
    ``{dataset: {line label: {"x", "ece", "ece_std", "acc", "acc_std", "n_seeds"}}}``.

    One line per method label (without variant suffix), dataset and other settings (runs that
    differ in any other key are separate lines, named by the keys). The other parameter is held
    at the value that has the most distinct ``param`` values in that line (ties: the config
    default), and the line label says which (e.g. ``ArgTCA (div) (β=35)``). Seeds are averaged
    (std over seeds when more than one).

    ``missing``: planned points whose run failed, ``(dataset key, method, selector, alpha,
    beta)``. A line keeps them as x values with NaN numbers (a gap in the plot, "failed" in
    sweep.md), ``"missing"`` marks them, and the line's label names them, so a failed point is
    never silently left out of a line."""
    other = {"ALPHA": "BETA", "BETA": "ALPHA"}[param]
    sym = {"ALPHA": "α", "BETA": "β"}[other]
    groups: Dict[Tuple[str, str], List[Run]] = {}
    for r in sorted(runs, key=lambda r: (_dataset_rank(r.dataset_key), r.dataset_key,
                                         _method_sort_key(r)[:4])):
        if _trainer_node(r.method):
            groups.setdefault((r.dataset, r.base_label), []).append(r)
    lines: Dict[Tuple[str, str], List[Run]] = {}
    for (ds, lab), rs in groups.items():
        node = _trainer_node(rs[0].method)
        swept = (f"TRAINER.{node}.ALPHA", f"TRAINER.{node}.BETA")
        sig = {id(r): canonical({k: v for k, v in r.settings.items() if k not in swept})
               for r in rs}
        keys = [k for k in _differing(rs, set().union(*(r.settings for r in rs)))
                if k not in swept]
        for r in rs:
            name = lab + (" [" + ", ".join(f"{short_name(k)}={fmt_value(r.settings.get(k))}"
                                           for k in keys) + "]" if keys else "")
            lines.setdefault((ds, name + "\0" + sig[id(r)]), []).append(r)
    out: Dict[str, Dict[str, Dict[str, np.ndarray]]] = {}
    for (ds, key), rs in lines.items():
        lab = key.split("\0")[0]
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
        default_other = config_default(ok)
        fixed = max(by_other, key=lambda o: (len(by_other[o]), o == default_other, -o))
        pts = by_other[fixed]
        r0 = rs[0]
        lost = sorted({float(p[3] if param == "ALPHA" else p[4]) for p in missing
                       if (p[0], p[1], p[2]) == (r0.dataset_key, r0.method, r0.selector)
                       and float(p[4] if param == "ALPHA" else p[3]) == fixed}
                      - set(pts))
        xs = sorted(pts)
        cells = []
        for x in xs:
            seen: Dict[int, Run] = {}
            for r in pts[x]:
                if r.seed in seen:
                    raise duplicate_error(f"sweep {ds} / {lab} / {param}={x:g} / seed {r.seed}",
                                          seen[r.seed], r)
                seen.setdefault(r.seed, r)
            cells.append(Cell(lab, ds, ds, list(seen.values())))
        psym = {"ALPHA": "α", "BETA": "β"}[param]
        gone = (" (missing: " + ", ".join(f"{psym}={x:g}" for x in lost) + ")") if lost else ""
        nan = [np.nan] * len(lost)
        order = np.argsort(np.asarray(xs + lost, dtype=float), kind="stable")
        col = lambda v: np.asarray(v, dtype=float)[order]  # noqa: E731
        out.setdefault(ds, {})[f"{lab} ({sym}={fixed:g}){gone}"] = {
            "x": col(xs + lost),
            "ece": col([c.mean("ece") for c in cells] + nan),
            "ece_std": col([c.std("ece") for c in cells] + nan),
            "acc": col([c.mean("accuracy") for c in cells] + nan),
            "acc_std": col([c.std("accuracy") for c in cells] + nan),
            "n_seeds": col([len(c.runs) for c in cells] + [0] * len(lost)).astype(int),
            "missing": col([0] * len(xs) + [1] * len(lost)).astype(bool),
        }
    return out


def _sweep_markdown(by_param: Dict[str, Dict[str, Dict[str, Dict[str, np.ndarray]]]]) -> str:
    out = ["# Sensitivity", "", "Cells: accuracy / ECE (%); [k] = mean over k seeds; **failed** "
           "= the point was run and failed (a gap in the plot).", ""]
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
                    if "missing" in s and s["missing"][i]:
                        row.append("**failed**")
                        continue
                    ns = int(s["n_seeds"][i])
                    row.append(f"{s['acc'][i]:.2f} / {s['ece'][i]:.2f}"
                               + (f" [{ns}]" if ns > 1 else ""))
                out.append(f"| {ds} | {name} | " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)
