"""What the configuration knows about methods, read from the trainer registry as it stands: the
families a method declares (their keys and table titles, in table order) and the registered trainer
a name means. No method is named here: each trainer class declares its own ``method``, ``label``,
``family`` and value checks, and argtca/trainers/catalogue.py lists them (it imports the built-in
trainers; this module does not, so that the configuration stays below the trainers)."""
from __future__ import annotations

import copy
from typing import Optional

from argtca.registry import TRAINER_REGISTRY

# family key (a trainer's ``family``, written to summary.json) -> the title of its group of rows,
# in the order a table shows the groups
FAMILIES = {
    "zero-shot": "Zero-shot",
    "tpt-family": "TPT family",
    "training-free": "Training-free",
    "online": "Online",
    "argtca": "ArgTCA",
}


def trainer_names(cls) -> tuple:
    """The names ``cls`` answers to, lower case: its class name, its method key and its
    ``aliases`` (e.g. its name under Dassl)."""
    names = (cls.__name__, getattr(cls, "method", ""), *getattr(cls, "aliases", ()))
    return tuple(dict.fromkeys(str(n).lower() for n in names if n))


def find_trainer(name) -> Optional[type]:
    """The registered trainer class that ``name`` (a trainer name such as ``DMN``, a method key
    such as ``dmn``, or an alias) means; None when none of the registered ones does. A trainer
    name wins over another trainer's method key."""
    name = str(name or "").strip()
    if not name:
        return None
    if name in TRAINER_REGISTRY:
        return TRAINER_REGISTRY.get(name)
    return next((cls for cls in TRAINER_REGISTRY.registered_objects()
                 if name.lower() in trainer_names(cls)), None)


def node_of(cls) -> str:
    """The config node ``TRAINER.<NODE>`` a trainer class declares (``node_name``, set by
    argtca.plugins.method); a subclass that declares none has its class name's, upper-cased."""
    return str(cls.__dict__.get("node_name") or cls.__name__.upper())


def declared_nodes():
    """(node name, defaults dict, class) of every registered trainer that declares its config node
    (``defaults``, given to argtca.plugins.method: argtca's own methods and plug-ins alike), in
    registration order; a node two methods share (TRAINER.TS) comes once a method."""
    for cls in TRAINER_REGISTRY.registered_objects():
        own = cls.__dict__.get("defaults")
        if isinstance(own, dict):
            yield node_of(cls), own, cls


def declared_key(path: str):
    """The :class:`~argtca.config.keys.Key` of a flat key ``TRAINER.<NODE>.<KEY>`` that a
    registered method declares in its ``defaults`` (None when none does)."""
    parts = str(path).split(".")
    if len(parts) < 3 or parts[0] != "TRAINER":
        return None
    from argtca.config.keys import node_keys
    for name, own, _ in declared_nodes():
        if name == parts[1]:
            found = node_keys(f"TRAINER.{name}", own).get(path)
            if found is not None:
                return found
    return None


def key_facts(path: str):
    """The :class:`~argtca.config.keys.Key` of a flat key: a global key's (argtca/config/
    defaults.py), or a method node's once its method is registered; None for one nobody
    declared."""
    from argtca.config.keys import KEYS
    if path in KEYS:
        return KEYS[path]
    return declared_key(path)


def add_declared_nodes(cfg) -> None:
    """Add each declared node (:func:`declared_nodes`) to ``cfg.TRAINER``; a key already there
    keeps its value (a plug-in never changes a default of argtca's)."""
    from yacs.config import CfgNode as CN

    from argtca.config.keys import Key

    def merge(dst, src):
        for k, v in src.items():
            if isinstance(v, Key):   # a declared key's facts: its default is the value
                v = v.default
            if k not in dst:
                if isinstance(v, dict):
                    dst[k] = CN()
                    merge(dst[k], v)
                else:   # a copy: a run's list value is never the declaration's
                    dst[k] = copy.deepcopy(v)
            elif isinstance(v, dict) and isinstance(dst[k], CN):
                merge(dst[k], v)

    trainer = cfg.get("TRAINER")
    if trainer is None:
        return
    for name, own, _ in declared_nodes():
        if name not in trainer:
            trainer[name] = CN()
        merge(trainer[name], own)


def drop_foreign_nodes(cfg, keep=None) -> None:
    """Remove from ``cfg`` (not frozen) the nodes of the methods from outside argtca (a
    plug-in, an installed package's) other than those ``keep`` (default: the trainer
    ``TRAINER.NAME`` names) reads, so that what happens to be imported never enters another
    method's configuration; argtca's own nodes stay, as every node of its defaults always has."""
    keep = keep if keep is not None else find_trainer(cfg.TRAINER.get("NAME", ""))
    read = set()
    if keep is not None:
        read = {node_of(keep)}
        if hasattr(keep, "config_nodes"):
            read.update(keep.config_nodes(cfg))
    for name, _, cls in list(declared_nodes()):
        builtin = str(cls.__module__) == "argtca" or str(cls.__module__).startswith("argtca.")
        if not builtin and name not in read and name in cfg.TRAINER:
            del cfg.TRAINER[name]
