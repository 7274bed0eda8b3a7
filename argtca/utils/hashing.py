"""sha256 of the files a run reads, computed once per file version.

A run names its inputs (weights, attribute file, split file, plug-ins, ...) by the content of
each file, not by its path, so a file replaced at the same path is seen. Hashing 600 MB of weights
takes seconds, so a hash is kept per (real path, size, mtime): in this process, and on disk in
``$ARGTCA_CACHE/file-hashes.json`` (default ``~/.cache/argtca``) for the next run. A file rewritten
with the same size within the file system's mtime resolution would be missed; every tool that
replaces a file (cp, mv, a download) changes its mtime."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, Tuple

__all__ = ["file_sha256", "hash_cache_path"]

_MEMO: Dict[Tuple[str, int, int], str] = {}
_CHUNK = 1 << 20


def hash_cache_path() -> str:
    root = os.path.expanduser(os.environ.get("ARGTCA_CACHE") or "~/.cache/argtca")
    return os.path.join(root, "file-hashes.json")


def _read_disk_cache(path: str) -> Dict[str, str]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):   # absent or damaged: a cache only, rebuilt as files are hashed
        return {}
    return data if isinstance(data, dict) else {}


def _disk_key(real: str, size: int, mtime_ns: int) -> str:
    return f"{real}|{size}|{mtime_ns}"


def _remember_on_disk(key: str, digest: str) -> None:
    """Add one entry to the on-disk cache (atomic replace; a lost race only loses an entry)."""
    path = hash_cache_path()
    data = _read_disk_cache(path)
    if data.get(key) == digest:
        return
    real = key.rsplit("|", 2)[0]
    # one entry per file: older versions of it are never asked for again
    data = {k: v for k, v in data.items() if k.rsplit("|", 2)[0] != real}
    data[key] = digest
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(data, f, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except OSError:   # a read-only cache folder: hashed again next time, nothing else lost
        try:
            os.remove(tmp)
        except OSError:
            pass


def file_sha256(path: str) -> str:
    """The sha256 (hex) of the file at ``path``; OSError (naming the file) when it is unreadable."""
    real = os.path.realpath(os.path.expanduser(str(path)))
    st = os.stat(real)
    key = (real, int(st.st_size), int(st.st_mtime_ns))
    digest = _MEMO.get(key)
    if digest is not None:
        return digest
    dkey = _disk_key(*key)
    digest = _read_disk_cache(hash_cache_path()).get(dkey)
    if not (isinstance(digest, str) and len(digest) == 64):
        h = hashlib.sha256()
        with open(real, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
        digest = h.hexdigest()
        # the file may have changed while it was read: keep the hash only if it did not
        st2 = os.stat(real)
        if (st2.st_size, st2.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            return digest
        _remember_on_disk(dkey, digest)
    _MEMO[key] = digest
    return digest
