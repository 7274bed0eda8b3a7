"""A selector resolved once from its name, and the one check of what it returns.

:func:`argtca.selectors.resolve_selector` turns ``TRAINER.ARGTCA.SELECTOR`` into a
:class:`Selector`: the registered function, the traits it declared when it registered
(``needs_graph``: whether it reads the node embeddings, so whether Phase 1 trains the GAT at all;
``repeats``: whether it may pick one node twice, as ``tca`` does to keep TCA's repeated
attributes) and who provided it (a built-in module of this package or a plug-in file). Calling
the object runs the function and checks its answer against the selector contract (package
docstring) before anything uses it: a wrong answer stops the run with one line naming the
selector, its file, the class and what was wrong, instead of prompts built from another class's
attributes.
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from argtca.selectors._common import SelectorError

__all__ = ["Selector", "check_selection", "TRAITS"]

# what a selector may declare in register(); anything else is a typo that would be ignored
TRAITS = {"needs_graph": True, "repeats": False}
_BUILTIN = __name__.rsplit(".", 1)[0] + "."

Entry = Tuple[int, float]  # (node, score) or (node, score, attribute text)


@dataclass(frozen=True)
class Selector:
    name: str                 # as registered (lower case: TRAINER.ARGTCA.SELECTOR's spelling)
    fn: Callable[..., Any]
    needs_graph: bool = True  # reads the embeddings: Phase 1 builds and trains the graph
    repeats: bool = False     # may choose one node twice (TCA's file order keeps repeats)
    module: str = ""
    file: str = ""

    @property
    def builtin(self) -> bool:
        return self.module.startswith(_BUILTIN)

    @property
    def who(self) -> str:
        """How errors name it: ``selector "div"`` plus the plug-in file for plug-ins."""
        return (f'selector "{self.name}"' if self.builtin else
                f'selector "{self.name}" (plug-in {self.file or self.module})')

    def describe(self) -> Dict[str, Any]:
        """What phase1.json and summary.json record about the selector that ran."""
        return {"name": self.name, "builtin": self.builtin, "module": self.module,
                "file": self.file, "needs_graph": self.needs_graph}

    def __call__(self, emb: Optional[Tensor], node_class: Tensor, attrs: Sequence[str],
                 m_prime: int, classnames: Optional[Sequence[str]] = None, **kw
                 ) -> Dict[int, List[tuple]]:
        """Run the selector and return its checked answer with plain Python types (see
        :func:`check_selection`). A plug-in that raises is named in the error; the built-ins'
        own errors pass through."""
        try:
            sel = self.fn(emb, node_class, attrs, m_prime, **kw)
        except SelectorError:
            raise
        except Exception as e:  # noqa: BLE001 (third-party code: one line naming its file)
            if self.builtin:
                raise
            raise SelectorError(f"{self.who} failed: {type(e).__name__}: {e}") from e
        return check_selection(sel, node_class, attrs, m_prime, classnames=classnames,
                               who=self.who, repeats=self.repeats)


def _index(x: Any) -> Optional[int]:
    """``x`` as an int when it is an integer (Python, numpy or a 0-d integer tensor), else None."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def _number(x: Any) -> Optional[float]:
    if isinstance(x, bool):
        return None
    if isinstance(x, Tensor) and x.numel() == 1:
        x = x.item()
    return float(x) if isinstance(x, numbers.Real) else None


def check_selection(sel: Any, node_class: Tensor, attrs: Sequence[str], m_prime: int,
                    classnames: Optional[Sequence[str]] = None, who: str = "selector",
                    repeats: bool = False) -> Dict[int, List[tuple]]:
    """Check a selector's answer and return it as ``{class index: [(node, score[, text])]}`` with
    Python ints, finite floats and strings, classes in index order.

    The contract: a mapping with exactly one entry per class index 0..K-1, each a list of exactly
    M' pairs (node, score) or triples (node, score, attribute text); a node is an integer index of
    a node of THAT class (0 <= node < N), chosen at most once unless the selector declared
    ``repeats``; a score is a finite real number; a text is a non-empty string. The first
    violation raises :class:`SelectorError` naming ``who``, the class and what was wrong.
    """
    node_class = torch.as_tensor(node_class, dtype=torch.long).cpu()
    n = int(node_class.numel())
    k_total = int(node_class.max()) + 1 if n else 0
    owner_of = node_class.tolist()

    def cls(k: int) -> str:
        name = classnames[k] if classnames is not None and 0 <= k < len(classnames) else None
        return f"class {name!r} (index {k})" if name is not None else f"class {k}"

    def fail(where: str, what: str) -> SelectorError:
        return SelectorError(f"{who}: {where}: {what}; a selector returns, for every class "
                             f"index, M'={m_prime} (node, score) pairs of that class's nodes")

    if not isinstance(sel, Mapping):
        raise fail("its answer", f"got {type(sel).__name__}"
                   + ("" if sel is None else f" {_short(sel)}") + ", not a dict")
    out: Dict[int, List[tuple]] = {}
    for key, entries in sel.items():
        k = _index(key)
        if k is None or not 0 <= k < k_total:
            raise fail(f"key {key!r}", f"not a class index (there are {k_total} classes, "
                       f"0..{k_total - 1})")
        if k in out:
            raise fail(cls(k), "given twice")
        if entries is None or isinstance(entries, (str, bytes)) or \
                not isinstance(entries, Sequence):
            raise fail(cls(k), f"got {type(entries).__name__} {_short(entries)}, not a list "
                       f"of (node, score) pairs")
        if len(entries) != m_prime:
            raise fail(cls(k), f"{len(entries)} node(s) chosen, not M'={m_prime}")
        picked: List[tuple] = []
        seen = set()
        for pos, e in enumerate(entries):
            where = f"{cls(k)}, entry {pos}"
            if isinstance(e, (str, bytes)) or not isinstance(e, (Sequence, Tensor)) or \
                    len(e) not in (2, 3):
                raise fail(where, f"{_short(e)} is not a (node, score) pair")
            i = _index(e[0])
            if i is None:
                raise fail(where, f"node {_short(e[0])} is not an integer index")
            if i < 0:
                raise fail(where, f"node {i} is negative (nodes are 0..{n - 1})")
            if i >= n:
                raise fail(where, f"node {i} is out of range (the graph has {n} nodes, "
                           f"0..{n - 1})")
            if owner_of[i] != k:
                raise fail(where, f"node {i} ({attrs[i]!r}) belongs to {cls(owner_of[i])}")
            if i in seen and not repeats:
                raise fail(where, f"node {i} ({attrs[i]!r}) chosen twice")
            seen.add(i)
            s = _number(e[1])
            if s is None:
                raise fail(where, f"score {_short(e[1])} is not a number")
            if not math.isfinite(s):
                raise fail(where, f"score of node {i} is {s} (scores must be finite)")
            if len(e) == 3:
                if not isinstance(e[2], str) or not e[2].strip():
                    raise fail(where, f"attribute text {_short(e[2])} is not a non-empty string")
                picked.append((i, s, e[2]))
            else:
                picked.append((i, s))
        out[k] = picked
    missing = [k for k in range(k_total) if k not in out]
    if missing:
        raise fail(", ".join(cls(k) for k in missing[:5])
                   + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
                   "left out (no entry in the answer)")
    return {k: out[k] for k in range(k_total)}


def _short(x: Any, limit: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[:limit - 3] + "..."
