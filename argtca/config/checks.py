"""The ranges of the configuration's values, checked before anything is loaded: one
:class:`ConfigError` line lists every bad key with its value and what is allowed."""
from __future__ import annotations

import math
from typing import Dict, Iterator, Tuple, Union

from argtca.config import defaults as _defaults  # noqa: F401  (declares every key first)
from argtca.config.keys import KEYS, Range  # noqa: F401  (Range: a method's checks use it)
from argtca.config.methods import find_trainer, node_of
from argtca.registry import ENGINE_REGISTRY, TRAINER_REGISTRY


class ConfigError(ValueError):
    """A configuration value outside its range: the message names the key, the value and what
    is allowed."""


# keys with a closed set of spellings (exact, lower case: the code compares them as written),
# from their declarations (argtca/config/defaults.py); a method's own keys are in its table
# (:func:`method_tables`)
CFG_CHOICES = {k: key.choices for k, key in KEYS.items() if key.choices}
_AUGMIX = ("auto", "on", "off", "true", "false", "1", "0")


def _get(cfg, key: str):
    node = cfg
    for part in key.split("."):
        if not hasattr(node, "get") or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def _trainer_tunes(name):
    """The ``tunes`` of the registered trainer ``name`` (a trainer or method name); None when no
    trainer of that name is registered (yet)."""
    cls = find_trainer("" if name is _MISSING else name)
    return None if cls is None else bool(getattr(cls, "tunes", True))




# a method's table: key relative to its node (e.g. "POS_ALPHA", "GAT.HEADS") -> a Range, or a
# tuple of the allowed spellings
Table = Dict[str, Union[Range, Tuple[str, ...]]]


def method_tables() -> Iterator[Tuple[str, Table]]:
    """(node path, table) of every registered trainer that declares checks, in registration
    order: a trainer's ``cfg_ranges`` (a dict, or a classmethod returning one; a method declared
    with argtca.plugins.method: derived from its node's Keys) covers its node ``TRAINER.<NODE>``
    (argtca/config/methods.py ``node_of``); ``cfg_node_ranges`` (node path -> table) covers
    other nodes. A node's key checked by several trainers is checked once."""
    for cls in TRAINER_REGISTRY.registered_objects():
        own = getattr(cls, "cfg_ranges", None)
        own = own() if callable(own) else own
        if own:
            yield f"TRAINER.{node_of(cls)}", own
        for node, table in (getattr(cls, "cfg_node_ranges", None) or {}).items():
            yield node, table


# the ranges of the keys every method shares, from their declarations (those that depend on
# whether the method tunes prompts are in check_cfg_values)
SHARED_RANGES = {k: key.check for k, key in KEYS.items() if key.check is not None}


def _pixel_errors(cfg) -> list:
    errors = []
    for key in ("INPUT.PIXEL_MEAN", "INPUT.PIXEL_STD"):
        v = _get(cfg, key)
        if v is _MISSING:
            continue
        vals = list(v) if isinstance(v, (list, tuple)) else [v]
        ok = len(vals) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                    and math.isfinite(x) for x in vals)
        if ok and key.endswith("STD"):
            ok = min(vals) > 0
        if not ok:
            each = ", each > 0" if key.endswith("STD") else ""
            errors.append(f"{key}={v!r} (allowed: 3 finite numbers{each})")
    return errors


def _check_table(cfg, node_path: str, table: Table, num, errors, seen=None) -> None:
    """``table``'s checks of the keys under ``node_path`` ("" for full keys) of ``cfg``; a key in
    ``seen`` is skipped (checked already)."""
    node = _get(cfg, node_path) if node_path else cfg
    if node is _MISSING:
        return
    for rel, check in table.items():
        key = f"{node_path}.{rel}" if node_path else rel
        if seen is not None:
            if key in seen:
                continue
            seen.add(key)
        v = _get(cfg, key)
        if v is _MISSING:
            continue
        if isinstance(check, tuple):
            if v not in check:
                errors.append(f"{key}={v!r} (allowed: {', '.join(check)})")
            continue
        allowed = check.allowed(node, node_path) if callable(check.allowed) else check.allowed
        ok = (lambda x, check=check: check.ok(x, node)) if check.uses_node else check.ok
        num(key, ok, allowed, check.integer)


