"""Reading evaluation images: every PIL mode to 8-bit RGB, and a quick check of every file at load.

``to_rgb`` is the one conversion used by both view paths (``TestTimeDataset.load`` and, through it,
the GPU-views dataset). It differs from ``Image.convert("RGB")`` (TPT, Dassl, torchvision) only
where that call gives wrong pixels:

* 16-bit greyscale (``I;16``, ``I;16B``, ``I;16L``, ``I;16N``) and 32-bit integer ``I`` images are
  read as 16-bit data (full scale 65535, as Pillow stores 16-bit PNG, TIFF and PGM files) and
  scaled to 8 bits with ``round(v / 257)``; ``convert`` clips them to 255, so a 16-bit PNG turns
  white. An ``I`` image with values outside [0, 65535] has no known scale and is refused.
* Float images (``F``) are read as [0, 1] data (``round(255 v)``); values outside [0, 1] (or NaN)
  are refused, because [0, 1] and [0, 255] floats cannot be told apart safely.
* Images with transparency (``RGBA``, ``LA``, ``PA``, premultiplied ``RGBa``/``La``, ``P`` with a
  transparent palette entry, ``L``/``RGB``/``I;16`` with a PNG ``tRNS`` colour key) are composited
  on white, ``round((c·a + 255·(255 − a)) / 255)``, as web pages show them and as LAION's
  img2dataset prepares images; ``convert`` drops alpha and shows whatever colour the transparent
  pixels hold. Fully opaque images come out exactly as with ``convert``.
* Everything else (``1``, ``L``, ``P``, ``CMYK``, ``YCbCr``, ``LAB``, ``HSV``, ``RGBX``) goes
  through ``convert("RGB")`` unchanged. 16-bit colour PNGs are reduced to 8 bits by Pillow's
  decoder (high byte; at most one level from ``round(v / 257)``). EXIF orientation is not applied
  (as in TPT and torchvision).

``check_images`` is the load-time check: ``DATASET.CHECK_IMAGES`` "header" opens every evaluated
file in threads (format, size and mode are read from the header; no pixel is decoded), which
catches missing, empty, non-image and decompression-bomb files; "decode" also decodes and converts
every image (catches truncated files and out-of-range 16-bit/float data before the run); "off"
skips it. A file that fails later, while its views are made, is one :class:`DataError` line too.
"""
from __future__ import annotations

import os
import struct
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image, UnidentifiedImageError

from .base import DataError, Datum

__all__ = ["BACKGROUND", "CHECK_MODES", "to_rgb", "open_rgb", "image_problem", "check_images"]

BACKGROUND = 255                       # white, for transparent pixels
CHECK_MODES = ("off", "header", "decode")
_INT16_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
_FIX = "replace or re-download the file"


