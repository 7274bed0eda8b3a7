"""The prompt that asks a chat model for visual attributes of a class, and the strict reading of
its answer.

Template (``TEMPLATE_VERSION`` changes whenever the text below changes, so cached answers of an
older prompt are never reused):

* system: :data:`SYSTEM` — the model lists visual attributes for CLIP and answers with one JSON
  object ``{"attributes": [...]}``;
* few-shot: for each example class, a user turn made with :data:`USER` and an assistant turn with
  the example's attributes as that JSON object;
* user: :data:`USER` with the class name, the number asked for and an optional domain hint
  (``--domain "satellite images"``).

Few-shot examples: the first :data:`EXAMPLE_ATTRS` attributes (after :func:`normalize_attributes`)
of three classes of the TCA authors' published files (Caltech101 "leopard", Food101 "apple pie",
DescribableTextures "striped") when those files are in argtca's download cache (``argtca.fetch``;
never downloaded for this). The TCA repository has no licence, so no list is copied into argtca;
without the cached files, three examples written for argtca (:data:`BUILTIN_EXAMPLES`) are used.
Which source was used is part of the prompt hash and printed by the generator.

Answers are read strictly: one JSON object (optionally inside one Markdown code fence, which
models add when JSON mode is off) with a list of strings under ``"attributes"``; anything else is a
bad answer and asked again. Each attribute is then normalised by :func:`normalize_attributes`.
"""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["TEMPLATE_VERSION", "SYSTEM", "USER", "BUILTIN_EXAMPLES", "TCA_EXAMPLES",
           "AnswerError", "few_shot_examples", "build_messages", "prompt_hash", "parse_answer",
           "normalize_attributes", "hyphenate"]

TEMPLATE_VERSION = 1
EXAMPLE_ATTRS = 10
MAX_WORDS = 4                     # longer "attributes" are sentences, not attributes

SYSTEM = ("You write short visual attributes of object classes for a vision-language model (CLIP) "
          "that recognises the classes in photos. Answer with exactly one JSON object of the form "
          '{"attributes": ["...", "..."]} and nothing else.')
USER = ("List {n} visual attributes of the class \"{classname}\"{domain}: what a photo of it shows "
        "(parts, shape, colour, texture, material, typical surroundings), the most characteristic "
        "first. One to three words each, no sentences, and do not repeat the class name.")

# written for argtca (used when the TCA files are not in the download cache)
BUILTIN_EXAMPLES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("zebra", ("black-and-white-stripes", "mane", "hooves", "equine", "savannah", "herd",
               "short-tail", "grassland", "muzzle", "upright-ears")),
    ("espresso", ("small-cup", "crema", "dark-brown", "saucer", "ceramic", "coffee-beans",
                  "steam", "foam", "spoon", "cafe-counter")),
    ("lighthouse", ("tower", "lantern-room", "coastline", "red-and-white", "rocks", "sea",
                    "beacon", "cylindrical", "gallery-railing", "cliff")),
)
# (file in argtca.fetch, class) of the TCA authors' files used as examples when cached
TCA_EXAMPLES: Tuple[Tuple[str, str], ...] = (
    ("Caltech101_2_V.json", "leopard"), ("Food101_2_V.json", "apple pie"),
    ("DescribableTextures_2_V.json", "striped"))

_NOT_ATTRIBUTES = {"none", "n-a", "na", "null", "nil", "unknown", "etc"}


class AnswerError(ValueError):
    """The model's answer is not the JSON object asked for (the message says what is wrong)."""


def hyphenate(text: str) -> str:
    """Lower case, punctuation removed, words joined by hyphens (TCA's multi-word form)."""
    s = unicodedata.normalize("NFKC", str(text)).lower()
    s = re.sub(r"[^\w\s-]", "", s)
    return re.sub(r"[\s_-]+", "-", s).strip("-")


