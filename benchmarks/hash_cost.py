"""What hashing one weights file costs (argtca/utils/hashing.py): the sha256 of a file of --mb
MiB (default 600, about ViT-L/14's checkpoint), read from the page cache (warm: the file
was just written or read) and, where the OS lets us drop the file's pages (posix_fadvise
DONTNEED after fsync), from the disk (cold), and a cached lookup (the stat key); then what the
code identity of a run costs (the argtca package's content hash, once per process). Prints one
line per figure; the run's machine and disk decide the numbers.

    python benchmarks/hash_cost.py [--mb 600] [--dir /tmp] [--repeat 3]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time


def sha256_of(path: str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def drop_pages(path: str) -> bool:
    """Ask the OS to forget the file's cached pages (clean pages only: fsync first)."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=600)
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    os.environ["ARGTCA_CACHE"] = tempfile.mkdtemp(prefix="hash-cost-cache-")
    from argtca.utils import hashing
    fd, path = tempfile.mkstemp(suffix=".pt", dir=a.dir)
    try:
        with os.fdopen(fd, "wb") as f:
            block = os.urandom(1 << 20)
            for i in range(a.mb):
                f.write(block[:-8] + i.to_bytes(8, "little"))
        size = os.path.getsize(path) / 2**20
        warm, cold = [], []
        for _ in range(a.repeat):
            sha256_of(path)   # pages in
            t = time.perf_counter()
            sha256_of(path)
            warm.append(time.perf_counter() - t)
            if drop_pages(path):
                t = time.perf_counter()
                sha256_of(path)
                cold.append(time.perf_counter() - t)
        hashing.file_sha256(path)   # fills the cache
        t = time.perf_counter()
        n = 1000
        for _ in range(n):
            hashing._MEMO.clear()    # the on-disk cache: what a new run (a resume) reads
            hashing.file_sha256(path)
        lookup = (time.perf_counter() - t) / n
        print(f"file: {size:.0f} MiB in {a.dir}; {os.cpu_count()} CPUs; "
              f"hashlib {hashlib.sha256().name} (OpenSSL {__import__('ssl').OPENSSL_VERSION})")
        print(f"sha256, page cache (warm): best {min(warm):.2f} s, "
              f"{size / min(warm):.0f} MiB/s (runs: {', '.join(f'{x:.2f}' for x in warm)})")
        if cold:
            print(f"sha256, pages dropped (cold): best {min(cold):.2f} s, "
                  f"{size / min(cold):.0f} MiB/s (runs: {', '.join(f'{x:.2f}' for x in cold)})")
        else:
            print("sha256, cold: not measured (no posix_fadvise here)")
        print(f"cached lookup (stat + on-disk cache read): {lookup * 1e3:.3f} ms")
        # the code identity every run records (argtca/utils/code.py): the package's files,
        # hashed once per process
        from argtca.utils import code
        files = code._package_files(code.package_dir())
        mib = sum(os.path.getsize(f) for f in files) / 2**20
        times = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            code.files_sha256(files, code.package_dir())
            times.append(time.perf_counter() - t)
        print(f"argtca package hash ({len(files)} files, {mib:.1f} MiB): best "
              f"{min(times) * 1e3:.1f} ms (runs: {', '.join(f'{x * 1e3:.1f}' for x in times)})")
    finally:
        os.remove(path)


if __name__ == "__main__":
    main()
