"""``python -m argtca.data download``: torchvision's downloader into a staging folder under the data
root, then the folders argtca's loader reads moved into CoOp's layout and the staging folder (with
the archives) removed. Split files are not written into the root: they are fetched into argtca's
cache on first use (argtca.fetch)."""
from __future__ import annotations

import os
import shutil

from ..datasets.base import DataError
from ..fetch import is_offline
from .sources import SOURCES, how_to_get

__all__ = ["download", "place", "staging_dir"]


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
    try:
        tv_cls(staging, download=True)
    except Exception as e:  # network, checksum, disk: torchvision raises many kinds
        raise DataError(f"torchvision's {src.torchvision} download into {staging} failed "
                        f"({type(e).__name__}: {e}); run again (finished files are kept), or "
                        f"{how_to_get(cls, root, short=True)}") from e
    place(cls, staging, root)
    return src.layout
