"""The loader workers' side of ``TTA.VIEWS_DEVICE gpu`` (:mod:`argtca.views.gpu`): each
item is decoded once and shipped as view 0 (exactly the CPU path's), a canvas (the image resized
so that its long side is at most ``canvas`` pixels) and the random parameters of every view,
drawn from the same generators in the same order as the CPU path; the device makes the views.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image

from argtca.views.augmix import OPS, sample_plan
from argtca.datasets.base import Datum
from argtca.views.cpu import ViewGenerator, item_rngs, random_resized_crop_params
from argtca.views.dataset import TestTimeDataset
from argtca.views.gpu_ops import CHAINS, DEPTH, MAG0, N_COLUMNS, OP0, OP_NAMES

__all__ = ["views_device", "sample_view_params", "GpuViewDataset", "collate_gpu_views"]


def views_device(cfg) -> str:
    v = str(cfg.TTA.VIEWS_DEVICE).strip().lower()
    if v not in ("cpu", "cpu-fast", "gpu"):
        raise ValueError(f"TTA.VIEWS_DEVICE={cfg.TTA.VIEWS_DEVICE!r}: use 'cpu' (TPT's PIL "
                         f"pipeline, exact), 'cpu-fast' (tensor views in the loader workers, "
                         f"statistical) or 'gpu' (batched on the device, statistical)")
    return v


def sample_view_params(view_gen: ViewGenerator, width: int, height: int, seed: int,
                       index: int) -> torch.Tensor:
    """Parameters [V-1, len(VIEW_PARAM_COLUMNS)] of the random views of item ``index``: the draws
    :meth:`ViewGenerator.__call__` makes, in its order (crop box, flip, then the AugMix plan)."""
    n = view_gen.n_views - 1
    out = np.zeros((max(n, 0), N_COLUMNS), dtype=np.float32)
    if n <= 0:
        return torch.from_numpy(out)
    tg, rng = item_rngs(seed, index)
    out[:, OP0:MAG0] = -1
    for v in range(n):
        i, j, h, w = random_resized_crop_params(width, height, view_gen.scale, view_gen.ratio, tg)
        flip = torch.rand(1, generator=tg).item() < 0.5
        out[v, :5] = (j / width, i / height, (j + w) / width, (i + h) / height, float(flip))
        if view_gen.augmix:
            plan = sample_plan(rng, view_gen.severity, view_gen.size, OPS)
            out[v, 5] = plan.m
            out[v, 6:6 + CHAINS] = plan.weights
            for c, chain in enumerate(plan.chains):
                for d, op in enumerate(chain):
                    out[v, OP0 + c * DEPTH + d] = OP_NAMES.index(op.name)
                    out[v, MAG0 + c * DEPTH + d] = op.magnitude
        else:
            out[v, 5] = 1.0
    return torch.from_numpy(out)


def to_uint8(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()


class GpuViewDataset(TestTimeDataset):
    """Items → ``dict(index, label, path, view0 u8[3,S,S], canvas u8[3,C,C], hw i64[2], params)``.

    ``canvas``: the image resized (aspect kept, bilinear with antialias) so that its long side is
    at most ``canvas`` pixels, top-left in a zero square; ``hw`` its valid height and width.
    """

    __test__ = False

    def __init__(self, items: Sequence[Datum], view_gen: ViewGenerator, seed: int,
                 indices: Optional[Sequence[int]] = None, canvas: Optional[int] = None):
        super().__init__(items, view_gen, seed, indices=indices)
        self.canvas = int(canvas or 2 * view_gen.size)
        if self.canvas < view_gen.size:
            raise ValueError(f"canvas={self.canvas} must be >= INPUT.SIZE={view_gen.size}")

    def __getitem__(self, k: int) -> Dict[str, Any]:
        index, datum, img = self.load(k)
        vg, S, C = self.view_gen, self.view_gen.size, self.canvas
        view0 = F.center_crop(F.resize(img, S, interpolation=vg.interpolation), [S, S])
        W, H = img.size
        scale = min(1.0, C / max(W, H))
        w, h = max(1, round(W * scale)), max(1, round(H * scale))
        small = img if (w, h) == (W, H) else img.resize((w, h), Image.BILINEAR, reducing_gap=None)
        canvas = torch.zeros(3, C, C, dtype=torch.uint8)
        canvas[:, :h, :w] = to_uint8(small)
        return {"index": index, "label": int(datum.label), "path": datum.impath,
                "view0": to_uint8(view0), "canvas": canvas,
                "hw": torch.tensor([h, w], dtype=torch.long),
                "params": sample_view_params(vg, W, H, self.seed, index)}


def collate_gpu_views(batch: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"index": torch.tensor([b["index"] for b in batch], dtype=torch.long),
            "label": torch.tensor([b["label"] for b in batch], dtype=torch.long),
            "path": [b["path"] for b in batch],
            "view0": torch.stack([b["view0"] for b in batch]),
            "canvas": torch.stack([b["canvas"] for b in batch]),
            "hw": torch.stack([b["hw"] for b in batch]),
            "params": torch.stack([b["params"] for b in batch])}
