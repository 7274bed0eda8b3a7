"""The test loop's views loader, for either path: exact PIL views on the CPU
(:mod:`argtca.views.cpu`) or views made on the device (:mod:`argtca.views.gpu`).

:func:`build_views_loader` returns an iterable of batches ``{"index", "label", "path", "views"}``,
with ``views`` already on the device (copied one batch ahead on a side stream on CUDA).
"""
from __future__ import annotations

import time
from typing import Any, Dict, Iterator, Optional, Sequence

import torch
from torch.utils.data import DataLoader

from argtca.utils.host import forking
from argtca.views.cpu import FastViewGenerator, build_view_generator
from argtca.views.dataset import (PixelViewDataset, SlotRing, TestTimeDataset,
                                  build_item_loader, make_loader)
from argtca.views.exact import PixelMixer
from argtca.views.exact_ops import wait_for_warm_ups
from argtca.views.gpu import GpuViewMaker
from argtca.views.gpu_host import GpuViewDataset, collate_gpu_views, views_device

__all__ = ["ViewsLoader", "build_views_loader", "views_float", "views_ops"]


# page-locked staging slots of the uint8 items under TTA.VIEWS_FLOAT engine (at 224 px and 64
# views: 3 x 9.7 MB with TTA.VIEWS_OPS engine, 3 x 38 MB without)
PIN_SLOTS = 3


