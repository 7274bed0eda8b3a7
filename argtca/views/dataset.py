"""The test-time dataset and its loaders: items -> their views (a :class:`ViewGenerator` of
argtca/views/cpu.py), batches stacked in shared memory by the workers, a loader that turns a
worker's unreadable file into its one-line :class:`DataError`, and the prefetch cap.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, get_worker_info

from argtca.datasets.base import DataError, Datum
from argtca.datasets.images import open_rgb
from argtca.views.cpu import ViewGenerator

__all__ = ["TestTimeDataset", "PixelViewDataset", "SlotRing", "collate_views", "LoadFailure",
           "CheckedLoader",
           "make_loader", "build_test_loader", "build_item_loader", "capped_prefetch",
           "PREFETCH_BYTES"]


class TestTimeDataset(Dataset):
    """Items -> ``dict(index, views[V,3,S,S], label, path)``; views of item i depend on (seed, i).

    ``indices``: optional subset of item positions served in the given order (``index`` in the
    output is always the position in ``items``, so subsets and shards reproduce the full run).
    """

    __test__ = False   # not a pytest class

    def __init__(self, items: Sequence[Datum], view_gen: ViewGenerator, seed: int,
                 indices: Optional[Sequence[int]] = None):
        self.items = list(items)
        self.view_gen = view_gen
        self.seed = int(seed)
        if indices is None:
            self.indices = list(range(len(self.items)))
        else:
            self.indices = [int(i) for i in indices]
            bad = [i for i in self.indices if not 0 <= i < len(self.items)]
            if bad:
                raise IndexError(f"indices {bad[:5]} out of range for {len(self.items)} items")

    def __len__(self) -> int:
        return len(self.indices)

    def load(self, k: int) -> Tuple[int, Datum, Image.Image]:
        """``(index, datum, RGB image)`` of the k-th item (:func:`argtca.datasets.images.open_rgb`:
        every PIL mode to 8-bit RGB); one-line DataError naming the file if unreadable."""
        index = self.indices[k]
        datum = self.items[index]
        return index, datum, open_rgb(datum.impath)

    # dtype the views travel in from the loader workers (build_views_loader: float16 under fp16
    # autocast on CUDA, where the image tower's first layer rounds its input to fp16 anyway)
    out_dtype = torch.float32

    def __getitem__(self, k: int) -> Dict[str, Any]:
        index, datum, img = self.load(k)
        if self.out_dtype in getattr(self.view_gen, "DTYPES", ()):   # writes the dtype itself
            vg = self.view_gen
            out = None
            if get_worker_info() is not None:
                # in a loader worker, straight into shared memory: the item then goes to the
                # main process without a copy (pickling an ordinary tensor copies it there)
                out = _shared_empty((vg.n_views, 3, vg.size, vg.size), self.out_dtype)
            views = vg(img, self.seed, index, dtype=self.out_dtype, out=out)
        else:
            views = self.view_gen(img, self.seed, index)
        if views.dtype != self.out_dtype:
            views = views.to(self.out_dtype)
        return {"index": index, "views": views, "label": int(datum.label), "path": datum.impath}

    def item_bytes(self) -> int:
        """Bytes of one item's views as the workers ship them (the prefetch budget's unit)."""
        return views_bytes(self.view_gen, self.out_dtype)


class PixelViewDataset(TestTimeDataset):
    """Items -> ``dict(index, pixels, mix, label, path)``: the exact uint8 images of the views
    and the AugMix weights (:meth:`ViewGenerator.pixels`), without the float work, which the
    consumer does on the engine's device (:class:`argtca.views.exact.PixelMixer`,
    ``TTA.VIEWS_FLOAT engine``): the same views, bit for bit, ~115 ms of a core an image (64
    views) less in the workers, twice the bytes of float16 views in transport (4 uint8 images
    an AugMix view).

    ``ops`` (``TTA.VIEWS_OPS engine``, AugMix views): the workers stop after the crops and the
    item also holds ``plans``, the chains encoded for the consumer's
    :class:`argtca.views.exact_ops.ChainRunner`: one uint8 image a view (a quarter of the
    bytes) and none of PIL's AugMix ops in the workers."""

    __test__ = False

    # the item's tensors, in pixels_layout's order
    KEYS = ("pixels", "mix", "plans")

    def __init__(self, *args, ops: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.ops = bool(ops) and self.view_gen.augmix
        self.ring: Optional[SlotRing] = None   # set by the loader before its workers fork

    def layout(self):
        return self.view_gen.pixels_layout(self.ops)

    def __getitem__(self, k: int) -> Dict[str, Any]:
        index, datum, img = self.load(k)
        vg = self.view_gen
        out, slot = None, None
        if get_worker_info() is not None:
            if self.ring is not None:   # into the k-th item's reused slot: only its number travels
                slot = self.ring.slot_of(k)
                out = self.ring[slot]
            else:                       # straight into fresh shared memory, as the views
                out = tuple(_shared_empty(s, d) for s, d in self.layout())
            for t in out[1:]:
                t.zero_()
        got = vg.pixels(img, self.seed, index, out=out, ops=self.ops)
        item = {"index": index, "label": int(datum.label), "path": datum.impath}
        if slot is not None:
            item["slot"] = slot
        else:
            item.update(zip(self.KEYS, got))
        return item

    def item_bytes(self) -> int:
        return sum(math.prod(s) * d.itemsize for s, d in self.layout())


class SlotRing:
    """Shared-memory slots, reused, for the items loader workers make (``TTA.VIEWS_FLOAT engine``'s
    uint8 images, 9.7 MB an image of 64 views at 224 px under ``VIEWS_OPS engine``).

    Without it every item is a fresh shared-memory segment: the worker creates it, and the main
    process receives its file descriptor through the worker's resource-sharer thread (a socket
    handshake per tensor, which waits for the worker's GIL), maps it and faults its pages in,
    then unmaps it (benchmarks/README.md, item 2 of issue 42). The ring is allocated once, in the
    main process before the workers fork (they share its pages); a worker writes item ``k`` into
    slot ``k % n`` and sends only the slot's number; the main process reads the slot in place.

    Why a slot is never overwritten while the main process still reads it: the DataLoader hands
    a worker item ``k`` only after the main process received item ``k - P`` (``P`` = workers x
    prefetch: one new index for each item it yields), and the main process holds at most
    ``hold`` items it received (the batch it is grouping); with ``n = P + hold + 1`` slots, item
    ``k``'s slot is that of item ``k - n``, long done. The loader must be sequential (it is: the
    test loop's), and the consumer must be done with an item once it has ``hold`` newer ones."""

    def __init__(self, layout, n: int):
        self.n = int(n)
        self.buffers = tuple(_shared_empty((self.n,) + tuple(s), d) for s, d in layout)

    @classmethod
    def for_loader(cls, layout, num_workers: int, prefetch: int, hold: int) -> "SlotRing":
        return cls(layout, int(num_workers) * int(prefetch) + int(hold) + 1)

    def slot_of(self, k: int) -> int:
        return int(k) % self.n

    def __getitem__(self, slot: int) -> Tuple[torch.Tensor, ...]:
        return tuple(b[slot] for b in self.buffers)

    def attach(self, item, keys: Sequence[str]):
        """A worker's item that names its slot, with the slot's tensors under ``keys``."""
        if isinstance(item, dict) and "slot" in item:
            item = dict(item)
            item.update(zip(keys, self[item.pop("slot")]))
        return item


def _shared_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory (as torch's default_collate makes in workers)."""
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(math.prod(shape))
    return torch.empty(0, dtype=dtype).new(storage).view(*shape)


def _stack_shared(tensors: List[torch.Tensor]) -> torch.Tensor:
    """``torch.stack``; in a DataLoader worker into shared memory (as torch's default_collate
    does), so that sending the batch to the main process moves no bytes: a plain stack would be
    copied once more into shared memory when pickled (19 MB an image of 64 fp16 views)."""
    if get_worker_info() is None:
        return torch.stack(tensors)
    first = tensors[0]
    storage = first._typed_storage()._new_shared(len(tensors) * first.numel(),
                                                 device=first.device)
    out = first.new(storage).resize_(len(tensors), *first.shape)
    return torch.stack(tensors, out=out)


def collate_views(batch: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"index": torch.tensor([b["index"] for b in batch], dtype=torch.long),
            "views": _stack_shared([b["views"] for b in batch]),
            "label": torch.tensor([b["label"] for b in batch], dtype=torch.long),
            "path": [b["path"] for b in batch]}


class LoadFailure:
    """An item whose file could not be read: it travels through the DataLoader (workers included)
    as a value, so that the main process raises the dataset's one-line :class:`DataError` instead
    of torch's "Caught DataError in DataLoader worker process" traceback text."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message

    def __getstate__(self):
        return self.message

    def __setstate__(self, message):
        self.message = message


class _Guarded(Dataset):
    """``dataset`` whose :class:`DataError` becomes a :class:`LoadFailure` item; ``timed``: each
    (dict) item carries ``made_s``, the seconds its worker took to make it (what the views
    workers can sustain: :func:`argtca.engine.pipeline.loop_timing`)."""

    def __init__(self, dataset: Dataset, timed: bool = False):
        self.dataset = dataset
        self.timed = timed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, k: int):
        t = time.perf_counter()
        try:
            item = self.dataset[k]
        except DataError as e:
            return LoadFailure(str(e))
        if self.timed and isinstance(item, dict):
            item["made_s"] = time.perf_counter() - t
        return item


class _GuardedCollate:
    def __init__(self, collate):
        self.collate = collate

    def __call__(self, batch):
        for b in batch:
            if isinstance(b, LoadFailure):
                return b
        return self.collate(batch)


class CheckedLoader(DataLoader):
    """A DataLoader over ``_Guarded(dataset)`` that raises the item's :class:`DataError` (its own
    one-line message) in the iterating process."""

    def __iter__(self):
        # not a generator function: the workers start here, at iter(), not at the first next()
        return self._checked(super().__iter__())

    def _checked(self, it):
        for batch in it:
            if isinstance(batch, LoadFailure):
                # the pass ends here: the (persistent) workers go now, not when the error's
                # traceback, which holds this iterator, is collected
                stop = getattr(it, "_shutdown_workers", None)
                if stop is not None:
                    stop()
                    self._iterator = None
                raise DataError(batch.message)
            yield batch


# batches of CPU views waiting in the loader's queues take at most this many bytes: a batch of 16
# images x 64 fp16 views of 224 px is 308 MB, so 15 workers x 4 batches would hold 18 GB
PREFETCH_BYTES = 4 << 30


def capped_prefetch(prefetch: int, num_workers: int, batch_bytes: int,
                    budget: int = PREFETCH_BYTES) -> int:
    """``prefetch`` batches per worker, lowered (to 1 at least) so that workers x prefetch batches
    of ``batch_bytes`` stay within ``budget``."""
    if num_workers <= 0:
        return max(1, int(prefetch))
    return max(1, min(int(prefetch), int(budget) // max(1, num_workers * int(batch_bytes))))


def make_loader(dataset: Dataset, collate, num_workers: int, batch_images: int = 1,
                pin_memory: bool = False, prefetch: int = 4,
                item_bytes: int = 0) -> CheckedLoader:
    """Sequential :class:`CheckedLoader` of ``dataset`` in batches of ``batch_images``; with
    ``item_bytes`` (the size of one collated item) the prefetch depth is capped by
    :data:`PREFETCH_BYTES` of waiting batches."""
    num_workers = int(num_workers)
    if num_workers == -1:   # DATALOADER.NUM_WORKERS -1: what the machine has
        from argtca.utils.host import auto_workers
        num_workers = auto_workers()
    if num_workers < 0 or int(batch_images) < 1:
        raise ValueError(f"num_workers={num_workers} must be >= 0 and batch_images={batch_images} "
                         f">= 1")
    if item_bytes:
        prefetch = capped_prefetch(prefetch, num_workers, int(batch_images) * int(item_bytes))
    # persistent workers: the end of the pass does not wait for the workers' shutdown (a join
    # of up to 5 s a worker, measured inside the loop on a 16-core GPU host); they go with the
    # loader (or the process)
    return CheckedLoader(_Guarded(dataset), batch_size=int(batch_images), shuffle=False,
                         num_workers=num_workers, collate_fn=_GuardedCollate(collate),
                         pin_memory=pin_memory,
                         prefetch_factor=max(1, int(prefetch)) if num_workers > 0 else None,
                         persistent_workers=num_workers > 0, drop_last=False)


def _item(x):
    """``collate_fn`` of the item loader: each item as the dataset made it (no batch)."""
    return x


def build_item_loader(dataset: TestTimeDataset, num_workers: int, pin_memory: bool = False,
                      prefetch: int = 4) -> CheckedLoader:
    """Sequential loader of single items (``dict(index, views, label, path)``, no batch
    dimension), for a consumer that groups them into batches itself
    (:class:`argtca.views.loader.ViewsLoader`): every worker makes whole images, so all of them
    work on the first batch and none idles at the end of the pass, as they do when each makes a
    whole batch of ``TTA.BATCH_IMAGES``. Prefetch depth (items per worker) capped as
    :func:`make_loader`; an unreadable file raises its one-line :class:`DataError`."""
    per_image = _item_bytes(dataset)
    num_workers = int(num_workers)
    if num_workers == -1:
        from argtca.utils.host import auto_workers
        num_workers = auto_workers()
    if num_workers < 0:
        raise ValueError(f"num_workers={num_workers} must be >= 0")
    prefetch = capped_prefetch(prefetch, num_workers, per_image)
    return CheckedLoader(_Guarded(dataset, timed=True), batch_size=None, shuffle=False,
                         num_workers=num_workers, collate_fn=_item, pin_memory=pin_memory,
                         prefetch_factor=prefetch if num_workers > 0 else None,
                         persistent_workers=num_workers > 0)


def build_test_loader(dataset: TestTimeDataset, num_workers: int, batch_images: int = 1,
                      pin_memory: bool = False, prefetch: int = 4) -> CheckedLoader:
    """Sequential loader: batches of ``batch_images`` items collated by ``collate_views``; an
    unreadable file raises its one-line :class:`DataError` (also from worker processes). The
    prefetch depth is capped by :data:`PREFETCH_BYTES` of waiting views."""
    return make_loader(dataset, collate_views, num_workers, batch_images, pin_memory, prefetch,
                       item_bytes=_item_bytes(dataset))


def _item_bytes(dataset) -> int:
    size = getattr(dataset, "item_bytes", None)
    if size is not None:
        return int(size())
    # a dataset of float views of another kind
    return views_bytes(dataset.view_gen, getattr(dataset, "out_dtype", torch.float32))


def views_bytes(view_gen, dtype: torch.dtype) -> int:
    """Bytes of one image's views [n_views, 3, size, size] in ``dtype``."""
    return view_gen.n_views * 3 * view_gen.size * view_gen.size * torch.empty(
        0, dtype=dtype).element_size()
