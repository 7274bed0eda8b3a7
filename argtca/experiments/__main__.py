"""``python -m argtca.experiments COMMAND [DATASET ...] [options] [KEY VALUE ...]``."""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import List, Optional, Sequence, Tuple

from ..errors import print_bad_input
from . import __doc__ as _DOC

_KEY = re.compile(r"^[A-Z][A-Z0-9_]*\.")


def _split_items(items: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Positional words: datasets until the first config key (``TTA.N_VIEWS``), then overrides."""
    items = [x for x in items if x != "--"]
    for i, x in enumerate(items):
        if _KEY.match(x):
            return items[:i], items[i:]
    return items, []


def _list(value: str) -> List[str]:
    return [x for x in re.split(r"[,\s]+", value or "") if x]


def _ints(value: str, flag: str) -> List[int]:
    try:
        return [int(x) for x in _list(value)]
    except ValueError:
        raise SystemExit(f"error: {flag} {value!r}: integers separated by commas or spaces")


# the launcher's options: left out of the command a launch record keeps (flag -> takes a value)
LAUNCH_FLAGS = {"--launcher": True, "--partition": True, "--gpus-per-job": True,
                "--cpus-per-gpu": True, "--timeout-min": True, "--array-parallelism": True,
                "--account": True, "--wait": False, "--poll-s": True, "--dry-run": False}
EPILOG = """Cluster (docs/workflows.md#cluster): --launcher slurm submits the runs as a SLURM job
array through submitit (--launcher local: submitit's local jobs), e.g.
    python -m argtca.experiments table1 --launcher slurm --partition gpu --gpus-per-job 1 \\
        --timeout-min 240 --array-parallelism 32 --wait
Finished runs are never submitted again; without --wait the report is written later by
    python -m argtca.experiments collect <out-root>/launches/<plan>.json
    python -m argtca.experiments collect COMMAND [the same arguments]
"""


def launch_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster (submitit; docs/workflows.md#cluster)")
    g.add_argument("--launcher", default="inline", choices=["inline", "local", "slurm"],
                   help="inline (default): the runs one after the other in this process; "
                   "slurm: one SLURM array task per run; local: submitit's local jobs")
    g.add_argument("--partition", default=None, help="SLURM partition (slurm_partition)")
    g.add_argument("--account", default=None, help="SLURM account (slurm_account)")
    g.add_argument("--gpus-per-job", type=int, default=1, help="GPUs of each array task "
                   "(gpus_per_node; default 1); N > 1: N runs per task, one per GPU; 0: CPU")
    g.add_argument("--cpus-per-gpu", type=int, default=None,
                   help="CPU cores per GPU (the task asks cpus_per_task = this x GPUs)")
    g.add_argument("--timeout-min", type=int, default=240,
                   help="time limit of a task in minutes (timeout_min; default 240); a task "
                   "that reaches it is requeued and resumes")
    g.add_argument("--array-parallelism", type=int, default=None,
                   help="tasks running at once (slurm_array_parallelism; local: default one "
                   "per GPU group of this machine)")
    g.add_argument("--wait", action="store_true", help="follow the tasks (one progress line) "
                   "and write the report at the end; else print the job id and the collect "
                   "command")
    g.add_argument("--poll-s", type=float, default=10.0,
                   help="seconds between two looks at the tasks with --wait (default 10)")


def without_launch_options(argv: Sequence[str]) -> List[str]:
    """``argv`` without the launcher's options: the command a launch record keeps."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        flag = x.split("=", 1)[0]
        if flag in LAUNCH_FLAGS:
            skip = LAUNCH_FLAGS[flag] and "=" not in x
            continue
        out.append(x)
    return out


class _Parser(argparse.ArgumentParser):
    """Options only as spelled in full: argparse would take ``--plug FILE`` for ``--plugin``, so
    a word that looks like something else could load code (``collect`` reads a record's command
    with this same parser). Sub-commands are made of this class too (argparse's default)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m argtca.experiments", description=_DOC,
                                 epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, seeds: str):
        p.add_argument("items", nargs="*", metavar="DATASET | KEY VALUE",
                       help="configs/datasets keys, then KEY VALUE overrides for every run")
        p.add_argument("--root", default="", help="data root (default $DATA; the demo needs none)")
        p.add_argument("--out-root", default="output",
                       help="folder of the run folders and of report/ (default output)")
        p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                       help="import MODULE before the runs (e.g. your selector); repeatable")
        p.add_argument("--report-dir", default=None, help="report folder (default "
                       "<out-root>/report/<command>-<hash of the runs>; one holding a report of "
                       "other runs is refused unless --force)")
        p.add_argument("--force", action="store_true",
                       help="replace a report of other runs in --report-dir")
        if seeds is not None:
            p.add_argument("--seeds", default=seeds, help=f"seeds (default {seeds})")
            p.add_argument("--dry-run", action="store_true", help="list the runs (the finished "
                           "ones marked) and what the real command would refuse; run nothing")
            p.add_argument("--quiet", action="store_true",
                           help="hide each run's progress output (errors still show)")
            launch_options(p)

    t1 = sub.add_parser("table1", help="every method on every present dataset, over seeds")
    common(t1, "1,2,3")
    t1.add_argument("--methods", default="", help="comma-separated methods (default all: every "
                    "registered method, ArgTCA as argtca-div,argtca-disc; any argtca-SELECTOR; "
                    "python -m argtca.trainers.catalogue --table lists them); 'paper' = the "
                    "ArgTCA paper's rows, 'zoo' = the others")
    t1.add_argument("--baseline-config", default=None, metavar="YAML",
                    help="tuned.yaml of the tune command: the baselines' weights")
    t1.add_argument("--plan", action="store_true",
                    help="print the absent datasets, the views per method family, the "
                    "finished runs, then the runs, test images and estimated time per dataset "
                    "on this machine (from measured rates); run nothing")
    t1.add_argument("--rates", default=None, metavar="JSON", help="with --plan: the rate file "
                    "of python -m argtca.bench table1 to estimate from (default $ARGTCA_RATES, "
                    "else this machine's in benchmarks/rates)")
    t1.add_argument("--extended", action="store_true",
                    help="also ImageNet and SUN397 (not in the paper's Table 1) when no dataset "
                    "is named")
    sh = sub.add_parser("shift", help="TPT's distribution-shift table: every method on "
                        "ImageNet and -A, -V2, -R, -Sketch, over seeds, published numbers beside")
    common(sh, "1,2,3")
    sh.add_argument("--methods", default="", help="as for table1 (default all)")
    sh.add_argument("--baseline-config", default=None, metavar="YAML",
                    help="as for table1: tuned.yaml of the tune command")
    sh.add_argument("--plan", action="store_true", help="as for table1: the absent sets, then "
                    "the runs, test images and estimated time per set; run nothing")
    sh.add_argument("--rates", default=None, metavar="JSON", help="as for table1")
    od = sub.add_parser("ood", help="OOD detection: every method on an ID set and OOD sets "
                        "(AUROC, FPR@95TPR of the maximum softmax probability)")
    common(od, "1,2,3")
    od.add_argument("--ood", action="append", default=[], metavar="DATASET",
                    help="an OOD set (configs/datasets key, e.g. dtd or imagefolder); repeat")
    od.add_argument("--ood-root", default="", help="the OOD sets' data root (default --root)")
    od.add_argument("--ood-split", default="test", help="the OOD sets' split (default test)")
    od.add_argument("--allow-shared-classes", action="store_true",
                    help="accept an OOD set whose class names are in-distribution class names "
                    "(refused by default: its images are not out of distribution); ood.md and "
                    "the log name them")
    od.add_argument("--methods", default="", help="comma-separated methods (default: the first "
                    "method of the zero-shot, TPT and online families of python -m "
                    "argtca.trainers.catalogue --table; 'paper', 'zoo' and 'all' as for table1)")
    t2 = sub.add_parser("table2", help="ablations: full / zero edges / raw EOS / random")
    common(t2, "1")
    t2.add_argument("--selectors", default="div,disc")
    sw = sub.add_parser("sweep", help="alpha/beta sensitivity figures")
    common(sw, "1")
    sw.add_argument("--selectors", default="div,disc")
    sw.add_argument("--alphas", default="5,10,20,40")
    sw.add_argument("--betas", default="15,25,35,50")
    sw.add_argument("--fixed-alpha", default="10", help="alpha of the beta line (default 10)")
    sw.add_argument("--fixed-beta", default="35", help="beta of the alpha line (default 35)")
    t3 = sub.add_parser("table3", help="attributes tca/div/disc pick for chosen classes")
    common(t3, None)
    t3.add_argument("--class", dest="classes", action="append", default=[],
                    metavar="[DATASET:]NAME", help="class to show (repeat); NAME for every "
                    "dataset, DATASET:NAME for one")
    t3.add_argument("--num-classes", type=int, default=5,
                    help="classes shown where none is given (the first N)")
    t3.add_argument("--selectors", default="tca,div,disc")
    tu = sub.add_parser("tune", help="re-tune the baselines' weights on a validation split")
    common(tu, "1")
    tu.add_argument("--split", default="val", help="split evaluated (default val)")
    tu.add_argument("--tolerance", type=float, default=1.0,
                    help="accuracy points below the best that still qualify (default 1.0); "
                    "among those the lowest ECE is chosen")
    tu.add_argument("--grid", action="append", default=[], metavar="KEY=v1,v2",
                    help="a method's grid, e.g. TRAINER.CTPT.LAMBDA=25,50 (repeat; a method "
                    "named here gets only the keys given; default grids in argtca/experiments/"
                    "tune.py)")
    tu.add_argument("--methods", default="", help="baselines to tune (default: those with a "
                    "default grid in argtca/experiments/tune.py)")
    tu.add_argument("--write", default=None, metavar="YAML",
                    help="where to write the chosen values (default <report-dir>/tuned.yaml)")
    tu.add_argument("--allow-partial", action="store_true",
                    help="choose even where some grid points failed (tuned.yaml names them)")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "collect":
        return collect(argv[1:])
    from ..utils.console import running_command
    with running_command("python -m argtca.experiments", argv):   # what "run again" names
        return _run(argv)


def collect(rest: Sequence[str]) -> int:
    """``collect PLAN.json`` (a launch record: its command, from its folder) or ``collect
    COMMAND ARGS``: the report over the finished runs, the others listed with their state."""
    from .plan import ExperimentError
    rest = list(rest)
    if not rest or rest[0] in ("-h", "--help"):
        print("usage: python -m argtca.experiments collect <out-root>/launches/<plan>.json\n"
              "       python -m argtca.experiments collect COMMAND [the command's arguments]",
              file=sys.stderr if not rest else sys.stdout)
        return 2 if not rest else 0
    if not rest[0].endswith(".json"):
        return _run(rest, collect=True)
    import json
    import shlex
    try:
        data = json.loads(open(rest[0]).read())
        command, cwd = list(data["command"]), str(data["cwd"])
        if not all(isinstance(x, str) for x in command):
            raise TypeError("'command' is not a list of words")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return print_bad_input(ExperimentError(
            f"collect {rest[0]}: not a launch record ({type(e).__name__}: {e}); give the file "
            f"printed at submission, or the command and its arguments"))
    yours = (f"run `python -m argtca.experiments collect {shlex.join(command)}` yourself from "
             f"{cwd}")

    def unparsable(message: str):
        raise ExperimentError(f"collect {rest[0]}: its command is not one that python -m "
                              f"argtca.experiments accepts ({message}); restore the record, or "
                              f"{yours}")
    try:   # the command's own parser (options spelled in full): what it loads is what it says
        a = _parse(command, unparsable)
    except ExperimentError as e:
        return print_bad_input(e)
    if a.plugin:
        # a launch record is a file anyone with write access can edit: collect never imports
        # code it names (the same rule as for the pickles it names)
        return print_bad_input(ExperimentError(
            f"collect {rest[0]}: its command loads plug-in code (--plugin "
            f"{', '.join(a.plugin)}), and collect never imports code that an editable record "
            f"names; {yours}"))
    here = os.getcwd()
    try:   # the command's relative paths (--out-root, files) are from where it was launched
        os.chdir(cwd)
    except OSError as e:
        return print_bad_input(ExperimentError(f"collect {rest[0]}: its command ran in {cwd}, "
                                               f"which cannot be entered ({e.strerror})"))
    try:
        return _run(command, collect=True, parsed=a)
    finally:
        os.chdir(here)


def _parse(argv: List[str], on_error=None) -> Optional[argparse.Namespace]:
    """``argv`` (COMMAND then its arguments) read by the command's parser; None after --help.
    ``on_error(message)``, given, raises instead of argparse's usage and exit."""
    ap = build_parser()
    sub = next(x for x in ap._actions if isinstance(x, argparse._SubParsersAction))
    if not argv or argv[0] not in sub.choices:
        if on_error is not None:
            on_error(f"{argv[0] if argv else 'an empty command'!r} is not one of "
                     f"{', '.join(sub.choices)}")
        ap.parse_args(argv)   # --help, or the error naming the commands
        return None
    p = sub.choices[argv[0]]
    if on_error is not None:
        p.error = on_error
    # options may come between or after the datasets and the KEY VALUE overrides
    a = p.parse_intermixed_args(argv[1:])
    a.cmd = argv[0]
    return a


def _run(argv: List[str], collect: bool = False,
         parsed: Optional[argparse.Namespace] = None) -> int:
    from ..plugins import PluginError
    from .plan import ExperimentError, check_opts
    from .runner import dispatching
    from .preflight import PreflightError
    a = parsed if parsed is not None else _parse(argv)
    if a is None:
        return 2
    root = os.path.abspath(os.path.expanduser(a.root or os.environ.get("DATA", ""))) \
        if (a.root or os.environ.get("DATA")) else ""
    try:
        datasets, opts = _split_items(a.items)
        opts = check_opts(opts)
        kw = dict(root=root, out_root=a.out_root, opts=opts, plugins=a.plugin,
                  report_dir=a.report_dir)
        launcher, stop = None, _NeverRaised
        if a.cmd != "table3":
            kw.update(seeds=_ints(a.seeds, "--seeds"), dry_run=a.dry_run, quiet=a.quiet)
            if not kw["seeds"]:
                raise ExperimentError("--seeds is empty")
            if collect or a.launcher != "inline":
                from .launch import LaunchDone, LaunchOptions, Launcher
                stop = LaunchDone
                launcher = Launcher(LaunchOptions(
                    a.launcher, a.partition, a.gpus_per_job, a.cpus_per_gpu, a.timeout_min,
                    a.array_parallelism, a.account, a.wait, a.dry_run, collect, a.poll_s,
                    a.out_root, without_launch_options(argv)))
                kw["dry_run"] = False   # the launcher's dry run: its numbers, nothing submitted
        elif collect:
            raise ExperimentError("collect table3: table3 has no runs to collect (it reads the "
                                  "Phase-1 store); run it as it is")
        if a.plugin:   # a file that does not import is bad input: one line, before any run
            from ..plugins import load_plugins
            load_plugins(a.plugin)
        with dispatching(launcher):
            try:
                return _command(a, datasets, kw)
            except stop as e:   # submitted without --wait, or a launcher's dry run
                return e.code
    except PreflightError as e:   # problems found before the first run: its own message
        print(e, file=sys.stderr)
        return 2
    except (ExperimentError, KeyError, PluginError) as e:
        return print_bad_input(e)


class _NeverRaised(Exception):
    code = 0


def _command(a, datasets: List[str], kw) -> int:
    from .plan import ExperimentError
    if a.cmd == "table1":
        from .tables import table1
        return table1(datasets, methods=_list(a.methods),
                      baseline_config=a.baseline_config, plan=a.plan, extended=a.extended,
                      force=a.force, rates=a.rates, **kw)
    if a.cmd == "shift":
        from .shift import shift
        return shift(datasets, methods=_list(a.methods), baseline_config=a.baseline_config,
                     plan=a.plan, force=a.force, rates=a.rates, **kw)
    if a.cmd == "ood":
        from .ood import ood
        return ood(datasets, oods=a.ood, ood_root=a.ood_root, ood_split=a.ood_split,
                   methods=_list(a.methods), force=a.force,
                   allow_shared_classes=a.allow_shared_classes, **kw)
    if a.cmd == "table2":
        from .tables import table2
        return table2(datasets, selectors=_list(a.selectors), force=a.force, **kw)
    if a.cmd == "sweep":
        from .tables import sweep
        return sweep(datasets, selectors=_list(a.selectors), alphas=_list(a.alphas),
                     betas=_list(a.betas), fixed_alpha=a.fixed_alpha,
                     fixed_beta=a.fixed_beta, force=a.force, **kw)
    if a.cmd == "table3":
        from .tables import table3
        return table3(datasets, classes=a.classes, num_classes=a.num_classes,
                      selectors=a.selectors, **kw)
    from .tune import tune
    if len(datasets) > 1:
        raise ExperimentError(f"tune takes one dataset, got {datasets}")
    return tune(datasets[0] if datasets else "caltech101", grid_items=a.grid,
                tolerance=a.tolerance, split=a.split, write=a.write,
                methods=[m.lower() for m in _list(a.methods)],
                allow_partial=a.allow_partial, **kw)


if __name__ == "__main__":
    sys.exit(main())
