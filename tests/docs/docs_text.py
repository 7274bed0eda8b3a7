"""The documentation the docs tests read, parsed with Sybil (README.md and docs/*.md).

Convention (README "Tests"): every ```bash block is a command a reader can paste, and the docs
test runs it on the embedded demo; a block that needs what CI does not have (the real datasets or
weights, a GPU, a cluster, an LLM server, the network, installing packages) is preceded by
``<!-- skip: next "why" -->``, Sybil's markdown skip directive, and the reason is shown as the
test's skip reason. Output, other languages and file formats use ```text, ```json, ```python,
```toml, ...: those are read by the name checks only, never run.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from sybil import Sybil
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))


def _never(example):   # the blocks are run by the test, not by Sybil's evaluator
    raise AssertionError("docs blocks are run by tests/docs/test_docs_blocks.py")


# every fenced block, whatever its info string (Sybil's CodeBlockParser takes one language)
_FENCED = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<language>[^\n]*)$\n", re.M),
                                  mapping={"language": "language", "source": "source"})


def _code_blocks(document):
    for region in _FENCED(document):
        region.parsed = region.lexemes["source"]
        region.evaluator = _never
        yield region


_SYBIL = Sybil(parsers=[SkipParser(), _code_blocks], patterns=["README.md", "docs/*.md"],
               path=str(REPO))


@dataclass
class Block:
    path: Path           # the markdown file
    line: int            # line of the opening fence
    language: str        # the fence's info string ("bash", "text", "")
    source: str
    skip: Optional[str]  # the reason of a preceding ``<!-- skip: next "why" -->``, else None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> List[Block]:
    """The fenced code blocks of ``path`` in document order, each with its skip reason."""
    doc = _SYBIL.parse(path)
    out: List[Block] = []
    pending: Optional[str] = None
    for ex in doc.examples():
        parsed = ex.parsed
        if isinstance(parsed, tuple):   # a skip directive: (action, reason expression)
            action, reason = parsed
            if action != "next" or not reason:
                raise AssertionError(f"{path.name}:{ex.line}: the docs use only "
                                     f"'<!-- skip: next \"why\" -->' (a visible reason), "
                                     f"got skip: {action} {reason or ''}")
            pending = str(ast.literal_eval(reason.strip()))
            continue
        language = str(ex.region.lexemes.get("language") or "").strip()
        out.append(Block(path, ex.line, language, str(parsed), pending))
        pending = None
    if pending is not None:
        raise AssertionError(f"{path.name}: a skip directive with no code block after it")
    return out


def all_blocks() -> List[Block]:
    return [b for p in DOC_FILES for b in blocks(p)]
