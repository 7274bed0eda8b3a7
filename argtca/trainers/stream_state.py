"""The online methods' ``stream_state.pt``: written by one run, resumed by that run only.

The file holds the stream position, the adapter's state (tensors, numbers, lists) and who wrote
it: the order's hash, the adapter's name and the run's full fingerprint (``config.json``: every
result-defining key, the test set, the input files by content, the stream order's hash) as JSON
text. It is read with ``torch.load(weights_only=True)`` (tensors and plain values only: a pickle
that names any other code, e.g. ``os.system``, is refused, never run nor skipped) and accepted only
when its fingerprint is this run's: a state copied from another experiment (other learning
rates, another cache capacity, other CLIP weights, another method) is refused naming the keys
that differ. Every refusal is one line naming the file and the fix, and leaves ``records.jsonl``
as it was.
"""
from __future__ import annotations

import json
import pickle
import re
from typing import Any, Dict, Optional, Tuple

import torch

from argtca.run_folder import RunFolderError, fingerprint_differences

__all__ = ["STATE_FORMAT", "STATE_FIX", "read_stream_state", "state_structure_problem"]

STATE_FORMAT = 2   # 1 (no "format" key): position, order hash and state, no fingerprint
STATE_FIX = ("a stream resumes only from the state its own run saved: restore that file, or "
             "delete {out_dir} to start the stream over (records.jsonl is left as it is)")
_WHAT = "a stream state (a dict with position, state and the run's fingerprint)"


def _unpickle_reason(e: BaseException) -> str:
    """What torch's restricted reader refused, in a few words (its message spans many lines)."""
    msg = str(e)
    m = re.search(r"unsupported GLOBAL ([\w.]+)", msg)
    if m:
        return f"it asks to import {m.group(1)} when read"
    m = re.search(r"Unsupported operand (\d+)", msg)
    if m:
        return f"it holds a pickle instruction a tensor file never holds (operand {m.group(1)})"
    return "it holds objects other than tensors and plain values"


def read_stream_state(path: str, fingerprint: Dict[str, Any], adapter: str, n: int,
                      out_dir: str, order_sha256: str) -> Tuple[int, Dict[str, Any]]:
    """(position, adapter state) of ``path`` when it is a state this run saved; RunFolderError
    naming the file, what is wrong and the fix otherwise."""
    fix = STATE_FIX.format(out_dir=out_dir)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise RunFolderError(f"{path}: refused, nothing in it was loaded: {_unpickle_reason(e)}; "
                             f"argtca writes only tensors and plain values there (the file was "
                             f"replaced); {fix}") from None
    except Exception as e:   # noqa: BLE001 (a torn or foreign file: say which)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise RunFolderError(f"{path}: cannot read the stream state ({type(e).__name__}: "
                             f"{first[:200]}); {fix}") from None
    if not isinstance(ckpt, dict):
        raise RunFolderError(f"{path}: holds a {type(ckpt).__name__}, not {_WHAT}; {fix}")
    missing = [k for k in ("position", "state") if k not in ckpt]
    if missing:
        raise RunFolderError(f"{path}: not {_WHAT}: no {' and no '.join(missing)} (it has "
                             f"{', '.join(sorted(map(str, ckpt))[:8]) or 'no keys'}); {fix}")
    if ckpt.get("order_sha256") != order_sha256:
        raise RunFolderError(f"{path}: saved for another stream order (sha256 "
                             f"{ckpt.get('order_sha256')}, this run's {order_sha256}); {fix}")
    if "fingerprint" not in ckpt:
        raise RunFolderError(f"{path}: saved without the fingerprint of its run (by an argtca "
                             f"from before states recorded it, or by hand), so it cannot be told "
                             f"apart from another experiment's state; {fix}")
    try:
        saved = json.loads(ckpt["fingerprint"]) if isinstance(ckpt["fingerprint"], str) else None
    except ValueError:
        saved = None
    if not isinstance(saved, dict):
        raise RunFolderError(f"{path}: its fingerprint is not a JSON object; {fix}")
    now = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
    # judged as config.json is (argtca/run_folder/folder.py): keys an older argtca left out or
    # held that this run does not read (other methods' nodes, tuning keys, plug-in files) or
    # that joined at their default are no difference
    diff = fingerprint_differences(saved, now)
    if diff:
        raise RunFolderError(
            f"{path}: saved by another experiment, not this run's ({'; '.join(diff[:6])}"
            f"{' ...' if len(diff) > 6 else ''}); {fix}")
    if ckpt.get("adapter", adapter) != adapter:
        raise RunFolderError(f"{path}: the state of adapter {ckpt.get('adapter')!r}, not "
                             f"{adapter!r}; {fix}")
    position = ckpt["position"]
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= n:
        raise RunFolderError(f"{path}: position {position!r} is not an image count of this "
                             f"stream (0..{n}); {fix}")
    state = ckpt["state"]
    if not isinstance(state, dict) or not state:
        raise RunFolderError(f"{path}: the adapter state is "
                             f"{'empty' if isinstance(state, dict) else type(state).__name__}, "
                             f"not the dict of tensors the adapter saved; {fix}")
    return position, state


