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


from ..estimate import choose_rates
from ..plan import RunSpec, build_run_trainer, finished, holds_run


@dataclass
class Planned:
    spec: RunSpec
    images: Optional[int] = None      # its test images (None: it could not be set up here)
    classes: Optional[int] = None
    finished: bool = False            # already ran to the end: re-read, never submitted
    backbone: str = ""                # which measured rates apply (argtca/experiments/rates.py)
    views: str = ""

    @property
    def name(self) -> str:
        """The method as table1 names it (argtca-div, tpt): the rate files' key."""
        s = self.spec
        return f"argtca-{s.selector}" if s.method == "argtca" else s.method

    def seconds(self, table) -> Optional[float]:
        """Its estimated seconds at ``table``'s measured rates (None: not set up here, or no
        rate of its method on its path)."""
        if self.images is None or self.classes is None or table is None:
            return None
        return table.estimate(self.name, self.spec.dataset, self.backbone, self.views,
                              self.images, self.classes, self.spec.overrides).seconds


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
                p.backbone = str(tr.cfg.MODEL.BACKBONE.NAME)
                p.views = str(tr.cfg.TTA.VIEWS_DEVICE).lower()
                fp = tr.fingerprint()
            except (Exception, SystemExit):   # noqa: BLE001 (reported by the run itself)
                pass
        p.finished = finished(s) if s.out_root is not None else holds_run(s.out, fp)
        out.append(p)
    return out


def plan_summary(plans: Sequence[Planned], gpus_per_job: int) -> List[str]:
    """Runs, test images and estimated hours of what is to be submitted, at the rates measured
    on a GPU (on the CPU with ``gpus_per_job`` 0; ``table1 --plan``'s rate files)."""
    todo = [p for p in plans if not p.finished]
    tasks = len(group(todo, gpus_per_job))
    lines = [f"{len(plans)} run(s) planned: {len(plans) - len(todo)} finished (re-read, not "
             f"submitted), {len(todo)} to submit in {tasks} task(s)"
             + (f" of {gpus_per_job} GPU(s)" if gpus_per_job else " (CPU)")]
    device = "cuda" if gpus_per_job else "cpu"
    table, note = choose_rates(device)
    unit = "GPU" if gpus_per_job else "CPU"
    secs = {id(p): p.seconds(table) for p in todo}
    known = [p for p in todo if secs[id(p)] is not None]
    s = sum(secs[id(p)] for p in known)
    lines.append(f"to submit: {sum(p.images or 0 for p in todo)} test images, {s / 3600:.2f} "
                 f"{unit} hours ({s:.0f} {unit} s)")
    if table is None:
        lines.append(f"{unit} hours: {note}")
    else:
        lines.append(f"{unit} hours: each run's measured start plus its images at its measured "
                     f"pace, on its TTA.VIEWS_DEVICE; rates: {table.describe()}"
                     + (f"; {note}" if note else ""))
    unset = [p for p in todo if p.images is None]
    if unset:
        lines.append(f"{len(unset)} run(s) could not be set up here (each reports its own "
                     f"error when it starts): not counted")
    norate = sorted({f"{p.name} ({p.backbone}, TTA.VIEWS_DEVICE {p.views})" for p in todo
                     if p.images is not None and secs[id(p)] is None})
    if norate:
        lines.append(f"no measured rate of {', '.join(norate)}: not counted; measure it with "
                     f"python -m argtca.bench table1")
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
