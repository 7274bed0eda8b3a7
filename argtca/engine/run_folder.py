"""Per-image JSONL records, the fingerprint of an output directory, its lock, and resuming.

A run appends one JSON line per image to ``records.jsonl``. Started again with the same output
directory, configuration and test set it skips the images already recorded and ends with exactly
the metrics of an uninterrupted run. What protects a run folder:

* **fingerprint** (``config.json``): every configuration key that can change a number plus the
  test set (number of images, a hash of the (relative path, label) list and of the class names).
  A folder made with another fingerprint is refused, naming the differing keys; records without a
  ``config.json`` are refused (nothing says what made them).
* **inputs by content**: the sha256 of every input file (weights, attribute, split and plug-in
  files, ...) is part of the fingerprint: a file replaced at the same path is refused on resume,
  naming it and both hashes. Files a run derives and re-reads (``temperature.json``) are noted in
  ``derived.json`` and checked the same way.
* **a run that recorded nothing** (it stopped before its first image, e.g. weights not found)
  does not block a corrected command: its folder is taken over, saying so.
* **one writer**: :class:`RunLock` holds a lock (``filelock``) on ``run.lock`` while a run writes;
  a second run on the same folder is refused naming the first (pid, host, start, command). The
  lock dies with the run's main process (never held by its loader workers), so a killed run
  never blocks its resume.
* **records checked when read** (:func:`load_records`, :func:`check_records`): a torn last line
  (a kill mid-write) is dropped and the file repaired; a bad line anywhere else is an error naming
  the line; an image index recorded twice keeps one copy (an error if the copies disagree); every
  index must be in range, every confidence finite, and every record's path and label must be the
  dataset's item at that index."""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import socket
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence

from argtca.config import get_cfg_default
from argtca.utils.io import os_error, read_json_object, write_json

# Keys that change how fast a run goes, never what it computes.
# ``USE_CUDA`` is replaced in the fingerprint by the device type the run actually uses
# (``RUN.DEVICE_TYPE``): a CUDA run (fp16 autocast) is never resumed on the CPU (fp32) or back.
NON_RESULT_KEYS = {"OUTPUT_DIR", "OUTPUT_ROOT", "VERBOSE", "DATALOADER.NUM_WORKERS",
                   "DATALOADER.PREFETCH",
                   "DATALOADER.MAIN_THREADS", "USE_CUDA", "DATASET.CHECK_IMAGES",
                   "RUN.REQUIRE_CUDA",   # whether a run without CUDA may start at all
                   # the GPU views made on another stream: the same kernels, bit-identical views.
                   # The other TTA.FAST knobs change floating-point rounding: they stay in
                   "TTA.FAST.VIEWS_OVERLAP",
                   # how often an online method's state is saved: a resume starts at a saved
                   # batch boundary and makes the same batches, so never a different number
                   "TTA.STREAM.CHECKPOINT_IMAGES",
                   # where the data is mounted (/data or a node's /scratch): the test set is
                   # identified by content instead (TEST_SET.*: root-relative paths and labels,
                   # class names, split files by sha256); an own ImageFolder keeps its location
                   # (TEST_SET.ROOT, see data_fingerprint)
                   "DATASET.ROOT"}
# datasets whose file names are the user's own, not a published split's: two folders may hold
# other images under the same names, so the folder's location stays part of the test set
LOCATED_DATASETS = ("ImageFolder",)


class RunFolderError(RuntimeError):
    """A run folder whose content cannot be used as it is; the message names the file and the
    fix."""


class ConfigMismatchError(RunFolderError):
    pass


class RunLockedError(RunFolderError):
    pass


RECORD_KEYS = ("index", "pred", "label", "conf")
# fingerprint keys holding the sha256 of an input file: FILE_SHA256.<role> (e.g. MODEL.PRETRAINED)
INPUT_HASH_PREFIX = "FILE_SHA256."
TEST_SET_KEYS = ("TEST_SET.N_IMAGES", "TEST_SET.ITEMS_SHA256", "TEST_SET.CLASSNAMES_SHA256")
ROOT_KEY = "TEST_SET.ROOT"   # an own ImageFolder's absolute location (LOCATED_DATASETS)


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
    out = {"TEST_SET.N_IMAGES": len(items), "TEST_SET.ITEMS_SHA256": _sha(items),
           "TEST_SET.CLASSNAMES_SHA256": _sha(list(dataset.classnames))}
    if type(dataset).__name__ in LOCATED_DATASETS:
        out[ROOT_KEY] = os.path.abspath(root) if root else ""
    return out


