"""The run folder's check: its ``config.json`` against this run's fingerprint.

A folder made with another fingerprint is refused, naming the differing keys (or, for an input
file, its path and both sha256); records without a ``config.json`` are refused (nothing says what
made them); a folder whose run recorded nothing (it stopped before its first image) is taken
over, saying so. Fingerprints written by older versions are brought up to date first
(:func:`_upgrade`)."""
from __future__ import annotations

import glob
import json
import os
import sys
from typing import Dict, List, Optional

from argtca.run_folder.errors import ConfigMismatchError, RunFolderError
from argtca.run_folder.fingerprint import (INPUT_HASH_PREFIX, ROOT_KEY, TEST_SET_KEYS,
                                           TUNING_KEYS, config_defaults, unread_node_keys)
from argtca.utils.code import RESUMED_KEY, code_id, is_code_key, without_code
from argtca.utils.io import os_error, read_json_object, write_json

# files a run derives from its settings before its first record; stale once config.json changes
DERIVED_FILES = ("temperature.json", "phase1.json", "summary.json", "derived.json")


def read_json_file(path: str, what: str, fix: str):
    """A JSON object from ``path``; RunFolderError naming the file and ``fix`` when it is not."""
    return read_json_object(path, what, fix, error=RunFolderError)


def record_files(out_dir: str) -> List[str]:
    """The record files of ``out_dir`` that hold anything (main file and torchrun rank files)."""
    paths = [os.path.join(out_dir, "records.jsonl")] + sorted(
        glob.glob(os.path.join(out_dir, "records.rank*.jsonl")))
    return [p for p in paths if os.path.isfile(p) and os.path.getsize(p) > 0]


def has_records(out_dir: str) -> bool:
    return bool(record_files(out_dir))


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


def _upgrade(old: Dict[str, object], want: Dict[str, object]) -> Dict[str, object]:
    """``old`` (a stored fingerprint) as this version would have written it for the same run,
    where an older version left something out; compared with ``want`` afterwards."""
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
    # written while a fingerprint held every method's node: the nodes this run does not read
    # cannot have changed its records
    for k in unread_node_keys(old, want):
        cmp.pop(k)
    # written while every --plugin of a command entered all its runs: a plug-in file this run
    # takes no code from (argtca/trainers/identity.py plugin_code_files) is not read by it
    for k in [k for k in cmp if k.startswith(PLUGIN_HASH_PREFIX) and k not in want]:
        cmp.pop(k)
    # written while a fingerprint held keys this run does not read (a tuning step's keys of a
    # method without one): they cannot have changed its records
    for k in [k for k in cmp if k in TUNING_KEYS and k not in want]:
        cmp.pop(k)
    # a config key added after these records were written, at its default value, cannot
    # have changed them (what the code did then is what the default does now)
    defaults = config_defaults()
    cmp.update({k: v for k, v in want.items()
                if k not in cmp and k in defaults and v == defaults[k]})
    return cmp


PLUGIN_HASH_PREFIX = INPUT_HASH_PREFIX + "PLUGIN."


def fingerprint_differences(old: Dict[str, object], want: Dict[str, object]) -> List[str]:
    """``key: old -> now`` for each key where ``old`` (a stored fingerprint: ``config.json``, an
    online method's ``stream_state.pt``), brought up to date by :func:`_upgrade`, differs from
    ``want``; the code aside (:func:`check_code`'s). The one comparison of a stored fingerprint,
    so that a state and the folder it lives in are judged alike."""
    want = without_code(want)
    return _diff(_upgrade(without_code(old), want), want)


def compatible_folder(exp_root: str, seed: object, fp: Dict[str, object]) -> Optional[str]:
    """A run folder ``<exp_root>/<hash8>/seed<N>`` whose ``config.json`` an earlier version wrote
    for this very run under another ``<hash8>`` (its fingerprint then held keys this version
    leaves out, e.g. a ``--plugin`` file of a run that takes no code from it): the run re-reads
    or resumes it there rather than starting over (its config.json is brought up to date, saying
    so). None when there is none."""
    want = without_code(json.loads(json.dumps(fp, default=str)))
    for path in sorted(glob.glob(os.path.join(glob.escape(exp_root), "*", f"seed{seed}",
                                              "config.json"))):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(old, dict) and old and _upgrade(without_code(old), want) == want:
            return os.path.dirname(path)
    return None


