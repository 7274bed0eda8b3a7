"""ablation.md: full / zero edges / raw EOS / random rows per ArgTCA selector."""
from __future__ import annotations

import json
from typing import Dict, List, Sequence, Tuple

from .runs import (MISSING, SELECTOR_ORDER, Run, _dataset_rank, _relevant_overrides, _warn,
                   duplicate_error)
from .tables import Cell


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
                raise duplicate_error(f"ablation {r.dataset} / {_ablation_variant(r)} / {col} / "
                                      f"seed {r.seed}", g[r.seed], r)
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