def run_fingerprint(cfg, dataset, device_type: Optional[str] = None,
                    inputs: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """The fingerprint stored in ``config.json``: result-defining config keys plus the test set,
    (when given) the device type the run computes on (cuda: fp16 autocast; cpu: fp32) and the
    sha256 of every input file (``inputs``: role -> sha256, stored as ``FILE_SHA256.<role>``)."""
    fp = result_fingerprint(cfg)
    fp.update(data_fingerprint(dataset))
    if device_type is not None:
        fp["RUN.DEVICE_TYPE"] = str(device_type)
    for role, digest in (inputs or {}).items():
        fp[INPUT_HASH_PREFIX + role] = str(digest)
    return dict(sorted(fp.items()))


def config_hash(fp: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


# the online stream's order, by its sha256 (argtca/trainers/zoo.py)
STREAM_ORDER_KEY = "STREAM.ORDER_SHA256"


def seed_axis_keys(fp: Dict[str, object]) -> List[str]:
    """The fingerprint keys that follow the seed: ``SEED`` itself and, when the online stream is
    shuffled by the run's seed (``TTA.STREAM.SEED`` < 0, the default), the order's hash. Seeds
    of one experiment differ in these keys only; a fixed stream seed or the split file's order
    is a setting like any other."""
    keys = ["SEED"]
    try:
        own_seed = int(fp.get("TTA.STREAM.SEED", -1)) >= 0
    except (TypeError, ValueError):
        own_seed = True
    if not own_seed and str(fp.get("TTA.STREAM.ORDER", "shuffle")) != "index":
        keys.append(STREAM_ORDER_KEY)
    return keys


def experiment_settings(fp: Dict[str, object]) -> Dict[str, object]:
    """The fingerprint without the keys that follow the seed (:func:`seed_axis_keys`)."""
    axis = set(seed_axis_keys(fp))
    return {k: v for k, v in fp.items() if k not in axis}


def experiment_hash(fp: Dict[str, object]) -> str:
    """Eight hex digits naming an experiment: the run fingerprint without the seed and what
    follows it (:func:`seed_axis_keys`: the seeds of one experiment, and the stream orders they
    draw, share a folder ``<hash>/seed<N>``; any other difference gives another)."""
    rest = experiment_settings(fp)
    return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()[:8]


def read_json_file(path: str, what: str, fix: str):
    """A JSON object from ``path``; RunFolderError naming the file and ``fix`` when it is not."""
    return read_json_object(path, what, fix, error=RunFolderError)


def _has_records(out_dir: str) -> List[str]:
    """The record files of ``out_dir`` that hold anything (main file and torchrun rank files)."""
    import glob
    paths = [os.path.join(out_dir, "records.jsonl")] + sorted(
        glob.glob(os.path.join(out_dir, "records.rank*.jsonl")))
    return [p for p in paths if os.path.isfile(p) and os.path.getsize(p) > 0]


def has_records(out_dir: str) -> bool:
    return bool(_has_records(out_dir))


def _diff(old: Dict[str, object], new: Dict[str, object]) -> List[str]:
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def _changed_inputs(old: Dict[str, object], new: Dict[str, object],
                    paths: Dict[str, str]) -> List[str]:
    """One phrase per input file whose content differs from the one the records were made from."""
    out = []
    for k in sorted(set(old) | set(new)):
        if not k.startswith(INPUT_HASH_PREFIX) or old.get(k) == new.get(k):
            continue
        role = k[len(INPUT_HASH_PREFIX):]
        where = paths.get(role, role)
        if k not in old:
            out.append(f"{role} {where} (sha256 {new[k]}) was not read by the run that made "
                       f"these records")
        elif k not in new:
            out.append(f"{role} {where} read by the run that made these records (sha256 "
                       f"{old[k]}) is not read now")
        else:
            out.append(f"{role} {where} changed since these records were made (sha256 "
                       f"{old[k]} then, {new[k]} now)")
    return out


# files a run derives from its settings before its first record; stale once config.json changes
DERIVED_FILES = ("temperature.json", "phase1.json", "summary.json", "derived.json")


def _config_defaults() -> Dict[str, object]:
    """Every default config key, flattened and JSON-normalised as in a fingerprint."""
    global _DEFAULTS
    if _DEFAULTS is None:
        _DEFAULTS = json.loads(json.dumps(flatten_cfg(get_cfg_default()), default=str))
    return _DEFAULTS


_DEFAULTS: Optional[Dict[str, object]] = None


def check_or_write_fingerprint(out_dir: str, fp: Dict[str, object],
                               paths: Optional[Dict[str, str]] = None) -> None:
    """Compare ``fp`` with ``out_dir/config.json`` (refusing a different one, naming the keys, or
    for an input file its path and both sha256), or write it for a fresh folder. A folder whose
    run wrote no record yet (it stopped before its first image) is taken over, saying so.
    Records without a ``config.json`` are refused. ``paths``: role -> path of each input file."""
    path = os.path.join(out_dir, "config.json")
    want = json.loads(json.dumps(fp, default=str))
    start_over = f"delete {out_dir} (or pass another --output-dir) to start over"
    if os.path.isfile(path):
        found = _has_records(out_dir)
        try:
            old = read_json_file(path, "the run's configuration fingerprint",
                                 f"it records what made the records next to it; restore it, or "
                                 f"{start_over}")
        except RunFolderError:
            if found:
                raise
            old = None   # a damaged fingerprint of a run that recorded nothing: nothing to keep
        if old is not None and not found and old != want:
            old = None
        if old is None:
            _replace_unstarted(out_dir, path, want)
            return
        cmp = dict(old)
        if not any(k in old for k in TEST_SET_KEYS):
            # written before the fingerprint covered the test set: every reused record is still
            # checked against the dataset's item at its index (check_records)
            cmp.update({k: want[k] for k in TEST_SET_KEYS if k in want})
        if "DATASET.ROOT" in old:
            # written while the data root was part of the fingerprint: an own ImageFolder's root
            # is its TEST_SET.ROOT now; any other dataset is identified by its TEST_SET keys
            root = cmp.pop("DATASET.ROOT")
            if ROOT_KEY in want and ROOT_KEY not in old:
                cmp[ROOT_KEY] = os.path.abspath(str(root)) if root else ""
        if not any(k.startswith(INPUT_HASH_PREFIX) for k in old):
            # written before input files were hashed: what made these records cannot be checked
            # any more; from now on the folder records (and checks) them
            cmp.update({k: v for k, v in want.items() if k.startswith(INPUT_HASH_PREFIX)})
        added = {k: v for k, v in want.items() if k not in cmp and k in _config_defaults()
                 and v == _config_defaults()[k]}
        # a config key added after these records were written, at its default value, cannot
        # have changed them (what the code did then is what the default does now)
        cmp.update(added)
        if cmp != want:
            files = _changed_inputs(cmp, want, paths or {})
            diff = [d for d in _diff(cmp, want) if not d.startswith(INPUT_HASH_PREFIX)]
            data = any(k in TEST_SET_KEYS for k in set(cmp) ^ set(want)) or any(
                cmp.get(k) != want.get(k) for k in TEST_SET_KEYS)
            why = ("the test set changed since these records were made (split file, image list "
                   "or class names): " if data else "")
            parts = files + diff
            raise ConfigMismatchError(
                f"{out_dir} holds results of a different configuration ({why}"
                f"{'; '.join(parts[:6])}{' ...' if len(parts) > 6 else ''}); use another "
                f"--output-dir or delete {out_dir} to start over")
        if old != want:   # add the test-set keys / input hashes to an older fingerprint
            write_json(path, want, sort_keys=True)
        return
    found = _has_records(out_dir)
    if found:
        raise RunFolderError(
            f"{found[0]} holds records but {path} (the fingerprint of the configuration and test "
            f"set that made them) is missing, so they cannot be checked: restore config.json, or "
            f"{start_over}")
    write_json(path, want, sort_keys=True)


def _replace_unstarted(out_dir: str, path: str, want: Dict[str, object]) -> None:
    """The folder of a run that stopped before its first record (e.g. weights not found): its
    settings are replaced by this run's, and what it derived from them is removed."""
    stale = [n for n in DERIVED_FILES if os.path.isfile(os.path.join(out_dir, n))]
    for n in stale:
        try:
            os.remove(os.path.join(out_dir, n))
        except OSError as e:
            raise os_error(e, os.path.join(out_dir, n)) from None
    what = "config.json" + (f" (and {', '.join(stale)}, removed)" if stale else "")
    print(f"argtca: {out_dir} held no records (its run stopped before its first image): its "
          f"{what} of other settings is replaced by this run's", file=sys.stderr, flush=True)
    write_json(path, want, sort_keys=True)


# ------------------------------------------------------------------------------ derived files
DERIVED_LEDGER = "derived.json"


def record_derived(out_dir: str, name: str) -> str:
    """Note the sha256 of ``out_dir/name`` (a file the run derived and will re-read, e.g.
    ``temperature.json``) in ``derived.json``; returns the hash."""
    from argtca.utils.hashing import file_sha256
    digest = file_sha256(os.path.join(out_dir, name))
    ledger = os.path.join(out_dir, DERIVED_LEDGER)
    data = {}
    if os.path.isfile(ledger):
        try:
            data = read_json_object(ledger, "hashes of derived files", "", error=ValueError)
        except ValueError:
            data = {}
    data[name] = digest
    write_json(ledger, data, sort_keys=True)
    return digest


def check_derived(out_dir: str, name: str, fix: str) -> Optional[str]:
    """The sha256 of ``out_dir/name`` when it is the file this folder's run derived (or when no
    hash was noted: older folders); None when the file is absent. RunFolderError naming the file
    and both hashes when it was changed since."""
    from argtca.utils.hashing import file_sha256
    p = os.path.join(out_dir, name)
    if not os.path.isfile(p):
        return None
    digest = file_sha256(p)
    ledger = os.path.join(out_dir, DERIVED_LEDGER)
    if os.path.isfile(ledger):
        data = read_json_file(ledger, "the hashes of the files this run derived", fix)
        noted = data.get(name)
        if noted is not None and noted != digest:
            raise RunFolderError(f"{p} changed since this run wrote it (sha256 {noted} then, "
                                 f"{digest} now): the records were made with the file as "
                                 f"written; {fix}")
    return digest


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


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):   # someone else's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class RunLock:
    """``with RunLock(out_dir):`` — an exclusive lock (``filelock``) on ``out_dir/run.lock`` while a
    run writes the folder. The file holds the owner's pid, host, start time and command, which the
    error of a second run names.

    The lock belongs to the run's main process: filelock closes its descriptor in forked
    children (loader workers fork after the lock is taken), so the lock ends with the main
    process even while its workers linger. A lock still held although the pid it names is dead
    (on this host) is taken over, saying so: its holder is an orphan of that run. The file itself
    stays (removing it would race with a new owner)."""

    def __init__(self, out_dir: str):
        self.path = os.path.join(out_dir, LOCK_NAME)
        self.lock = None

    def _try(self):
        from filelock import FileLock, Timeout
        lock = FileLock(self.path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return None
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP):   # some network mounts
                print(f"warning: cannot lock {self.path} ({e.strerror}): one writer per folder "
                      f"is not enforced on this file system", file=sys.stderr)
                return False
            raise os_error(e, self.path) from None
        return lock

    def acquire(self) -> "RunLock":
        lock = self._try()
        if lock is None:
            info = self._owner()
            pid = info.get("pid")
            if (isinstance(pid, int) and info.get("host") == socket.gethostname()
                    and pid != os.getpid() and not _pid_alive(pid)):
                # the named run is dead and something it started holds the lock: a new file
                print(f"argtca: {os.path.dirname(self.path) or '.'}: the run that held it (pid "
                      f"{pid}, started {info.get('started', '?')}) is no longer running; "
                      f"taking over its lock", file=sys.stderr, flush=True)
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise os_error(e, self.path) from None
                lock = self._try()
            if lock is None:
                raise RunLockedError(self._locked_message())
        if lock is False:
            return self
        self.lock = lock
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
        try:   # another descriptor on the file: writing it leaves the lock as it is
            with open(self.path, "w") as f:
                f.write(json.dumps(info) + "\n")
        except OSError as e:
            self.release()
            raise os_error(e, self.path) from None
        return self

    def _owner(self) -> dict:
        try:
            with open(self.path) as f:
                info = json.loads(f.read() or "{}")
        except (OSError, ValueError):
            info = {}
        return info if isinstance(info, dict) else {}

    def _locked_message(self) -> str:
        info = self._owner()
        who = (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
               f"{info.get('started', '?')}: {info.get('command', '?')}") if info else \
            "another process (it has not recorded its details yet)"
        return (f"{os.path.dirname(self.path) or '.'} is being written by another run ({who}); "
                f"one run per output folder: wait for it to finish (then this command resumes "
                f"or reuses its records) or pass another --output-dir")

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
