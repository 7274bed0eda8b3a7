"""What a plan costs on this machine (``table1 --plan``, the launchers' dry run): each run's
views path and device, the sizes of its datasets, and the hours the measured rates of
``python -m argtca.bench table1`` give them (argtca/experiments/rates.py)."""
from __future__ import annotations

import contextlib
import io
import os
from typing import Dict, List, Optional, Sequence, Tuple

from .plan import CONFIGS, ExperimentError, split_method

def plan_device(opts: Sequence[str] = ()) -> str:
    """The device the runs of this command will compute on here: "cuda" where CUDA is
    available and ``USE_CUDA`` is not switched off, else "cpu"."""
    import torch
    for k, v in zip(list(opts)[::2], list(opts)[1::2]):
        if k == "USE_CUDA" and str(v).strip().lower() in ("false", "0", "no", "off"):
            return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def choose_rates(device: str, given: Optional[str] = None):
    """(the rate table the estimate uses, a note): ``given`` (``--rates``), else
    ``$ARGTCA_RATES``, else the stored file of this machine (argtca/experiments/rates.py)."""
    from .rates import choose
    card, cores = "", None
    if device == "cuda":
        import torch
        card = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count()
    try:
        return choose(device, given or os.environ.get("ARGTCA_RATES") or None, card, cores)
    except ValueError as e:   # a named file that is not a rate file
        raise ExperimentError(str(e)) from None


def run_path(name: str, dataset: str, opts: Sequence[str] = ()) -> Tuple[str, str]:
    """(backbone, TTA.VIEWS_DEVICE) of the runs of method ``name`` on ``dataset`` under
    ``opts``, as their configuration resolves them: which measured rates apply."""
    from ..config import get_cfg_default
    from ..trainers.catalogue import method_info
    cfg = get_cfg_default()
    p = CONFIGS / "datasets" / f"{dataset}.yaml"
    try:
        if p.is_file():
            cfg.merge_from_file(str(p))
        info = method_info(split_method(name)[0])
        if info.config_file.is_file():
            cfg.merge_from_file(str(info.config_file))
        cfg.merge_from_list(list(opts))
    except (KeyError, ValueError, AssertionError, OSError):   # reported by the run itself
        pass
    return str(cfg.MODEL.BACKBONE.NAME), str(cfg.TTA.VIEWS_DEVICE).lower()


def dataset_size(dataset: str, root: str = "", opts: Sequence[str] = ()
                 ) -> Tuple[Optional[int], Optional[int]]:
    """(test images, classes) of ``dataset``: its published split's, else what its image list
    holds here (the demo: its generated set; an ImageFolder under the data root), with
    ``DATASET.NUM_IMAGES`` of ``opts`` applied; (None, None) where neither is known."""
    from ..report.reference import full_test_size, num_classes
    n, k = full_test_size(dataset), num_classes(dataset)
    cap = -1
    for key, v in zip(list(opts)[::2], list(opts)[1::2]):
        if key == "DATASET.NUM_IMAGES":
            cap = int(v)
    if n is None or k is None:
        from ..datasets import build_dataset
        from .select_attributes import build_cfg
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                cfg = build_cfg(dataset, list(opts) + ["DATASET.CHECK_IMAGES", "off"]
                                + (["DATASET.ROOT", root] if root else []))
                d = build_dataset(cfg)
            return len(d.test), len(d.classnames)
        except (Exception, SystemExit):   # noqa: BLE001 (absent here: not estimated)
            return None, None
    return (min(n, cap) if cap > 0 else n), k


def missing_note(missing: Dict[Tuple[str, str, str], List[str]], file: str,
                 n_methods: int = 0) -> List[str]:
    """One line per path and set of datasets: the methods without a measured rate there."""
    groups: Dict[Tuple[str, str, Tuple[str, ...]], List[str]] = {}
    for (backbone, views, m), dss in missing.items():
        groups.setdefault((backbone, views, tuple(dss)), []).append(m)
    return [f"no measured rate in {file} of "
            f"{'any method' if len(ms) == n_methods else ', '.join(ms)} with {backbone}, "
            f"TTA.VIEWS_DEVICE "
            f"{views} (on {', '.join(dss)}): not counted (+?); measure it with python -m "
            f"argtca.bench table1" for (backbone, views, dss), ms in groups.items()]


