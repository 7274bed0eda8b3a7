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

Before any run starts, each (ID, OOD) pair is built as its runs will build it
(:func:`check_ood_sets`): an OOD set that is an ID set (the same dataset, the same folder, or
any of its test images) is refused in one line, and so is one whose class names are ID class
names (its images are then not out of distribution) unless ``--allow-shared-classes``, which
names them in the log, the runs' summaries and ``ood.md``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Sequence

from .command import Command, split_list
from .plan import ExperimentError, RunSpec, check_presence, dataset_yaml, split_method
from .preflight import check_methods, dropped_lines, needs_attributes
from .runner import execute
from .tables import _finish, _present, table_cells

__all__ = ["ood", "plan_ood", "ood_dataset_name", "check_ood_sets"]

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


def check_ood_sets(specs: Sequence[RunSpec], oods: Sequence[str], root: str,
                   plugins: Sequence[str] = (), allow_shared: bool = False) -> List[str]:
    """Build each (ID, OOD) pair of ``specs`` once, as its runs will (the image check aside):
    an OOD set that is the ID set raises (one line, from argtca/datasets/ood.py); one whose class
    names are ID class names raises unless ``allow_shared``. Returns one note per accepted
    pair with shared class names."""
    from ..datasets import DataError, build_dataset
    from ..run import build_parser, setup_cfg
    keys = {ood_dataset_name(o): o for o in oods}
    seen, notes = set(), []
    for s in specs:
        name = _value(s.overrides, "DATASET.OOD.NAME")
        if name is None:
            continue
        ood_key = keys.get(name, name)
        if (s.dataset, ood_key) in seen:
            continue
        seen.add((s.dataset, ood_key))
        try:
            cfg = setup_cfg(build_parser().parse_args(s.argv(root, plugins)))
            cfg.defrost()
            cfg.DATASET.CHECK_IMAGES = "off"   # the run checks them
            cfg.freeze()
            oset = build_dataset(cfg)
        except DataError as e:
            raise ExperimentError(f"--ood {ood_key} (for {s.dataset}): {e}") from None
        line = oset.shared_line()
        if line and not allow_shared:
            raise ExperimentError(
                f"--ood {ood_key} (for {s.dataset}): {line}, so AUROC and FPR95 would not "
                f"measure OOD detection; give an OOD set of other classes, or pass "
                f"--allow-shared-classes to report it anyway (named in ood.md)")
        if line:
            notes.append(f"note: --ood {ood_key} (for {s.dataset}): {line}; accepted "
                         f"(--allow-shared-classes), named in ood.md")
    return notes


def ood(datasets: Sequence[str] = (), oods: Sequence[str] = (), ood_root: str = "",
        ood_split: str = "test", methods: Sequence[str] = (), seeds: Sequence[int] = (1, 2, 3),
        root: str = "", out_root="output", opts: Sequence[str] = (),
        plugins: Sequence[str] = (), dry_run: bool = False, quiet: bool = False,
        report_dir=None, force: bool = False, allow_shared_classes: bool = False) -> int:
    """Run every method on the ID datasets and on each OOD set; write the report (Table 1's over
    the ID runs, and the OOD section). ``allow_shared_classes``: accept an OOD set whose class
    names are ID class names (:func:`check_ood_sets`)."""
    from ..report.cli import make_ood_report
    from .plan import expand_methods
    if not datasets:
        raise ExperimentError("ood: name the in-distribution dataset, e.g. `python -m "
                              "argtca.experiments ood demo --ood imagefolder --ood-root DIR`")
    if not oods:
        raise ExperimentError("ood: no OOD set; give --ood DATASET (a configs/datasets key, "
                              "e.g. dtd or imagefolder with --ood-root)")
    methods = expand_methods(methods, plugins, default=default_methods())
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
    dup = [o for o in dict.fromkeys(oods) if list(oods).count(o) > 1]
    if dup:
        raise ExperimentError(f"ood: --ood {dup[0]} is given {list(oods).count(dup[0])} times; "
                              f"give each OOD set once")
    specs = plan_ood(pres, oods, ood_root, ood_split, methods, seeds, out_root, opts)
    shared = check_ood_sets(specs, oods, root, plugins, allow_shared_classes)
    for line in shared:
        print(f"[ood] {line}", flush=True)
    notes = dropped_lines(pres, methods, opts) + shared
    outcomes = [] if dry_run else execute(specs, root, plugins, "ood", quiet, also=notes)

    def make(done):
        written = make_ood_report(done, report_dir, force=force,
                                  default_parent=out_root / "report", prefix="ood")
        print(Path(written["ood.md"]).read_text())
        return written

    return _finish(outcomes, "ood", make, dry_run, specs, root, plugins, notes)


def _add_arguments(p) -> None:
    p.add_argument("--ood", action="append", default=[], metavar="DATASET",
                   help="an OOD set (configs/datasets key, e.g. dtd or imagefolder); repeat")
    p.add_argument("--ood-root", default="", help="the OOD sets' data root (default --root)")
    p.add_argument("--ood-split", default="test", help="the OOD sets' split (default test)")
    p.add_argument("--allow-shared-classes", action="store_true",
                   help="accept an OOD set whose class names are in-distribution class names "
                   "(refused by default: its images are not out of distribution); ood.md and "
                   "the log name them")
    p.add_argument("--methods", default="", help="comma-separated methods (default: the first "
                   "method of the zero-shot, TPT and online families of python -m "
                   "argtca.trainers.catalogue --table; 'paper', 'zoo' and 'all' as for table1)")


def _run(args, datasets: List[str], common) -> int:
    return ood(datasets, oods=args.ood, ood_root=args.ood_root, ood_split=args.ood_split,
               methods=split_list(args.methods), force=args.force,
               allow_shared_classes=args.allow_shared_classes, **common)


OOD_COMMAND = Command("ood", "OOD detection: every method on an ID set and OOD sets (AUROC, "
                      "FPR@95TPR of the maximum softmax probability)", "1,2,3",
                      _add_arguments, _run)