class ViewsLoader:
    """Iterable of ``{"index", "label", "path", "views"}`` batches with ``views`` on ``device``.

    On CUDA the next batch is copied (pinned memory, non-blocking, side stream) while the current
    one is processed; with ``group`` (CPU views) the loader yields single images, each copied as
    it comes into its batch, which is handed out once complete. GPU views are made on the compute
    stream; ``overlap`` (``TTA.FAST.VIEWS_OVERLAP``) makes them on the copy stream instead, so the
    views of batch n+1 are computed while batch n is tuned (same kernels, same numbers). Off by
    default: the loop is bound by the host thread that launches both, so it gains nothing and costs
    memory
    (``benchmarks/README.md#fast-engine-knobs``).

    ``mixer`` (with ``group``; ``TTA.VIEWS_FLOAT engine``): the loader yields the views' exact
    uint8 images (:class:`argtca.views.dataset.PixelViewDataset`) and each image's float stage
    runs here, on ``device`` (on CUDA on the copy stream, after its pixels' copy), into the
    batch's ``views_dtype`` tensor: the views the workers would have made, bit for bit.
    """

    def __init__(self, loader: DataLoader, device, maker: Optional[GpuViewMaker] = None,
                 overlap: bool = False, group: int = 0, mixer: Optional[PixelMixer] = None,
                 views_dtype: torch.dtype = torch.float32, ring: Optional[SlotRing] = None):
        self.loader = loader
        # the workers' items come as slot numbers of this ring (argtca/views/dataset.py)
        self.ring = ring
        self.device = torch.device(device)
        self.maker = maker
        self.overlap = bool(overlap) and maker is not None
        # group > 0: the loader yields single images (CPU views), grouped here into batches of
        # `group`, each image copied to the device as it comes
        self.group = int(group)
        if self.group and maker is not None:
            raise ValueError("ViewsLoader: group is for single-image (CPU views) loaders")
        if mixer is not None and not self.group:
            raise ValueError("ViewsLoader: mixer needs a single-image loader (group > 0)")
        self.mixer = mixer
        self.views_dtype = views_dtype
        # host seconds: waiting for the DataLoader's next batch, and queueing GPU views; and
        # the seconds the workers took to make the items received (single-image loaders)
        self.seconds = {"workers": 0.0, "views": 0.0, "made": 0.0, "items": 0,
                        "n_workers": int(getattr(loader, "num_workers", 0) or 0)}
        self._started = None   # the DataLoader's iterator once start() ran
        self._ring, self._slot = [], -1   # page-locked staging of the mixer's uint8 items

    def __len__(self) -> int:
        if self.group:
            return -(-len(self.loader) // self.group)
        return len(self.loader)

    def _to_device(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        out = dict(batch)
        keys = ("view0", "canvas", "hw", "params") if self.maker is not None else ("views",)
        if self.maker is not None:
            out["params_cpu"] = batch["params"]
        for k in keys:
            out[k] = batch[k].to(self.device, non_blocking=True)
        return out

    def _finish(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if self.maker is not None:
            t = time.perf_counter()
            batch = {"index": batch["index"], "label": batch["label"], "path": batch["path"],
                     "views": self.maker(batch)}
            self.seconds["views"] += time.perf_counter() - t
        return batch

    def _next(self, it):
        t = time.perf_counter()
        try:
            b = next(it)
            if isinstance(b, dict) and "made_s" in b:
                self.seconds["made"] += float(b.pop("made_s"))
                self.seconds["items"] += 1
            return b if self.ring is None else self.ring.attach(b, PixelViewDataset.KEYS)
        finally:
            self.seconds["workers"] += time.perf_counter() - t

    def start(self) -> "ViewsLoader":
        """Start the DataLoader's workers now (they fork and begin on their first batches); the
        next ``iter()`` continues from them. The test loop calls it before the model is built:
        the workers then fork from a small process without a CUDA context, and make their
        first batches while the model loads and the per-dataset work runs."""
        if self._started is None:
            self._started = self._fork()
        return self

    def _fork(self):
        """The DataLoader's iterator (its workers fork in it), then the mixer's kernels start
        compiling in a thread: never beside a fork."""
        wait_for_warm_ups()   # another loader's, if it still runs
        with forking():
            it = iter(self.loader)
        if self.mixer is not None:
            self.mixer.warm_up()
        return it

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        # not a generator function: the workers start at iter() (before the engine's per-dataset
        # work, which their start then overlaps), not at the first next()
        it, self._started = self._started, None
        return self._batches(self._fork() if it is None else it)

    def _grouped(self, it) -> Iterator[Dict[str, Any]]:
        """Batches of ``group`` single images. On CUDA each image's views are copied (pinned,
        non-blocking, side stream) into the batch's device tensor as soon as the image comes,
        and a batch is handed out as soon as its last image is copied: the engine works on it
        while the workers make the next images."""
        cuda = self.device.type == "cuda"
        stream = torch.cuda.Stream(self.device) if cuda else None
        while True:
            items, views = [], None
            while len(items) < self.group:
                try:
                    b = self._next(it)
                except StopIteration:
                    break
                if cuda:
                    with torch.cuda.stream(stream):
                        if views is None:
                            left = len(self.loader) - self._served
                            views = self._empty(b, min(self.group, left))
                        self._put(views[len(items)], b)
                    self._served += 1
                    # its pinned tensors go back to the host allocator once their copy is done
                    b = {k: b[k] for k in ("index", "label", "path")}
                items.append(b)
            if not items:
                return
            if cuda:
                ev = torch.cuda.Event()
                ev.record(stream)
                current = torch.cuda.current_stream(self.device)
                current.wait_event(ev)
                views.record_stream(current)
            elif self.mixer is not None:
                views = self._empty(items[0], len(items))
                for j, b in enumerate(items):
                    self._put(views[j], b)
            else:
                views = torch.stack([b["views"] for b in items])
            yield {"index": torch.tensor([b["index"] for b in items], dtype=torch.long),
                   "label": torch.tensor([b["label"] for b in items], dtype=torch.long),
                   "path": [b["path"] for b in items], "views": views}

    def _empty(self, item: Dict[str, Any], n: int) -> torch.Tensor:
        """The views tensor of a batch of ``n`` images like ``item``, on the device."""
        if self.mixer is None:
            v = item["views"]
            return torch.empty((n, *v.shape), dtype=v.dtype, device=self.device)
        px = item["pixels"]
        shape = (n, item["mix"].shape[0] + 1, 3, px.shape[1], px.shape[2])
        return torch.empty(shape, dtype=self.views_dtype, device=self.device)

    def _put(self, dst: torch.Tensor, item: Dict[str, Any]) -> None:
        """One image's views into ``dst`` (its row of the batch), on the current stream."""
        if self.mixer is None:
            dst.copy_(item["views"], non_blocking=True)
            return
        t = time.perf_counter()
        px, mix = item["pixels"], item["mix"]
        if self.device.type == "cuda":
            px, mix = self._staged(px, mix)
        px = px.to(self.device, non_blocking=True)
        mix = mix.to(self.device, non_blocking=True)
        plans = item.get("plans")   # TTA.VIEWS_OPS engine: read on the host by the ChainRunner
        self.mixer(px, mix, dst, plans=None if plans is None else plans.numpy())
        if self.device.type == "cuda":
            self._ring[self._slot][2].record()   # the slot is free once these copies are done
        self.seconds["views"] += time.perf_counter() - t

    def _staged(self, px: torch.Tensor, mix: torch.Tensor):
        """``px``, ``mix`` copied into the next of a few reused page-locked slots. The uint8 items
        (9.7 or 38 MB an image) are not pinned by the DataLoader: its pin thread would page-lock
        every waiting item in fresh memory (gigabytes of ``cudaHostAlloc`` at the loop's start,
        which serialises with the first CUDA work); a ring of :data:`PIN_SLOTS` slots is
        allocated once and reused as soon as its copy to the device has run."""
        self._slot = (self._slot + 1) % PIN_SLOTS
        if len(self._ring) < PIN_SLOTS:
            self._ring.append((torch.empty(px.shape, dtype=px.dtype, pin_memory=True),
                               torch.empty(mix.shape, dtype=mix.dtype, pin_memory=True),
                               torch.cuda.Event()))
        hp, hm, ev = self._ring[self._slot]
        if hp.shape != px.shape or hm.shape != mix.shape:   # the last image of a short item
            return px, mix
        ev.synchronize()
        return hp.copy_(px), hm.copy_(mix)

    def _batches(self, it) -> Iterator[Dict[str, Any]]:
        if self.group:
            self._served = 0
            yield from self._grouped(it)
            return
        if self.device.type != "cuda":
            while True:
                try:
                    b = self._next(it)
                except StopIteration:
                    return
                yield self._finish(self._to_device(b))
        stream = torch.cuda.Stream(self.device)

        def fetch():
            try:
                b = self._next(it)
            except StopIteration:
                return None, None
            with torch.cuda.stream(stream):
                b = self._to_device(b)
                if self.overlap:   # GPU views of batch n+1 made while batch n is tuned
                    b = self._finish(b)
                ev = torch.cuda.Event()
                ev.record(stream)
            return b, ev

        nxt, ev = fetch()
        while nxt is not None:
            cur, cur_ev = nxt, ev
            torch.cuda.current_stream(self.device).wait_event(cur_ev)
            for k, v in cur.items():
                if isinstance(v, torch.Tensor) and v.device.type == "cuda":
                    v.record_stream(torch.cuda.current_stream(self.device))
            nxt, ev = fetch()
            yield cur if self.overlap else self._finish(cur)


# The views pipelines, settled once per run (:func:`settle_views`) and recorded in its summary:
# name -> what makes the views
PIPELINES = {
    "pil": "TPT's PIL views in the loader workers (exact)",
    "pil+device-float": "PIL views as uint8 from the workers, ToTensor/Normalize and the AugMix "
                        "mix on the engine's device (exact, bit for bit)",
    "pil+device-ops": "crops and encoded AugMix chains from the workers, Pillow's arithmetic of "
                      "the ops and the float stage on the engine's device (exact, bit for bit)",
    "cpu-fast": "the same random draws, tensor arithmetic in the workers (statistical)",
    "gpu": "the same transforms batched on the device (statistical)",
}


def settle_views(cfg, device) -> str:
    """The views pipeline a run of ``cfg`` on ``device`` uses (a key of :data:`PIPELINES`), from
    ``TTA.VIEWS_DEVICE`` x ``VIEWS_FLOAT`` x ``VIEWS_OPS`` and their "auto": the one place the
    three are resolved and their cross-key rule checked (a :class:`ValueError` naming the fix;
    the trainer settles it with the rest of the configuration, before anything is loaded)."""
    where = views_device(cfg)
    if where != "cpu":
        return where
    if views_float(cfg, device) == "workers":
        views_ops(cfg, device)   # the cross-key rule: ops on the engine need the float stage
        return "pil"
    return "pil+device-ops" if views_ops(cfg, device) == "engine" else "pil+device-float"


def _exact_dataset(cfg, dataset, view_gen, seed, indices, pipeline, device, pin):
    """(dataset of items, device-side mixer or None, the dtype of the views) of a CPU pipeline."""
    if pipeline == "cpu-fast":   # same parameters, exact PIL ops where cheap, mixing once
        view_gen = FastViewGenerator.like(view_gen)
    # under fp16 autocast the image tower's first layer (autocast conv / the fp16 tower) rounds
    # its input to fp16: rounding before the copy instead gives identical features and halves
    # the bytes collated, pinned and copied (38.5 -> 19 MB per image)
    dtype = torch.float16 if pin and str(cfg.TTA.PREC) == "amp" else torch.float32
    if pipeline in ("pil+device-float", "pil+device-ops"):
        # the workers ship the exact uint8 images; their float work (and with ops, their AugMix
        # chains) runs on the device
        ops = pipeline == "pil+device-ops"
        ds = PixelViewDataset(dataset.test, view_gen, int(seed), indices=indices, ops=ops)
        return ds, PixelMixer(view_gen.mean, view_gen.std, view_gen.augmix, device, ops=ops,
                              size=view_gen.size), dtype
    ds = TestTimeDataset(dataset.test, view_gen, int(seed), indices=indices)
    ds.out_dtype = dtype
    return ds, None, dtype


def build_views_loader(cfg, dataset, seed: int, indices: Sequence[int], batch_images: int,
                       device, num_workers: int, prefetch: int = 4,
                       canvas: Optional[int] = None,
                       compile: Optional[bool] = None) -> ViewsLoader:
    """The loader of the test loop for the run's views pipeline (:func:`settle_views`): the
    exact PIL views of :mod:`argtca.views.cpu` (their float stage and AugMix ops in the workers
    or on the device) or the statistical "cpu-fast" and "gpu" ones (this module). ``cfg`` is the
    run configuration the engine sees (zero-shot: one view). ``compile`` (GPU views on CUDA):
    ``torch.compile`` the view maker's mixing, LUT pass and warp (:class:`GpuViewMaker`); None:
    as the engine's towers, i.e. when the resolved ``cfg.TTA.COMPILE`` is "on". The uint8
    items of the device-side pipelines travel through a ring of reused shared-memory slots
    (:class:`argtca.views.dataset.SlotRing`)."""
    device = torch.device(device)
    view_gen = build_view_generator(cfg, dataset)
    pin = device.type == "cuda"
    pipeline = settle_views(cfg, device)
    if pipeline != "gpu":
        ds, mixer, dtype = _exact_dataset(cfg, dataset, view_gen, seed, indices, pipeline,
                                          device, pin)
        if int(batch_images) < 1:
            raise ValueError(f"batch_images={batch_images} must be >= 1")
        # single images, grouped into batches by ViewsLoader (all workers on every batch).
        # DATALOADER.PREFETCH counts batches a worker may hold ready; a worker here makes images,
        # so its depth is PREFETCH x BATCH_IMAGES images (capped by PREFETCH_BYTES, e.g. 14 an
        # image of 64 fp16 views at 224 px on 15 workers, 7 of their uint8 images under
        # VIEWS_FLOAT engine), so that they keep making images while the model is built (they
        # start first) instead of stopping at PREFETCH images each
        # the mixer's items are staged through ViewsLoader's few page-locked slots instead
        loader = build_item_loader(ds, int(num_workers), pin_memory=pin and mixer is None,
                                   prefetch=int(prefetch) * int(batch_images))
        ring = None
        if isinstance(ds, PixelViewDataset) and loader.num_workers > 0:
            # the workers write into reused slots, allocated here, before they fork; the
            # consumer holds at most one batch of received items (ViewsLoader._grouped)
            ring = ds.ring = SlotRing.for_loader(ds.layout(), loader.num_workers,
                                                 loader.prefetch_factor, int(batch_images))
        return ViewsLoader(loader, device, group=int(batch_images), mixer=mixer,
                           views_dtype=dtype, ring=ring)
    ds = GpuViewDataset(dataset.test, view_gen, int(seed), indices=indices, canvas=canvas)
    # an unreadable file raises its one-line DataError here too, also from worker processes
    loader = make_loader(ds, collate_gpu_views, int(num_workers), batch_images=batch_images,
                         pin_memory=pin, prefetch=prefetch)
    if compile is None:
        compile = str(cfg.TTA.get("COMPILE", "off")).lower() in ("on", "true")
    return ViewsLoader(loader, device, GpuViewMaker(view_gen, compile=bool(compile)),
                       overlap=bool(cfg.TTA.FAST.VIEWS_OVERLAP))


def views_float(cfg, device) -> str:
    """Where the float stage of the exact CPU views (``TTA.VIEWS_DEVICE cpu``: ``ToTensor +
    Normalize`` and the AugMix mix, ~28 % of a worker's time an image) runs, from
    ``cfg.TTA.VIEWS_FLOAT``: "workers" (in the loader workers, with the rest of the views) or
    "engine" (on the engine's device, from the uint8 images the workers ship: the same views,
    bit for bit); "auto": "engine" on CUDA, "workers" elsewhere (on the CPU the main process
    would take over the workers' work)."""
    v = str(cfg.TTA.get("VIEWS_FLOAT", "auto")).strip().lower()
    if v == "auto":
        return "engine" if torch.device(device).type == "cuda" else "workers"
    if v not in ("workers", "engine"):
        raise ValueError(f"TTA.VIEWS_FLOAT={cfg.TTA.VIEWS_FLOAT!r}: use 'auto' (the engine's "
                         f"device on CUDA), 'workers' or 'engine'")
    return v


def views_ops(cfg, device) -> str:
    """Where the AugMix ops of the exact CPU views (PIL's shears, rotations and colour tables,
    ~80 % of a worker's time an image) run, from ``cfg.TTA.VIEWS_OPS``: "workers" (PIL, in the
    loader workers) or "engine" (:class:`argtca.views.exact_ops.ChainRunner` on the engine's
    device, from the crops and encoded chains the workers ship: the same views, bit for bit);
    "auto": "engine" where the float stage runs there (:func:`views_float`), else "workers"."""
    v = str(cfg.TTA.get("VIEWS_OPS", "auto")).strip().lower()
    if v not in ("auto", "workers", "engine"):
        raise ValueError(f"TTA.VIEWS_OPS={cfg.TTA.VIEWS_OPS!r}: use 'auto' (with the float "
                         f"stage), 'workers' or 'engine'")
    float_stage = views_float(cfg, device)
    if v == "auto":
        return float_stage
    if v == "engine" and float_stage != "engine":
        raise ValueError(f"TTA.VIEWS_OPS=engine needs the float stage on the engine too: set "
                         f"TTA.VIEWS_FLOAT engine (it is {cfg.TTA.get('VIEWS_FLOAT', 'auto')!r},"
                         f" i.e. {float_stage!r} on {torch.device(device).type})")
    return v
