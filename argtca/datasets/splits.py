"""Split files: a CoOp split file missing from the data root comes from argtca's download cache
(fetched on first use, :mod:`argtca.fetch`); nothing is written into the data root."""
from __future__ import annotations

from argtca.datasets.base import DataError
from argtca.fetch import KNOWN_FILES, FetchError, fetch

__all__ = ["fetch_split_file"]


def fetch_split_file(name: str, expected_at: str, hint: str) -> str:
    """A split file missing from the data root (``expected_at``): the cached/downloaded copy.
    Nothing is written into the data root."""
    if name not in KNOWN_FILES:
        raise DataError(f"split file {expected_at} not found: {hint}")
    try:
        return str(fetch(name))
    except FetchError as e:
        raise DataError(f"split file {expected_at} not found and {e} Or: {hint}") from e
