"""Per-image JSONL records, the fingerprint of an output directory, its lock, and resuming.

A run appends one JSON line per image to ``records.jsonl``. Started again with the same output
directory, configuration and test set it skips the images already recorded and ends with exactly
the metrics of an uninterrupted run. What protects a run folder:

* **fingerprint** (``config.json``): every configuration key that can change a number plus the
  test set (number of images, a hash of the (relative path, label) list and of the class names).
  A folder made with another fingerprint is refused, naming the differing keys; records without a
  ``config.json`` are refused (nothing says what made them).
* **one writer**: :class:`RunLock` holds an OS lock (``flock``) on ``run.lock`` while a run writes;
  a second run on the same folder is refused naming the first (pid, host, start, command). The
  kernel drops the lock when the process dies, so a killed run never blocks its resume.
* **records checked when read** (:func:`load_records`, :func:`check_records`): a torn last line
  (a kill mid-write) is dropped and the file repaired; a bad line anywhere else is an error naming
  the line; an image index recorded twice keeps one copy (an error if the copies disagree); every
  index must be in range, every confidence finite, and every record's path and label must be the
  dataset's item at that index."""
from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence

from argtca.utils.io import os_error, read_json_object, write_json  # noqa: F401  (write_json: run-folder API)

# Keys that change how fast a run goes, never what it computes.
# ``USE_CUDA`` is replaced in the fingerprint by the device type the run actually uses
# (``RUN.DEVICE_TYPE``): a CUDA run (fp16 autocast) is never resumed on the CPU (fp32) or back.
NON_RESULT_KEYS = {"OUTPUT_DIR", "VERBOSE", "DATALOADER.NUM_WORKERS", "DATALOADER.PREFETCH",
                   "DATALOADER.MAIN_THREADS", "USE_CUDA", "DATASET.CHECK_IMAGES"}


class RunFolderError(RuntimeError):
    """A run folder whose content cannot be used as it is; the message names the file and the fix."""


class ConfigMismatchError(RunFolderError):
    pass


class RunLockedError(RunFolderError):
    pass


RECORD_KEYS = ("index", "pred", "label", "conf")
TEST_SET_KEYS = ("TEST_SET.N_IMAGES", "TEST_SET.ITEMS_SHA256", "TEST_SET.CLASSNAMES_SHA256")


def flatten_cfg(cfg, prefix: str = "") -> Dict[str, object]:
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if hasattr(v, "items"):
            out.update(flatten_cfg(v, key + "."))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


def result_fingerprint(cfg) -> Dict[str, object]:
    return {k: v for k, v in sorted(flatten_cfg(cfg).items()) if k not in NON_RESULT_KEYS}


def _rel_item_path(impath: str, root: str) -> str:
    """An image path relative to the data root when it lies under it (absolute otherwise), so
    the test-set hash does not depend on where the data folder is mounted."""
    if root:
        rel = os.path.relpath(impath, root)
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return impath.replace(os.sep, "/")


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def data_fingerprint(dataset) -> Dict[str, object]:
    """What defines the test set: its size, the (path relative to the data root, label) list in
    index order and the class names in label order."""
    root = getattr(dataset, "root", "") or ""
    items = [[_rel_item_path(d.impath, root), int(d.label)] for d in dataset.test]
    return {"TEST_SET.N_IMAGES": len(items), "TEST_SET.ITEMS_SHA256": _sha(items),
            "TEST_SET.CLASSNAMES_SHA256": _sha(list(dataset.classnames))}


def run_fingerprint(cfg, dataset, device_type: Optional[str] = None) -> Dict[str, object]:
    """The fingerprint stored in ``config.json``: result-defining config keys plus the test set,
    and (when given) the device type the run computes on (cuda: fp16 autocast; cpu: fp32)."""
    fp = result_fingerprint(cfg)
    fp.update(data_fingerprint(dataset))
    if device_type is not None:
        fp["RUN.DEVICE_TYPE"] = str(device_type)
    return dict(sorted(fp.items()))


