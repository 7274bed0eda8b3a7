"""sha256 of the files a run reads, computed once per file version.

A run names its inputs (weights, attribute file, split file, plug-ins, ...) by the content of
each file, not by its path, so a file replaced at the same path is seen. A hash is kept per file
version, in this process and on disk in ``$ARGTCA_CACHE/file-hashes.json`` (default
``~/.cache/argtca``) for the next run, and a file version is its real path, device, inode, size,
mtime and **ctime** (nanoseconds). The mtime alone is not enough: ``touch -r``, ``cp -p`` and
``tar``/``unzip`` restore it, so a same-size file rewritten, copied over or swapped with ``mv``
keeps (path, size, mtime). The ctime cannot be set by any user tool: every write, ``cp -p`` and
rename sets it to the current time, and ``mv`` also brings another inode to the path.

Why a cache rather than hashing at every run or resume: ``python benchmarks/hash_cost.py`` on the
development machine (2 CPUs, virtual disk) took 0.52 s for 600 MiB from the page cache and
0.5-1.6 s with its pages dropped (about 1.2 GB/s, OpenSSL's sha256), against 0.03 ms for a cached
lookup. Every run of a sweep, every resume and the launcher's survey of a plan hash the weights,
so seconds per 600 MB file per run, paid again on network disks at their read speed; the stat
key above is as safe as a rehash against anything but a clock set back on purpose.

File-system timestamps tick at a coarse clock (a few ms on Linux), so a file changed right after
it was hashed could keep even its ctime; a hash is therefore not kept while the file's ctime is
within :data:`RACY_SECONDS` of now (as git does for its index): such a file is hashed again.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from contextvars import ContextVar
from typing import Dict, Tuple

__all__ = ["file_sha256", "hash_cache_path", "RACY_SECONDS", "InputChangedError",
           "expected_inputs", "read_input", "check_read"]

Key = Tuple[int, int, int, int, int]   # device, inode, size, mtime_ns, ctime_ns
_MEMO: Dict[Tuple[str, Key], str] = {}
_CHUNK = 1 << 20
# a file changed less than this long ago is not cached (timestamps may not have ticked since)
RACY_SECONDS = 2.0


def hash_cache_path() -> str:
    root = os.path.expanduser(os.environ.get("ARGTCA_CACHE") or "~/.cache/argtca")
    return os.path.join(root, "file-hashes.json")


def _read_disk_cache(path: str) -> Dict[str, object]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):   # absent or damaged: a cache only, rebuilt as files are hashed
        return {}
    return data if isinstance(data, dict) else {}


def _stat_key(st: os.stat_result) -> Key:
    return (int(st.st_dev), int(st.st_ino), int(st.st_size), int(st.st_mtime_ns),
            int(st.st_ctime_ns))


def _disk_version(key: Key) -> str:
    return ":".join(str(x) for x in key)


def _cached_on_disk(real: str, key: Key):
    """The sha256 the on-disk cache holds for this version of ``real``, else None. Entries are
    ``{real path: {"version": "dev:ino:size:mtime_ns:ctime_ns", "sha256": hex}}``; anything else
    (an older cache's "path|size|mtime" keys) is never matched."""
    entry = _read_disk_cache(hash_cache_path()).get(real)
    if isinstance(entry, dict) and entry.get("version") == _disk_version(key):
        digest = entry.get("sha256")
        if isinstance(digest, str) and len(digest) == 64:
            return digest
    return None


def _remember_on_disk(real: str, key: Key, digest: str) -> None:
    """Add one entry to the on-disk cache (atomic replace; a lost race only loses an entry)."""
    path = hash_cache_path()
    data = _read_disk_cache(path)
    entry = {"version": _disk_version(key), "sha256": digest}
    if data.get(real) == entry:
        return
    # one entry per file (older versions of it are never asked for again); entries of the
    # older "path|size|mtime" format go
    data = {k: v for k, v in data.items() if isinstance(v, dict) and k != real}
    data[real] = entry
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


def content_sha256(real: str) -> str:
    """The sha256 (hex) of a file's bytes, read in chunks, uncached."""
    h = hashlib.sha256()
    with open(real, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str) -> str:
    """The sha256 (hex) of the file at ``path``; OSError (naming the file) when it is unreadable."""
    real = os.path.realpath(os.path.expanduser(str(path)))
    st = os.stat(real)
    key = _stat_key(st)
    digest = _MEMO.get((real, key))
    if digest is not None:
        return digest
    digest = _cached_on_disk(real, key)
    if digest is None:
        digest = content_sha256(real)
        # keep the hash only if the file did not change while it was read, and changed long
        # enough ago that a change now would show in its timestamps
        if _stat_key(os.stat(real)) != key or time.time() - st.st_ctime_ns / 1e9 < RACY_SECONDS:
            return digest
        _remember_on_disk(real, key, digest)
    _MEMO[(real, key)] = digest
    return digest


# ------------------------------------------------------------------- the bytes a run uses
class InputChangedError(ValueError):
    """An input file whose bytes, read to be used, are not those its run's fingerprint names."""


# real path -> sha256 of the bytes this process last read from it to use (read_input(log=True):
# the small input files read at load time, before the run fingerprints them)
_READ: Dict[str, str] = {}
# real path -> (role, sha256) of the input files the running run has fingerprinted
_EXPECTED: ContextVar[Dict[str, Tuple[str, str]]] = ContextVar("argtca_expected_inputs",
                                                               default={})


@contextlib.contextmanager
def expected_inputs(paths: Dict[str, str], hashes: Dict[str, str]):
    """Inside: :func:`read_input` of one of ``paths`` (role -> path) must read the bytes whose
    sha256 is ``hashes[role]`` (the run's fingerprint)."""
    token = _EXPECTED.set({os.path.realpath(os.path.expanduser(str(p))): (role, hashes[role])
                           for role, p in paths.items() if role in hashes})
    try:
        yield
    finally:
        _EXPECTED.reset(token)


def read_input(path: str, log: bool = False) -> bytes:
    """The whole content of an input file, read once, so that what is deserialized is what is
    hashed: inside :func:`expected_inputs`, bytes other than the fingerprinted ones (the file
    rewritten since the run hashed it: a sync, a download in another shell) are refused with
    one line naming the file and both hashes, before anything is computed from them."""
    real = os.path.realpath(os.path.expanduser(str(path)))
    with open(real, "rb") as f:
        data = f.read()
    role, want = _EXPECTED.get().get(real, ("", ""))
    got = hashlib.sha256(data).hexdigest() if (want or log) else ""
    if log:   # ``log``: checked when the run fingerprints the file (check_read)
        _READ[real] = got
    if want:
        if got != want:
            raise InputChangedError(
                f"{role} file {path} changed after this run fingerprinted it (sha256 {want[:16]} "
                f"then, {got[:16]} as read now): its records would come from other bytes than "
                f"its config.json names; run the same command again once the file is in place "
                f"(it is fingerprinted anew)")
    return data


def check_read(paths: Dict[str, str], hashes: Dict[str, str]) -> None:
    """The input files read before the run fingerprinted them (``read_input(log=True)``: the
    attribute, split and class-name files) must hold what was read: a file rewritten in between
    is refused in one line, naming it and both hashes."""
    for role, path in paths.items():
        real = os.path.realpath(os.path.expanduser(str(path)))
        used = _READ.get(real)
        if used and role in hashes and used != hashes[role]:
            raise InputChangedError(
                f"{role} file {path} changed after this run read it (sha256 {used[:16]} read, "
                f"{hashes[role][:16]} on disk now): its records would come from other bytes than "
                f"its config.json names; run the same command again once the file is in place")
