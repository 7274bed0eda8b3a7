"""Table 1 (every method, every present dataset, over seeds), Table 2 (ablations), the α/β
sensitivity figures and Table 3 (attributes of chosen classes): plan the runs, run them, report.

Every run goes to ``argtca.run``'s own folder, ``<out>/<method>/<ds>/<hash8>/seed<k>``, the hash
naming every setting that can change a number (argtca/experiments/plan.py): Table 1, compare.sh,
the ablations, the sweep and the runs of a ``--baseline-config`` share a folder exactly when
their settings are the same, and never otherwise. Reports go to ``--report-dir`` or
``<out>/report/<command>-<hash of the runs>`` (``table1-<config stem>-<hash>`` with a
``--baseline-config``), so a report of other runs is never overwritten.
"""
from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ..report.runs import ReportError

from .command import Command, split_list
from .estimate import plan_lines
from .plan import (ABLATION_DATASETS, TABLE1_DATASETS, TABLE1_EXTENSION,
                   Presence, RunSpec,
                   as_float, check_presence, failure_lines, finished,
                   load_baseline_config, presence_lines, resolve_run_dirs, split_method)
from .preflight import (check_methods, check_selectors, dropped_lines, needs_attributes,
                        views_lines)
from .runner import dry_run as run_dry, execute


def _split(opts, split="test") -> str:
    opts = list(opts)
    for k, v in zip(opts[::2], opts[1::2]):   # the split the runs evaluate is the one checked
        if k == "DATASET.SPLIT":
            split = v
    return split


def _present(datasets, root, opts, need_attr, tag, split="test",
             methods: Sequence[str] = ()) -> List[Presence]:
    opts = list(opts)
    pres = check_presence(datasets, root, split=_split(opts, split), opts=opts,
                          need_attributes=need_attr)
    names = ", ".join(m for m in methods if needs_attributes(m, opts)) or "TCA and ArgTCA"
    for line in presence_lines(pres, need_attr, names):
        print(f"[{tag}] {line}", flush=True)
    return pres


def _finish(outcomes, tag: str, make, dry_run: bool, specs, root: str = "",
            plugins: Sequence[str] = (), notes: Sequence[str] = ()) -> int:
    """Report over the finished runs; exit status 0 when every run finished, else 1. ``notes``:
    what the command left out (:func:`dropped_lines`), said once more at the end."""
    if not specs:
        print(f"[{tag}] error: nothing to run: no dataset is present (see above); set DATA or "
              f"--root to the data root (python -m argtca.data check), or try the embedded "
              f"demo: python -m argtca.experiments {tag} demo", file=sys.stderr)
        return 2
    if dry_run:   # the runs' folders and what the real command would refuse, nothing run
        return run_dry(specs, root, plugins, tag, notes)
    for line in failure_lines(outcomes, tag):
        print(line, file=sys.stderr)
    for line in notes:
        print(f"[{tag}] {line}", file=sys.stderr)
    done = [o.spec.out for o in outcomes if o.ok]
    if not done:
        print(f"[{tag}] error: no run finished, no report written", file=sys.stderr)
        return 1
    try:
        written = make(done)
    except ReportError as e:
        print(f"[{tag}] error: {e}", file=sys.stderr)
        return 2
    for name in ("table.md", "ablation.md", "sweep.md", "shift.md"):
        if name in written:
            print(Path(written[name]).read_text())
    from ..report.cli import wrote_lines
    print("\n".join(wrote_lines(written, tag)))
    return 0 if len(done) == len(outcomes) else 1


# ----------------------------------------------------------------------------- Table 1
def table_cells(pres: Sequence[Presence], methods: Sequence[str], seeds: Sequence[int],
                opts: Sequence[str]) -> Iterator[Tuple[int, str, str]]:
    """The (seed, dataset, method name) a table runs, seed-major (one seed of every dataset and
    method first), then dataset, then method: the present datasets only, and a method that
    reads an attribute file only where the dataset has one."""
    need = {name: needs_attributes(name, opts) for name in methods}
    for seed in seeds:
        for p in pres:
            if not p.present:
                continue
            for name in methods:
                if not (need[name] and p.attributes_problem):
                    yield seed, p.dataset, name