def _u16_to_u8(a: np.ndarray) -> np.ndarray:
    """round(v / 257) for 0 <= v <= 65535 (no ties: v / 257 is never k + 1/2)."""
    return ((a.astype(np.uint32) + 128) // 257).astype(np.uint8)


def _composite(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] colour over white through uint8 [H, W] alpha, rounded."""
    c = rgb.astype(np.uint32)
    a = alpha.astype(np.uint32)[..., None]
    return ((c * a + BACKGROUND * (255 - a) + 127) // 255).astype(np.uint8)


def _grey_to_rgb(grey: np.ndarray, transparent: Optional[np.ndarray] = None) -> Image.Image:
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    if transparent is not None:
        rgb[transparent] = BACKGROUND
    return Image.fromarray(np.ascontiguousarray(rgb), "RGB")


def to_rgb(img: Image.Image, path: str = "") -> Image.Image:
    """8-bit RGB version of a loaded PIL image of any mode (see the module docstring).

    ``path`` only names the file in the :class:`DataError` raised for data without a known scale.
    """
    mode = img.mode
    where = f"image {path}" if path else "image"
    if mode in _INT16_MODES or mode == "I" or mode.startswith("I;"):
        a = np.asarray(img)
        if a.dtype.kind not in "iu":
            raise DataError(f"{where}: unsupported integer mode {mode!r}; convert it to 8-bit")
        if a.size and (int(a.min()) < 0 or int(a.max()) > 65535):
            raise DataError(f"{where}: {mode} data range [{int(a.min())}, {int(a.max())}] is not "
                            f"16-bit ([0, 65535]), so its brightness scale is unknown; convert "
                            f"the file to 8-bit or 16-bit")
        t = img.info.get("transparency")
        mask = (a == t) if isinstance(t, int) and not isinstance(t, bool) else None
        return _grey_to_rgb(_u16_to_u8(a), mask)
    if mode == "F":
        a = np.asarray(img, dtype=np.float64)
        if a.size and not (np.isfinite(a).all() and a.min() >= 0.0 and a.max() <= 1.0):
            finite = a[np.isfinite(a)]
            rng = (f"[{finite.min():g}, {finite.max():g}]" if finite.size else "no finite value")
            bad = "" if np.isfinite(a).all() else " with NaN/inf"
            raise DataError(f"{where}: float (mode F) data must lie in [0, 1], found {rng}{bad}; "
                            f"convert the file to 8-bit (or scale it to [0, 1])")
        return _grey_to_rgb(np.floor(a * 255.0 + 0.5).astype(np.uint8))
    if img.has_transparency_data:
        rgba = np.asarray(img.convert("RGBA"))
        return Image.fromarray(_composite(rgba[..., :3], rgba[..., 3]), "RGB")
    if mode == "RGB":
        return img
    try:
        return img.convert("RGB")
    except (ValueError, OSError) as e:
        raise DataError(f"{where}: cannot convert mode {mode!r} to RGB ({e}); convert the file "
                        f"to an 8-bit RGB format") from e


def _describe(path: str, e: BaseException) -> str:
    if isinstance(e, FileNotFoundError):
        return "file not found"
    if isinstance(e, Image.DecompressionBombError):
        return (f"{e} (decompression-bomb guard; downscale the image if it is genuine)")
    if isinstance(e, UnidentifiedImageError):
        try:
            if os.path.getsize(path) == 0:
                return "empty file (0 bytes)"
        except OSError:
            pass
        return "not an image file Pillow can read"
    msg = str(e) or type(e).__name__
    return msg.replace(f"'{path}'", "").replace(path, "").strip(" :") or type(e).__name__


# What a broken file can raise inside Pillow's decoders besides OSError (e.g. SyntaxError "broken
# PNG file", struct.error / EOFError on short headers, ValueError on impossible sizes).
_READ_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError,
                struct.error, zlib.error)


def open_rgb(path: str) -> Image.Image:
    """Decode ``path`` and return it as 8-bit RGB; :class:`DataError` naming the file otherwise."""
    try:
        with Image.open(path) as im:
            im.load()
            img = im
    except _READ_ERRORS as e:
        raise DataError(f"cannot read image {path}: {_describe(path, e)}; {_FIX}") from e
    return to_rgb(img, path)


def image_problem(path: str, decode: bool = False) -> Optional[str]:
    """Why ``path`` cannot be used, or None. Reads the header only unless ``decode``."""
    try:
        with Image.open(path) as im:
            w, h = im.size
            if w < 1 or h < 1:
                return f"image size {w}x{h}"
            if decode:
                im.load()
                to_rgb(im, path)
    except DataError as e:
        return str(e)
    except _READ_ERRORS as e:
        return _describe(path, e)
    return None


# check_images: files checked in the calling thread first, and the time per file under which the
# rest are checked there too (a cached header: ~35 us on a dev box; a cold disk: milliseconds)
SERIAL_PROBE_FILES = 64
SERIAL_SECONDS_PER_FILE = 5e-4


def check_images(items: Sequence[Datum], what: str, mode: str = "header",
                 threads: int = 16) -> None:
    """Check every file of ``items`` (``mode`` in :data:`CHECK_MODES`); one :class:`DataError`
    naming the failing files (up to 3) and their problems."""
    mode = str(mode).strip().lower()
    if mode not in CHECK_MODES:
        raise DataError(f"DATASET.CHECK_IMAGES={mode!r}: use one of {', '.join(CHECK_MODES)}")
    if mode == "off" or not items:
        return
    paths = [d.impath for d in items]
    decode = mode == "decode"
    n = max(1, min(int(threads), len(paths)))
    # a header check of cached files is bound by Python: threads then only contend for the GIL
    # (4096 cached JPEGs: 0.14 s in one thread, 0.60 s in 16); they pay when the files wait on a
    # disk or a network file system, and always for decoding (Pillow's decoder releases the GIL).
    # The first files, checked in this thread, say which case this is.
    head = 0 if decode or n == 1 else min(len(paths), SERIAL_PROBE_FILES)
    t = time.perf_counter()
    problems = [image_problem(p, decode) for p in paths[:head]]
    serial = n == 1 or (head and time.perf_counter() - t <= head * SERIAL_SECONDS_PER_FILE)
    rest = paths[head:]
    if serial:
        problems += [image_problem(p, decode) for p in rest]
    elif rest:
        with ThreadPoolExecutor(n) as pool:
            problems += list(pool.map(lambda p: image_problem(p, decode), rest, chunksize=64))
    bad: List[Tuple[str, str]] = [(p, why) for p, why in zip(paths, problems) if why]
    if bad:
        shown = "; ".join(f"{p} ({why})" for p, why in bad[:3])
        more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise DataError(f"{len(bad)} of {len(paths)} images of {what} cannot be read: {shown}"
                        f"{more}; replace or re-download these files")