def config_hash(fp: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_json_file(path: str, what: str, fix: str):
    """A JSON object from ``path``; RunFolderError naming the file and ``fix`` when it is not."""
    return read_json_object(path, what, fix, error=RunFolderError)


def _has_records(out_dir: str) -> List[str]:
    """The record files of ``out_dir`` that hold anything (main file and torchrun rank files)."""
    import glob
    paths = [os.path.join(out_dir, "records.jsonl")] + sorted(
        glob.glob(os.path.join(out_dir, "records.rank*.jsonl")))
    return [p for p in paths if os.path.isfile(p) and os.path.getsize(p) > 0]


def check_or_write_fingerprint(out_dir: str, fp: Dict[str, object]) -> None:
    """Compare ``fp`` with ``out_dir/config.json`` (refusing a different one, naming the keys), or
    write it for a fresh folder. Records without a ``config.json`` are refused."""
    path = os.path.join(out_dir, "config.json")
    want = json.loads(json.dumps(fp, default=str))
    start_over = f"delete {out_dir} (or pass another --output-dir) to start over"
    if os.path.isfile(path):
        old = read_json_file(path, "the run's configuration fingerprint",
                             f"it records what made the records next to it; restore it, or "
                             f"{start_over}")
        cmp = dict(old)
        if not any(k in old for k in TEST_SET_KEYS):
            # written before the fingerprint covered the test set: every reused record is still
            # checked against the dataset's item at its index (check_records)
            cmp.update({k: want[k] for k in TEST_SET_KEYS if k in want})
        if cmp != want:
            diff = [f"{k}: {cmp.get(k)!r} -> {want.get(k)!r}"
                    for k in sorted(set(cmp) | set(want)) if cmp.get(k) != want.get(k)]
            data = any(k in TEST_SET_KEYS for k in set(cmp) ^ set(want)) or any(
                cmp.get(k) != want.get(k) for k in TEST_SET_KEYS)
            why = ("the test set changed since these records were made (split file, image list "
                   "or class names): " if data else "")
            raise ConfigMismatchError(
                f"{out_dir} holds results of a different configuration ({why}"
                f"{'; '.join(diff[:6])}{' ...' if len(diff) > 6 else ''}); use another "
                f"--output-dir or delete {out_dir} to start over")
        if old != want:   # add the test-set keys to an older fingerprint
            write_json(path, want, sort_keys=True)
        return
    found = _has_records(out_dir)
    if found:
        raise RunFolderError(
            f"{found[0]} holds records but {path} (the fingerprint of the configuration and test "
            f"set that made them) is missing, so they cannot be checked: restore config.json, or "
            f"{start_over}")
    write_json(path, want, sort_keys=True)


# ------------------------------------------------------------------------------ records
def _record_problem(r) -> Optional[str]:
    """Why ``r`` is not a record (None when it is one)."""
    if not isinstance(r, dict):
        return f"a JSON {type(r).__name__}, not an object"
    missing = [k for k in RECORD_KEYS if k not in r]
    if missing:
        return f"missing {', '.join(missing)}"
    for k in ("index", "pred", "label"):
        if not isinstance(r[k], int) or isinstance(r[k], bool):
            return f"{k}={r[k]!r} is not an integer"
    if not isinstance(r["conf"], (int, float)) or isinstance(r["conf"], bool):
        return f"conf={r['conf']!r} is not a number"
    return None


def _same_result(a: dict, b: dict) -> bool:
    return (a["pred"], a["label"]) == (b["pred"], b["label"]) and \
        (a["conf"] == b["conf"] or abs(float(a["conf"]) - float(b["conf"])) <= 1e-4)


def load_records(path: str) -> List[dict]:
    """Read the records of ``path`` (in file order, one per image index).

    A torn last line (no newline at the end: a run killed, or a disk full, mid-write) is dropped
    and the file repaired. Any other line that is not a record is an error naming the line. An
    index recorded twice keeps its first copy when both agree (and the file is rewritten), and is
    an error when they disagree."""
    if not os.path.isfile(path):
        return []
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    lines = text.split("\n")   # the last item is "" when the file ends with a newline
    fix = (f"delete that line (its image is run again) or delete {os.path.dirname(path) or '.'} "
           f"to start over")
    good: Dict[int, dict] = {}
    where: Dict[int, int] = {}
    rewrite = bool(text) and not text.endswith("\n")
    for ln, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            problem = _record_problem(r)
        except (ValueError, RecursionError) as e:
            problem = f"not JSON ({e})"
        if problem is not None:
            if ln == len(lines):   # unterminated last line: a torn write
                continue
            raise RunFolderError(f"{path}:{ln}: not a record ({problem}): {line[:80]!r}; {fix}")
        if not math.isfinite(float(r["conf"])):
            raise RunFolderError(
                f"{path}:{ln}: image index {r['index']} ({r.get('path', '?')}) has confidence "
                f"{r['conf']}, not a finite number (a run before prediction checks existed); "
                f"{fix}")
        i = r["index"]
        if i in good:
            if not _same_result(good[i], r):
                raise RunFolderError(
                    f"{path}: image index {i} is recorded twice with different results (line "
                    f"{where[i]}: pred {good[i]['pred']} conf {good[i]['conf']}; line {ln}: pred "
                    f"{r['pred']} conf {r['conf']}): two runs wrote this folder at once or it was "
                    f"edited; delete {os.path.dirname(path) or '.'} and run again")
            rewrite = True
            continue
        good[i] = r
        where[i] = ln
    out = list(good.values())
    if rewrite:
        write_records(path, out)
    return out


def _same_item(rec_path: str, impath: str, root: str) -> bool:
    a = os.path.normpath(rec_path).replace(os.sep, "/")
    if a == os.path.normpath(impath).replace(os.sep, "/"):
        return True
    rel = _rel_item_path(impath, root)
    return not os.path.isabs(rel) and a.endswith("/" + rel)


def check_records(records: Sequence[dict], dataset, path: str) -> None:
    """Every record's index is in range and its path and label are the dataset's item at that
    index; RunFolderError (naming the record, the item and the fix) otherwise."""
    items = dataset.test
    root = getattr(dataset, "root", "") or ""
    out_dir = os.path.dirname(path) or "."
    for r in records:
        i = r["index"]
        if not 0 <= i < len(items):
            raise RunFolderError(
                f"{path}: image index {i} is outside the test set of {len(items)} images: the test "
                f"set changed since these records were made; delete {out_dir} (or use another "
                f"--output-dir) to run on the current data")
        d = items[i]
        rp = r.get("path")
        if r["label"] != int(d.label) or (rp is not None and not _same_item(str(rp), d.impath,
                                                                             root)):
            raise RunFolderError(
                f"{path}: the record of image {i} ({rp}, label {r['label']}) is not the dataset's "
                f"image {i} ({d.impath}, label {d.label}): the test set changed since these "
                f"records were made; delete {out_dir} (or use another --output-dir) to run on the "
                f"current data")


def write_records(path: str, records: Iterable[dict]) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise os_error(e, tmp) from None


class RecordWriter:
    """Appends records. Every batch is flushed to the OS at once (a killed process, even by
    SIGKILL, loses nothing written); ``fsync`` (what survives a crash of the machine itself) runs
    at most every ``fsync_seconds`` and at close: an fsync per batch cost tens of milliseconds
    on network and virtual disks, as much as a batch of GPU work."""

    def __init__(self, path: str, fsync_seconds: float = 2.0):
        self.path = path
        self.fsync_seconds = float(fsync_seconds)
        self._synced = time.monotonic()
        try:
            self.f = open(path, "a")
        except OSError as e:
            raise os_error(e, path) from None

    def write(self, recs: Iterable[dict]) -> None:
        try:
            self.f.write("".join(json.dumps(r) + "\n" for r in recs))
            self.f.flush()
            if time.monotonic() - self._synced >= self.fsync_seconds:
                os.fsync(self.f.fileno())
                self._synced = time.monotonic()
        except OSError as e:
            raise os_error(e, self.path) from None

    def close(self):
        try:
            self.f.flush()
            os.fsync(self.f.fileno())
        except (OSError, ValueError):   # a failed write was reported by write()
            pass
        try:
            self.f.close()
        except OSError:   # the failed flush was reported by write(); nothing more to save
            pass


# ------------------------------------------------------------------------------ one writer
LOCK_NAME = "run.lock"


class RunLock:
    """``with RunLock(out_dir):`` — an exclusive ``flock`` on ``out_dir/run.lock`` while a run
    writes the folder. The file holds the owner's pid, host, start time and command, which the
    error of a second run names. The kernel releases the lock when the owner exits or dies; the
    file itself stays (removing it would race with a new owner)."""

    def __init__(self, out_dir: str):
        self.path = os.path.join(out_dir, LOCK_NAME)
        self.fd: Optional[int] = None

    def acquire(self) -> "RunLock":
        try:
            import fcntl
        except ImportError:    # no flock (Windows): one writer is not enforced
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise os_error(e, self.path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(self._locked_message()) from None
        except OSError as e:   # a file system without locks (some network mounts)
            os.close(fd)
            print(f"warning: cannot lock {self.path} ({e.strerror}): one writer per folder is not "
                  f"enforced on this file system", file=sys.stderr)
            return self
        self.fd = fd
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
        try:
            os.ftruncate(fd, 0)
            os.write(fd, (json.dumps(info) + "\n").encode())
        except OSError as e:
            self.release()
            raise os_error(e, self.path) from None
        return self

    def _locked_message(self) -> str:
        try:
            with open(self.path) as f:
                info = json.loads(f.read() or "{}")
        except (OSError, ValueError):
            info = {}
        who = (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
               f"{info.get('started', '?')}: {info.get('command', '?')}") if info else \
            "another process (it has not recorded its details yet)"
        return (f"{os.path.dirname(self.path) or '.'} is being written by another run ({who}); "
                f"one run per output folder: wait for it to finish (then this command resumes "
                f"or reuses its records) or pass another --output-dir")

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)   # closing the descriptor drops the flock
            self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