def plan_table1(pres: Sequence[Presence], methods: Sequence[str], seeds: Sequence[int],
                out_root: Path, opts: Sequence[str],
                tuned: Optional[Dict[str, List[str]]] = None) -> List[RunSpec]:
    """One run per :func:`table_cells` cell. A tuned method's weights are overrides like any
    other: its runs get their own folders."""
    specs = []
    for seed, ds, name in table_cells(pres, methods, seeds, opts):
        method, sel = split_method(name)
        ov = list(opts) + (list(tuned[method]) if tuned and method in tuned else [])
        specs.append(RunSpec(method, ds, seed, None, sel, ov, out_root=Path(out_root)))
    return specs


def table1(datasets: Sequence[str] = (), seeds: Sequence[int] = (1, 2, 3),
           methods: Sequence[str] = (), root: str = "", out_root="output",
           opts: Sequence[str] = (), baseline_config=None, plugins: Sequence[str] = (),
           dry_run: bool = False, quiet: bool = False, report_dir=None, plan: bool = False,
           extended: bool = False, force: bool = False, tag: str = "table1",
           defaults: Sequence[str] = (), rates: Optional[str] = None,
           after: Optional[Callable[[List[Path], Path], Dict[str, Path]]] = None) -> int:
    """The paper's Table 1 (its nine datasets by default; ``extended``: also ImageNet and
    SUN397). ``plan``: print the runs, images and estimated time per dataset on this machine,
    from the measured rates (``rates``: a rate file of ``python -m argtca.bench table1``; default
    this machine's), run nothing.
    The report goes to ``report_dir`` or ``<out_root>/report/table1-<hash of the runs>``
    (``table1-<config stem>-<hash>`` with a ``baseline_config``): other runs never overwrite
    a report. Another table of the same kind (argtca/experiments/shift.py) passes its ``tag``
    (the lines' prefix and the report folder's), its ``defaults`` (the datasets when none is
    named) and ``after(done run folders, report folder) -> {name: file}``, its own section."""
    from ..report import make_report
    from .plan import expand_methods
    datasets = list(datasets) or list(defaults) or (
        TABLE1_DATASETS + (TABLE1_EXTENSION if extended else []))
    methods = expand_methods(methods, plugins)
    check_methods(methods, plugins)
    out_root = Path(out_root)
    tuned = load_baseline_config(baseline_config) if baseline_config else None
    if plan:
        lines = plan_head(datasets, methods, seeds, root, out_root, opts, plugins, tuned)
        for line in lines + plan_lines(datasets, methods, seeds, opts, root, rates):
            print(f"[{tag}] {line}")
        return 0
    need_attr = any(needs_attributes(m, opts) for m in methods)
    pres = _present(datasets, root, opts, need_attr, tag, methods=methods)
    specs = plan_table1(pres, methods, seeds, out_root, opts, tuned)
    notes = dropped_lines(pres, methods, opts)
    outcomes = [] if dry_run else execute(specs, root, plugins, tag, quiet, also=notes)
    prefix = f"{tag}-{Path(baseline_config).stem}" if baseline_config else tag

    def make(done):
        written = make_report(done, report_dir, show_std=True, force=force,
                              default_parent=out_root / "report", prefix=prefix)
        if after is not None:
            written.update(after(done, Path(written["report.json"]).parent))
        return written

    return _finish(outcomes, tag, make, dry_run, specs, root, plugins, notes)


def plan_head(datasets: Sequence[str], methods: Sequence[str], seeds: Sequence[int], root: str,
              out_root: Path, opts: Sequence[str], plugins: Sequence[str] = (),
              tuned: Optional[Dict[str, List[str]]] = None) -> List[str]:
    """The first lines of ``table1 --plan``: the datasets absent here (the estimate below still
    counts their published test splits), the views each method family makes and what the
    estimate assumes, and the runs already finished under ``out_root``."""
    pres = check_presence(datasets, root, split=_split(opts), opts=opts, need_attributes=False)
    absent = [p for p in pres if not p.present]
    lines = []
    if absent:
        why = ("no data root: set $DATA or pass --root /path/to/data" if not root else
               f"not under {root}: python -m argtca.data check "
               f"{' '.join(p.dataset for p in absent)} --root {root} says what is missing")
        lines.append(f"absent here: {len(absent)} of {len(pres)} dataset(s) "
                     f"({', '.join(p.dataset for p in absent)}): {why}; the estimate below "
                     f"counts their published test splits, a run now would skip them")
    lines += views_lines(methods, opts)
    specs = plan_table1(pres, methods, seeds, out_root, opts, tuned)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        resolve_run_dirs(specs, root, plugins)
    done = [s for s in specs if finished(s)]
    lines.append(f"finished under {out_root}: {len(done)} of the {len(specs)} run(s) of the "
                 f"present datasets (re-read, not run again; the estimate counts every run)"
                 + (":" if done else ""))
    lines += [f"  {s.name} -> {s.out}" for s in done]
    return lines


