"""The demo's attribute file (TCA format: class name -> one space-separated string of attributes,
most relevant first, multi-word attributes hyphenated).

The list is written by hand to look like the LLM-generated TCA files *and* to make attribute
selection matter: some classes open with shared words (``round`` is true for 7 classes, ``red``
for 7), some with near-synonym pairs (stop sign: ``octagonal eight-sided``; yield sign:
``triangular three-sided``; starfish: ``star-shaped five-armed``; leaf: ``veins veined``), and the
class-specific parts come later (``green-stem``, ``chocolate-chips``, ``black-pips``).  Taking the
first two (TCA) therefore often picks redundant or non-discriminative attributes.
Every listed attribute is grounded: it is true for (most) rendered instances of the class.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Set

from .render import POSSIBLE_ATTRIBUTES, SIZE_WORDS, SYNONYM_GROUPS, expand_synonyms

ATTRIBUTE_FILE = Path(__file__).resolve().parent / "assets" / "demo_attributes.json"


def load_attributes(path: Path = ATTRIBUTE_FILE) -> Dict[str, List[str]]:
    with open(path) as f:
        raw = json.load(f)
    return {k: v.split() for k, v in raw.items()}


def all_attribute_words() -> Set[str]:
    words: Set[str] = set(SIZE_WORDS)
    for v in POSSIBLE_ATTRIBUTES.values():
        words |= expand_synonyms(set(v))
    for g in SYNONYM_GROUPS:
        words.update(g)
    if ATTRIBUTE_FILE.is_file():
        for v in load_attributes().values():
            words.update(v)
    return words
