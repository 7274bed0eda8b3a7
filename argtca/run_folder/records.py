"""The per-image records (``records.jsonl``): read and checked (:func:`load_records`,
:func:`check_records`), rewritten atomically (:func:`write_records`) and appended
(:class:`RecordWriter`); a torchrun job's rank files folded into it (:func:`fold_rank_files`).

A torn last line (a kill mid-write) is dropped and the file repaired; a bad line anywhere else is
an error naming the line; an image index recorded twice keeps one copy (an error if the copies
disagree); every index must be in range, every number the metrics read (conf, p_label, brier)
finite and in its range, and every record's path and label must be the dataset's item at that
index."""
from __future__ import annotations

import glob
import json
import math
import os
import time
from typing import Dict, Iterable, List, Optional, Sequence

from argtca.run_folder.errors import RunFolderError
from argtca.run_folder.fingerprint import rel_item_path
from argtca.utils.io import os_error

RECORD_KEYS = ("index", "pred", "label", "conf")


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


# the numbers of a record the metrics read, each with its range: probabilities, and the Brier
# score of one image (at most 2); SLACK absorbs float32 rounding of a probability's mean
RECORD_NUMBERS = {"conf": (0.0, 1.0), "p_label": (0.0, 1.0), "brier": (0.0, 2.0)}
SLACK = 1e-6


def number_problem(r: dict) -> Optional[str]:
    """Why a number of record ``r`` that the metrics read cannot be used (None when each can):
    ``conf``, and ``p_label`` / ``brier`` when the record has them, must be finite numbers in
    their ranges (a NaN would end the report, an out-of-range one would be counted silently)."""
    for k, (lo, hi) in RECORD_NUMBERS.items():
        v = r.get(k)
        if v is None and k != "conf":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"{k}={v!r} is not a number"
        if not math.isfinite(v):
            return f"{k}={v} is not a finite number"
        if not lo - SLACK <= v <= hi + SLACK:
            return f"{k}={v} is outside [{lo:g}, {hi:g}]"
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
        problem = number_problem(r)
        if problem is not None:
            raise RunFolderError(
                f"{path}:{ln}: image index {r['index']} ({r.get('path', '?')}): {problem} (an "
                f"edited file, or a run before prediction checks existed); {fix}")
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
    rel = rel_item_path(impath, root)
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


# ------------------------------------------------------------------ a torchrun job's rank files
# rank r of a torchrun job appends its images to records.rank<r>.jsonl (argtca/trainers/
# distributed.py); rank 0 folds them into records.jsonl when the job starts and when it ends
def merge_records(parts: Iterable[Iterable[dict]]) -> List[dict]:
    """Records of all ranks -> one list sorted by ``index``. The same index twice (a resumed rank
    that re-did an image) must carry the same prediction; the first copy is kept."""
    out: Dict[int, dict] = {}
    for part in parts:
        for r in part:
            i = int(r["index"])
            if i in out:
                a, b = out[i], r
                if (a["pred"], a["label"]) != (b["pred"], b["label"]) or \
                        abs(a["conf"] - b["conf"]) > 1e-4:
                    raise RuntimeError(f"image index {i} was recorded twice with different "
                                       f"results ({a} vs {b}); delete the output directory and "
                                       f"run again")
                continue
            out[i] = r
    return [out[i] for i in sorted(out)]


def fold_rank_files(out_dir: str) -> List[dict]:
    """Merge ``records.jsonl`` and every ``records.rank*.jsonl`` of ``out_dir`` into
    ``records.jsonl`` (sorted by index), delete the rank files, return the records."""
    main = os.path.join(out_dir, "records.jsonl")
    rank_files = sorted(glob.glob(os.path.join(out_dir, "records.rank*.jsonl")))
    merged = merge_records([load_records(main)] + [load_records(p) for p in rank_files])
    if rank_files or os.path.isfile(main):
        write_records(main, merged)
    for p in rank_files:
        os.remove(p)
    return merged
