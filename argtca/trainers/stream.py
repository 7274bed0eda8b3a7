"""An online method's stream over the test set, as one value: :class:`Stream`.

The stream is the test set in a fixed, seeded order (``TTA.STREAM``), where a run stands in it
and what it keeps in the run folder: the order (``stream.json``), its sha256 (in the run's
fingerprint: a resume refuses another order) and the adapter's state at the last checkpoint
(``stream_state.pt``, read back by argtca/trainers/stream_state.py). The trainer
(argtca/trainers/zoo.py ``StreamTrainer``) holds one and asks it; the run folder's lifecycle
(argtca/run_folder/session.py) is the session's, which hands the stream its checked records.

    stream = Stream.of(cfg, len(test_set))
    fp.update(stream.fingerprint_keys())                  # the run's fingerprint
    kept = stream.resume(out_dir, records, fp, "tda")     # the resume decision
    todo = stream.pending(kept)                           # test indices still to run, in order
    stream.restore(adapter, "TDA")                        # the saved state, once it is built
    ... stream.position_of(index) per record; stream.due(n, every) -> stream.save(n, ...)

A resumed run drops the records made after the last checkpoint, restores the state and runs on
from there in the same batches, so its records equal an uninterrupted run's.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from argtca.run_folder import STREAM_ORDER_KEY, RunFolderError, write_records
from argtca.trainers.stream_state import (STATE_FIX, STATE_FORMAT, read_stream_state,
                                          state_structure_problem)
from argtca.utils.io import write_json

__all__ = ["Stream", "STATE_FILE", "ORDER_FILE", "stream_seed", "stream_order", "order_sha256"]

STATE_FILE = "stream_state.pt"
ORDER_FILE = "stream.json"


def stream_seed(cfg) -> int:
    s = int(cfg.TTA.STREAM.SEED)
    return int(cfg.SEED) if s < 0 else s


def stream_order(n: int, order: str, seed: int) -> List[int]:
    """The test indices in stream order: "shuffle" a permutation drawn from ``seed`` (numpy's
    PCG64, stable across versions), "index" the split file's order."""
    if order == "index":
        return list(range(n))
    return [int(i) for i in np.random.default_rng(int(seed)).permutation(n)]


def order_sha256(order: List[int]) -> str:
    return hashlib.sha256(json.dumps(order).encode()).hexdigest()[:16]


