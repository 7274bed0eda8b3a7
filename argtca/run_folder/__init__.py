"""A run folder: per-image JSONL records, the fingerprint of an output directory, its lock, and
resuming.

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
  dataset's item at that index.

One module per concern: :mod:`~argtca.run_folder.fingerprint` (what identifies a run, the
experiment's hash), :mod:`~argtca.run_folder.folder` (``config.json`` checked or written),
:mod:`~argtca.run_folder.derived` (``derived.json``), :mod:`~argtca.run_folder.records` and
:mod:`~argtca.run_folder.lock`; their public names are imported here. The sequence a run goes
through in its folder, whichever way it executes, is :class:`~argtca.run_folder.session.RunSession`
(:mod:`~argtca.run_folder.session`)."""
from argtca.run_folder.derived import DERIVED_LEDGER, check_derived, record_derived
from argtca.run_folder.errors import ConfigMismatchError, RunFolderError, RunLockedError
from argtca.run_folder.fingerprint import (INPUT_HASH_PREFIX, LOCATED_DATASETS, NON_RESULT_KEYS,
                                           ROOT_KEY, STREAM_ORDER_KEY, TEST_SET_KEYS,
                                           config_defaults, config_hash, data_fingerprint,
                                           experiment_hash, experiment_settings, flatten_cfg,
                                           json_sha256, result_fingerprint, run_fingerprint,
                                           seed_axis_keys, trainer_node, unread_node_keys)
from argtca.run_folder.folder import (DERIVED_FILES, check_code, check_or_write_fingerprint,
                                      compatible_folder, fingerprint_differences, has_records,
                                      read_json_file, record_files)
from argtca.run_folder.lock import LOCK_NAME, RunLock
from argtca.run_folder.records import (RECORD_KEYS, RecordWriter, check_records, fold_rank_files,
                                       load_records, merge_records, write_records)
from argtca.run_folder.session import RunSession

__all__ = ["DERIVED_LEDGER", "check_derived", "record_derived", "ConfigMismatchError",
           "RunFolderError", "RunLockedError", "INPUT_HASH_PREFIX", "LOCATED_DATASETS",
           "NON_RESULT_KEYS", "ROOT_KEY", "STREAM_ORDER_KEY", "TEST_SET_KEYS", "config_defaults",
           "config_hash", "data_fingerprint", "experiment_hash", "experiment_settings",
           "flatten_cfg", "json_sha256", "result_fingerprint", "run_fingerprint", "seed_axis_keys",
           "trainer_node", "unread_node_keys",
           "DERIVED_FILES", "check_code", "check_or_write_fingerprint", "compatible_folder",
           "fingerprint_differences", "has_records",
           "read_json_file",
           "record_files", "LOCK_NAME", "RunLock", "RECORD_KEYS", "RecordWriter", "check_records",
           "fold_rank_files", "load_records", "merge_records", "write_records", "RunSession"]
