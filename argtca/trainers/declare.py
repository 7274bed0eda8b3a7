"""The trainer a method declaration makes (``argtca.plugins.method``): an adapter's a
:class:`~argtca.trainers.zoo.FeatureTrainer` or ``StreamTrainer``, an objective's a
:class:`~argtca.trainers.base.TestTimeTrainer`, a trainer class registered as itself. Installed
as the registry's method factory when the trainers load (argtca/registry.py
``set_method_factory``), so that declaring a method imports nothing above the registry."""
from __future__ import annotations

import inspect
import re
from typing import Any, Dict

from argtca.registry import PluginError

__all__ = ["declare", "TRAITS"]

_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_NODE = re.compile(r"^[A-Z][A-Z0-9_]*$")

TRAITS = ("tunes", "aliases", "rows", "base_node", "reads_nodes")


def declare(cls, key, label, family, defaults, paper, override, trainer, node, traits) -> None:
    """Make and register the trainer of a method declared with argtca.plugins.method (the
    registry's method factory, installed when the trainers load)."""
    from argtca.config.keys import node_checks
    from argtca.config.methods import FAMILIES, find_trainer
    from argtca.registry import TRAINER_REGISTRY
    from argtca.trainers.base import TestTimeTrainer

    where = f"method {key!r} ({cls.__module__}.{cls.__qualname__})"
    if not isinstance(key, str) or not _KEY.match(key):
        raise PluginError(f"{where}: the key must be lower-case letters, digits and _ starting "
                          f"with a letter (it names run folders and --methods rows)")
    own_trainer = inspect.isclass(cls) and issubclass(cls, TestTimeTrainer)
    if not own_trainer:   # imported only here: a trainer module declaring its methods needs none
        from argtca.adapters.base import Adapter
        from argtca.engine.objectives import Objective
        if not inspect.isclass(cls) or not issubclass(cls, (Adapter, Objective)):
            raise PluginError(f"{where}: @method declares a subclass of argtca.adapters.Adapter "
                              f"(training-free or online), argtca.engine.objectives.Objective "
                              f"(prompt tuning) or argtca.trainers.TestTimeTrainer (its own "
                              f"trainer logic), not {cls!r}")
    adapter = not own_trainer and issubclass(cls, Adapter)
    online = adapter and bool(getattr(cls, "online", False))
    family = family or (getattr(cls, "family", "tpt-family") if own_trainer else "online"
                        if online else "training-free" if adapter else "tpt-family")
    if family not in FAMILIES:
        raise PluginError(f"{where}: family {family!r} is not one of {', '.join(FAMILIES)}")
    if adapter and family not in ("training-free", "online"):
        raise PluginError(f"{where}: an adapter is a training-free or online method, not "
                          f"family {family!r}")
    if defaults is not None and not isinstance(defaults, dict):
        raise PluginError(f"{where}: defaults must be a dict of the node's keys, got "
                          f"{type(defaults).__name__}")
    unknown = sorted(set(traits) - set(TRAITS))
    if unknown:
        raise PluginError(f"{where}: unknown argument(s) {', '.join(unknown)} (traits: "
                          f"{', '.join(TRAITS)})")
    name = str(trainer or (cls.__name__ if own_trainer else key.upper()))
    if own_trainer and name != cls.__name__:
        raise PluginError(f"{where}: a trainer class is registered under its class name "
                          f"{cls.__name__!r}, not trainer={name!r}")
    node = str(node or name.upper())
    if not _NODE.match(node):
        raise PluginError(f"{where}: node {node!r} must be upper-case letters, digits and _ "
                          f"(it is the config node TRAINER.<NODE>)")
    defaults = dict(defaults or {})
    # the node's value checks: its keys' facts, and the class's own table (a plug-in's shorthand)
    checks = {**node_checks(defaults), **dict(cls.__dict__.get("cfg_ranges") or {})}
    attrs: Dict[str, Any] = {
        "method": key, "label": str(label or key), "family": family, "defaults": defaults,
        "node_name": node, "cfg_ranges": checks, **traits}
    if paper is not None or not own_trainer:
        attrs["paper"] = bool(paper)
    taken = find_trainer(key)
    if taken is not None and taken is not cls and not override:
        raise PluginError(f"{where}: the method key {key!r} is taken by the trainer "
                          f"{taken.__module__}.{taken.__qualname__}; choose another key, or "
                          f"pass override=True to replace it on purpose")
    try:
        if own_trainer:
            for attr, value in attrs.items():
                setattr(cls, attr, value)
            TRAINER_REGISTRY.register(cls, override=override)
            return
        from argtca.registry import ADAPTER_REGISTRY, OBJECTIVE_REGISTRY
        if adapter:
            from argtca.trainers.zoo import FeatureTrainer, StreamTrainer
            ADAPTER_REGISTRY.register(cls, name=key, override=override)
            base = StreamTrainer if online else FeatureTrainer
            attrs["adapter_name"] = key
            attrs.setdefault("tunes", bool(getattr(cls, "tunes", False)))
        else:
            OBJECTIVE_REGISTRY.register(cls, name=key, override=override)
            base = TestTimeTrainer
            attrs["objective_name"] = key
        attrs.update({"__module__": cls.__module__, "__qualname__": name,
                      "__doc__": cls.__doc__ or f"The method {key} ({cls.__qualname__})."})
        TRAINER_REGISTRY.register(type(name, (base,), attrs), override=override)
    except KeyError as e:   # the registry's "already registered by ..." line
        raise PluginError(f"{where}: {e.args[0] if e.args else e}") from None
