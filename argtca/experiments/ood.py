"""OOD detection as MCM (Ming et al. 2022) and TTA-VLM evaluate it: every method on an
in-distribution (ID) test set and on each OOD set, the OOD score of an image its maximum softmax
probability under the adapted model over the ID classes; AUROC and FPR at 95% TPR per method.

    python -m argtca.experiments ood DATASET --ood OOD_DATASET [--ood ...] [--ood-root DIR]
        [--methods ...] [--seeds 1,2,3] [KEY VALUE ...]

Each method runs as a normal run on the ID set (the very run of table1 with the same settings:
shared, re-read when finished) and once per OOD set with ``DATASET.OOD.NAME`` (the ID dataset's
classes and settings, the OOD set's images: argtca/datasets/ood.py), in its own hash-keyed
folder, so both are resumable and skipped when finished. An online method adapts over each
set's stream separately (two runs, its state never carried from one to the other). The report
(``<out-root>/report/ood-<hash>/``) is Table 1's over the ID runs plus ``ood.md``/``ood.csv``
(:mod:`argtca.report.ood`), computed from the records alone.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Sequence

from .plan import ExperimentError, RunSpec, check_presence, dataset_yaml, split_method
from .preflight import check_methods, dropped_lines, needs_attributes
from .runner import execute
from .tables import _finish, _present, table_cells

__all__ = ["ood", "plan_ood", "ood_dataset_name"]

# the default: the first declared method of the zero-shot, TPT and online families (the catalogue)
OOD_FAMILIES = ("zero-shot", "tpt-family", "online")


def default_methods() -> List[str]:
    from argtca.trainers.catalogue import method_names
    return [method_names(f)[0] for f in OOD_FAMILIES]


def ood_dataset_name(ds: str) -> str:
    """The registered dataset name of a configs/datasets key (``dtd`` -> its DATASET.NAME)."""
    import yaml
    data = yaml.safe_load(dataset_yaml(ds).read_text()) or {}
    name = str((data.get("DATASET") or {}).get("NAME") or "")
    if not name:
        raise ExperimentError(f"--ood {ds}: configs/datasets/{ds}.yaml names no DATASET.NAME")
    return name


def _value(opts: Sequence[str], key: str):
    opts = list(opts)
    vals = [v for k, v in zip(opts[::2], opts[1::2]) if k == key]
    return vals[-1] if vals else None


def plan_ood(pres, oods: Sequence[str], ood_root: str, ood_split: str, methods: Sequence[str],
             seeds: Sequence[int], out_root: Path, opts: Sequence[str]) -> List[RunSpec]:
    """Seed-major like Table 1; per (seed, ID dataset, method) the ID run, then one run per OOD
    set. A ``DATASET.NUM_IMAGES`` override limits the OOD sets too (unless
    ``DATASET.OOD.NUM_IMAGES`` is given)."""
    n = _value(opts, "DATASET.NUM_IMAGES")
    extra_n = ([] if n is None or _value(opts, "DATASET.OOD.NUM_IMAGES") is not None
               else ["DATASET.OOD.NUM_IMAGES", str(n)])
    specs = []
    for seed, ds, name in table_cells(pres, methods, seeds, opts):
        method, sel = split_method(name)
        specs.append(RunSpec(method, ds, seed, None, sel, list(opts), out_root=Path(out_root)))
        for o in oods:
            ov = list(opts) + ["DATASET.OOD.NAME", ood_dataset_name(o), "DATASET.OOD.ROOT",
                               ood_root, "DATASET.OOD.SPLIT", ood_split] + extra_n
            specs.append(RunSpec(method, ds, seed, None, sel, ov,
                                 f"{name} on {o} (OOD for {ds}), seed {seed}",
                                 out_root=Path(out_root)))
    return specs


def ood(datasets: Sequence[str] = (), oods: Sequence[str] = (), ood_root: str = "",
        ood_split: str = "test", methods: Sequence[str] = (), seeds: Sequence[int] = (1, 2, 3),
        root: str = "", out_root="output", opts: Sequence[str] = (),
        plugins: Sequence[str] = (), dry_run: bool = False, quiet: bool = False,
        report_dir=None, force: bool = False) -> int:
    """Run every method on the ID datasets and on each OOD set; write the report (Table 1's over
    the ID runs, and the OOD section)."""
    from ..report.cli import make_ood_report
    from .plan import METHOD_SETS
    if not datasets:
        raise ExperimentError("ood: name the in-distribution dataset, e.g. `python -m "
                              "argtca.experiments ood demo --ood imagefolder --ood-root DIR`")
    if not oods:
        raise ExperimentError("ood: no OOD set; give --ood DATASET (a configs/datasets key, "
                              "e.g. dtd or imagefolder with --ood-root)")
    methods = [m for name in methods for m in METHOD_SETS.get(str(name).lower(), [name])]
    methods = list(dict.fromkeys(methods)) or default_methods()
    check_methods(methods, plugins)
    ood_root = os.path.abspath(os.path.expanduser(ood_root)) if ood_root else root
    out_root = Path(out_root)
    need_attr = any(needs_attributes(m, opts) for m in methods)
    pres = _present(datasets, root, opts, need_attr, "ood", methods=methods)
    opres = check_presence(list(oods), ood_root, split=ood_split, need_attributes=False)
    absent = [p for p in opres if not p.present]
    if absent:
        raise ExperimentError("ood: OOD set(s) not found: " + "; ".join(
            f"{p.dataset}: {p.why}" for p in absent) + " (--ood-root names their data root)")
    specs = plan_ood(pres, oods, ood_root, ood_split, methods, seeds, out_root, opts)
    notes = dropped_lines(pres, methods, opts)
    outcomes = [] if dry_run else execute(specs, root, plugins, "ood", quiet, also=notes)

    def make(done):
        written = make_ood_report(done, report_dir, force=force,
                                  default_parent=out_root / "report", prefix="ood")
        print(Path(written["ood.md"]).read_text())
        return written

    return _finish(outcomes, "ood", make, dry_run, specs, root, plugins, notes)
