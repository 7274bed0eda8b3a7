"""The launch record, ``<out-root>/launches/<plan>.json``: what each launch of a plan submitted
(its launcher, log folder and tasks: job ids and run names), read back by ``collect``.

The record is plain JSON that a user can edit, so nothing in it is trusted as a path: the logs
of its tasks are looked up only in the launch's own log folder (``<out-root>/launches/logs``, next
to the record), a job id must be one (digits, ``12_3`` for an array task), and a record naming
another folder is refused rather than followed. Each defect is one line naming the file, the
value and the fix."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from ..plan import ExperimentError
from .jobs import JOB_ID

LOG_FOLDER = "%j"   # submitit's folder of one job: <out-root>/launches/logs/<job id>


def log_folder(record: Path) -> Path:
    """The launch's own log folder: next to its record."""
    return Path(record).parent / "logs" / LOG_FOLDER


@dataclass
class RecordedTask:
    launcher: str                 # local | slurm
    job_id: Optional[str]         # None: a local task this launch never started
    runs: List[str]


_FIX = ("restore it, or delete it (collect then reads what finished from the run folders "
        "alone)")


def read_record(record: Path) -> List[RecordedTask]:
    """Every task of every launch in ``record``, oldest first; ExperimentError (one line) for a
    record that is not JSON, lacks a key, or names a folder other than the launch's own."""
    record = Path(record)
    try:
        text = record.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ExperimentError(f"launch record {record}: not UTF-8 text; {_FIX}") from None
    except OSError as e:
        raise ExperimentError(f"launch record {record}: cannot be read ({e.strerror})") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ExperimentError(f"launch record {record}: not JSON ({e}); {_FIX}") from None
    own = str(log_folder(record).resolve())

    def bad(where: str, what: str) -> ExperimentError:
        return ExperimentError(f"launch record {record}: {where}: {what}; {_FIX}")

    if not isinstance(data, dict) or not isinstance(data.get("launches"), list):
        raise bad("top level", "expected an object with a 'launches' list")
    out: List[RecordedTask] = []
    for i, launch in enumerate(data["launches"], 1):
        where = f"launch {i}"
        if not isinstance(launch, dict):
            raise bad(where, f"expected an object, got {json.dumps(launch)[:80]}")
        for key in ("launcher", "folder", "tasks"):
            if key not in launch:
                raise bad(where, f"no {key!r} (every launch the launcher writes has "
                                 f"launcher, folder and tasks)")
        if launch["launcher"] not in ("local", "slurm"):
            raise bad(where, f"launcher {launch['launcher']!r}: expected 'local' or 'slurm'")
        folder = launch["folder"]
        if not isinstance(folder, str) or str(Path(folder).resolve()) != own:
            # never followed: the task logs and results of a launch are read only next to its
            # record, whatever a hand-edited record says
            raise bad(where, f"folder {folder!r} is not this launch's log folder {own} (the "
                             f"logs are read only there)")
        if not isinstance(launch["tasks"], list):
            raise bad(where, f"tasks {json.dumps(launch['tasks'])[:80]}: expected a list")
        for k, t in enumerate(launch["tasks"], 1):
            w = f"{where}, task {k}"
            if not isinstance(t, dict) or not isinstance(t.get("runs"), list) or not all(
                    isinstance(r, str) for r in t["runs"]):
                raise bad(w, f"{json.dumps(t)[:80]}: expected {{\"job_id\": ..., \"runs\": "
                             f"[run names]}}")
            job_id = t.get("job_id")
            if job_id is not None and not (isinstance(job_id, (str, int))
                                           and JOB_ID.match(str(job_id))):
                raise bad(w, f"job_id {json.dumps(job_id)[:80]}: expected a job id such as "
                             f"1234 or 1234_5")
            out.append(RecordedTask(launch["launcher"],
                                    None if job_id is None else str(job_id), list(t["runs"])))
    return out