def normalize_attributes(items: Sequence[str], classname: str) -> Tuple[List[str], Counter]:
    """``(attributes, dropped)``: each item hyphenated (:func:`hyphenate`); empty items, "none"
    and the like, items of more than :data:`MAX_WORDS` words, the class name itself (or its plural)
    and repeats dropped, counted in ``dropped`` by reason. Order kept (first occurrence)."""
    cls = hyphenate(classname)
    own = {cls, cls + "s", cls + "es"}
    out, seen, dropped = [], set(), Counter()
    for item in items:
        a = hyphenate(item)
        if not a or a in _NOT_ATTRIBUTES:
            dropped["empty or 'none'"] += 1
        elif a.count("-") + 1 > MAX_WORDS:
            dropped[f"longer than {MAX_WORDS} words"] += 1
        elif a in own:
            dropped["the class name itself"] += 1
        elif a in seen:
            dropped["repeats"] += 1
        else:
            seen.add(a)
            out.append(a)
    return out, dropped


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.S)


def parse_answer(content: Optional[str]) -> List[str]:
    """The list under ``"attributes"`` of the model's JSON answer; :class:`AnswerError` else."""
    if content is None or not str(content).strip():
        raise AnswerError("empty answer")
    text = str(content).strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise AnswerError(f"not JSON ({e.msg} at character {e.pos}): {text[:80]!r}") from None
    if not isinstance(data, dict) or "attributes" not in data:
        raise AnswerError(f'not a JSON object with an "attributes" list: {text[:80]!r}')
    attrs = data["attributes"]
    if not isinstance(attrs, list) or not all(isinstance(a, str) for a in attrs):
        raise AnswerError(f'"attributes" is not a list of strings: {str(attrs)[:80]!r}')
    if not attrs:
        raise AnswerError('"attributes" is empty')
    return attrs


def few_shot_examples() -> Tuple[str, List[Tuple[str, List[str]]]]:
    """``(source, [(class, attributes), ...])``: the TCA authors' cached files when all are in the
    download cache, else :data:`BUILTIN_EXAMPLES`."""
    try:
        from ..fetch import FetchError, cached_path
        out = []
        for fname, cname in TCA_EXAMPLES:
            p = cached_path(fname)
            if p is None:
                raise FileNotFoundError(fname)
            with open(p, encoding="utf-8") as f:
                words = json.load(f)[cname].split()
            attrs, _ = normalize_attributes(words, cname)
            if len(attrs) < 3:
                raise ValueError(fname)
            out.append((cname, attrs[:EXAMPLE_ATTRS]))
        return "TCA authors' files (download cache)", out
    except (FetchError, FileNotFoundError, KeyError, ValueError, OSError, AttributeError):
        return "built-in", [(c, list(a)) for c, a in BUILTIN_EXAMPLES]


def _user(classname: str, n: int, domain: str) -> str:
    return USER.format(n=n, classname=classname, domain=f" ({domain})" if domain else "")


def build_messages(classname: str, n: int, examples: Sequence[Tuple[str, Sequence[str]]],
                   domain: str = "") -> List[Dict[str, str]]:
    """Chat messages asking for ``n`` attributes of ``classname``."""
    msgs = [{"role": "system", "content": SYSTEM}]
    for cname, attrs in examples:
        msgs.append({"role": "user", "content": _user(cname, len(attrs), domain="")})
        msgs.append({"role": "assistant", "content": json.dumps({"attributes": list(attrs)})})
    msgs.append({"role": "user", "content": _user(classname, n, domain)})
    return msgs


def prompt_hash(n: int, examples: Sequence[Tuple[str, Sequence[str]]], domain: str = "") -> str:
    """sha256 of everything in the prompt except the class name (template, examples, n, domain)."""
    blob = json.dumps({"version": TEMPLATE_VERSION, "system": SYSTEM, "user": USER, "n": n,
                       "examples": [[c, list(a)] for c, a in examples], "domain": domain},
                      sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