# ----------------------------------------------------------------------------- Table 2
def plan_ablation(pres: Sequence[Presence], seeds: Sequence[int], out_root: Path,
                  opts: Sequence[str], selectors: Sequence[str] = ("div", "disc")
                  ) -> List[RunSpec]:
    """ablation.sh's runs: per selector full / zero edges / raw EOS, and random once."""
    specs = []
    for seed in seeds:
        for p in pres:
            if not p.present or p.attributes_problem:
                continue
            ds, root = p.dataset, Path(out_root)
            for sel in selectors:
                specs.append(RunSpec("argtca", ds, seed, None, sel, list(opts), out_root=root))
                specs.append(RunSpec("argtca", ds, seed, None, sel,
                                     list(opts) + ["TRAINER.ARGTCA.EDGES", "none"],
                                     f"argtca-{sel} zero edges on {ds}, seed {seed}",
                                     out_root=root))
                specs.append(RunSpec("argtca", ds, seed, None, sel,
                                     list(opts) + ["TRAINER.ARGTCA.EMBEDDINGS", "raw"],
                                     f"argtca-{sel} raw EOS on {ds}, seed {seed}",
                                     out_root=root))
            specs.append(RunSpec("argtca", ds, seed, None, "random", list(opts), out_root=root))
    return specs


def table2(datasets: Sequence[str] = (), seeds: Sequence[int] = (1,), root: str = "",
           out_root="output", opts: Sequence[str] = (), plugins: Sequence[str] = (),
           selectors: Sequence[str] = ("div", "disc"), dry_run: bool = False,
           quiet: bool = False, report_dir=None, force: bool = False) -> int:
    from ..report import make_ablation_report
    check_selectors(selectors, plugins)
    out_root = Path(out_root)
    names = [f"argtca-{s}" for s in selectors] + ["argtca-random"]
    pres = _present(list(datasets) or ABLATION_DATASETS, root, opts, True, "table2",
                    methods=names)
    specs = plan_ablation(pres, seeds, out_root, opts, selectors)
    notes = dropped_lines(pres, names, opts)
    outcomes = [] if dry_run else execute(specs, root, plugins, "table2", quiet, also=notes)
    return _finish(outcomes, "table2", lambda done: make_ablation_report(
        done, report_dir, force=force, default_parent=out_root / "report", prefix="table2"),
        dry_run, specs, root, plugins, notes)


# ----------------------------------------------------------------------------- sweep
def plan_sweep(pres: Sequence[Presence], selectors: Sequence[str], seeds: Sequence[int],
               out_root: Path, opts: Sequence[str], alphas: Sequence[str] = ("5", "10", "20",
               "40"), betas: Sequence[str] = ("15", "25", "35", "50"), fixed_alpha: str = "10",
               fixed_beta: str = "35") -> List[RunSpec]:
    points = [(a, fixed_beta) for a in alphas] + [(fixed_alpha, b) for b in betas]
    points = list(dict.fromkeys(points))   # (10, 35) is on both lines: run once
    specs = []
    for seed in seeds:
        for p in pres:
            if not p.present or p.attributes_problem:
                continue
            for sel in selectors:
                for a, b in points:
                    specs.append(RunSpec(
                        "argtca", p.dataset, seed, None,
                        sel, list(opts) + ["TRAINER.ARGTCA.ALPHA", as_float(a),
                                           "TRAINER.ARGTCA.BETA", as_float(b)],
                        f"argtca-{sel} alpha={a} beta={b} on {p.dataset}, seed {seed}",
                        out_root=Path(out_root)))
    return specs


