"""What makes a run's numbers mean less than they seem, found from its settings and its data
before the first image: said once in the run's log, stored in its ``summary.json`` (the report
reads it there) and never a reason to refuse the run.

* ``inactive``: the method's defining mechanism cannot act under these settings (BoostAdapter
  without a boosting view, a cache that never fills, a weight of 0 ...). Each adapter
  (argtca/adapters/) and objective (argtca/engine/objectives.py) declares its own conditions in
  its ``inactive_reason(node, cfg, n_classes)``; the report names the row (argtca/report/notes.py).
* ``ood_shared_classes``: an OOD run whose OOD set has class names of the in-distribution set
  (argtca/datasets/ood.py); ``ood.md`` names them.
"""
from __future__ import annotations

from typing import Dict, List

__all__ = ["inactive_reason", "run_notes", "note_lines"]


def inactive_reason(trainer) -> str:
    """The method's own declaration for this run: its adapter's (training-free and online
    methods) or its objective's (the prompt-tuning methods; zero-shot CLIP tunes nothing by
    design). ``cfg``: the run's settled configuration (``run_cfg``, the views the engine sees)."""
    n = len(getattr(trainer, "classnames", []) or [])
    if getattr(trainer, "adapter_name", ""):
        cls = trainer.adapter_cls
        return str(cls.inactive_reason(trainer.node, trainer.cfg, n) or "")
    if not getattr(trainer, "tunes", True):
        return ""
    from argtca.registry import OBJECTIVE_REGISTRY
    cls = OBJECTIVE_REGISTRY.get(trainer.objective_name)
    return str(getattr(cls, "inactive_reason", lambda *a: "")(trainer.node, trainer.run_cfg, n)
               or "")


def run_notes(trainer) -> Dict[str, object]:
    """The ``summary.json`` keys (only those that apply)."""
    out: Dict[str, object] = {}
    why = inactive_reason(trainer)
    if why:
        out["inactive"] = why
    shared = list(getattr(trainer.dataset, "shared_classes", None) or [])
    if shared:
        out["ood_shared_classes"] = shared
    return out


def note_lines(trainer) -> List[str]:
    """One line per note, for the log."""
    lines = []
    why = inactive_reason(trainer)
    if why:
        lines.append(f"{trainer.display_label} is not itself under these settings: {why}")
    shared = getattr(trainer.dataset, "shared_line", None)
    if callable(shared) and shared():
        lines.append(shared())
    return lines
