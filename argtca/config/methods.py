"""What the configuration knows about methods, read from the trainer registry as it stands: the
families a method declares (their keys and table titles, in table order) and the registered trainer
a name means. No method is named here: each trainer class declares its own ``method``, ``label``,
``family`` and value checks, and argtca/trainers/catalogue.py lists them (it imports the built-in
trainers; this module does not, so that the configuration stays below the trainers)."""
from __future__ import annotations

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


def declared_nodes():
    """(node name, defaults dict, class) of every registered trainer that declares its config node
    itself (``defaults``: a method declared with argtca.plugins.method, a plug-in's or a new
    built-in's), in registration order; the nodes of argtca/config/defaults.py declare none."""
    for cls in TRAINER_REGISTRY.registered_objects():
        own = cls.__dict__.get("defaults")
        if isinstance(own, dict):
            yield cls.__name__.upper(), own, cls


def declared_key(path: str):
    """The :class:`~argtca.config.keys.Key` of a flat key ``TRAINER.<NODE>.<KEY>`` that a
    registered method declares in its ``defaults`` (None when none does)."""
    from argtca.config.keys import node_keys
    for name, own, _ in declared_nodes():
        if path.startswith(f"TRAINER.{name}."):
            found = node_keys(f"TRAINER.{name}", own).get(path)
            if found is not None:
                return found
    return None


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
                else:
                    dst[k] = v
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
    """Remove from ``cfg`` (not frozen) the declared nodes of the methods other than ``keep``
    (default: the trainer ``TRAINER.NAME`` names), so that what happens to be imported (a
    plug-in, an installed package's methods) never enters another method's fingerprint."""
    keep = keep if keep is not None else find_trainer(cfg.TRAINER.get("NAME", ""))
    own = getattr(keep, "__name__", "").upper()
    for name, _, _ in list(declared_nodes()):
        if name != own and name in cfg.TRAINER:
            del cfg.TRAINER[name]
