"""attributes.md: the phase-1 picks of the ArgTCA selectors side by side."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from .runs import MISSING, SELECTOR_ORDER, ReportError, Run, _dataset_rank, _warn


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
        try:
            picks = r.phase1()
        except ReportError as e:
            _warn(f"attributes.md leaves out {r.path}: {e}")
            continue
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