class Stream:
    """The ``n`` test images in the order ``kind`` ("shuffle" from ``seed``, or "index"), and
    one run's place in it.

    ``order``: the test indices in stream order; ``sha256``: its hash. After :meth:`resume`:
    ``out_dir``, ``position`` (the images the saved state has seen; 0 when none was saved),
    ``kept`` (the records before it, in stream order) and ``dropped`` (the records after it, made
    again from the saved state). :meth:`save` moves ``position`` on."""

    def __init__(self, n: int, kind: str = "shuffle", seed: int = 1):
        self.kind, self.seed = str(kind), int(seed)
        self.order: List[int] = stream_order(int(n), self.kind, self.seed)
        self.sha256 = order_sha256(self.order)
        self._positions = {i: p for p, i in enumerate(self.order)}
        self.out_dir: Optional[str] = None
        self.position = 0
        self.kept: List[dict] = []
        self.dropped = 0
        self._state: Optional[Dict[str, Any]] = None   # the saved adapter state to restore

    @classmethod
    def of(cls, cfg, n: int) -> "Stream":
        """The stream ``TTA.STREAM`` names over ``n`` test images."""
        return cls(n, str(cfg.TTA.STREAM.ORDER), stream_seed(cfg))

    def __len__(self) -> int:
        return len(self.order)

    def position_of(self, index: int) -> int:
        """Where test image ``index`` is in the stream."""
        return self._positions[index]

    def info(self) -> Dict[str, object]:
        """What the stream is (``stream.json`` without the indices, summary.json's ``stream``)."""
        return {"order": self.kind, "seed": self.seed, "sha256": self.sha256, "n": len(self)}

    def fingerprint_keys(self) -> Dict[str, object]:
        """The stream's part of the run's fingerprint (config.json): its order's hash."""
        return {STREAM_ORDER_KEY: self.sha256}

    def state_path(self) -> str:
        return os.path.join(str(self.out_dir), STATE_FILE)

    # ------------------------------------------------------------------ resume
    def resume(self, out_dir: str, records: List[dict], fingerprint: Dict[str, Any],
               adapter: str) -> List[dict]:
        """The resume decision in ``out_dir``, whose ``records`` the run session has checked:
        ``stream.json`` is written when missing; a ``stream_state.pt`` there is this run's
        (its order, its fingerprint ``fingerprint``, adapter ``adapter``, a position in the
        stream) or is refused in one line (argtca/trainers/stream_state.py); the records before
        its position are kept, in stream order, and returned. The records after it are dropped
        from ``records.jsonl`` only by :meth:`restore`, once the state is accepted by the
        adapter: a state refused leaves the file as it was."""
        self.out_dir = out_dir
        if not os.path.isfile(os.path.join(out_dir, ORDER_FILE)):
            write_json(os.path.join(out_dir, ORDER_FILE), dict(self.info(), indices=self.order))
        self._state, position = None, 0
        if os.path.isfile(self.state_path()):
            position, self._state = read_stream_state(self.state_path(), fingerprint, adapter,
                                                      len(self), out_dir, self.sha256)
        pos = self._positions
        kept = [r for r in records if pos[r["index"]] < position]
        if len(kept) != position:
            raise RunFolderError(
                f"{os.path.join(out_dir, 'records.jsonl')}: {len(kept)} records before the "
                f"stream state's position {position}; the records and {STATE_FILE} disagree: "
                f"delete {out_dir} to start the stream over")
        kept.sort(key=lambda r: pos[r["index"]])
        self.position, self.kept, self.dropped = position, kept, len(records) - len(kept)
        return kept

    def pending(self, records: List[dict]) -> List[int]:
        """The test indices still to run after the kept ``records``, in stream order."""
        return self.order[len(records):]

    def restore(self, adapter, label: str) -> None:
        """Give the built ``adapter`` (an online one) the saved state, checked against its own
        and the sizes it declares for the saved position (a wrong buffer is refused here, naming
        the file, not in the next image's ``torch.cat``); drop the records made after the
        checkpoint from ``records.jsonl``; tell the adapter the stream's length
        (``OnlineAdapter.begin_stream``)."""
        if self._state is not None:
            problem = state_structure_problem(self._state, adapter.state_dict(),
                                              declared=adapter.state_shapes(self.position))
            if problem:
                raise RunFolderError(
                    f"{self.state_path()}: not a state of {label}'s adapter at image "
                    f"{self.position} of the stream ({problem}); "
                    f"{STATE_FIX.format(out_dir=self.out_dir)}")
            adapter.load_state_dict(self._state)
            print(f"argtca: stream resumed at image {self.position} of "
                  f"{len(self)} from {STATE_FILE}", flush=True)
        if self.dropped:
            print(f"argtca: {self.dropped} records after the last stream checkpoint "
                  f"(image {self.position} of the stream) are made again, from the saved "
                  f"state", flush=True)
            write_records(os.path.join(str(self.out_dir), "records.jsonl"), self.kept)
            self.dropped = 0
        begin = getattr(adapter, "begin_stream", None)
        if begin is not None:   # e.g. OnZeta's schedule sqrt(t / n) needs the stream's length
            begin(len(self))

    # ------------------------------------------------------------------ checkpoints
    def due(self, n: int, every: int) -> bool:
        """Whether the state after ``n`` images is to be saved: ``every`` images after the last
        checkpoint, and at the stream's end."""
        return n - self.position >= every or n == len(self)

    def save(self, position: int, state: Dict[str, Any], fingerprint: Dict[str, Any],
             adapter: str) -> None:
        """``stream_state.pt``: the adapter ``adapter``'s ``state`` after ``position`` images,
        with the order's hash and the run's ``fingerprint`` (replaced whole: a kill leaves the
        last one)."""
        path = self.state_path()
        tmp = path + ".tmp"
        fp = json.dumps(fingerprint, sort_keys=True, default=str)
        # plain values and tensors only: read back with weights_only=True
        torch.save({"format": STATE_FORMAT, "position": int(position),
                    "order_sha256": self.sha256, "adapter": adapter,
                    "fingerprint": fp, "state": state}, tmp)
        os.replace(tmp, path)
        self.position = position
