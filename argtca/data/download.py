"""``python -m argtca.data download``: torchvision's downloader into a staging folder under the data
root, then the folders argtca's loader reads moved into CoOp's layout and the staging folder (with
the archives) removed. Split files are not written into the root: they are fetched into argtca's
cache on first use (argtca.fetch).

torchvision's downloader reads without a timeout, so a server that stalls or trickles would hang
the command for hours: while it runs, its HTTP downloads go through :func:`_guarded_urlretrieve`
(socket timeout, overall deadline and minimum rate of :class:`argtca.fetch.RateGuard`;
``ARGTCA_DOWNLOAD_DEADLINE`` default :data:`argtca.fetch.DATA_DEADLINE_S`,
``ARGTCA_DOWNLOAD_MIN_RATE``), and other sockets (Google Drive through gdown) get the socket
timeout. A download stopped this way says how far it got and that running it again keeps the
archives already verified."""
from __future__ import annotations

import os
import shutil
import socket
import urllib.request
from contextlib import contextmanager
from unittest import mock

from ..datasets.base import DataError
from ..fetch import DATA_DEADLINE_S, TIMEOUT_S, RateGuard, SlowDownload, _env_float, is_offline
from .sources import SOURCES, how_to_get

__all__ = ["download", "place", "staging_dir"]


def _guarded_urlretrieve(guard: RateGuard):
    """A drop-in for torchvision's ``_urlretrieve(url, filename, chunk_size)`` that keeps the
    guard's deadline and minimum rate (the rate window restarts with each file, so unpacking
    between two downloads does not count as a slow download)."""
    from torchvision.datasets.utils import USER_AGENT
    from tqdm.auto import tqdm

    def retrieve(url, filename, chunk_size: int = 1 << 15) -> None:
        guard.restart_window()
        req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp, open(filename, "wb") as fh, \
                tqdm(total=resp.length, unit="B", unit_scale=True, disable=None) as bar:
            read = getattr(resp, "read1", resp.read)   # whatever arrived: a trickle is seen
            n = 0
            while True:
                guard.update(n)
                chunk = read(chunk_size)
                if not chunk:
                    break
                fh.write(chunk)
                n += len(chunk)
                bar.update(len(chunk))
    return retrieve


@contextmanager
def _guarded(guard: RateGuard):
    import torchvision.datasets.utils as tvu
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(TIMEOUT_S)
    try:
        if hasattr(tvu, "_urlretrieve"):
            with mock.patch.object(tvu, "_urlretrieve", _guarded_urlretrieve(guard)):
                yield
        else:                                   # another torchvision: the socket timeout only
            yield
    finally:
        socket.setdefaulttimeout(old)


def staging_dir(root: str, cls) -> str:
    return os.path.join(root, f".argtca-download-{cls.key}")


def place(cls, staging: str, root: str) -> None:
    """Move what torchvision left in ``staging`` into the loader's layout under ``root``."""
    src = SOURCES[cls.__name__]
    for a, b in src.moves:
        s, d = os.path.join(staging, a), os.path.join(root, b)
        if not os.path.exists(s):
            raise DataError(f"{s} not found after torchvision's {src.torchvision} download; the "
                            f"download is incomplete: delete {staging} and run again")
        if os.path.exists(d):
            raise DataError(f"{d} already exists; delete it to download {cls.key} again")
    for a, b in src.moves:
        d = os.path.join(root, b)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.move(os.path.join(staging, a), d)
    shutil.rmtree(staging, ignore_errors=True)


def download(cls, root: str) -> str:
    """Download ``cls`` under ``root`` with torchvision; returns what was laid out."""
    src = SOURCES.get(cls.__name__)
    if src is None or not src.torchvision:
        raise DataError(f"{cls.key} cannot be downloaded automatically: "
                        f"{how_to_get(cls, root)}")
    if is_offline():
        raise DataError(f"ARGTCA_OFFLINE is set: not downloading {cls.key}; unset it, or "
                        f"{how_to_get(cls, root, short=True)}")
    os.makedirs(root, exist_ok=True)
    for _, b in src.moves:
        d = os.path.join(root, b)
        if os.path.exists(d):
            raise DataError(f"{d} already exists; delete it to download {cls.key} again")
    import torchvision.datasets as tvd
    staging = staging_dir(root, cls)
    tv_cls = getattr(tvd, src.torchvision)
    guard = RateGuard(deadline=_env_float("ARGTCA_DOWNLOAD_DEADLINE", DATA_DEADLINE_S))
    try:
        with _guarded(guard):
            tv_cls(staging, download=True)
    except SlowDownload as e:
        raise DataError(f"torchvision's {src.torchvision} download into {staging} stopped: {e}. "
                        f"Run the same command again to go on (archives already downloaded and "
                        f"verified are kept in {staging}), raise ARGTCA_DOWNLOAD_DEADLINE or "
                        f"lower ARGTCA_DOWNLOAD_MIN_RATE, or "
                        f"{how_to_get(cls, root, short=True)}") from None
    except Exception as e:  # network, checksum, disk: torchvision raises many kinds
        raise DataError(f"torchvision's {src.torchvision} download into {staging} failed "
                        f"({type(e).__name__}: {e}); run again (finished files are kept), or "
                        f"{how_to_get(cls, root, short=True)}") from e
    place(cls, staging, root)
    return src.layout
