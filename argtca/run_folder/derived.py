"""The ledger of files a run derives and re-reads (``temperature.json``): their sha256 in
``derived.json``, checked when the run reads them again."""
from __future__ import annotations

import os
from typing import Optional

from argtca.run_folder.errors import RunFolderError
from argtca.run_folder.folder import read_json_file
from argtca.utils.hashing import file_sha256
from argtca.utils.io import read_json_object, write_json

DERIVED_LEDGER = "derived.json"


def record_derived(out_dir: str, name: str) -> str:
    """Note the sha256 of ``out_dir/name`` (a file the run derived and will re-read, e.g.
    ``temperature.json``) in ``derived.json``; returns the hash."""
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