def _time(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else \
        f"{s:.0f} s"


def plan_lines(datasets: Sequence[str], methods: Sequence[str], seeds: Sequence[int],
               opts: Sequence[str] = (), root: str = "", rates: Optional[str] = None
               ) -> List[str]:
    """What a table will run: per dataset the runs, the test images and the estimated time on
    this machine (the path the runs take: ``TTA.VIEWS_DEVICE`` of each method, on CUDA where
    there is one, else the CPU), from the measured per-method rates of the whole-table benchmark
    (``python -m argtca.bench table1``; argtca/experiments/rates.py), and the totals."""
    from .rates import borrowed_note
    device = plan_device(opts)
    table, note = choose_rates(device, rates)
    where = "GPU time" if device == "cuda" else "CPU time"
    lines = [f"{'dataset':<16}{'runs':>6}{'images/run':>12}{'images':>10}{'classes':>9}"
             f"{where:>10}"]
    tot_runs = tot_img = per = 0
    tot_s = 0.0
    unknown, borrowed, missing, own, other, short = [], [], {}, [], {}, []
    steady_only: List[str] = []
    for ds in datasets:
        n, k = dataset_size(ds, root, opts)
        runs = len(methods) * len(seeds)
        tot_runs += runs
        if n is None or k is None:
            unknown.append(ds)
            lines.append(f"{ds:<16}{runs:>6}{'?':>12}{'?':>10}{'?':>9}{'?':>10}")
            continue
        from ..report.reference import full_test_size
        if full_test_size(ds) is None:
            own.append(f"{ds} {n}")
        s, known = 0.0, 0
        for m in methods:
            backbone, views = run_path(m, ds, opts)
            e = table.estimate(m, ds, backbone, views, n, k, opts) if table is not None \
                else None
            if e is None or e.seconds is None:
                missing.setdefault((backbone, views, m), []).append(ds)
                continue
            known += 1
            s += e.seconds * len(seeds)
            if e.source:
                borrowed.append([m, ds, e.source])
            if e.other_settings is not None:
                other.setdefault(" ".join(e.other_settings) or "the defaults", []).append(m)
            if e.short_planned:
                short.append(m)
            if e.steady_only:
                steady_only.append(m)
        cell = "?" if not known else _time(s) + ("+?" if known < len(methods) else "")
        lines.append(f"{ds:<16}{runs:>6}{n:>12}{n * runs:>10}{k:>9}{cell:>10}")
        tot_img, tot_s, per = tot_img + n * runs, tot_s + s, per + n
    total = _time(tot_s) + ("+?" if missing else "") if tot_s else "?"
    lines.append(f"{'total':<16}{tot_runs:>6}{'':>12}{tot_img:>10}{'':>9}{total:>10}")
    lines.append(f"{per} test images per method and seed")
    sizes = "; ".join(
        (["the published test splits (CoOp's split files)"] if len(own) < len(datasets) - len(
            unknown) else []) + ([f"{', '.join(own)} (as listed here)"] if own else []))
    lines.append(f"{len(methods)} method(s) x {len(seeds)} seed(s); images: {sizes}; time: each "
                 f"run's measured start (model, per-dataset work, first batch, metrics) plus its "
                 f"images at its measured pace, on the path it takes here "
                 f"({'one GPU' if device == 'cuda' else 'the CPU'}, its TTA.VIEWS_DEVICE)")
    if table is not None:
        lines.append(f"rates: {table.describe()}" + (f"; {note}" if note else ""))
    else:
        lines.append(f"rates: {note}")
    lines += borrowed_note(borrowed, len(methods))
    from .rates import methods_named, settings
    for sets, ms in other.items():
        lines.append(f"no rate measured with these runs' settings "
                     f"({' '.join(settings(opts)) or 'the defaults'}) for "
                     f"{methods_named(ms, len(methods))}: the rates of {sets} used")
    if short:
        lines.append(f"the rates of {methods_named(short, len(methods))} were measured on "
                     f"short GPU runs that planned for their own few images, not the published "
                     f"size (before TTA.FAST.AUTO_IMAGES): a full run's size-dependent modes "
                     f"(TPT's step 1 by the Jacobian at >= 2048 images) may differ; `python -m "
                     f"argtca.bench table1` on this machine re-measures them")
    if steady_only:
        lines.append(f"the rates of {methods_named(steady_only, len(methods))}"
                     f" are their runs' rates after the first batch alone (measured before the "
                     f"pace of argtca 0b5265e): a short GPU run's can be the engine using up the "
                     f"views its workers made ahead, too fast where the workers bound a long run; "
                     f"`python -m argtca.bench table1` on this machine re-measures them")
    if table is not None:
        lines += missing_note(missing, table.path.name, len(methods))
    if unknown:
        lines.append(f"no published size for {', '.join(unknown)} and not readable here: "
                     f"not estimated")
    return lines
