r"""Command line, with CoOp train.py's flags:

    python -m argtca.run --root $DATA --dataset-config-file configs/datasets/caltech101.yaml \
        --config-file configs/trainers/tpt.yaml --seed 1 [KEY VALUE ...]

The run folder is output/<method>/<dataset>/<hash8>/seed<N> (--output-root for another folder than
output/), hash8 naming every setting that can
change a number (config, test set, device, input file contents; <hash8>/settings.json says which):
the same command resumes or re-reads its folder, other settings get another one. --output-dir
names the folder instead; a folder holding records of other settings is then refused.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict

from argtca.config import ConfigError, check_cfg_values, get_cfg_default
from argtca.errors import print_bad_input
from argtca.registry import TRAINER_REGISTRY


def build_parser() -> argparse.ArgumentParser:
    # options only as spelled in full (allow_abbrev): no word is taken for --plugin by accident
    p = argparse.ArgumentParser(prog="python -m argtca.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--root", default="", help="data root (CoOp layout); $DATA in the scripts")
    p.add_argument("--output-dir", default="", help="output directory (default "
                   "output/<method>/<dataset>/<hash8>/seed<N>, hash8 naming the settings)")
    p.add_argument("--output-root", default="", help="folder of the default run folders "
                   "(OUTPUT_ROOT, default output): <root>/<method>/<dataset>/<hash8>/seed<N>")
    p.add_argument("--dataset-config-file", default="", help="configs/datasets/<name>.yaml")
    p.add_argument("--config-file", default="", help="configs/trainers/<method>.yaml")
    p.add_argument("--trainer", default="", help="a registered trainer (e.g. TPT) or method key "
                   "(e.g. tpt); python -m argtca.trainers.catalogue --table lists them")
    p.add_argument("--backbone", default="", help="MODEL.BACKBONE.NAME, e.g. ViT-B/16")
    p.add_argument("--seed", type=int, default=None, help="SEED (views of image i depend on it)")
    p.add_argument("--eval-only", action="store_true", help="accepted for CoOp compatibility")
    p.add_argument("--no-train", action="store_true", help="accepted for CoOp compatibility")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE (dotted name on PYTHONPATH, or a .py file) before the run, "
                   "e.g. your own selector or method (docs/own-method.md); repeatable")
    p.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    return p


def parse_args(argv):
    """The command line; a flag written among or after the ``KEY VALUE`` overrides (e.g.
    ``... TTA.STEPS 1 --output-dir out``, or a script's extra arguments) is taken as that flag.
    argparse's REMAINDER would swallow it as a config key ("unknown key --output-dir"). Only a
    word in a KEY position is looked at, so a value such as ``TTA.STREAM.SEED -1`` stays a value;
    after a bare ``--`` everything is an override."""
    parser = build_parser()
    args = parser.parse_args(argv)
    opts = list(args.opts)
    if not opts or opts[0] == "--":
        return args
    flags = {s: a for a in parser._actions for s in a.option_strings}
    moved, kept, i = [], [], 0
    while i < len(opts):
        word = opts[i]
        action = flags.get(word.split("=", 1)[0]) if word.startswith("-") else None
        if action is None:
            kept += opts[i:i + 2]
            i += 2
            continue
        n = 1 + (0 if action.nargs == 0 or "=" in word else 1)
        moved += opts[i:i + n]
        i += n
    if not moved:
        return args
    head = list(argv)[:len(argv) - len(opts)]
    return parser.parse_args(head + moved + kept)


def _check_file(path: str, what: str) -> None:
    if path and not os.path.isfile(path):
        raise ConfigError(f"{what} not found: {path} (see configs/ for the available files)")


def _yacs_error(e: Exception, where: str) -> ConfigError:
    """One line for yacs' unknown-key / type-mismatch errors, naming ``where`` the value came
    from."""
    msg = str(e.args[0]) if e.args else str(e)
    for marker in ("Non-existent config key: ", "Non-existent key: "):
        if marker in msg:
            key = msg.split(marker, 1)[1].strip().strip("'")
            return ConfigError(f"{where}: unknown key {key}; every key and its default is in "
                               f"argtca/config/defaults.py")
    if "Type mismatch" in msg and "for config key: " in msg:
        key = msg.rsplit("for config key: ", 1)[1].strip()
        default = get_cfg_default()
        for part in key.split("."):
            default = default[part] if hasattr(default, "get") and part in default else None
        if hasattr(default, "items"):
            return ConfigError(f"{where}: {key} is a group of keys, not a value; set its keys "
                               f"(e.g. {key}.{next(iter(default))})")
        return ConfigError(f"{where}: {key} must be {type(default).__name__} (default "
                           f"{default!r}); write it in that type (e.g. 1.0 for a float, quote "
                           f"strings such as 'on')")
    return ConfigError(f"{where}: {msg.splitlines()[0] if msg else type(e).__name__}")


def _merge_file(cfg, path: str, flag: str) -> None:
    """``cfg.merge_from_file`` with one error line naming the file (and the line for bad YAML)."""
    import yaml
    where = f"{flag} {path}"
    try:
        cfg.merge_from_file(path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}{at}: malformed YAML ({what}); fix the file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start}); is it a "
                          f"YAML config?") from None
    except (KeyError, ValueError, AssertionError) as e:
        raise _yacs_error(e, where) from None
    except (AttributeError, TypeError):   # yacs on a file that is a list or a scalar
        raise ConfigError(f"{where}: must hold a YAML mapping of config keys (e.g. 'TTA:' then "
                          f"'  STEPS: 1'), not a list or a single value") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} is a directory, not a YAML file") from None


def setup_cfg(args):
    """The run configuration: defaults, the YAML files, the flags, then ``KEY VALUE`` overrides;
    every problem (missing/malformed file, unknown key, wrong type, value out of range) is one
    :class:`ConfigError` line naming where it came from."""
    from argtca.config.methods import drop_foreign_nodes
    from argtca.trainers.catalogue import trainer_name   # registers the trainers and their checks
    cfg = get_cfg_default()
    _check_file(args.dataset_config_file, "--dataset-config-file")
    _check_file(args.config_file, "--config-file")
    if args.dataset_config_file:
        _merge_file(cfg, args.dataset_config_file, "--dataset-config-file")
    if args.config_file:
        _merge_file(cfg, args.config_file, "--config-file")
    if args.root:
        cfg.DATASET.ROOT = args.root
    if args.output_dir:
        cfg.OUTPUT_DIR = args.output_dir
    if getattr(args, "output_root", ""):
        cfg.OUTPUT_ROOT = args.output_root
    if args.seed is not None:
        cfg.SEED = args.seed
    if args.trainer:
        cfg.TRAINER.NAME = trainer_name(args.trainer)
    if args.backbone:
        cfg.MODEL.BACKBONE.NAME = args.backbone
    opts = list(args.opts)
    if opts and opts[0] == "--":
        opts = opts[1:]
    if len(opts) % 2:
        raise ConfigError(f"overrides must be KEY VALUE pairs, got {opts}")
    try:
        cfg.merge_from_list(opts)
    except (KeyError, ValueError, AssertionError) as e:
        raise _yacs_error(e, "command-line override") from None
    cfg.DATASET.ROOT = os.path.expanduser(os.path.expandvars(cfg.DATASET.ROOT))
    # the config nodes of other declared methods (plug-ins) stay out of this run's fingerprint
    drop_foreign_nodes(cfg)
    check_cfg_values(cfg)
    cfg.freeze()
    return cfg


def build_trainer(cfg, plugins=()):
    """The trainer of ``cfg``; ``plugins`` (the ``--plugin`` modules, imported) are read by the run,
    so their files enter its fingerprint by content."""
    import argtca.trainers  # noqa: F401  (registration)
    if not cfg.TRAINER.NAME:
        raise SystemExit("error: no trainer: pass --trainer or a --config-file that sets "
                         "TRAINER.NAME")
    trainer = TRAINER_REGISTRY.get(cfg.TRAINER.NAME)(cfg)
    trainer.plugin_files = plugin_files(plugins)
    return trainer


def build_checked_trainer(cfg, plugins=()):
    """:func:`build_trainer`, what it prints (the engine notes, the CPU-time box) held back until
    the weights the run loads are known to be there, as table1's preflight checks them
    (argtca/models/run_checks.py ``weights_problems``): a missing file is one error line, with
    nothing before it."""
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        trainer = build_trainer(cfg, plugins)
    from argtca.models.run_checks import weights_problems
    problems = weights_problems(trainer)
    if problems:
        raise ConfigError("; ".join(problems))
    sys.stdout.write(out.getvalue())
    sys.stdout.flush()
    sys.stderr.write(err.getvalue())
    return trainer


def plugin_files(names) -> Dict[str, str]:
    """module name -> source file of each imported ``--plugin`` (a .py path or a module name)."""
    from argtca.plugins import loaded_plugin_files
    return loaded_plugin_files(names)


# Exit status of ``python -m argtca.run`` (README "What a run guarantees"):
EXIT_OK = 0
EXIT_INTERNAL = 1     # a bug: the traceback, then one line
# bad input or an unusable/unwritable output folder: one line naming the fix (argtca.errors)
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # Ctrl-C: one line saying how to resume


def _resume_hint(trainer, argv) -> str:
    import shlex
    where = ""
    if trainer is not None:
        try:
            where = f" in {os.path.join(trainer.output_dir(), 'records.jsonl')}"
        except Exception:  # no dataset yet: nothing recorded
            pass
    from argtca.utils.console import user_command
    return (f"the finished images are kept{where}; run the same command again to resume: "
            f"{user_command(f'python -m argtca.run {shlex.join(argv)}')}")


def _os_error_line(e: OSError, trainer, argv) -> str:
    import errno
    what = f"{e.filename}: {e.strerror}" if e.filename else str(e)
    if e.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT,
                   errno.EFBIG):
        return (f"error: cannot write {what}: free space or make the output folder writable "
                f"(or pass another --output-dir); {_resume_hint(trainer, argv)}")
    return f"error: {what}"


class PluginFailure(RuntimeError):
    """An exception raised inside a plug-in's code, named in one line (:func:`_name_the_plugin`)."""


def _name_the_plugin(e: Exception, trainer, args, argv) -> None:
    """Raise :class:`PluginFailure` naming the plug-in file when ``e`` was raised inside a
    ``--plugin`` file or the file of a plug-in method, adapter or objective the run uses: the
    error is the plug-in's, not argtca's (no "internal error" traceback)."""
    from argtca.plugins import PluginError
    from argtca.trainers.contract import MethodContractError, raised_in
    if isinstance(e, (PluginError, MethodContractError, PluginFailure)):
        return   # already one line naming it
    files = set(plugin_files(args.plugin).values())
    if trainer is not None:
        try:
            files |= {f for _, f in trainer.providers().values() if f}
        except Exception:   # noqa: BLE001 (the error being reported is the one to show)
            pass
    files = {os.path.realpath(f) for f in files}
    if not files or not raised_in(e, files):
        return
    tb, where = e.__traceback__, ""
    while tb is not None:   # the last frame in a plug-in file: where it failed
        if os.path.realpath(tb.tb_frame.f_code.co_filename) in files:
            where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    raise PluginFailure(f"the plug-in code at {where} failed: {type(e).__name__}: "
                        f"{msg.splitlines()[0] if msg else ''} (ARGTCA_DEBUG=1 shows the "
                        f"traceback); {_resume_hint(trainer, argv)}") from e


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    debug = bool(os.environ.get("ARGTCA_DEBUG"))
    from argtca.utils.console import quiet_third_party_warnings
    quiet_third_party_warnings()   # libraries' own deprecations: nothing the user can act on
    trainer = None
    try:
        from argtca.engine.distributed import world_size
        from argtca.trainers.distributed import distributed_test, said_once
        try:
            with said_once():   # under torchrun, an error every rank meets: rank 0's line alone
                if args.plugin:
                    from argtca.plugins import load_plugins
                    load_plugins(args.plugin)
                try:
                    cfg = setup_cfg(args)
                except AssertionError as e:  # yacs asserts on unknown keys on the command line
                    raise KeyError(f"{e}; every key and its default is in "
                                   f"argtca/config/defaults.py") from e
                trainer = build_checked_trainer(cfg, args.plugin)
            # under torchrun the test set is sharded over ranks, the records merged in order
            distributed_test(trainer) if world_size() > 1 else trainer.test()
        except Exception as e:
            if not debug:
                _name_the_plugin(e, trainer, args, argv)
            raise
    except KeyboardInterrupt:
        if debug:
            raise
        from argtca.utils.console import inside_command
        if not inside_command():   # else the command that runs this run says it, once
            print(f"interrupted: {_resume_hint(trainer, argv)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as e:   # setup's one-line errors (argparse exits by itself)
        if debug or not isinstance(e.code, str):
            raise
        print(e.code if e.code.startswith("error") else f"error: {e.code}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (KeyError, ValueError, FileNotFoundError, RuntimeError) as e:
        if debug:
            raise
        return print_bad_input(e)
    except OSError as e:   # read-only or full output folder, ...
        if debug:
            raise
        print(_os_error_line(e, trainer, argv), file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:
        if debug:
            raise
        import traceback
        traceback.print_exc()
        print(f"error: internal error ({type(e).__name__}: {e}); this is a bug, please report it "
              f"with the traceback above; {_resume_hint(trainer, argv)}", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
