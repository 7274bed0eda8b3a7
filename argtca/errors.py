"""The one-line error convention of argtca's command lines (``python -m argtca.run``, ``.data``,
``.experiments``, ``.attributes``, ``.select_attributes``): bad input is one ``error: ...`` line on
stderr and exit status 2."""
from __future__ import annotations

import sys
from typing import Callable

EXIT_BAD_INPUT = 2


def error_message(e: BaseException) -> str:
    """The message of ``e`` (a KeyError's without the quotes ``str`` adds)."""
    return e.args[0] if isinstance(e, KeyError) and e.args else str(e)


def print_bad_input(e: BaseException, clean: Callable[[str], str] = str) -> int:
    """Print ``e`` as one ``error:`` line (passed through ``clean``, e.g. to redact a key) and
    return the bad-input exit status."""
    print(f"error: {clean(error_message(e))}", file=sys.stderr)
    return EXIT_BAD_INPUT
