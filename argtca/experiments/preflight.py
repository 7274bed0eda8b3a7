"""What the planned runs of a command share, checked once before the first one starts.

A table of 13 runs whose weights cannot be had used to start 13 runs that each failed on the same
error (each after the CPU-time box), leaving 13 half-made folders. :func:`preflight` builds every
run's configuration, dataset and trainer as ``argtca.run`` will (without the model: the checks of
the configuration, the dataset, the attribute file, ``INPUT.SIZE`` and ``RUN.REQUIRE_CUDA``
happen there) and resolves each ``MODEL.PRETRAINED`` once (a file that exists, a tag whose weights
are cached or can be downloaded: argtca/models/pretrained.py), and reports each problem once, with
its fix and the runs it stops. The runner starts nothing while any is left.

Which methods read an attribute file (:func:`needs_attributes`) and the closing lines that name
what was left out of a table (:func:`dropped_lines`) live here too.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..models.run_checks import more_weights_problem, weights_problem
from .plan import (CONFIGS, NEEDS_ATTRIBUTES, ExperimentError, Presence, RunSpec,
                   build_run_trainer, finished, split_method)


class PreflightError(ExperimentError):
    """Problems found before the first run: the whole message (one line per problem)."""


def needs_attributes(name: str, opts: Sequence[str] = ()) -> bool:
    """Whether the method ``name`` (``tpt``, ``argtca-div``, ...) reads an attribute file under
    the overrides ``opts``: TCA and ArgTCA always, a training-free or online method with
    ``TTA.PROMPTS attributes``."""
    method, _ = split_method(name)
    if method in NEEDS_ATTRIBUTES:
        return True
    from ..config import get_cfg_default
    from ..registry import TRAINER_REGISTRY
    import argtca.trainers  # noqa: F401  (registration)
    from ..trainers.attributes import AttributeFile
    cfg = get_cfg_default()
    try:
        cfg.merge_from_file(str(CONFIGS / "trainers" / f"{method}.yaml"))
        cfg.merge_from_list(list(opts))
        cls = TRAINER_REGISTRY.get(cfg.TRAINER.NAME)
    except (KeyError, ValueError, AssertionError, OSError):   # reported when the run is set up
        return False
    return (isinstance(cls, type) and issubclass(cls, AttributeFile)
            and str(cfg.TTA.get("PROMPTS", "class")) == "attributes")


def _setup_problem(e: BaseException) -> str:
    from ..errors import error_message
    if isinstance(e, SystemExit):
        msg = str(e.code)
    else:
        msg = error_message(e)
    msg = msg.replace("\n", " ").strip()
    return msg[len("error: "):] if msg.startswith("error: ") else msg


def preflight(specs: Sequence[RunSpec], root: str, plugins: Sequence[str] = (),
              device: Optional[str] = None) -> List[Tuple[str, List[str]]]:
    """Set ``out`` of every hash-keyed spec (as :func:`~argtca.experiments.plan.resolve_run_dirs`)
    and return the problems of the runs still to do: (message with its fix, names of the runs it
    stops), each message once, in the order met. Finished runs are only re-read: not checked.
    ``device``: the device type of the machine the runs will run on ("cuda": a cluster's GPU
    node, so ``RUN.REQUIRE_CUDA`` is not held against a login node without one), None for this
    machine's (``build_run_trainer``)."""
    from ..run import build_parser, setup_cfg
    if plugins:
        from ..plugins import load_plugins
        load_plugins(plugins)
    problems: Dict[str, List[str]] = {}
    weights: Dict[Tuple[str, str], List[str]] = {}
    datasets: Dict[str, object] = {}
    more: Dict[Tuple[str, str, str], List[str]] = {}   # a method's other weights (more_weights)
    for s in specs:
        if s.out is not None and finished(s):   # only re-read
            continue
        # a run prints its own notes (engine choice, the CPU-time box) when it starts
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                cfg = setup_cfg(build_parser().parse_args(s.argv(root, plugins)))
            except (Exception, SystemExit) as e:   # noqa: BLE001 (each is reported below)
                problems.setdefault(_setup_problem(e), []).append(s.name)
                continue
            try:
                tr = build_run_trainer(s, root, plugins, datasets, device)
                if s.out_root is not None and s.out is None:
                    s.out = Path(tr.output_dir())
                for prefix, backbone, pretrained in getattr(tr, "more_weights", list)():
                    more.setdefault((prefix, backbone, pretrained), []).append(s.name)
            except (Exception, SystemExit) as e:   # noqa: BLE001
                problems.setdefault(_setup_problem(e), []).append(s.name)
        if not finished(s):
            key = (str(cfg.MODEL.BACKBONE.NAME), str(cfg.MODEL.PRETRAINED))
            weights.setdefault(key, []).append(s.name)
    for (backbone, pretrained), names in weights.items():
        msg = weights_problem(backbone, pretrained)
        if msg:
            problems.setdefault(msg, []).extend(names)
    for (prefix, backbone, pretrained), names in more.items():
        msg = more_weights_problem(prefix, backbone, pretrained)
        if msg:
            problems.setdefault(msg, []).extend(names)
    return list(problems.items())


def _runs(names: Sequence[str], total: int) -> str:
    names = list(dict.fromkeys(names))
    if len(names) == total and total > 1:
        return f"every run ({total})"
    shown = "; ".join(names[:3])
    return shown + (f"; and {len(names) - 3} more" if len(names) > 3 else "")


