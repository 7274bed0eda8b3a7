"""Per-image JSONL records, the configuration fingerprint of an output directory, and resuming.

A run appends one JSON line per image to ``records.jsonl``. Started again with the same output
directory and configuration it skips the images already recorded and ends with exactly the metrics
of an uninterrupted run; a directory made with a different configuration is refused."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, Iterable, List

# Keys that change how fast a run goes, never what it computes.
NON_RESULT_KEYS = {"OUTPUT_DIR", "VERBOSE", "DATALOADER.NUM_WORKERS", "DATALOADER.PREFETCH",
                   "USE_CUDA"}


class ConfigMismatchError(RuntimeError):
    pass


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


def config_hash(fp: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_or_write_fingerprint(out_dir: str, fp: Dict[str, object]) -> None:
    path = os.path.join(out_dir, "config.json")
    if os.path.isfile(path):
        with open(path) as f:
            old = json.load(f)
        if old != json.loads(json.dumps(fp, default=str)):
            diff = [f"{k}: {old.get(k)!r} -> {fp.get(k)!r}"
                    for k in sorted(set(old) | set(fp)) if old.get(k) != fp.get(k)]
            raise ConfigMismatchError(
                f"{out_dir} holds results of a different configuration ({'; '.join(diff[:6])}"
                f"{' ...' if len(diff) > 6 else ''}); use another --output-dir or delete {out_dir} "
                f"to start over")
        return
    write_json(path, fp, sort_keys=True, default=str)


def write_json(path: str, obj, **dump_kwargs) -> None:
    """Atomic JSON write (temp file + rename): a killed run never leaves a half-written file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, **dump_kwargs)
    os.replace(tmp, path)


def load_records(path: str) -> List[dict]:
    """Read records; a torn last line (a run killed mid-write) is dropped and the file repaired."""
    if not os.path.isfile(path):
        return []
    good, torn = [], False
    with open(path) as f:
        lines = f.read().split("\n")
    for line in lines:
        if not line.strip():
            continue
        try:
            good.append(json.loads(line))
        except json.JSONDecodeError:
            torn = True
    if torn:
        write_records(path, good)
    return good


def write_records(path: str, records: Iterable[dict]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


class RecordWriter:
    def __init__(self, path: str):
        self.path = path
        self.f = open(path, "a")

    def write(self, recs: Iterable[dict]) -> None:
        for r in recs:
            self.f.write(json.dumps(r) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self):
        self.f.close()
