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

__all__ = ["declared_inactive", "inactive_reason", "run_notes", "note_lines"]


def declared_inactive(trainer_cls, node, cfg, n_classes: int) -> str:
    """The method's own declaration: its adapter's ``inactive_reason`` (training-free and
    online methods) or its objective's (the prompt-tuning methods; zero-shot CLIP tunes nothing
    by design). ``node``: its config node, ``cfg`` the configuration its engine sees."""
    adapter = getattr(trainer_cls, "adapter_name", "")
    if adapter:
        from argtca.registry import ADAPTER_REGISTRY, load_builtin_methods
        load_builtin_methods()   # registration
        cls = ADAPTER_REGISTRY.get(adapter)
    elif getattr(trainer_cls, "tunes", True):
        from argtca.registry import OBJECTIVE_REGISTRY
        cls = OBJECTIVE_REGISTRY.get(trainer_cls.objective_name)
    else:
        return ""
    why = getattr(cls, "inactive_reason", None)   # a plug-in's class may not declare it
    return str(why(node, cfg, n_classes) or "") if why else ""


def inactive_reason(trainer) -> str:
    """:func:`declared_inactive` for a built trainer: its node, the configuration its engine
    sees (``run_cfg``, settled by ``resolve_auto``) and its dataset's classes."""
    n = len(getattr(trainer, "classnames", []) or [])
    return declared_inactive(type(trainer), trainer.node, trainer.run_cfg, n)


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
