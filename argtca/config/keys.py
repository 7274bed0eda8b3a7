"""A configuration key's facts, declared once beside its default.

Every key of argtca's configuration is declared as a :class:`Key`: its default, its one-line
doc, its allowed spellings (``choices``) or value check (``check``, a :class:`Range`), whether it
can change a number (``numbers``: a key that cannot, such as the loader's workers or the output
folder, stays out of a run's fingerprint), its short name in report headers (``short``) and,
for the report, whether it is a property of the dataset (``dataset``: differs between datasets
by nature) or of the protocol (``protocol``: rows differing in it are never ranked against each
other), and whether only the methods that take a tuning step read it (``tuning``). The yacs tree
of defaults, the value checks (argtca/config/checks.py), the fingerprint's keys
(argtca/run_folder/fingerprint.py) and the report's classification and names
(argtca/report/identity.py) are all read from these declarations (:data:`KEYS`); a method's own
node declares its keys the same way, beside the method (``@method(..., defaults={...})``).

Modelled on open_clip's and timm's typed configs: one record per setting instead of a value in
one file, its check in another and its role in two more.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

__all__ = ["Key", "Range", "KEYS", "declare", "node_keys", "node_checks"]


@dataclass(frozen=True)
class Range:
    """A check of one key: ``ok(value)`` (``ok(value, node)`` with ``uses_node``) must hold;
    ``allowed`` says what is allowed (a text, or ``allowed(node, node_path)`` for a text naming
    another key's value); ``integer`` refuses a float."""
    ok: Callable[..., bool]
    allowed: Union[str, Callable[[Any, str], str]]
    integer: bool = False
    uses_node: bool = False


@dataclass(frozen=True)
class Key:
    """One configuration key's facts (see the module docstring)."""
    default: Any
    doc: str
    choices: Tuple[str, ...] = ()
    check: Optional[Range] = None
    numbers: bool = True
    short: str = ""
    dataset: bool = False
    protocol: bool = False
    # read only by the methods that take a tuning step (a trainer's ``tunes``): no number of
    # another method depends on it, so its runs' fingerprints leave it out
    tuning: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)

    def problems(self) -> list:
        """What the declaration lacks (a test refuses a key declared without its facts)."""
        out = []
        if not str(self.doc).strip():
            out.append("no doc")
        if self.choices and self.check is not None:
            out.append("both choices and a check")
        if self.choices and self.default not in self.choices:
            out.append(f"default {self.default!r} not among its choices")
        return out


# flat key ("TTA.N_VIEWS", "TRAINER.TDA.POS_ALPHA") -> its declaration, in declaration order
KEYS: Dict[str, Key] = {}


def declare(root, path: str, key: Key) -> Key:
    """Set ``path``'s default in the yacs tree ``root`` (creating its nodes) and record its
    facts in :data:`KEYS`. A key declared twice is an error naming it."""
    from yacs.config import CfgNode as CN
    if path in KEYS and KEYS[path] != key:
        raise KeyError(f"config key {path} is declared twice with other facts")
    *parents, last = path.split(".")
    node = root
    for part in parents:
        if part not in node:
            node[part] = CN()
        node = node[part]
    node[last] = key.default
    KEYS[path] = key
    return key


def node_keys(prefix: str, table: Dict[str, Any]) -> Dict[str, Key]:
    """A method node's ``defaults`` (key -> a :class:`Key`, a plain value, or a nested dict for
    a sub-node) as flat ``prefix.KEY`` -> :class:`Key`; a plain value (a plug-in's shorthand)
    is a key that changes numbers, with no doc."""
    out: Dict[str, Key] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(node_keys(f"{prefix}.{k}", v))
        else:
            out[f"{prefix}.{k}"] = v if isinstance(v, Key) else Key(v, "")
    return out


def node_checks(table: Dict[str, Any]) -> Dict[str, Any]:
    """The value checks of a method node's ``defaults`` (as :func:`node_keys` reads them): key
    relative to the node (``"GAT.HEADS"``) -> its Key's ``check`` (a :class:`Range`, which may
    read the node: ``uses_node``) or its ``choices``; the table argtca/config/checks.py runs."""
    out: Dict[str, Any] = {}
    for path, key in node_keys("", table).items():
        if key.check is not None:
            out[path[1:]] = key.check
        elif key.choices:
            out[path[1:]] = tuple(key.choices)
    return out
