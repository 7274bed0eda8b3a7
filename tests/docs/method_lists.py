"""The lists of methods in README.md and docs/*.md, generated from the catalogue
(argtca/trainers/catalogue.py): a list is written between markers that say which it is,

    <!-- methods:SPEC -->TDA, DMN-ZS, ... and DynaPrompt<!-- /methods -->

and tests/docs/test_docs_method_lists.py checks that the text between them is what SPEC gives
today (``python tests/docs/method_lists.py --write`` rewrites them). SPEC is

* ``all``, ``paper``, ``zoo``, ``baselines`` (table1's ``--methods`` sets, one name per table
  row: ArgTCA once per selector), ``keys`` (every registered method key), ``variants`` (the
  keys in no set: the temperature-scaled reference variants), optionally ``/FAMILY`` (only that
  family's: ``all/online``);
* ``count:SET[/FAMILY]``: how many;
* ``dassl``: the trainer names a Dassl/CoOp user passes as ``--trainer``;
* a style after a colon: ``:bold`` (``**TDA**``), ``:code`` (```TDA```);
* ``as-is``: a deliberate subset, left as written (each name must still be a method's).

A list of four or more method names outside markers is an error (where lists used to drift).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

REPO = Path(__file__).resolve().parents[2]
MARK = re.compile(r"<!-- methods:(?P<spec>[\w/:-]+) -->(?P<body>.*?)<!-- /methods -->", re.S)
SETS = ("all", "paper", "zoo", "baselines", "keys", "variants")


def _rows() -> Dict[str, List[Tuple[str, str, str]]]:
    """set -> [(row name, display name, family)] in table order."""
    from argtca.trainers.catalogue import catalogue, method_sets
    info = {m.method: m for m in catalogue()}

    def shown(row: str) -> Tuple[str, str, str]:
        method, _, sel = row.partition("-")
        m = info[method if method in info else row]
        name = f"{m.label}-{sel.capitalize()}" if sel and m.family == "argtca" else m.label
        return row, name, m.family
    out = {k: [shown(r) for r in v] for k, v in method_sets().items()}
    out["keys"] = [(m.method, m.label, m.family) for m in catalogue()]
    out["variants"] = [(m.method, m.label, m.family) for m in catalogue() if not m.rows]
    return out


def join(names: List[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def render(spec: str) -> str:
    """The text of ``SPEC`` (module docstring), from the catalogue as registered now."""
    from argtca.dassl_plugin import dassl_name
    from argtca.trainers.catalogue import catalogue
    head, _, style = spec.partition(":")
    count = head == "count"
    if count:
        head, _, style = style.partition(":")
    if head == "dassl":
        names = [dassl_name(m.trainer) for m in catalogue()]
    else:
        which, _, family = head.partition("/")
        if which not in SETS:
            raise ValueError(f"<!-- methods:{spec} -->: {which!r} is none of {SETS}, dassl, "
                             f"count:..., as-is")
        names = [n for _, n, f in _rows()[which] if not family or f == family]
        if not names:
            raise ValueError(f"<!-- methods:{spec} -->: no method")
    if count:
        return str(len(names))
    wrap = {"": "{}", "bold": "**{}**", "code": "`{}`"}[style]
    return join([wrap.format(n) for n in names])


def method_words() -> List[str]:
    """Every way the docs name a method: labels, keys, row names, Dassl names, ``DMN``, ...;
    longest first (a regex alternation takes the first that matches)."""
    from argtca.trainers.catalogue import catalogue
    words = set()
    for rows in _rows().values():
        for row, name, _ in rows:
            words |= {row, name}
    for m in catalogue():
        words |= {m.method, m.method.upper(), m.label, m.trainer, m.label.split("-")[0]
                  if m.label.endswith("-ZS") else m.label}
    words |= {"zero-shot", "zero-shot CLIP"}
    return sorted(words, key=len, reverse=True)


def doc_files() -> List[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))


def marked(text: str) -> Iterator[re.Match]:
    return MARK.finditer(text)


def unmarked_lists(text: str, least: int = 4) -> Iterator[Tuple[int, str]]:
    """(line, text) of each list of ``least`` or more method names outside the markers (names
    separated by commas, the last one by "and"/"or" too, each maybe **bold** or `code`)."""
    name = "|".join(re.escape(w) for w in method_words())
    item = rf"(?:\*\*|`)?(?:{name})(?:\*\*|`)?(?![\w-])"
    sep = r"(?:,\s+(?:and\s+|or\s+)?|\s+(?:and|or)\s+)"
    pattern = re.compile(rf"(?<![\w-]){item}(?:{sep}{item}){{{least - 1},}}")
    blank = MARK.sub(lambda m: " " * len(m.group()), text)
    for m in pattern.finditer(blank):
        if not re.match(r",?\s*(\.\.\.|…)", blank[m.end():]):   # "a, b, c, d, ...": some of them
            yield text.count("\n", 0, m.start()) + 1, m.group()


def rewrite(text: str) -> str:
    return MARK.sub(lambda m: m.group() if m["spec"] == "as-is" else
                    f"<!-- methods:{m['spec']} -->{render(m['spec'])}<!-- /methods -->", text)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/docs/method_lists.py --write   (rewrites the marked lists)")
    for path in doc_files():
        old = path.read_text()
        new = rewrite(old)
        if new != old:
            path.write_text(new)
            print(f"rewrote the method lists of {path.relative_to(REPO)}")