def _check_method_tables(cfg, num, errors) -> None:
    """Each registered method's table (:func:`method_tables`) on the configuration ``cfg``."""
    seen: set = set()
    for node_path, table in method_tables():
        _check_table(cfg, node_path, table, num, errors, seen)


def check_cfg_values(cfg, tunes=None) -> None:
    """Refuse out-of-range values before anything is loaded; one :class:`ConfigError` line listing
    every bad key with its value and the allowed range.

    ``tunes``: whether the run tunes prompts (every method but zero-shot CLIP); ``None`` reads it
    from the ``tunes`` of the trainer ``TRAINER.NAME`` names. Tuned runs need ``TTA.STEPS >= 1``
    and ``TTA.N_VIEWS >= 2`` (the confident-view selection needs views to choose from); zero-shot
    ignores both. ``TTA.ENGINE`` is "auto" or a registered engine. Each registered method's own
    table (its ``cfg_ranges``, :func:`method_tables`) checks its node. Names are looked up in the
    registries as they stand: before the trainers and engines are imported (``argtca.trainers``
    imports both), only the checks that hold for every trainer and engine run; the trainer runs
    this again, with its own ``tunes``, before it loads anything. Keys a configuration lacks
    (e.g. a Dassl config without argtca's nodes) are skipped.
    """
    if tunes is None:
        tunes = _trainer_tunes(_get(cfg, "TRAINER.NAME"))
    errors = []

    def num(key, ok, allowed, integer=False):
        v = _get(cfg, key)
        if v is _MISSING:
            return
        bad_type = isinstance(v, bool) or not isinstance(v, (int, float)) or (
            integer and not isinstance(v, int))
        if bad_type or not math.isfinite(v) or not ok(v):
            errors.append(f"{key}={v!r} (allowed: {allowed})")

    for key, choices in CFG_CHOICES.items():
        v = _get(cfg, key)
        if v is not _MISSING and v not in choices:
            errors.append(f"{key}={v!r} (allowed: {', '.join(choices)})")
    engine = _get(cfg, "TTA.ENGINE")
    engines = ("auto",) + tuple(n.lower() for n in ENGINE_REGISTRY.registered_names())
    if engine is not _MISSING and len(engines) > 1 and engine not in engines:
        errors.append(f"TTA.ENGINE={engine!r} (allowed: {', '.join(engines)})")
    aug = _get(cfg, "TTA.AUGMIX")
    if (aug is not _MISSING and not isinstance(aug, bool)
            and str(aug).strip().lower() not in _AUGMIX):
        errors.append(f"TTA.AUGMIX={aug!r} (allowed: auto, on, off)")

    errors += _pixel_errors(cfg)
    num("TTA.N_VIEWS", (lambda v: v >= 2) if tunes else (lambda v: v >= 1),
        ">= 2 for tuned methods (view 0 plus augmented views to select from)" if tunes else ">= 1",
        True)
    num("TTA.SELECTION_P", lambda v: 0 < v <= 1, "(0, 1], the fraction of views kept; TPT: 0.1")
    if tunes:
        num("TTA.STEPS", lambda v: v >= 1, ">= 1 for tuned methods (0 steps is zero-shot: use "
            "the zeroshot trainer)", True)
        num("TTA.LR", lambda v: v > 0, "> 0")
    else:
        num("TTA.STEPS", lambda v: v >= 0, ">= 0", True)
    if (aug is _MISSING or isinstance(aug, bool)
            or str(aug).strip().lower() not in ("off", "false", "0")):
        num("TTA.AUGMIX_SEVERITY", lambda v: v > 0.1, "> 0.1 (AugMix levels are drawn from "
            "U(0.1, severity)); TPT: 1")
    _check_table(cfg, "", SHARED_RANGES, num, errors)
    _check_method_tables(cfg, num, errors)
    if errors:
        raise ConfigError("configuration value out of range: " + "; ".join(errors)
                          + " (each key is declared with its default and range beside it: the "
                          "global keys in argtca/config/defaults.py, a method's beside the "
                          "method, e.g. argtca/adapters/tda.py)")