def sweep(datasets: Sequence[str] = (), selectors: Sequence[str] = ("div", "disc"),
          seeds: Sequence[int] = (1,), root: str = "", out_root="output",
          opts: Sequence[str] = (), plugins: Sequence[str] = (), alphas=("5", "10", "20", "40"),
          betas=("15", "25", "35", "50"), fixed_alpha="10", fixed_beta="35",
          dry_run: bool = False, quiet: bool = False, report_dir=None,
          force: bool = False) -> int:
    from ..report import make_sweep_report
    check_selectors(selectors, plugins)
    out_root = Path(out_root)
    names = [f"argtca-{s}" for s in selectors]
    pres = _present(list(datasets) or ABLATION_DATASETS, root, opts, True, "sweep",
                    methods=names)
    specs = plan_sweep(pres, selectors, seeds, out_root, opts, alphas, betas, fixed_alpha,
                       fixed_beta)
    notes = dropped_lines(pres, names, opts)
    outcomes = [] if dry_run else execute(specs, root, plugins, "sweep", quiet, also=notes)
    failed = [(o.spec.dataset, o.spec.method, o.spec.selector,
               float(value_of(o.spec.overrides, "TRAINER.ARGTCA.ALPHA")),
               float(value_of(o.spec.overrides, "TRAINER.ARGTCA.BETA")))
              for o in outcomes if not o.ok]     # marked in the report, not left out
    return _finish(outcomes, "sweep", lambda done: make_sweep_report(
        done, report_dir, force=force, default_parent=out_root / "report", prefix="sweep",
        missing=failed), dry_run, specs, root, plugins, notes)


def value_of(overrides: Sequence[str], key: str) -> str:
    """The value of the last ``key`` in a KEY VALUE override list."""
    return [overrides[i + 1] for i in range(0, len(overrides) - 1, 2) if overrides[i] == key][-1]