def _mismatch(out_dir: str, cmp: Dict[str, object], want: Dict[str, object],
              paths: Dict[str, str]) -> ConfigMismatchError:
    files = _changed_inputs(cmp, want, paths)
    diff = [d for d in _diff(cmp, want) if not d.startswith(INPUT_HASH_PREFIX)]
    data = any(k in TEST_SET_KEYS for k in set(cmp) ^ set(want)) or any(
        cmp.get(k) != want.get(k) for k in TEST_SET_KEYS)
    why = ("the test set changed since these records were made (split file, image list "
           "or class names): " if data else "")
    parts = files + diff
    return ConfigMismatchError(
        f"{out_dir} holds results of a different configuration ({why}"
        f"{'; '.join(parts[:6])}{' ...' if len(parts) > 6 else ''}); use another "
        f"--output-dir or delete {out_dir} to start over")


def check_or_write_fingerprint(out_dir: str, fp: Dict[str, object],
                               paths: Optional[Dict[str, str]] = None) -> None:
    """Compare ``fp`` with ``out_dir/config.json`` (refusing a different one, naming the keys, or
    for an input file its path and both sha256), or write it for a fresh folder. A folder whose
    run wrote no record yet (it stopped before its first image) is taken over, saying so.
    Records without a ``config.json`` are refused. ``paths``: role -> path of each input file."""
    path = os.path.join(out_dir, "config.json")
    want = json.loads(json.dumps(fp, default=str))
    start_over = f"delete {out_dir} (or pass another --output-dir) to start over"
    found = record_files(out_dir)
    if not os.path.isfile(path):
        if found:
            raise RunFolderError(
                f"{found[0]} holds records but {path} (the fingerprint of the configuration and "
                f"test set that made them) is missing, so they cannot be checked: restore "
                f"config.json, or {start_over}")
        write_json(path, want, sort_keys=True)
        return
    try:
        old = read_json_file(path, "the run's configuration fingerprint",
                             f"it records what made the records next to it; restore it, or "
                             f"{start_over}")
    except RunFolderError:
        if found:
            raise
        old = None   # a damaged fingerprint of a run that recorded nothing: nothing to keep
    if old is None or (not found and old != want):
        _replace_unstarted(out_dir, path, want)
        return
    # the code that made the records is checked on resume (check_code), and stays recorded
    code = {k: v for k, v in old.items() if is_code_key(k)}
    cmp = _upgrade(without_code(old), without_code(want))
    if cmp != without_code(want):
        raise _mismatch(out_dir, cmp, without_code(want), paths or {})
    if without_code(old) != without_code(want):   # add the test-set keys / input hashes
        dropped = sorted(k[len(PLUGIN_HASH_PREFIX):] for k in old
                         if k.startswith(PLUGIN_HASH_PREFIX) and k not in want)
        if dropped:
            print(f"argtca: {out_dir}: its config.json, written by an earlier argtca, also named "
                  f"the plug-in file(s) {', '.join(dropped)}, which this run takes no code from; "
                  f"they are dropped from it and its records kept", file=sys.stderr, flush=True)
        write_json(path, dict(without_code(want), **code), sort_keys=True)


def check_code(out_dir: str, fp: Dict[str, object], n_records: int, n_total: int,
               allow: bool = False) -> None:
    """A resume (records made, some still to make) under other code than the records' (argtca's
    version or source, argtca/utils/code.py) is refused in one line naming both, unless
    ``allow`` (``RUN.CODE_CHANGE allow``): then the switch is recorded in ``config.json``
    (``CODE.RESUMED_UNDER``). A finished run is re-read under any code: its ``config.json``
    keeps the code that made it."""
    if not n_records or n_records >= n_total:
        return
    path = os.path.join(out_dir, "config.json")
    try:
        old = read_json_file(path, "the run's configuration fingerprint", "restore it")
    except RunFolderError:
        return   # check_or_write_fingerprint has named it
    now = {k: v for k, v in fp.items() if is_code_key(k) and k != RESUMED_KEY}
    then = {k: v for k, v in old.items() if is_code_key(k) and k != RESUMED_KEY}
    under = list(old.get(RESUMED_KEY) or [])
    last = under[-1] if under else then
    if last == now:
        return
    if not allow:
        raise ConfigMismatchError(
            f"{out_dir} holds {n_records} of {n_total} records made by {code_id(then)}, but this "
            f"is {code_id(now)}: resuming would mix two versions' records in one run; finish it "
            f"with the code that started it, or resume anyway with RUN.CODE_CHANGE allow (the "
            f"switch is recorded in its config.json), or delete {out_dir} to start over")
    old[RESUMED_KEY] = under + [dict(now, AT_RECORD=n_records)]
    write_json(path, old, sort_keys=True)
    print(f"argtca: {out_dir}: {n_records} records made by {code_id(then)} resumed under "
          f"{code_id(now)} (RUN.CODE_CHANGE allow; recorded as {RESUMED_KEY} in config.json)",
          file=sys.stderr, flush=True)


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