def preflight_message(problems: Sequence[Tuple[str, List[str]]], n_runs: int, tag: str,
                      also: Sequence[str] = ()) -> str:
    """One message: what stops the runs (each problem once, with its fix and the runs it
    concerns), then what the command leaves out anyway (``also``), then what to do."""
    lines = [f"[{tag}] error: no run started: {len(problems)} problem(s) found before the "
             f"first of {n_runs} run(s); each with its fix:"]
    lines += [f"  - {msg} ({_runs(names, n_runs)})" for msg, names in problems]
    lines += [f"  - {x}" for x in also]
    lines.append(f"[{tag}] nothing was run or written: fix the above and run the same command "
                 f"again")
    return "\n".join(lines)


def dropped(pres: Sequence[Presence], methods: Sequence[str], opts: Sequence[str] = ()
            ) -> Dict[str, List[str]]:
    """The methods left out for want of an attribute file -> the present datasets concerned."""
    need = [m for m in methods if needs_attributes(m, opts)]
    out: Dict[str, List[str]] = {}
    for p in pres:
        if p.present and p.attributes_problem:
            for m in need:
                out.setdefault(m, []).append(p.dataset)
    return out


def dropped_lines(pres: Sequence[Presence], methods: Sequence[str],
                  opts: Sequence[str] = ()) -> List[str]:
    """What a table leaves out, each dataset and each method named once (the closing lines;
    the first lines gave each reason in full)."""
    lines = []
    absent = [p.dataset for p in pres if not p.present]
    if absent:
        lines.append(f"not run: the absent dataset(s) {', '.join(absent)} (what is missing: "
                     f"the first lines, or python -m argtca.data check)")
    by_sets: Dict[Tuple[str, ...], List[str]] = {}
    for m, ds in dropped(pres, methods, opts).items():
        by_sets.setdefault(tuple(ds), []).append(m)
    for ds, ms in by_sets.items():
        lines.append(f"not run: {', '.join(ms)} on {', '.join(ds)}: no attribute file (the "
                     f"first lines say where to get it; or set DATASET.ATTRIBUTE_FILE)")
    return lines


def check_selectors(names: Sequence[str], plugins: Sequence[str] = (),
                    flag: str = "--selectors") -> None:
    """Every selector name registered (after importing the ``--plugin`` modules): else one
    line naming the valid ones."""
    from ..plugins import load_plugins
    from ..selectors import SELECTOR_REGISTRY   # argtca's own selectors registered
    if plugins:
        load_plugins(plugins)
    known = sorted(SELECTOR_REGISTRY.registered_names())
    bad = [n for n in names if str(n).lower() not in known]
    if bad:
        raise ExperimentError(f"{flag}: unknown selector(s) {', '.join(repr(b) for b in bad)}; "
                              f"registered: {', '.join(known)} (your own: --plugin MODULE)")


def check_methods(methods: Sequence[str], plugins: Sequence[str] = ()) -> None:
    """Every ``--methods`` name a method (``split_method``: one line listing them) and every
    ``argtca-SELECTOR`` a registered selector. The ``--plugin`` modules are imported first: a
    method they declare is a method like the others."""
    if plugins:
        from ..plugins import load_plugins
        load_plugins(plugins)
    sels = [sel for m in methods for meth, sel in [split_method(m)] if meth == "argtca"]
    if sels:
        check_selectors(sels, plugins, "--methods argtca-SELECTOR")


def views_lines(methods: Sequence[str], opts: Sequence[str] = ()) -> List[str]:
    """Per method family, the views its runs make (how many, on which path), and the path the
    time estimate is for (those views, on this machine's GPU or CPU)."""
    from ..config import get_cfg_default
    from ..registry import TRAINER_REGISTRY
    from ..trainers.catalogue import method_info
    fams: Dict[str, Dict[str, List[str]]] = {}
    devices = set()
    for name in methods:
        method, _ = split_method(name)
        cfg = get_cfg_default()
        try:
            info = method_info(method)
            if info.config_file.is_file():
                cfg.merge_from_file(str(info.config_file))
            cfg.TRAINER.NAME = info.trainer
            cfg.merge_from_list(list(opts))
            cls = TRAINER_REGISTRY.get(cfg.TRAINER.NAME)
        except (KeyError, ValueError, AssertionError, OSError):
            continue
        views = int(cfg.TTA.N_VIEWS)
        if not getattr(cls, "tunes", True) and not getattr(cls, "adapter_name", ""):
            views = 1   # zero-shot: view 0 only
        dev = str(cfg.TTA.VIEWS_DEVICE).lower()
        devices.add(dev)
        what = "1 view" if views == 1 else (
            f"{'up to ' if getattr(cls, 'adapter_name', '') else ''}{views} views, "
            f"TTA.VIEWS_DEVICE {dev}")
        fams.setdefault(info.family_title, {}).setdefault(what, []).append(name)
    parts = []
    for fam, whats in fams.items():
        if len(whats) == 1:
            parts.append(f"{fam}: {next(iter(whats))}")
        else:
            parts.append(f"{fam}: " + ", ".join(f"{w} ({', '.join(ms)})"
                                               for w, ms in whats.items()))
    path = {"cpu": "CPU exact views (TPT's PIL pipeline)", "cpu-fast": "CPU fast views",
            "gpu": "GPU views"}
    made = " and ".join(path.get(d, d) for d in sorted(devices)) or "?"
    from .estimate import plan_device
    here = "one GPU" if plan_device(opts) == "cuda" else "the CPU (no CUDA here)"
    return ["views per method family: " + "; ".join(parts),
            f"time below: {made} on {here}, as these runs make them, at the rates measured on "
            f"that path (the rates line below)"]