# ----------------------------------------------------------------------------- Table 3
def text_table_to_markdown(text: str) -> str:
    """select_attributes' fixed-width table (``a | b`` rows, a ``-+-`` rule) as Markdown; the
    lines after it (the classes it leaves out) follow it as text."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    out, after = [], []
    for i, ln in enumerate(lines):
        if after or (i > 1 and " | " not in ln and "|" not in ln):
            after.append(ln)
        elif i == 1 and set(ln) <= {"-", "+"}:
            out.append("|" + "|".join([":---"] * (ln.count("-+-") + 1)) + "|")
        else:
            out.append("| " + " | ".join(c.strip() for c in ln.split(" | ")) + " |")
    return "\n".join(out + ([""] + after if after else [])) + "\n"


def table3(datasets: Sequence[str] = (), classes: Sequence[str] = (), num_classes: int = 5,
           selectors: str = "tca,div,disc", root: str = "", out_root="output",
           opts: Sequence[str] = (), plugins: Sequence[str] = (), report_dir=None) -> int:
    """The attributes tca, div and disc pick for chosen classes, per present dataset, from the
    Phase-1 store the runs use (``python -m argtca.experiments.select_attributes``).
    ``classes``: NAME
    (every dataset) or DATASET:NAME; a dataset without any gets its first ``num_classes``."""
    from argtca.experiments import select_attributes
    pres = _present(list(datasets) or ABLATION_DATASETS, root, opts, True, "table3")
    rep = Path(report_dir) if report_dir else Path(out_root) / "report" / "table3"
    rep.mkdir(parents=True, exist_ok=True)
    md = ["# Attributes selected per class (Table 3)", "",
          f"Selectors {selectors}; M' = TRAINER.ARGTCA.NUM_ATTRIBUTES picks per class from the "
          "Phase-1 store ($ARGTCA_CACHE/phase1) shared with the runs."]
    rc = 0
    for p in pres:
        if not p.present or p.attributes_problem:
            continue
        mine = [c.split(":", 1)[1] if ":" in c else c for c in classes
                if ":" not in c or c.split(":", 1)[0] == p.dataset]   # in the order given
        own = [c.split(":", 1)[1] for c in classes if c.startswith(f"{p.dataset}:")]
        code, buf = None, io.StringIO()
        # plain NAMEs are for the datasets that have them: without them when this one does not
        for shown in ([mine, own] if own != mine else [mine]):
            argv = [p.dataset, "--selectors", selectors, "--num-classes", str(num_classes)]
            for c in shown:
                argv += ["--class", c]
            for pl in plugins:
                argv += ["--plugin", pl]
            argv += list(opts) + (["DATASET.ROOT", root] if root else [])
            buf, ebuf = io.StringIO(), io.StringIO()
            try:   # select_attributes: bad input is one "error:" line on stderr and exit 2
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(ebuf):
                    code = select_attributes.main(argv)
            except SystemExit as e:
                code, ebuf = 2, io.StringIO(f"error: {e.code}\n")
            if code and shown is mine and own != mine and "unknown classes" in ebuf.getvalue():
                continue
            sys.stderr.write(ebuf.getvalue())
            break
        if code:
            print(f"[table3] error: {p.dataset}: no table (message above)", file=sys.stderr)
            rc = 1
            continue
        if code:
            rc = 1
            continue
        table = text_table_to_markdown(buf.getvalue())
        (rep / f"{p.dataset}.md").write_text(table)
        md += ["", f"## {p.dataset}", "", table]
        print(f"[table3] {p.dataset}\n{buf.getvalue()}")
    (rep / "table3.md").write_text("\n".join(md).rstrip() + "\n")
    print(f"[table3] wrote: {rep / 'table3.md'}")
    return rc


# ---------------------------------------------- the commands of python -m argtca.experiments
def _table1_arguments(p) -> None:
    p.add_argument("--methods", default="", help="comma-separated methods (default all: every "
                   "registered method, ArgTCA as argtca-div,argtca-disc; any argtca-SELECTOR; "
                   "python -m argtca.trainers.catalogue --table lists them); 'paper' = the "
                   "ArgTCA paper's rows, 'zoo' = the others")
    p.add_argument("--baseline-config", default=None, metavar="YAML",
                   help="tuned.yaml of the tune command: the baselines' weights")
    p.add_argument("--plan", action="store_true",
                   help="print the absent datasets, the views per method family, the "
                   "finished runs, then the runs, test images and estimated time per dataset "
                   "on this machine (from measured rates); run nothing")
    p.add_argument("--rates", default=None, metavar="JSON", help="with --plan: the rate file "
                   "of python -m argtca.bench table1 to estimate from (default $ARGTCA_RATES, "
                   "else this machine's in benchmarks/rates)")
    p.add_argument("--extended", action="store_true",
                   help="also ImageNet and SUN397 (not in the paper's Table 1) when no dataset "
                   "is named")


def _table1_run(args, datasets: List[str], common) -> int:
    return table1(datasets, methods=split_list(args.methods),
                  baseline_config=args.baseline_config, plan=args.plan, extended=args.extended,
                  force=args.force, rates=args.rates, **common)


def _selectors_argument(default: str):
    def add(p) -> None:
        p.add_argument("--selectors", default=default)
    return add


def _table2_run(args, datasets: List[str], common) -> int:
    return table2(datasets, selectors=split_list(args.selectors), force=args.force, **common)


def _sweep_arguments(p) -> None:
    _selectors_argument("div,disc")(p)
    p.add_argument("--alphas", default="5,10,20,40")
    p.add_argument("--betas", default="15,25,35,50")
    p.add_argument("--fixed-alpha", default="10", help="alpha of the beta line (default 10)")
    p.add_argument("--fixed-beta", default="35", help="beta of the alpha line (default 35)")


def _sweep_run(args, datasets: List[str], common) -> int:
    return sweep(datasets, selectors=split_list(args.selectors), alphas=split_list(args.alphas),
                 betas=split_list(args.betas), fixed_alpha=args.fixed_alpha,
                 fixed_beta=args.fixed_beta, force=args.force, **common)


def _table3_arguments(p) -> None:
    p.add_argument("--class", dest="classes", action="append", default=[],
                   metavar="[DATASET:]NAME", help="class to show (repeat); NAME for every "
                   "dataset, DATASET:NAME for one")
    p.add_argument("--num-classes", type=int, default=5,
                   help="classes shown where none is given (the first N)")
    _selectors_argument("tca,div,disc")(p)


def _table3_run(args, datasets: List[str], common) -> int:
    return table3(datasets, classes=args.classes, num_classes=args.num_classes,
                  selectors=args.selectors, **common)


TABLE1_COMMAND = Command("table1", "every method on every present dataset, over seeds",
                         "1,2,3", _table1_arguments, _table1_run)
TABLE2_COMMAND = Command("table2", "ablations: full / zero edges / raw EOS / random", "1",
                         _selectors_argument("div,disc"), _table2_run)
SWEEP_COMMAND = Command("sweep", "alpha/beta sensitivity figures", "1",
                        _sweep_arguments, _sweep_run)
TABLE3_COMMAND = Command("table3", "attributes tca/div/disc pick for chosen classes", None,
                         _table3_arguments, _table3_run)
