"""The Phase-1 store: trained node embeddings, once per dataset, shared by every run.

One file per key, ``<root>/<key>.pt`` (``torch.save`` of plain tensors and a JSON string), with a
readable ``<key>.json`` beside it. ``root`` is ``$ARGTCA_CACHE/phase1`` (default
``~/.cache/argtca/phase1``, the cache root the demo dataset uses too). The key is
``<dataset>-<sha256[:16]>`` of the caller's payload (what determines the graph: dataset, class
names, attribute-file content, backbone and text-weights hash, M, edges, embeddings, GAT settings
and seed, the Phase-1 code); what only selects from the graph (selector, M', alpha/beta, output
folder) is not in it.

Integrity: every entry carries the sha256 of its content (each stored value's name, dtype, shape
and bytes), written beside the payload in its metadata and checked on every reuse. A file whose
bytes changed on disk (a bad sector, a partial copy, a hand edit) still unpickles and would hand the
selectors garbage, so an entry that fails the check, or has no hash, is rebuilt, saying so.

Concurrency: a reader that finds the file uses it (files appear whole: written to a temporary name
in the same folder, then ``os.replace``). A writer takes an exclusive lock (``filelock``) on
``<key>.lock``, looks again (another run may have finished meanwhile) and only then computes, so two
runs needing the same graph at the same time train it once: the second waits and reuses it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from filelock import FileLock, Timeout

__all__ = ["StoreError", "default_store_dir", "store_key", "content_sha256", "Phase1Store",
           "text_weights_sha256"]


class StoreError(RuntimeError):
    """The store cannot be written: the message names the folder and the fix."""


def default_store_dir() -> str:
    """``$ARGTCA_CACHE/phase1`` (default ``~/.cache/argtca/phase1``)."""
    from argtca.demo.generator import cache_root  # the one definition of argtca's cache root
    return str(cache_root() / "phase1")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def store_key(payload: Dict[str, Any], label: str = "graph") -> str:
    """``<label>-<first 16 hex digits of sha256(canonical JSON of payload)>``."""
    digest = hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(label)).strip("_") or "graph"
    return f"{slug}-{digest}"


def content_sha256(data: Dict[str, Any]) -> str:
    """sha256 over every stored value but ``meta``, in key order: a tensor by its name, dtype,
    shape and bytes, a dict / list / tuple that holds tensors item by item (a transferred graph's
    entry nests them), anything else (lists, numbers, None) by its canonical JSON."""
    h = hashlib.sha256()

    def holds_tensor(v: Any) -> bool:
        if isinstance(v, torch.Tensor):
            return True
        if isinstance(v, dict):
            return any(holds_tensor(x) for x in v.values())
        return isinstance(v, (list, tuple)) and any(holds_tensor(x) for x in v)

    def feed(name: str, v: Any) -> None:
        if isinstance(v, torch.Tensor):
            t = v.detach().to("cpu").contiguous()
            h.update(f"{name}|tensor|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, dict) and holds_tensor(v):
            h.update(f"{name}|dict|{len(v)}|".encode())
            for k in sorted(v, key=str):
                feed(f"{name}.{k}", v[k])
        elif isinstance(v, (list, tuple)) and holds_tensor(v):
            h.update(f"{name}|{type(v).__name__}|{len(v)}|".encode())
            for i, item in enumerate(v):
                feed(f"{name}[{i}]", item)
        else:
            h.update(f"{name}|json|{canonical_json(v)}|".encode())

    for name in sorted(k for k in data if k != "meta"):
        feed(name, data[name])
    return h.hexdigest()


class Phase1Store:
    def __init__(self, root: Optional[str] = None):
        self.root = os.path.abspath(os.path.expanduser(root or default_store_dir()))

    def path(self, key: str) -> str:
        return os.path.join(self.root, f"{key}.pt")

    def load(self, key: str, payload: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The stored entry of ``key`` when it exists, reads, was made for exactly ``payload``
        and passes its content check; otherwise None (it is then recomputed and replaced)."""
        return self._check(key, payload)[0]

    def _check(self, key: str, payload: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], str]:
        """(entry or None, why not: "" when found or absent, else one phrase for the log)."""
        path = self.path(key)
        if not os.path.isfile(path):
            return None, ""
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
            meta = json.loads(data["meta"])
        except Exception as e:  # noqa: BLE001 (any unreadable file is rebuilt)
            return None, f"cannot be read ({type(e).__name__}: {e})"
        if meta.get("payload") != json.loads(canonical_json(payload)):
            return None, "was made for other inputs"
        want, got = meta.get("sha256"), content_sha256(data)
        if not want:
            return None, "has no content hash (written by an older argtca)"
        if want != got:
            return None, f"failed its content check (sha256 {got[:16]}, stored {want[:16]})"
        data["meta"] = meta
        return data, ""

    def get_or_compute(self, key: str, payload: Dict[str, Any],
                       compute: Callable[[], Dict[str, Any]],
                       log: Callable[[str], None] = print) -> Tuple[Dict[str, Any], bool]:
        """(entry, reused). ``compute()`` returns a dict of tensors / lists / numbers and a
        ``meta`` dict; it is called at most once per key across concurrent processes."""
        found, why = self._check(key, payload)
        if found is not None:
            return found, True
        try:
            os.makedirs(self.root, exist_ok=True)
            lock = os.path.join(self.root, f"{key}.lock")
            open(lock, "a").close()
        except OSError as e:
            raise StoreError(f"cannot write the Phase-1 store {self.root} ({e}); set ARGTCA_CACHE "
                             f"to a writable folder") from e
        flock = FileLock(lock)
        try:
            flock.acquire(timeout=0)
        except Timeout:
            log(f"[phase 1] waiting for another run that is training graph {key}")
            flock.acquire()
        try:
            found, why = self._check(key, payload)
            if found is not None:
                return found, True
            if why:
                log(f"[phase 1] stored graph {key} ({self.path(key)}) {why}: rebuilding it")
            data = compute()
            meta = dict(data.get("meta") or {})
            meta["payload"] = json.loads(canonical_json(payload))
            meta["key"] = key
            meta["sha256"] = content_sha256(data)
            data = dict(data, meta=canonical_json(meta))
            path = self.path(key)
            tmp = f"{path}.tmp-{os.getpid()}"
            try:
                torch.save(data, tmp)
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
            from argtca.utils.io import write_json
            write_json(os.path.join(self.root, f"{key}.json"), meta)
            data["meta"] = meta
            return data, False
        finally:
            flock.release()


def text_weights_sha256(model) -> str:
    """sha256 over the name, dtype, shape and bytes of every parameter and buffer of the CLIP
    text tower that the EOS hidden state depends on (token and positional embeddings, the
    transformer, ln_final): the weights' identity, whatever file or tag they came from."""
    h = hashlib.sha256()
    state = model.state_dict()
    prefixes = ("token_embedding.", "positional_embedding", "transformer.", "ln_final.",
                "attn_mask")
    for name in sorted(state):
        if not name.startswith(prefixes):
            continue
        t = state[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
