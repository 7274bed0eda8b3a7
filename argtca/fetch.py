"""Small public files argtca fetches on first use: TCA attribute lists, CoOp split files and
ImageNet's ``classnames.txt``. None of them is shipped (the TCA repository has no licence).

Each known file has a documented source (URLs tried in order), a sha256 recorded here where the
file's bytes are known, and a cache path ``$ARGTCA_CACHE/downloads/<kind>/<name>`` (default
``~/.cache/argtca``; ``$ARGTCA_DOWNLOADS`` moves the downloads folder alone). A download is
streamed into a temporary file next to its cache path, checked (complete, sha256 or, where no
hash is recorded, the file's structure) and only then renamed into place, so a failed download
never leaves a half-written cache file.

Every download has an overall deadline and a minimum rate (:class:`RateGuard`): a server that
stalls or trickles (a byte every few seconds keeps a socket timeout from ever firing) stops the
download with one line saying how far it got and how to go on, instead of hanging the run.

Environment:
  ``ARGTCA_OFFLINE=1``  never touch the network; a file that is not cached is an error that says
                        which file to copy where.
  ``ARGTCA_MIRROR=URL`` fetch every file from ``URL/<name>`` instead of its sources (a local
                        ``http://`` server or a ``file:///folder`` holding the files by name).
  ``ARGTCA_DOWNLOAD_DEADLINE=S``  seconds a download may take in all (default :data:`DEADLINE_S`;
                        dataset downloads: :data:`DATA_DEADLINE_S`).
  ``ARGTCA_DOWNLOAD_MIN_RATE=B``  bytes per second a download must keep up, averaged over
                        :data:`RATE_WINDOW_S` seconds (default :data:`MIN_RATE`).

Sources (pinned): TCA authors' repository rhebbalaguppe/TCA_PromptWithoutPanic at commit
b9645fd9 (2025-06-12), folders ``TCA/Attributes`` and ``TCA/data/data_splits``; CoOp's split files
and ImageNet class names from the Google-Drive links in KaiyangZhou/CoOp's DATASETS.md.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

__all__ = ["FetchError", "KnownFile", "KNOWN_FILES", "TCA_ATTRIBUTE_FILES", "TCA_COMMIT",
           "downloads_dir", "cached_path", "fetch", "RateGuard", "SlowDownload",
           "is_offline", "sha256_of"]

TCA_REPO = "rhebbalaguppe/TCA_PromptWithoutPanic"
TCA_COMMIT = "b9645fd9be8d1ba49deb773218eb3db2dcf32599"
_TCA_RAW = f"https://raw.githubusercontent.com/{TCA_REPO}/{TCA_COMMIT}/TCA"
_GDRIVE = "https://drive.google.com/uc?export=download&id={}"
COOP_DATASETS_MD = "https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md"
TIMEOUT_S = 30.0            # per socket operation (connect, one read)
DEADLINE_S = 600.0          # a whole download of one of these files (the largest is ~5 MB)
DATA_DEADLINE_S = 6 * 3600.0  # a whole dataset download (python -m argtca.data download)
MIN_RATE = 1024.0           # bytes/s, averaged over RATE_WINDOW_S
RATE_WINDOW_S = 30.0


class FetchError(ValueError):
    """A file could not be found, downloaded or verified: names the file and the fix."""


class SlowDownload(Exception):
    """A download passed its deadline or fell below its minimum rate (the message says which)."""


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise FetchError(f"{name}={raw!r} is not a number; give seconds (deadline) or bytes per "
                         f"second (minimum rate), or unset it") from None
    if not value > 0:
        raise FetchError(f"{name}={raw!r} must be > 0; unset it for the default")
    return value


class RateGuard:
    """Deadline and minimum rate of one download: call :meth:`update` with the bytes received so
    far (as often as convenient); it raises :class:`SlowDownload` once ``deadline`` seconds have
    passed, or when the last ``window`` seconds brought fewer than ``min_rate * window`` bytes.
    Defaults come from ``ARGTCA_DOWNLOAD_DEADLINE`` / ``ARGTCA_DOWNLOAD_MIN_RATE``."""

    def __init__(self, deadline: Optional[float] = None, min_rate: Optional[float] = None,
                 window: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        self.deadline = deadline or _env_float("ARGTCA_DOWNLOAD_DEADLINE", DEADLINE_S)
        self.min_rate = min_rate or _env_float("ARGTCA_DOWNLOAD_MIN_RATE", MIN_RATE)
        self.window = float(window or RATE_WINDOW_S)
        self.clock = clock
        self.t0 = clock()
        self.n = 0
        self._marks = [(self.t0, 0)]          # (time, bytes) at the start of the current window

    def update(self, n: int) -> None:
        now = self.clock()
        self.n = n
        if now - self.t0 > self.deadline:
            raise SlowDownload(f"not finished after {self.deadline:g} s, the deadline "
                               f"(ARGTCA_DOWNLOAD_DEADLINE); {self._got()}")
        t_mark, n_mark = self._marks[0]
        if now - t_mark >= self.window:
            if n - n_mark < self.min_rate * self.window:
                raise SlowDownload(f"{n - n_mark} bytes in the last {now - t_mark:.0f} s, below "
                                   f"the minimum rate of {self.min_rate:g} bytes/s "
                                   f"(ARGTCA_DOWNLOAD_MIN_RATE); {self._got()}")
            self._marks = [(now, n)]

    def restart_window(self) -> None:
        """Start a new rate window (a new file begins; the deadline runs on)."""
        self._marks = [(self.clock(), self.n)]

    def _got(self) -> str:
        return f"{self.n} bytes received in {self.clock() - self.t0:.0f} s"


@dataclass(frozen=True)
class KnownFile:
    name: str                      # file name (cache name; the name under ARGTCA_MIRROR)
    kind: str                      # "attributes" | "splits" | "imagenet"
    urls: Tuple[str, ...]          # sources, tried in order
    sha256: Optional[str]          # None: bytes not known here; the structure is checked instead
    source: str                    # where it comes from, for messages

    def cache_path(self) -> Path:
        return downloads_dir() / self.kind / self.name


def _attr(name: str, sha: str) -> KnownFile:
    return KnownFile(name, "attributes", (f"{_TCA_RAW}/Attributes/{name}",), sha,
                     f"{TCA_REPO} @ {TCA_COMMIT[:8]}, TCA/Attributes/{name}")


def _split(name: str, sha: Optional[str], gdrive: str) -> KnownFile:
    urls = ((f"{_TCA_RAW}/data/data_splits/{name}",) if sha else ()) + (_GDRIVE.format(gdrive),)
    where = (f"{TCA_REPO} @ {TCA_COMMIT[:8]}, TCA/data/data_splits/{name}, or " if sha else "")
    return KnownFile(name, "splits", urls, sha,
                     where + f"CoOp's DATASETS.md (Google Drive id {gdrive})")


# sha256 of the files as published at the pinned commit (the split files are CoOp's, byte-identical
# in TCA's copy). Food101/SUN397 splits are not in TCA's copy (over 4 MiB) and ImageNet's
# classnames.txt only on Google Drive: no hash is recorded for those; their structure is checked.
_FILES = [
    _attr("Caltech101_2_V.json",
          "9980ec1cddc414c45c0145cc5ad4bdd4e05ca8c65d9da67cb67ba3299d557f68"),
    _attr("DescribableTextures_2_V.json",
          "4a6741ad080680320d31a8e59a7844448e076203b8884d73881a7729dc6fda9d"),
    _attr("EuroSAT_2_V.json", "4a99e788e38d3d7427ff7514f331663b3059010714d795b814e2dd6087591d1a"),
    _attr("FGVCAircraft_2_V.json",
          "323f46fe5e4d6432666576e97fb58a623c648e31c14abbac92ac2e61df1ea32d"),
    _attr("Food101_2_V.json", "0a9c2d6b1bb78842c191da09d1ccfa29d44d85c83cc3e60c8778f1309b4cccb3"),
    _attr("ImageNet_2_V.json", "9fb232cb9adf0664d0afa9ed019c33805db5199c01d90e327c583de04f68862c"),
    _attr("OxfordFlowers_2_V.json",
          "f72eaa5f6b1a2619d6cd4a37a6f87765ce0c427373715696ef1c90a49988d1a9"),
    _attr("OxfordPets_2_V.json",
          "8a2407bee63a19be0c7dbd4dfad650f472579479a78017e37153dde4e5fcf1f8"),
    _attr("SUN397_2_V.json", "51afa3c88c1b4f68282d046324086bab5580124d3603bf7a660e3c570b48e3b6"),
    _attr("StanfordCars_2_V.json",
          "6caf5ea8a3473ebf94ac158a5a4b320bc937e0d7beb5eaa2184c169c4f877229"),
    _attr("UCF101_2_V.json", "5858253102d399d498df40933381de4accca84a1e82dad6bc184e68770c4e0bd"),
    _split("split_zhou_Caltech101.json",
           "52ce83205ff8ff8a1a18119aad6376120ae35c36e783a984bc560cbf10e73fa5",
           "1hyarUivQE36mY6jSomru6Fjd-JzwcCzN"),
    _split("split_zhou_DescribableTextures.json",
           "f26ebeccd2b58e68d70f07a0dc39fe49bf7b69024bac34396b954dfd87969c38",
           "1u3_QfB467jqHgNXC00UIzbLZRQCg2S7x"),
    _split("split_zhou_EuroSAT.json",
           "541503a77d0b26b735d85ec7a3e672804fe0aa466c2e5f07da772cc6c0af8ad2",
           "1Ip7yaCWFi0eaOFUGga0lUdVi_DDQth1o"),
    _split("split_zhou_OxfordFlowers.json",
           "2f50c42fc1a17ca13c271cb4269b1347bdb43d2be672e34f74a4e4cbfbcca794",
           "1Pp0sRXzZFZq15zVOzKjKBu4A9i01nozT"),
    _split("split_zhou_OxfordPets.json",
           "d7f3ffe65b3919f95132e51422894ae18686b83c331fd8c0adcdc3dc2de6301e",
           "1501r8Ber4nNKvmlFVQZ8SeUHTcdTTEqs"),
    _split("split_zhou_StanfordCars.json",
           "40acee7aa65c8e4727a32d90e884b7c3f8960b523422317e163f7af65432959d",
           "1ObCFbaAgVu0I-k_Au-gIUcefirdAuizT"),
    _split("split_zhou_UCF101.json",
           "d78cb834f7c5792ceaff2c5ee2d7c76a9e4086e48a3a6b01232989d29cbefdd8",
           "1I0S0q91hJfsV9Gf4xDIjgDq4AqBNJb1y"),
    _split("split_zhou_Food101.json", None, "1QK0tGi096I0Ba6kggatX1ee6dJFIcEJl"),
    _split("split_zhou_SUN397.json", None, "1y2RD81BYuiyvebdN-JymPfyWYcd8_MUq"),
    KnownFile("classnames.txt", "imagenet", (_GDRIVE.format("1-61f_ol79pViBFDG_IDlUQSwoLcn2XXF"),),
              None, "CoOp's DATASETS.md, ImageNet section (Google Drive id "
                    "1-61f_ol79pViBFDG_IDlUQSwoLcn2XXF; CLIP's ImageNet class names)"),
]
KNOWN_FILES: Dict[str, KnownFile] = {f.name: f for f in _FILES}

# registered dataset class -> the TCA authors' attribute file for it (ImageNet's serves its
# variants)
TCA_ATTRIBUTE_FILES: Dict[str, str] = {
    "Caltech101": "Caltech101_2_V.json", "DescribableTextures": "DescribableTextures_2_V.json",
    "EuroSAT": "EuroSAT_2_V.json", "FGVCAircraft": "FGVCAircraft_2_V.json",
    "Food101": "Food101_2_V.json", "OxfordFlowers": "OxfordFlowers_2_V.json",
    "OxfordPets": "OxfordPets_2_V.json", "SUN397": "SUN397_2_V.json",
    "StanfordCars": "StanfordCars_2_V.json", "UCF101": "UCF101_2_V.json",
    "ImageNet": "ImageNet_2_V.json", "ImageNetA": "ImageNet_2_V.json",
    "ImageNetR": "ImageNet_2_V.json", "ImageNetV2": "ImageNet_2_V.json",
    "ImageNetSketch": "ImageNet_2_V.json",
}


# ----------------------------------------------------------------------------- structure checks
def _check_split_bytes(data: bytes) -> Optional[str]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"not JSON ({e})"
    if not isinstance(obj, dict) or not isinstance(obj.get("test"), list) or not obj["test"]:
        return "not a CoOp split file (no non-empty 'test' list)"
    e = obj["test"][0]
    if not (isinstance(e, list) and len(e) == 3 and isinstance(e[0], str)
            and isinstance(e[1], int)):
        return f"not a CoOp split file (test entry {e!r} is not [path, label, classname])"
    return None


_WNID_LINE = re.compile(r"^n\d{8} \S.*$")


def _check_classnames_bytes(data: bytes) -> Optional[str]:
    try:
        lines = [ln.strip() for ln in data.decode("utf-8").splitlines() if ln.strip()]
    except UnicodeDecodeError as e:
        return f"not text ({e})"
    bad = [ln for ln in lines if not _WNID_LINE.match(ln)]
    if bad:
        return f"line {bad[0][:60]!r} is not '<wnid> <class name>'"
    if len(lines) != 1000 or len({ln.split(" ", 1)[0] for ln in lines}) != 1000:
        return f"{len(lines)} lines, expected 1000 distinct ImageNet classes"
    return None


_STRUCTURE: Dict[str, Callable[[bytes], Optional[str]]] = {
    "splits": _check_split_bytes, "imagenet": _check_classnames_bytes,
    "attributes": lambda b: None if _is_json_object(b) else "not a JSON object",
}


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data.decode("utf-8")), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


# ----------------------------------------------------------------------------- cache / download
def downloads_dir() -> Path:
    d = os.environ.get("ARGTCA_DOWNLOADS")
    if d:
        return Path(os.path.expanduser(d))
    cache = os.environ.get("ARGTCA_CACHE") or "~/.cache/argtca"
    return Path(os.path.expanduser(cache)) / "downloads"


def is_offline() -> bool:
    return os.environ.get("ARGTCA_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def sha256_of(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _problem(kf: KnownFile, data: bytes) -> Optional[str]:
    """Why ``data`` is not ``kf`` (None when it is)."""
    if kf.sha256 is not None:
        got = hashlib.sha256(data).hexdigest()
        return None if got == kf.sha256 else f"sha256 {got} differs from the recorded {kf.sha256}"
    return _STRUCTURE[kf.kind](data)


def _manual_fix(kf: KnownFile) -> str:
    return (f"download {kf.name} by hand from {kf.urls[0]} ({kf.source}) and copy it to "
            f"{kf.cache_path()}")


def cached_path(name: str) -> Optional[Path]:
    """The verified cached copy of a known file, or None when it is not cached."""
    kf = KNOWN_FILES[name]
    p = kf.cache_path()
    if not p.is_file():
        return None
    problem = _problem(kf, p.read_bytes())
    if problem:
        raise FetchError(f"cached file {p} is not {kf.name} ({problem}); delete it (it is fetched "
                         f"again on next use) or " + _manual_fix(kf))
    return p


def _urls(kf: KnownFile) -> Tuple[str, ...]:
    mirror = os.environ.get("ARGTCA_MIRROR", "").strip()
    if mirror:
        return (mirror.rstrip("/") + "/" + kf.name,)
    return kf.urls


def _download(url: str, dest: Path, kf: KnownFile, timeout: float,
              guard: Optional[RateGuard] = None) -> None:
    """Stream ``url`` into a temporary file beside ``dest``; verify; rename into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    guard = guard or RateGuard()
    try:
        n = 0
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            expected = resp.headers.get("Content-Length")
            # read1: whatever has arrived (read(n) would wait for n bytes), so a trickle is seen
            read = getattr(resp, "read1", resp.read)
            while True:
                guard.update(n)
                block = read(1 << 16)
                if not block:
                    break
                out.write(block)
                n += len(block)
        if expected is not None and expected.isdigit() and n != int(expected):
            raise FetchError(f"download of {kf.name} from {url} is incomplete ({n} of {expected} "
                             f"bytes); try again, or " + _manual_fix(kf))
        problem = _problem(kf, Path(tmp).read_bytes())
        if problem:
            raise FetchError(f"download of {kf.name} from {url} is not the expected file "
                             f"({problem}); nothing was cached. Try again later, or "
                             + _manual_fix(kf))
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fetch(name: str, timeout: float = TIMEOUT_S) -> Path:
    """Path of the verified cached copy of a known file, downloading it first if needed."""
    if name not in KNOWN_FILES:
        raise FetchError(f"{name!r} is not a file argtca knows how to fetch; known: "
                         f"{', '.join(sorted(KNOWN_FILES))}")
    kf = KNOWN_FILES[name]
    p = cached_path(name)
    if p is not None:
        return p
    dest = kf.cache_path()
    if is_offline():
        raise FetchError(f"{kf.name} is not cached and ARGTCA_OFFLINE is set: "
                         + _manual_fix(kf))
    errors = []
    for url in _urls(kf):
        try:
            _download(url, dest, kf, timeout)
            print(f"[argtca] fetched {kf.name} from {url} -> {dest}", flush=True)
            return dest
        except FetchError as e:
            errors.append(str(e))
        except SlowDownload as e:
            errors.append(f"{url}: too slow: {e}")
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            errors.append(f"{url}: {type(e).__name__}: {reason}")
    raise FetchError(f"could not fetch {kf.name} ({'; '.join(errors)}). Offline? A slow "
                     f"network? Run the same command again (it starts this file over; files "
                     f"already fetched are kept), raise ARGTCA_DOWNLOAD_DEADLINE or lower "
                     f"ARGTCA_DOWNLOAD_MIN_RATE, or " + _manual_fix(kf))
