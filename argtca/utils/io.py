"""JSON files read and written the same way everywhere: atomic writes (a killed run never leaves a
half-written file) and reads whose one-line error names the file, what it should hold and the
fix."""
from __future__ import annotations

import json
import os

__all__ = ["write_json", "read_json_object", "os_error"]


def os_error(e: OSError, path: str) -> OSError:
    """The same OSError with the file named (a failing write() does not carry it)."""
    return e if e.filename else OSError(e.errno, e.strerror, path)


def write_json(path: str, obj, **dump_kwargs) -> None:
    """Atomic JSON write (temp file + rename): a killed run never leaves a half-written file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"   # one per process: ranks writing the same file never mix
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, **dump_kwargs)
        os.replace(tmp, path)
    except OSError as e:
        raise os_error(e, tmp) from None


def read_json_object(path: str, what: str, fix: str, error: type = ValueError) -> dict:
    """A JSON object from ``path``; ``error`` naming the file, ``what`` it is and ``fix`` when it
    is not UTF-8, not JSON or not an object."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{path}: {what} is not UTF-8 text (byte {e.start}); {fix}") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: {what} is not valid JSON ({e.msg} at line {e.lineno}); "
                    f"{fix}") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: {what} must be a JSON object, got {type(obj).__name__}; {fix}")
    return obj
