"""What a launch would submit: each planned run resolved to its run folder, finished ones left out,
the rest grouped into tasks; the plan's hash names its launch record."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence


from ..plan import (RATE_SOURCE, VIEWS_ASSUMPTION, RunSpec,
                    build_run_trainer, finished, holds_run, seconds_per_image)


@dataclass
class Planned:
    spec: RunSpec
    images: Optional[int] = None      # its test images (None: it could not be set up here)
    classes: Optional[int] = None
    finished: bool = False            # already ran to the end: re-read, never submitted

    @property
    def gpu_seconds(self) -> Optional[float]:
        if self.images is None or self.classes is None:
            return None
        return seconds_per_image(self.spec.method, self.classes) * self.images


def survey(specs: Sequence[RunSpec], root: str, plugins: Sequence[str] = (),
           device: Optional[str] = None) -> List[Planned]:
    """Each spec's run folder (set on ``spec.out`` for hash-keyed ones), test images, classes
    and whether it already finished, from its trainer built as the run will build it on a
    machine of ``device`` type. A spec that cannot be set up here is submitted anyway: its run
    reports its own error."""
    if plugins:
        from ...plugins import load_plugins
        load_plugins(plugins)
    datasets: Dict[str, object] = {}
    out = []
    for s in specs:
        p, fp = Planned(s), None
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                tr = build_run_trainer(s, root, plugins, datasets, device)
                if s.out_root is not None:
                    s.out = Path(tr.output_dir())
                p.images, p.classes = len(tr.dataset.test), len(tr.dataset.classnames)
                fp = tr.fingerprint()
            except (Exception, SystemExit):   # noqa: BLE001 (reported by the run itself)
                pass
        p.finished = finished(s) if s.out_root is not None else holds_run(s.out, fp)
        out.append(p)
    return out


def plan_summary(plans: Sequence[Planned], gpus_per_job: int) -> List[str]:
    """Runs, test images and estimated GPU hours of what is to be submitted."""
    todo = [p for p in plans if not p.finished]
    tasks = len(group(todo, gpus_per_job))
    lines = [f"{len(plans)} run(s) planned: {len(plans) - len(todo)} finished (re-read, not "
             f"submitted), {len(todo)} to submit in {tasks} task(s)"
             + (f" of {gpus_per_job} GPU(s)" if gpus_per_job else " (CPU)")]
    known = [p for p in todo if p.gpu_seconds is not None]
    s = sum(p.gpu_seconds for p in known)
    lines.append(f"to submit: {sum(p.images for p in known)} test images, {s / 3600:.2f} GPU "
                 f"hours ({s:.0f} GPU s)")
    lines.append(f"GPU hours estimated from {RATE_SOURCE}, linear in the classes; zero-shot at "
                 f"1/64 of a TTA image; model loading and ArgTCA's Phase 1 not included; GPU "
                 f"time {VIEWS_ASSUMPTION}")
    if len(known) < len(todo):
        lines.append(f"{len(todo) - len(known)} run(s) could not be set up here (each reports "
                     f"its own error when it starts): not counted")
    return lines


def group(plans: Sequence[Planned], gpus_per_job: int) -> List[List[Planned]]:
    """The array tasks: one run each, or ``gpus_per_job`` runs (one per GPU) in plan order."""
    n = max(1, gpus_per_job)
    return [list(plans[i:i + n]) for i in range(0, len(plans), n)]


def plan_hash(specs: Sequence[RunSpec], root: str, plugins: Sequence[str]) -> str:
    """Twelve hex digits naming the plan: every run's name and command (the same command
    arguments give the same plan, hence the same launch record)."""
    text = json.dumps([[s.name, s.argv(root, plugins)] for s in specs])
    return hashlib.sha256(text.encode()).hexdigest()[:12]
