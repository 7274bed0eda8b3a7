"""``builtin:<relpath>``: a file shipped inside the installed argtca package (the demo's weights
and attribute file), usable wherever a config names a file."""
from __future__ import annotations

import os

__all__ = ["PKG_DIR", "resolve_builtin"]

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resolve_builtin(path: str) -> str:
    """``builtin:<relpath>`` → file inside the installed argtca package; anything else unchanged."""
    if isinstance(path, str) and path.startswith("builtin:"):
        return os.path.join(PKG_DIR, path[len("builtin:"):])
    return path
