"""Cost of the load-time image check: ``python -m argtca.bench.check_images [--n 10000]``.

Writes ``--n`` JPEGs of ``--size`` pixels (Caltech101-like, noise + gradients, quality 90) into a
temporary folder, then times :func:`argtca.datasets.images.check_images` in each mode ("header",
the default, and "decode") with ``--threads`` threads and with one thread. The files were just
written, so they are in the page cache: this is the CPU cost; a cold network file system adds its
latency per file (which the threads overlap).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from PIL import Image

from argtca.datasets.base import Datum
from argtca.datasets.images import check_images


def make_images(folder: str, n: int, size=(500, 375), seed: int = 0):
    rng = np.random.default_rng(seed)
    w, h = size
    base = np.linspace(0, 255, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 3), np.float32)
    noise = [rng.normal(0, 20, (h, w, 3)).astype(np.float32) for _ in range(8)]
    items = []
    for i in range(n):
        arr = np.clip(base * rng.uniform(0.3, 1.0, 3) + noise[i % 8], 0, 255)
        path = os.path.join(folder, f"img_{i:05d}.jpg")
        Image.fromarray(arr.astype(np.uint8)).save(path, quality=90)
        items.append(Datum(path, 0, "x"))
    return items


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--size", type=int, nargs=2, default=(500, 375))
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--modes", nargs="+", default=["header", "decode"])
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        items = make_images(d, args.n, tuple(args.size))
        mb = sum(os.path.getsize(x.impath) for x in items) / 2 ** 20
        print(f"wrote {args.n} JPEGs {args.size[0]}x{args.size[1]} ({mb:.0f} MiB) in "
              f"{time.perf_counter() - t:.1f} s; {os.cpu_count()} CPUs")
        for mode in args.modes:
            for threads in (1, args.threads, 1, args.threads):   # each twice: the second is warm
                t = time.perf_counter()
                check_images(items, "bench", mode, threads=threads)
                s = time.perf_counter() - t
                print(f"check {mode:6s} threads={threads:2d}: {s:6.2f} s  "
                      f"({1e3 * s / args.n:.3f} ms/image)")


if __name__ == "__main__":
    main()
