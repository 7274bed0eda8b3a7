"""What compiling the image tower costs and saves, whole or block by block.

The fp16 lean ViT-B/16 tower (random weights) on one batch of 16 images x 64 views: eager; the
whole tower under ``torch.compile``; each attention block through one compiled function (the 12
blocks share it). Prints the first call (compilation) and the steady ms per image of each.
Usage: python benchmarks/probes/tower_compile_probe.py [BACKBONE]
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main() -> None:
    import open_clip
    from argtca.engine.towers import compile_blocks, fast_image_tower
    name = sys.argv[1] if len(sys.argv) > 1 else "ViT-B-16"
    dev = torch.device("cuda")
    model = open_clip.create_model(name, pretrained=None).to(dev).eval()
    x = torch.randn(1024, 3, 224, 224, device=dev, dtype=torch.float16)

    def timed(fn, reps=5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            fn(x)
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            with torch.no_grad():
                fn(x)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return {"first_s": round(first, 2),
                "ms_per_image": round(1e3 * sorted(times)[reps // 2] / 16, 3)}

    rows = {}
    rows["eager"] = timed(fast_image_tower(model.visual, torch.float16))
    rows["whole"] = timed(torch.compile(fast_image_tower(model.visual, torch.float16),
                                        dynamic=False))
    rows["blocks"] = timed(compile_blocks(fast_image_tower(model.visual, torch.float16)))
    print(json.dumps(rows), flush=True)


if __name__ == "__main__":
    main()
