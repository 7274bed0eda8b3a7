"""``open_clip`` without Hugging Face ``transformers``: start-up time.

open_clip imports ``transformers`` (when installed) at import time for its HF text towers and
CoCa; argtca's prompt encoder supports CLIP-style text towers only, so that import only costs
start-up (seconds on a machine with transformers 5.x). ``import_open_clip()`` imports open_clip
with ``transformers`` hidden (open_clip then runs as without it installed), unless transformers
is already imported or ``ARGTCA_OPEN_CLIP_TRANSFORMERS=1``. ``transformers`` itself stays
importable afterwards.
"""
from __future__ import annotations

import os
import sys

_HIDDEN = ("transformers",)


def import_open_clip():
    if "open_clip" in sys.modules:
        return sys.modules["open_clip"]
    keep = (os.environ.get("ARGTCA_OPEN_CLIP_TRANSFORMERS", "").strip().lower()
            in ("1", "true", "on"))
    hide = [] if keep else [m for m in _HIDDEN if m not in sys.modules]
    for m in hide:
        sys.modules[m] = None          # "import transformers" raises ImportError
    try:
        import open_clip
    finally:
        for m in hide:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]
    return open_clip


open_clip = import_open_clip()
