"""The methods, as their trainer classes declare them: the one place that lists methods.

Every list of methods (``python -m argtca.run --trainer``, table1's ``--methods paper|zoo|all``,
``scripts/baseline.sh`` and ``compare.sh``, the zoo benchmark, the report's order of rows, the
value checks) is derived here from ``TRAINER_REGISTRY``, as Dassl's ``build_trainer`` asks its
registry. A registered trainer class declares (with ``argtca.plugins.method`` beside its class,
argtca's own methods and plug-ins alike):

* ``method``: its key (scripts, run folders, reports); ``label``: its display name;
* ``family``: a key of :data:`argtca.config.methods.FAMILIES` (zero-shot, TPT family,
  training-free, online, ArgTCA), written to summary.json, which groups the report's rows;
* its config node ``TRAINER.<NODE>`` (``defaults``: its keys with their facts; ``base_node``: the
  node its prompts and objective read, another method's) and its value checks (``cfg_ranges``,
  from its keys' facts); its default YAML ``configs/trainers/<method>.yaml`` (``config_file``:
  another);
* ``paper``: a row of the paper's Table 1; ``rows``: the names it adds to table1's method sets
  (default its key; ArgTCA: one per selector of the paper; none for a reference variant).

``python -m argtca.trainers.catalogue [--plugin MODULE] [--family F | --set paper|zoo|all]
[--sep ,]`` prints the names (the shell scripts read them so; ``--run-args METHOD``: the
arguments of ``python -m argtca.run`` that choose it).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import argtca.trainers  # noqa: F401  (registers the built-in trainers)
from argtca.config.methods import FAMILIES, find_trainer
from argtca.config.paths import configs_dir
from argtca.registry import TRAINER_REGISTRY


@dataclass(frozen=True)
class MethodInfo:
    method: str           # the key
    trainer: str          # TRAINER.NAME
    label: str
    family: str           # a key of FAMILIES
    node: str             # its config node, e.g. TRAINER.DMN
    config_file: Path     # its default YAML
    paper: bool
    rows: Tuple[str, ...]
    module: str           # where it is declared

    @property
    def family_title(self) -> str:
        return FAMILIES.get(self.family, "Other")


def _info(cls) -> MethodInfo:
    method = str(cls.method)
    node = str(getattr(cls, "base_node", "") or cls.__name__.upper())
    own = getattr(cls, "config_file", "")
    return MethodInfo(
        method=method, trainer=cls.__name__, label=str(cls.label),
        family=str(getattr(cls, "family", "tpt-family")), node=f"TRAINER.{node}",
        config_file=Path(own) if own else configs_dir() / "trainers" / f"{method}.yaml",
        paper=bool(getattr(cls, "paper", False)),
        rows=tuple(getattr(cls, "rows", (method,))), module=cls.__module__)


def catalogue() -> List[MethodInfo]:
    """Every registered method (plug-ins too, once imported), in table order: by family
    (FAMILIES' order; unknown families last), then by registration, a variant (a subclass of
    another registered method in the same family, e.g. TPT + TS) right after its base."""
    classes = TRAINER_REGISTRY.registered_objects()
    first = {cls: i for i, cls in enumerate(classes)}
    order = list(FAMILIES)

    def key(cls):
        fam = str(getattr(cls, "family", "tpt-family"))
        base = min((first[c] for c in cls.__mro__ if c in first
                    and getattr(c, "family", None) == fam), default=first[cls])
        return (order.index(fam) if fam in order else len(order), base, first[cls])

    return [_info(cls) for cls in sorted(classes, key=key)]


def method_names(family: Optional[str] = None) -> List[str]:
    """The method keys, in table order; ``family``: only that family's."""
    return [m.method for m in catalogue() if family is None or m.family == family]


def method_info(name: str) -> MethodInfo:
    """The declaration of ``name`` (a method key, a trainer name or an alias); KeyError listing the
    methods when there is none."""
    cls = find_trainer(name)
    if cls is None:
        raise KeyError(f"unknown method {name!r}; registered: {', '.join(method_names())}")
    return _info(cls)


def trainer_name(name: str) -> str:
    """TRAINER.NAME for a method key or trainer name (``name`` itself when none is registered:
    the registry's lookup then names the choices)."""
    cls = find_trainer(name)
    return cls.__name__ if cls is not None else name


def method_config_args(name: str) -> List[str]:
    """The ``python -m argtca.run`` arguments that choose the method ``name``: its default YAML
    (``--config-file``) where it has one, else ``--trainer`` (a plug-in declared with
    argtca.plugins.method: its node's defaults are its settings)."""
    try:
        info = method_info(name)
    except KeyError:   # the run names the registered methods
        return ["--config-file", str(configs_dir() / "trainers" / f"{name}.yaml")]
    if info.config_file.is_file():
        return ["--config-file", str(info.config_file)]
    return ["--trainer", info.method]


def method_sets() -> Dict[str, List[str]]:
    """table1's names that stand for a list in ``--methods``: ``paper`` (the paper's rows),
    ``zoo`` (the field's methods the paper does not run), ``all`` (both, in table order) and
    ``baselines`` (the paper's rows but ArgTCA's: the methods ``tune_baselines`` tunes)."""
    rows = [(r, m) for m in catalogue() for r in m.rows]
    return {"paper": [r for r, m in rows if m.paper],
            "zoo": [r for r, m in rows if not m.paper],
            "all": [r for r, _ in rows],
            "baselines": [r for r, m in rows if m.paper and m.family != "argtca"]}


def zoo_methods() -> List[str]:
    """The methods that tune no prompt (training-free and online): the zoo benchmark's."""
    return [m.method for m in catalogue() if m.family in ("training-free", "online")]


def main(argv=None) -> int:
    # options only as spelled in full: no shortened word is taken for --plugin
    p = argparse.ArgumentParser(prog="python -m argtca.trainers.catalogue",
                                description="Print the registered methods' keys.",
                                allow_abbrev=False)
    p.add_argument("--family", choices=list(FAMILIES), help="only this family's methods")
    p.add_argument("--exclude-family", choices=list(FAMILIES), help="all but this family's")
    p.add_argument("--set", choices=["paper", "zoo", "all", "baselines"],
                   help="table1's method set")
    p.add_argument("--sep", default=" ", help="separator (default: a space)")
    p.add_argument("--table", action="store_true", help="key, family and label of each method")
    p.add_argument("--run-args", metavar="METHOD", help="print, one per line, the arguments of "
                   "python -m argtca.run that choose METHOD (its YAML, or --trainer)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (its methods are listed too); repeatable")
    args = p.parse_args(argv)
    if args.plugin:
        from argtca.errors import print_bad_input
        from argtca.plugins import PluginError, load_plugins
        try:
            load_plugins(args.plugin)
        except PluginError as e:
            return print_bad_input(e)
    if args.run_args:
        print("\n".join(method_config_args(args.run_args)))
        return 0
    if args.table:
        for m in catalogue():
            print(f"{m.method:14} {m.family_title:14} {m.label}")
        return 0
    names = method_sets()[args.set] if args.set else method_names(args.family)
    if args.exclude_family:
        names = [n for n in names if n not in method_names(args.exclude_family)]
    print(args.sep.join(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
