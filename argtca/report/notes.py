"""What the runs said about themselves (``summary.json``, argtca/trainers/notes.py), for the
report: a method whose defining mechanism could not act under its settings (``inactive``), named
under the table's header per row; an OOD set with class names of the in-distribution set
(``ood_shared_classes``), named in ``ood.md``."""
from __future__ import annotations

from typing import Dict, List, Sequence

from .runs import Run

__all__ = ["inactive_lines", "shared_classes_lines"]


def inactive_lines(runs: Sequence[Run], labels: Sequence[str]) -> List[str]:
    """One line naming each row whose runs' method was not itself, with why (its runs' own
    words; empty when there is none)."""
    why: Dict[str, List[str]] = {}
    for r in runs:
        text = str(r.summary.get("inactive") or "").strip()
        if text and text not in why.setdefault(r.label, []):
            why[r.label].append(text)
    rows = [f"{lab}: {'; '.join(why[lab])}" for lab in labels if why.get(lab)]
    if not rows:
        return []
    return ["**Not itself under these settings** (the method's own mechanism cannot act; its "
            "runs' logs and summary.json say so): " + "; ".join(rows) + "."]


def shared_classes_lines(results: Sequence[Dict]) -> List[str]:
    """``ood.md``'s line per (ID, OOD) column whose OOD runs named ID class names."""
    seen: Dict[str, List[str]] = {}
    for r in results:
        names = list(r.get("shared") or [])
        if names:
            seen.setdefault(f"{r['id']} vs {r['ood_name']}", names)
    lines = []
    for col, names in seen.items():
        shown = ", ".join(names[:8]) + (f", and {len(names) - 8} more" if len(names) > 8 else "")
        lines.append(f"**Not out of distribution**: {col}: {len(names)} class name(s) of the OOD "
                     f"set are in-distribution class names ({shown}); those images are of ID "
                     f"classes, so its AUROC and FPR95 do not measure OOD detection alone.")
    return lines
