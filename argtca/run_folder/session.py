"""One run's life in its folder, the same for every way a run executes (one process, a torchrun
job, an online method's stream): :class:`RunSession`.

    with RunSession(out_dir, dataset, fingerprint, input_paths=..., settings=...) as session:
        ...  # session.records: this folder's checked records; tune the rest, write, finish

On entry, in this order: the folder is made (or found), the experiment's ``settings.json`` is
written where the run names its folder by hash, the folder's lock is taken (one writer), the
caller's own checks run (which provider made the records), ``config.json`` is checked or written,
the records are read (a torchrun job's rank files folded in) and checked against the dataset, and
a resume under other code is refused (or recorded). On leaving with an error before the run
started writing records, what it made is removed (argtca/run_folder/unstarted.py); the lock is
always released. These are the guarantees of docs/guarantees.md ("Resume is exact", "One writer
per folder", "Fingerprint", "Code has an identity", "A failed start blocks nothing"); keeping them
in one object means a change to them is made once for every execution mode.

Under torchrun, rank 0 alone does the folder's work (``rank``); ``agree`` is then called on every
rank with rank 0's error (None when it had none) and raises on every rank where there was one,
so no rank starts a loop on a folder rank 0 refused. Knowing nothing of trainers, the session
takes what a run is as values and callables (the trainer builds it:
``RunIdentity.run_session``).
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence

from argtca.run_folder.folder import check_code, check_or_write_fingerprint
from argtca.run_folder.lock import RunLock
from argtca.run_folder.records import check_records, fold_rank_files, load_records
from argtca.run_folder.unstarted import empty_unstarted, missing_dirs, remove_made
from argtca.utils.io import write_json

__all__ = ["RunSession"]


class RunSession:
    """``with RunSession(...) as session:`` around everything a run does in ``out_dir``.

    ``dataset``: the test set the records are checked against (``.test`` items).
    ``fingerprint``: returns the run's fingerprint; called once the lock is held (a run whose
    inputs cannot be read fails holding it, so that what it made is removed).
    ``input_paths``: returns role -> path of the input files (named by a refusal).
    ``settings``: returns the experiment folder's ``settings.json`` content, written into the
    folder above ``out_dir`` when missing; None where ``out_dir`` was named by the user.
    ``checks``: called with ``out_dir`` under the lock, before ``config.json`` is compared (a
    check that names the cause better than a differing key can).
    ``allow_code_change``: ``RUN.CODE_CHANGE allow``.
    ``rank``: this process's torchrun rank; only rank 0 touches the folder.
    ``rank_files``: fold ``records.rank<r>.jsonl`` of an interrupted torchrun job into
    ``records.jsonl`` (a one-process run leaves its records file as written: a stream's is in
    stream order).
    ``agree``: collective, called on every rank with rank 0's error or None (torchrun).

    After entry (rank 0): ``fingerprint``, ``records`` (checked) and ``records_path``."""

    def __init__(self, out_dir: str, dataset, fingerprint: Callable[[], Dict[str, object]], *,
                 input_paths: Callable[[], Dict[str, str]] = dict,
                 settings: Optional[Callable[[], dict]] = None,
                 checks: Sequence[Callable[[str], None]] = (),
                 allow_code_change: bool = False, rank: int = 0, rank_files: bool = False,
                 agree: Optional[Callable[[Optional[BaseException]], None]] = None):
        self.out_dir = out_dir
        self.dataset = dataset
        self._fingerprint = fingerprint
        self._input_paths = input_paths
        self._settings = settings
        self._checks = tuple(checks)
        self.allow_code_change = allow_code_change
        self.rank = rank
        self.rank_files = rank_files
        self._agree = agree
        self.records_path = os.path.join(out_dir, "records.jsonl")
        self.fingerprint: Dict[str, object] = {}
        self.records: List[dict] = []
        self._made: List[str] = []
        self._before: set = set()
        self._lock: Optional[RunLock] = None
        self._started = False

    # ------------------------------------------------------------------ entry
    def _open(self) -> None:
        out_dir = self.out_dir
        # what a run that fails before its first record made is removed on the way out: the
        # corrected command may have another hash, and would never reuse it
        self._made = missing_dirs(out_dir)
        self._before = set() if self._made else set(os.listdir(out_dir))
        os.makedirs(out_dir, exist_ok=True)
        if self._settings is not None:   # what the experiment folder <hash8>/ stands for
            path = os.path.join(os.path.dirname(out_dir), "settings.json")
            if not os.path.isfile(path):   # the same content for every seed: written once
                write_json(path, self._settings(), default=str)
        # one writer per folder: a second run here is refused; the lock dies with this process
        self._lock = RunLock(out_dir).acquire()
        fp = self._fingerprint()   # config + test set + device + input file contents
        for check in self._checks:
            check(out_dir)
        check_or_write_fingerprint(out_dir, fp, self._input_paths())
        records = fold_rank_files(out_dir) if self.rank_files else load_records(self.records_path)
        check_records(records, self.dataset, self.records_path)   # each one is the dataset's item
        # a resume under other code than the records' is refused (or recorded, when allowed)
        check_code(out_dir, fp, len(records), len(self.dataset.test),
                   allow=self.allow_code_change)
        self.fingerprint, self.records = fp, records

    def __enter__(self) -> "RunSession":
        try:
            err = None
            if self.rank == 0:
                try:
                    self._open()
                except Exception as e:   # noqa: BLE001 (told to the other ranks, then raised)
                    err = e
            if self._agree is not None:
                self._agree(err)
            if err is not None:
                raise err
        except BaseException as e:
            self.__exit__(type(e), e, e.__traceback__)
            raise
        return self

    def started(self) -> None:
        """From here on a record may have been written where ``records.jsonl`` does not show it
        (a torchrun rank's own file): a failure keeps the folder. A one-process run need not say
        it: its records are in ``records.jsonl``, which is never removed."""
        self._started = True

    # ------------------------------------------------------------------ exit
    def __exit__(self, kind, e, tb) -> bool:
        # an error (not Ctrl-C: the run resumes) before the first record leaves nothing behind
        failed = isinstance(e, Exception) and not self._started
        try:
            if failed and self._lock is not None:
                empty_unstarted(self.out_dir, self._before)   # while the lock is held
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            if failed and self._made:
                remove_made(self._made, os.path.dirname(os.path.abspath(self.out_dir)))
        return False
