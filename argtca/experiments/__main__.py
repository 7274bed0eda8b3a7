"""``python -m argtca.experiments COMMAND [DATASET ...] [options] [KEY VALUE ...]``."""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import print_bad_input
from . import __doc__ as _DOC
from .command import Command, split_list
from .ood import OOD_COMMAND
from .shift import SHIFT_COMMAND
from .tables import SWEEP_COMMAND, TABLE1_COMMAND, TABLE2_COMMAND, TABLE3_COMMAND
from .tune import TUNE_COMMAND

# the sub-commands, in the order --help lists them; each declared beside what it runs
COMMANDS: Dict[str, Command] = {c.name: c for c in (
    TABLE1_COMMAND, SHIFT_COMMAND, OOD_COMMAND, TABLE2_COMMAND, SWEEP_COMMAND, TABLE3_COMMAND,
    TUNE_COMMAND)}

_KEY = re.compile(r"^[A-Z][A-Z0-9_]*\.")


def _split_items(items: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Positional words: datasets until the first config key (``TTA.N_VIEWS``), then overrides."""
    items = [x for x in items if x != "--"]
    for i, x in enumerate(items):
        if _KEY.match(x):
            return items[:i], items[i:]
    return items, []


def _ints(value: str, flag: str) -> List[int]:
    try:
        return [int(x) for x in split_list(value)]
    except ValueError:
        raise SystemExit(f"error: {flag} {value!r}: integers separated by commas or spaces")


EPILOG = """Cluster (docs/workflows.md#cluster): --launcher slurm submits the runs as a SLURM job
array through submitit (--launcher local: submitit's local jobs), e.g.
    python -m argtca.experiments table1 --launcher slurm --partition gpu --gpus-per-job 1 \\
        --timeout-min 240 --array-parallelism 32 --wait
Finished runs are never submitted again; without --wait the report is written later by
    python -m argtca.experiments collect <out-root>/launches/<plan>.json
    python -m argtca.experiments collect COMMAND [the same arguments]
"""


def launch_options(p: argparse.ArgumentParser) -> List[argparse.Action]:
    """Adds the launcher's options to ``p``; returns them."""
    g = p.add_argument_group("cluster (submitit; docs/workflows.md#cluster)")
    return [
        g.add_argument("--launcher", default="inline", choices=["inline", "local", "slurm"],
                       help="inline (default): the runs one after the other in this process; "
                       "slurm: one SLURM array task per run; local: submitit's local jobs"),
        g.add_argument("--partition", default=None, help="SLURM partition (slurm_partition)"),
        g.add_argument("--account", default=None, help="SLURM account (slurm_account)"),
        g.add_argument("--gpus-per-job", type=int, default=1, help="GPUs of each array task "
                       "(gpus_per_node; default 1); N > 1: N runs per task, one per GPU; 0: CPU"),
        g.add_argument("--cpus-per-gpu", type=int, default=None,
                       help="CPU cores per GPU (the task asks cpus_per_task = this x GPUs)"),
        g.add_argument("--timeout-min", type=int, default=240,
                       help="time limit of a task in minutes (timeout_min; default 240); a task "
                       "that reaches it is requeued and resumes"),
        g.add_argument("--array-parallelism", type=int, default=None,
                       help="tasks running at once (slurm_array_parallelism; local: default one "
                       "per GPU group of this machine)"),
        g.add_argument("--wait", action="store_true", help="follow the tasks (one progress "
                       "line) and write the report at the end; else print the job id and the "
                       "collect command"),
        g.add_argument("--poll-s", type=float, default=10.0,
                       help="seconds between two looks at the tasks with --wait (default 10)"),
    ]


# left out of the command a launch record keeps (flag -> takes a value): the launcher's options,
# and --dry-run (collect reports the runs; a dry run of the launcher only listed them)
LAUNCH_FLAGS = {flag: action.nargs != 0 for action in launch_options(argparse.ArgumentParser())
                for flag in action.option_strings}
LAUNCH_FLAGS["--dry-run"] = False


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


def _common_arguments(p: argparse.ArgumentParser, command: Command) -> None:
    """The arguments every command takes; with runs (``command.seeds``) also the seeds, a dry
    run, quiet runs and the launcher's options."""
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
    if command.seeds is not None:
        p.add_argument("--seeds", default=command.seeds, help=f"seeds (default {command.seeds})")
        p.add_argument("--dry-run", action="store_true", help="list the runs (the finished "
                       "ones marked) and what the real command would refuse; run nothing")
        p.add_argument("--quiet", action="store_true",
                       help="hide each run's progress output (errors still show)")
        launch_options(p)


def _parsers() -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    """The top parser and each command's parser by name."""
    ap = _Parser(prog="python -m argtca.experiments", description=_DOC, epilog=EPILOG,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    parsers = {}
    for name, command in COMMANDS.items():
        p = parsers[name] = sub.add_parser(name, help=command.help)
        _common_arguments(p, command)
        command.add_arguments(p)
    return ap, parsers


def build_parser() -> argparse.ArgumentParser:
    return _parsers()[0]


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
        args = _parse(command, unparsable)
    except ExperimentError as e:
        return print_bad_input(e)
    if args.plugin:
        # a launch record is a file anyone with write access can edit: collect never imports
        # code it names (the same rule as for the pickles it names)
        return print_bad_input(ExperimentError(
            f"collect {rest[0]}: its command loads plug-in code (--plugin "
            f"{', '.join(args.plugin)}), and collect never imports code that an editable record "
            f"names; {yours}"))
    here = os.getcwd()
    try:   # the command's relative paths (--out-root, files) are from where it was launched
        os.chdir(cwd)
    except OSError as e:
        return print_bad_input(ExperimentError(f"collect {rest[0]}: its command ran in {cwd}, "
                                               f"which cannot be entered ({e.strerror})"))
    try:
        return _run(command, collect=True, parsed=args)
    finally:
        os.chdir(here)


def _parse(argv: List[str], on_error=None) -> Optional[argparse.Namespace]:
    """``argv`` (COMMAND then its arguments) read by the command's parser; None after --help.
    ``on_error(message)``, given, raises instead of argparse's usage and exit."""
    ap, parsers = _parsers()
    if not argv or argv[0] not in parsers:
        if on_error is not None:
            on_error(f"{argv[0] if argv else 'an empty command'!r} is not one of "
                     f"{', '.join(parsers)}")
        ap.parse_args(argv)   # --help, or the error naming the commands
        return None
    p = parsers[argv[0]]
    if on_error is not None:
        p.error = on_error
    # options may come between or after the datasets and the KEY VALUE overrides
    args = p.parse_intermixed_args(argv[1:])
    args.cmd = argv[0]
    return args


def _run(argv: List[str], collect: bool = False,
         parsed: Optional[argparse.Namespace] = None) -> int:
    from ..plugins import PluginError
    from .plan import ExperimentError, check_opts
    from .runner import dispatching
    from .preflight import PreflightError
    args = parsed if parsed is not None else _parse(argv)
    if args is None:
        return 2
    command = COMMANDS[args.cmd]
    root = os.path.abspath(os.path.expanduser(args.root or os.environ.get("DATA", ""))) \
        if (args.root or os.environ.get("DATA")) else ""
    try:
        datasets, opts = _split_items(args.items)
        opts = check_opts(opts)
        kw = dict(root=root, out_root=args.out_root, opts=opts, plugins=args.plugin,
                  report_dir=args.report_dir)
        # what a launcher ends a command with (LaunchDone): none without a launcher
        launcher, stops = None, ()
        if command.seeds is not None:
            kw.update(seeds=_ints(args.seeds, "--seeds"), dry_run=args.dry_run, quiet=args.quiet)
            if not kw["seeds"]:
                raise ExperimentError("--seeds is empty")
            if collect or args.launcher != "inline":
                from .launch import LaunchDone, LaunchOptions, Launcher
                stops = (LaunchDone,)
                launcher = Launcher(LaunchOptions(
                    args.launcher, args.partition, args.gpus_per_job, args.cpus_per_gpu,
                    args.timeout_min, args.array_parallelism, args.account, args.wait,
                    args.dry_run, collect, args.poll_s, args.out_root,
                    without_launch_options(argv)))
                kw["dry_run"] = False   # the launcher's dry run: its numbers, nothing submitted
        elif collect:
            raise ExperimentError(f"collect {command.name}: {command.name} has no runs to "
                                  f"collect (it reads the Phase-1 store); run it as it is")
        if args.plugin:   # a file that does not import is bad input: one line, before any run
            from ..plugins import load_plugins
            load_plugins(args.plugin)
        with dispatching(launcher):
            try:
                return command.run(args, datasets, kw)
            except stops as e:   # submitted without --wait, or a launcher's dry run
                return e.code
    except PreflightError as e:   # problems found before the first run: its own message
        print(e, file=sys.stderr)
        return 2
    except (ExperimentError, KeyError, PluginError) as e:
        return print_bad_input(e)


if __name__ == "__main__":
    sys.exit(main())
