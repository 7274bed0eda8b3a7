"""The per-class key-value caches of the online adapters (TDA, BoostAdapter, DPE): fixed-size
tensors, so that a push and a read-out are a few batched kernels without a host synchronisation.

A cache is a plain dict of tensors (it lives in an adapter's ``self.state`` and round-trips
through ``state_dict`` / ``load_state_dict``):

- ``keys [K, C, E]``: per class ``K``, ``C`` slots of features; ``count [K]`` slots used, the used
  slots first;
- ``entropy [K, C]`` in a priority cache, each class's entries sorted by it;
- any payload ``name [K, C, *shape]`` (TDA's negative mask, BoostAdapter's probabilities).

Two push rules, both from the official code (TDA's ``update_cache``, which BoostAdapter and DPE
copy):

- :func:`priority_push`: a class keeps its ``C`` lowest-entropy entries, sorted by entropy; a full
  class drops its last (highest-entropy) entry only for a strictly lower entropy, and among equal
  entropies the earlier entry stays first (the official append + stable sort);
- :func:`fifo_push` (BoostAdapter's negative cache, ``fifo=True``): appended, the oldest entry of a
  full class dropped.

The read-out is Tip-Adapter's: weights ``exp(-β (1 - f · key))`` of the used slots
(:func:`weights`), summed per class or multiplied by a payload (:func:`cache_logits`).
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch

__all__ = ["new_cache", "widen", "priority_push", "fifo_push", "filled", "entries",
           "affinity_weights", "weights", "cache_logits"]

Cache = Dict[str, torch.Tensor]


def new_cache(n_classes: int, capacity: int, dim: int, device, fifo: bool = False,
              payload: Optional[Dict[str, Sequence[int]]] = None) -> Cache:
    """An empty cache of ``capacity`` slots per class for ``dim``-features; a priority cache
    unless ``fifo``; ``payload`` maps a name to the shape of what each entry carries besides
    its key."""
    cache = {"keys": torch.zeros(n_classes, capacity, dim, device=device),
             "count": torch.zeros(n_classes, dtype=torch.long, device=device)}
    if not fifo:
        cache["entropy"] = torch.zeros(n_classes, capacity, device=device)
    for name, shape in (payload or {}).items():
        cache[name] = torch.zeros(n_classes, capacity, *shape, device=device)
    return cache


def widen(cache: Cache, capacity: int) -> Cache:
    """A copy of ``cache`` with ``capacity`` (>= its own) slots per class, the extra ones empty
    (BoostAdapter's per-image copy of its history with room for the boosting samples)."""
    out = {}
    for name, t in cache.items():
        if name == "count":
            out[name] = t.clone()
            continue
        pad = t.new_zeros(t.shape[0], capacity - t.shape[1], *t.shape[2:])
        out[name] = torch.cat([t, pad], 1)
    return out


def _row(cache: Cache, cls) -> torch.Tensor:
    # a 1-element index tensor: advanced indexing stays on the device (a 0-d tensor index would
    # be read back to the host as a Python integer)
    return torch.as_tensor(cls, device=cache["count"].device).reshape(1)


def _write(cache: Cache, row: torch.Tensor, src: torch.Tensor, at: torch.Tensor,
           write: torch.Tensor, fields: Dict[str, torch.Tensor]) -> None:
    """Row ``row`` of each field becomes ``old[src]`` with ``fields[name]`` in the slot ``at``,
    where ``write`` (a [1] bool) holds; elsewhere it stays as it was."""
    count = cache["count"][row]
    cap = cache["keys"].shape[1]
    for name, value in fields.items():
        old = cache[name][row]                                        # [1, C, ...]
        tail = (1,) * (old.dim() - 2)
        shifted = old.gather(1, src.reshape(src.shape + tail).expand_as(old))
        new = torch.where(at.reshape(at.shape + tail), value.to(old.dtype), shifted)
        cache[name][row] = torch.where(write.reshape((1,) * old.dim()), new, old)
    cache["count"][row] = torch.where(write, (count + 1).clamp(max=cap), count)


def priority_push(cache: Cache, cls, key: torch.Tensor, entropy,
                  gate: Optional[torch.Tensor] = None, **payload: torch.Tensor) -> None:
    """The official ``update_cache`` on class ``cls``, branch-free: the entry goes after every
    used entry of entropy <= its own, the rest move one slot down and a full class's last entry
    falls off; an entry that would land past the last slot (entropy >= the full class's
    highest) writes nothing, nor does one whose ``gate`` is False."""
    row = _row(cache, cls)
    ent_row = cache["entropy"][row]                                   # [1, C]
    entropy = torch.as_tensor(entropy, device=ent_row.device).to(ent_row.dtype)
    slots = torch.arange(ent_row.shape[1], device=ent_row.device)
    used = slots < cache["count"][row][:, None]
    pos = (used & (ent_row <= entropy)).sum(-1)                       # [1]
    write = pos < ent_row.shape[1]
    if gate is not None:
        write = write & gate
    src = slots - (slots > pos[:, None]).long()
    _write(cache, row, src, slots == pos[:, None], write,
           dict(keys=key, entropy=entropy, **payload))


def fifo_push(cache: Cache, cls, key: torch.Tensor, gate: Optional[torch.Tensor] = None,
              **payload: torch.Tensor) -> None:
    """BoostAdapter's negative cache (the official ``update_cache(..., fifo=True)``): appended to
    class ``cls``; a full class drops its oldest entry; ``gate`` False writes nothing."""
    row = _row(cache, cls)
    count = cache["count"][row]                                       # [1]
    cap = cache["keys"].shape[1]
    slots = torch.arange(cap, device=count.device)
    full = (count >= cap)[:, None]
    src = torch.where(full, (slots + 1).clamp(max=cap - 1), slots)
    pos = count.clamp(max=cap - 1)
    write = torch.ones_like(count, dtype=torch.bool) if gate is None else gate.reshape(1)
    _write(cache, row, src, slots == pos[:, None], write, dict(keys=key, **payload))


def filled(cache: Cache) -> torch.Tensor:
    """[K, C] bool: the used slots."""
    slots = torch.arange(cache["keys"].shape[1], device=cache["count"].device)
    return slots[None, :] < cache["count"][:, None]


def entries(cache: Cache) -> Tuple[torch.Tensor, torch.Tensor]:
    """The used entries, class-major and in slot order: (keys [N, E], classes [N]). Their
    number is data-dependent, so this reads it back to the host (inspection, not the step)."""
    used = filled(cache)
    return cache["keys"][used], used.nonzero()[:, 0]


def affinity_weights(feat: torch.Tensor, keys: torch.Tensor, beta: float) -> torch.Tensor:
    """Tip-Adapter's ``exp(-β (1 - f · key))``, written as the official code computes it:
    [E] and [..., E] -> [...]."""
    affinity = keys @ feat
    return ((-1) * (beta - beta * affinity)).exp()


def weights(cache: Cache, feat: torch.Tensor, beta: float) -> torch.Tensor:
    """[K, C]: the affinity weights of the used slots, 0 for the empty ones."""
    return affinity_weights(feat, cache["keys"], beta) * filled(cache)


def cache_logits(cache: Cache, feat: torch.Tensor, beta: float,
                 values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[K]: the cache's logits for ``feat`` (without the α): the weights summed per class (one-hot
    values), or ``Σ w · values`` with per-entry ``values [K, C, K']`` -> [K']."""
    w = weights(cache, feat, beta)
    if values is None:
        return w.sum(1)
    return w.reshape(-1) @ values.reshape(-1, values.shape[-1])