def _zero_sized(t: torch.Tensor) -> bool:
    return any(d == 0 for d in t.shape)


def state_structure_problem(saved: Any, fresh: Any, where: str = "state",
                            declared: Any = None) -> Optional[str]:
    """Why ``saved`` cannot be the adapter state shaped like ``fresh`` (the adapter's own state
    before the first image) at the saved position, None when it can: the same dict keys; a
    tensor where a tensor is, of its dtype; of the shape ``declared`` gives where the adapter
    declares one (:meth:`~argtca.adapters.base.OnlineAdapter.state_shapes`: a buffer that grows
    with the stream, a list's length, a counter's value), else of the fresh shape, unless the
    fresh buffer is empty (a plug-in's growing buffer it does not declare)."""
    if isinstance(fresh, dict):
        if not isinstance(saved, dict):
            return f"{where} is a {type(saved).__name__}, not a dict"
        if set(saved) != set(fresh):
            gone = sorted(map(str, set(fresh) - set(saved)))
            extra = sorted(map(str, set(saved) - set(fresh)))
            return (f"{where} " + "; ".join(
                ([f"lacks {', '.join(gone)}"] if gone else [])
                + ([f"has unknown {', '.join(extra)}"] if extra else [])))
        declared = declared if isinstance(declared, dict) else {}
        for k in fresh:
            problem = state_structure_problem(saved[k], fresh[k], f"{where}[{k!r}]",
                                              declared.get(k))
            if problem:
                return problem
        return None
    if isinstance(declared, int) and not isinstance(declared, bool):   # a counter of images
        value = saved.item() if isinstance(saved, torch.Tensor) and saved.numel() == 1 else saved
        if value != declared:
            return f"{where} is {value!r}, the adapter's is {declared} at this position"
    if isinstance(fresh, torch.Tensor):
        if not isinstance(saved, torch.Tensor):
            return f"{where} is a {type(saved).__name__}, not a tensor"
        want = tuple(declared) if isinstance(declared, tuple) else (
            None if _zero_sized(fresh) else tuple(fresh.shape))
        if saved.dtype != fresh.dtype or (want is not None and tuple(saved.shape) != want):
            return (f"{where} is {saved.dtype} {tuple(saved.shape)}, the adapter's is "
                    f"{fresh.dtype} {want if want is not None else tuple(fresh.shape)}"
                    + (" at this position" if isinstance(declared, tuple) else ""))
        return None
    if isinstance(fresh, (list, tuple)):
        if not isinstance(saved, (list, tuple)):
            return f"{where} is a {type(saved).__name__}, not a list"
        want = declared[0] if isinstance(declared, tuple) else (len(fresh) or None)
        if want is not None and len(saved) != want:
            return f"{where} holds {len(saved)} items, the adapter's {want}"
    return None
