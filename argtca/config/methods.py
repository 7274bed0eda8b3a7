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
