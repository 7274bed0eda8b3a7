"""Attribute vocabularies in the TCA authors' format.

File format (``rhebbalaguppe/TCA_PromptWithoutPanic``, folder ``TCA/Attributes``,
``<Dataset>_2_V.json``): one JSON object, class name -> one string of space-separated attributes,
most relevant first; multi-word attributes are hyphenated ("big-cat").

The lists are LLM output and noisy (repeats, "None", the class name itself). ``dedupe=True`` drops
repeated attributes of a class (first occurrence kept, compared after lower-casing and trimming);
nothing else is filtered.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, List, Sequence

from argtca.datasets import resolve_dataset_class
from argtca import fetch
from argtca.utils.paths import resolve_builtin

__all__ = ["AttributeFileError", "load_attributes", "attribute_file_hash", "normalize_attribute",
           "dedupe_attributes", "attribute_file_for"]

_WHERE = ("TCA attribute files come from the TCA authors' repository "
          "rhebbalaguppe/TCA_PromptWithoutPanic, folder TCA/Attributes, file <Dataset>_2_V.json "
          "(e.g. Caltech101_2_V.json)")


class AttributeFileError(ValueError):
    """Bad attribute file: the message names the file, the offending value and the fix."""


def normalize_attribute(attr: str) -> str:
    """The comparison form of an attribute: trimmed and lower-cased."""
    return attr.strip().lower()


def _normalize_class(name: str) -> str:
    return " ".join(name.replace("_", " ").lower().split())


def dedupe_attributes(attrs: Sequence[str]) -> List[str]:
    """Drop repeats (compared with :func:`normalize_attribute`), keeping the first occurrence."""
    seen, out = set(), []
    for a in attrs:
        key = normalize_attribute(a)
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


def attribute_file_hash(path: str) -> str:
    """sha256 (hex) of the file's bytes, for cache keys."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _short(value, n: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n - 4] + "...'"


def _no_duplicate_keys(path: str):
    """``json.load`` hook: a key given twice with different values is an error (``json`` would
    keep the last one silently); an exact repeat is harmless and kept once."""
    def hook(pairs):
        out = {}
        for k, v in pairs:
            if k in out and out[k] != v:
                raise AttributeFileError(
                    f"attribute file {path!r}: class {k!r} is given twice, as {_short(out[k])} "
                    f"and as {_short(v)}; keep one entry per class.")
            out[k] = v
        return out
    return hook


def _check_same_class_twice(path: str, data: Dict[str, str]) -> None:
    """Two keys naming the same class once case and ``_`` are ignored ("Cat", "cat") must agree:
    a dataset class would otherwise get whichever the lookup meets first."""
    seen: Dict[str, str] = {}
    for k, v in data.items():
        norm = _normalize_class(k)
        if norm in seen and data[seen[norm]].split() != v.split():
            raise AttributeFileError(
                f"attribute file {path!r}: keys {seen[norm]!r} and {k!r} name the same class "
                f"(case and '_' are ignored when matching) but differ: {_short(data[seen[norm]])} "
                f"vs {_short(v)}; keep one of them.")
        seen.setdefault(norm, k)


def load_attributes(path: str, classnames: Sequence[str], num_required: int,
                    dedupe: bool = False) -> Dict[str, List[str]]:
    """Read a TCA attribute file and return ``{classname: [attr, ...]}`` for ``classnames``.

    Keys of the result are the names in ``classnames`` (in that order). A class is looked up by its
    exact key first, then case-insensitively with ``_`` read as a space. Every class must have at
    least ``num_required`` attributes (counted after de-duplication when ``dedupe``); otherwise,
    and for a missing/empty path, invalid JSON, a value that is not a string, or classes absent from
    the file, :class:`AttributeFileError` is raised naming the file, the value and the fix.
    """
    if not path:
        raise AttributeFileError(
            "no attribute file given (DATASET.ATTRIBUTE_FILE is empty). " + _WHERE
            + "; download the file of your dataset and set DATASET.ATTRIBUTE_FILE to its path.")
    if not os.path.isfile(path):
        raise AttributeFileError(
            f"attribute file not found: {path!r}. Fix DATASET.ATTRIBUTE_FILE. " + _WHERE + ".")
    try:
        from argtca.utils.hashing import read_input   # the bytes used, noted for the run
        data = json.loads(read_input(path, log=True).decode("utf-8"),
                          object_pairs_hook=_no_duplicate_keys(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AttributeFileError(
            f"attribute file {path!r} is not valid JSON ({e}); re-download it. " + _WHERE + "."
        ) from e
    if not isinstance(data, dict):
        raise AttributeFileError(
            f"attribute file {path!r} must hold one JSON object (class name -> string of "
            f"space-separated attributes) but holds a {type(data).__name__}; use a TCA-format "
            f"file. " + _WHERE + ".")
    bad = [k for k, v in data.items() if not isinstance(v, str)]
    if bad:
        shown = ", ".join(f"{k!r}: {type(data[k]).__name__}" for k in bad[:10])
        more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
        raise AttributeFileError(
            f"attribute file {path!r}: every value must be one string of space-separated "
            f"attributes, but these are not strings: {shown}{more}. Fix the file (TCA format).")
    _check_same_class_twice(path, data)
    if num_required < 1:
        raise AttributeFileError(f"num_required must be >= 1, got {num_required}")

    by_norm: Dict[str, str] = {}
    for k in data:  # first key wins when two keys normalise to the same name
        by_norm.setdefault(_normalize_class(k), k)
    result: Dict[str, List[str]] = {}
    missing: List[str] = []
    for name in classnames:
        key = name if name in data else by_norm.get(_normalize_class(name))
        if key is None:
            missing.append(name)
            continue
        attrs = data[key].split()
        result[name] = dedupe_attributes(attrs) if dedupe else attrs
    if missing:
        raise AttributeFileError(
            f"attribute file {path!r} has no entry for {len(missing)} of the {len(classnames)} "
            f"classes of the dataset: {', '.join(repr(m) for m in missing)}. Use the attribute "
            f"file of this dataset (keys are class names, matched exactly, then case-insensitively "
            f"with '_' as space) or add these classes to it.")
    short = [(n, len(a)) for n, a in result.items() if len(a) < num_required]
    if short:
        what = "distinct attributes" if dedupe else "attributes"
        listed = ", ".join(f"{n!r} has {c}" for n, c in short)
        raise AttributeFileError(
            f"attribute file {path!r}: {num_required} {what} per class are needed but {listed}. "
            f"Add attributes to these classes or lower the number requested "
            f"(TRAINER.TCA.NUM_ATTRIBUTES or TRAINER.ARGTCA.NUM_ATTRIBUTES, M'; ArgTCA's graph "
            f"takes up to NUM_CANDIDATES and needs only M' distinct per class).")
    return result


def attribute_file_for(cfg) -> str:
    """``DATASET.ATTRIBUTE_FILE`` when set (``builtin:`` resolved), else the TCA authors' file for
    ``DATASET.NAME``, fetched on first use."""
    given = str(cfg.DATASET.ATTRIBUTE_FILE or "").strip()
    name = str(cfg.DATASET.NAME or "").strip()
    try:
        name = resolve_dataset_class(name).__name__
    except KeyError:
        pass
    key = "imagefolder" if name == "ImageFolder" else name
    make = (f"python -m argtca.attributes generate --dataset {key} --root $DATA --out "
            f"attributes.json (docs/own-data.md)")
    if given:
        path = resolve_builtin(os.path.expanduser(given))
        if name == "ImageFolder" and not os.path.isfile(path):   # one's own file, not TCA's
            raise AttributeFileError(f"DATASET.ATTRIBUTE_FILE={given!r}: {path} not found; give "
                                     f"your image folder's attribute file or make one: {make}")
        return path
    if name == "ImageFolder":
        raise AttributeFileError(f"DATASET.ATTRIBUTE_FILE is empty: the classes of your image "
                                 f"folder need your attribute file (class name -> "
                                 f"space-separated attributes); make one with: {make}")
    fname = fetch.TCA_ATTRIBUTE_FILES.get(name)
    if fname is None:
        raise AttributeFileError(
            f"DATASET.ATTRIBUTE_FILE is empty and dataset {name!r} has no TCA attribute file "
            f"(known: {', '.join(sorted(fetch.TCA_ATTRIBUTE_FILES))}); "
            f"set DATASET.ATTRIBUTE_FILE to a "
            f"TCA-format JSON (class name -> space-separated attributes); for your own classes, "
            f"make one with: {make}")
    try:
        return str(fetch.fetch(fname))
    except fetch.FetchError as e:
        raise AttributeFileError(f"{e}; or set DATASET.ATTRIBUTE_FILE /path/{fname}") from e
