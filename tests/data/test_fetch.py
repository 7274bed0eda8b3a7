"""argtca.fetch through a real local HTTP server: attribute files, split files, failures."""
import hashlib
import http.server
import json
import socket
from pathlib import Path

import pytest

from argtca import fetch
from argtca.attributes import AttributeFileError, attribute_file_for
from argtca.config import get_cfg_default
from argtca.datasets import DataError, resolve_dataset_class
from helpers_http import FileServer as _Server
from argtca.fetch import KNOWN_FILES, TCA_ATTRIBUTE_FILES, FetchError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Network allowed, a private download cache; returns the cache folder."""
    monkeypatch.delenv("ARGTCA_OFFLINE", raising=False)
    cache = tmp_path / "downloads"
    monkeypatch.setenv("ARGTCA_DOWNLOADS", str(cache))
    return cache


def _serve(monkeypatch, directory, handler=None):
    srv = _Server(directory, handler)
    monkeypatch.setenv("ARGTCA_MIRROR", srv.url)
    return srv


def _files(folder: Path):
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def _attr_dir(shared_data):
    d = shared_data / "tca_attributes"
    if not d.is_dir():
        pytest.skip("../shared/data/tca_attributes is absent")
    return d


# ----------------------------------------------------------------------------- registry
def test_recorded_hashes_are_those_of_the_published_files(shared_data):
    for kind, folder in (("attributes", "tca_attributes"), ("splits", "coop_splits")):
        names = [n for n, kf in KNOWN_FILES.items() if kf.kind == kind and kf.sha256]
        for name in names:
            p = shared_data / folder / name
            if p.is_file():
                assert hashlib.sha256(p.read_bytes()).hexdigest() == KNOWN_FILES[name].sha256, name
    # every file of the reference folders is registered
    for p in (shared_data / "tca_attributes").glob("*.json"):
        assert KNOWN_FILES[p.name].kind == "attributes"


def test_every_dataset_knows_its_files():
    import argtca.datasets.coop as coop
    for cls in coop.COOP_DATASETS:
        assert TCA_ATTRIBUTE_FILES[cls.__name__] in KNOWN_FILES
        if issubclass(cls, coop.JsonSplitDataset):
            assert KNOWN_FILES[cls.split_file].kind == "splits"
    for kf in KNOWN_FILES.values():
        assert kf.urls and all(u.startswith("https://") for u in kf.urls)
        if kf.kind == "attributes":
            assert fetch.TCA_COMMIT in kf.urls[0]
            assert kf.urls[0].endswith("/TCA/Attributes/" + kf.name)


# ----------------------------------------------------------------------------- download
def test_attribute_file_downloaded_verified_cached(monkeypatch, online, shared_data):
    src = _attr_dir(shared_data)
    srv = _serve(monkeypatch, src)
    try:
        cfg = get_cfg_default()
        cfg.DATASET.NAME = "caltech101"          # the key works as well as the class name
        path = Path(attribute_file_for(cfg))
        assert path == online / "attributes" / "Caltech101_2_V.json"
        assert path.read_bytes() == (src / "Caltech101_2_V.json").read_bytes()
        assert srv.requests == ["/Caltech101_2_V.json"]
        # the ImageNet variants share ImageNet's file
        cfg.DATASET.NAME = "ImageNetA"
        assert Path(attribute_file_for(cfg)).name == "ImageNet_2_V.json"
        assert _files(online) == ["Caltech101_2_V.json", "ImageNet_2_V.json"]
    finally:
        srv.close()
    # server gone: the cache answers, without a request
    cfg.DATASET.NAME = "Caltech101"
    assert Path(attribute_file_for(cfg)) == path
    # an explicit path wins and is not fetched
    mine = online.parent / "mine.json"
    mine.write_text('{"a": "b"}')
    cfg.DATASET.ATTRIBUTE_FILE = str(mine)
    assert attribute_file_for(cfg) == str(mine)


def test_checksum_mismatch_caches_nothing(monkeypatch, online, shared_data, tmp_path):
    src = _attr_dir(shared_data)
    bad = tmp_path / "served"
    bad.mkdir()
    data = json.loads((src / "EuroSAT_2_V.json").read_text())
    data["Forest"] = "tampered"
    (bad / "EuroSAT_2_V.json").write_text(json.dumps(data))
    srv = _serve(monkeypatch, bad)
    try:
        with pytest.raises(FetchError) as e:
            fetch.fetch("EuroSAT_2_V.json")
    finally:
        srv.close()
    msg = str(e.value)
    assert "sha256" in msg and KNOWN_FILES["EuroSAT_2_V.json"].sha256 in msg
    assert str(online / "attributes" / "EuroSAT_2_V.json") in msg   # where to copy it by hand
    assert _files(online) == []


class _Truncating(http.server.SimpleHTTPRequestHandler):
    """Announces the full length, sends half, closes."""

    def do_GET(self):
        body = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True


def test_partial_download_caches_nothing(monkeypatch, online, shared_data):
    srv = _serve(monkeypatch, _attr_dir(shared_data), handler=_Truncating)
    try:
        with pytest.raises(FetchError) as e:
            fetch.fetch("OxfordPets_2_V.json")
    finally:
        srv.close()
    msg = str(e.value)
    assert "OxfordPets_2_V.json" in msg and "incomplete" in msg.lower(), msg
    assert _files(online) == []


def test_server_down_and_offline_say_what_to_copy_where(monkeypatch, online):
    with socket.socket() as s:                       # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("ARGTCA_MIRROR", f"http://127.0.0.1:{port}")
    cfg = get_cfg_default()
    cfg.DATASET.NAME = "SUN397"
    with pytest.raises(AttributeFileError) as e:
        attribute_file_for(cfg)
    msg = str(e.value)
    dest = online / "attributes" / "SUN397_2_V.json"
    for part in ("SUN397_2_V.json", str(dest), "Offline?", "DATASET.ATTRIBUTE_FILE",
                 f"{fetch.TCA_COMMIT}/TCA/Attributes/SUN397_2_V.json"):
        assert part in msg, part
    assert _files(online) == []
    monkeypatch.setenv("ARGTCA_OFFLINE", "1")
    with pytest.raises(FetchError, match="ARGTCA_OFFLINE") as e:
        fetch.fetch("SUN397_2_V.json")
    assert str(dest) in str(e.value)


def test_corrupt_cache_file_is_named(online):
    p = online / "attributes" / "Food101_2_V.json"
    p.parent.mkdir(parents=True)
    p.write_text("{}")
    with pytest.raises(FetchError) as e:
        fetch.fetch("Food101_2_V.json")
    assert str(p) in str(e.value) and "delete it" in str(e.value)


def test_unknown_dataset_needs_explicit_file():
    cfg = get_cfg_default()
    cfg.DATASET.NAME = "Demo"
    cfg.DATASET.ATTRIBUTE_FILE = ""
    with pytest.raises(AttributeFileError, match="DATASET.ATTRIBUTE_FILE"):
        attribute_file_for(cfg)


# ----------------------------------------------------------------------------- split files
def test_missing_split_file_is_fetched_not_written_into_root(monkeypatch, online, shared_data,
                                                            tmp_path):
    splits = shared_data / "coop_splits"
    if not (splits / "split_zhou_DescribableTextures.json").is_file():
        pytest.skip("coop_splits absent")
    root = tmp_path / "data"
    (root / "dtd" / "images").mkdir(parents=True)
    srv = _serve(monkeypatch, splits)
    try:
        cfg = get_cfg_default()
        cfg.DATASET.ROOT = str(root)
        ds = resolve_dataset_class("dtd")(cfg, check_files=False)
    finally:
        srv.close()
    assert len(ds.test) == 1692 and ds.num_classes == 47        # shared/data/README.md
    assert all(d.impath.startswith(str(root / "dtd" / "images") + "/") for d in ds.test)
    assert _files(root) == []                                   # nothing written into the root
    assert _files(online) == ["split_zhou_DescribableTextures.json"]


def test_unhashed_split_is_checked_by_structure(monkeypatch, online, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    # what Google Drive answers for a file it will not serve directly: an HTML page
    (served / "split_zhou_Food101.json").write_text("<html><body>Virus scan warning</body></html>")
    srv = _serve(monkeypatch, served)
    try:
        with pytest.raises(FetchError, match="not JSON"):
            fetch.fetch("split_zhou_Food101.json")
        assert _files(online) == []
        split = {"train": [], "val": [], "test": [["apple_pie/1.jpg", 0, "apple_pie"]]}
        (served / "split_zhou_Food101.json").write_text(json.dumps(split))
        p = fetch.fetch("split_zhou_Food101.json")
    finally:
        srv.close()
    assert json.loads(p.read_text()) == split


def test_imagenet_classnames_checked_by_structure(monkeypatch, online, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    lines = [f"n{i:08d} class {i}" for i in range(1000)]
    (served / "classnames.txt").write_text("\n".join(lines[:999]) + "\n")
    srv = _serve(monkeypatch, served)
    try:
        with pytest.raises(FetchError, match="999 lines"):
            fetch.fetch("classnames.txt")
        (served / "classnames.txt").write_text("\n".join(lines) + "\n")
        assert fetch.fetch("classnames.txt").read_text().splitlines() == lines
    finally:
        srv.close()


def test_split_missing_offline_keeps_the_data_root_hint(tmp_path):
    (tmp_path / "eurosat" / "2750").mkdir(parents=True)
    cfg = get_cfg_default()
    cfg.DATASET.ROOT = str(tmp_path)
    with pytest.raises(DataError) as e:
        resolve_dataset_class("eurosat")(cfg)
    msg = str(e.value)
    assert str(tmp_path / "eurosat" / "split_zhou_EuroSAT.json") in msg
    assert "ARGTCA_OFFLINE" in msg and "DATASETS.md" in msg


# --- a server that trickles: overall deadline and minimum rate ---------------------------------

def test_rate_guard_by_hand():
    """Clock and byte counts chosen by hand: window 10 s, minimum 100 B/s, deadline 60 s."""
    t = [0.0]
    g = fetch.RateGuard(deadline=60, min_rate=100, window=10, clock=lambda: t[0])
    for now, n in ((5, 100), (10, 1000), (15, 1200), (19.9, 1999)):
        t[0] = now
        g.update(n)                      # window 0-10 s: 1000 B >= 100 B/s * 10 s; restarts
    t[0] = 20.0
    with pytest.raises(fetch.SlowDownload, match=r"999 bytes in the last 10 s, below the minimum "
                                                 r"rate of 100 bytes/s"):
        g.update(1999)                   # window 10-20 s: 999 B < 1000 B
    g = fetch.RateGuard(deadline=60, min_rate=100, window=10, clock=lambda: t[0])
    for k in range(1, 7):                # 2000 B per 10 s: never too slow
        t[0] = 20.0 + 10 * k
        g.update(2000 * k)
    t[0] = 80.5
    with pytest.raises(fetch.SlowDownload, match=r"not finished after 60 s, the deadline .* "
                                                 r"12000 bytes received in 60 s"):
        g.update(12000)
    g.restart_window()                   # a new file: the rate is measured from here
    assert g._marks == [(80.5, 12000)]


@pytest.fixture
def trickle(monkeypatch, online):
    from helpers_http import TrickleServer
    servers = []

    def make(**kw):
        srv = TrickleServer(**kw)
        servers.append(srv)
        monkeypatch.setenv("ARGTCA_MIRROR", srv.url)
        return srv
    yield make
    for s in servers:
        s.close()


def test_a_trickling_server_stops_at_the_minimum_rate(monkeypatch, online, trickle):
    import time
    monkeypatch.setattr(fetch, "RATE_WINDOW_S", 0.5)
    monkeypatch.setenv("ARGTCA_DOWNLOAD_MIN_RATE", "100")
    srv = trickle(size=100_000, chunk=1, every=0.05)          # ~20 bytes/s, forever
    t0 = time.monotonic()
    with pytest.raises(FetchError) as e:
        fetch.fetch("Caltech101_2_V.json")
    assert time.monotonic() - t0 < 10
    msg = str(e.value)
    assert "too slow" in msg and "below the minimum rate of 100 bytes/s" in msg
    assert "Run the same command again" in msg and "ARGTCA_DOWNLOAD_MIN_RATE" in msg
    assert srv.requests == ["/Caltech101_2_V.json"]
    assert _files(online) == []                                # nothing cached, no .part left


def test_a_slow_but_steady_download_stops_at_the_deadline(monkeypatch, online, trickle):
    import time
    monkeypatch.setenv("ARGTCA_DOWNLOAD_DEADLINE", "1.0")
    monkeypatch.setenv("ARGTCA_DOWNLOAD_MIN_RATE", "10")
    trickle(size=1_000_000, chunk=200, every=0.02)           # ~10 kB/s: fast enough, too long
    t0 = time.monotonic()
    with pytest.raises(FetchError, match=r"not finished after 1 s, the deadline "
                                         r"\(ARGTCA_DOWNLOAD_DEADLINE\)"):
        fetch.fetch("split_zhou_Food101.json")
    assert time.monotonic() - t0 < 10
    assert _files(online) == []


def test_bad_download_limits_are_one_clear_error(monkeypatch, online, trickle):
    trickle()
    monkeypatch.setenv("ARGTCA_DOWNLOAD_DEADLINE", "soon")
    with pytest.raises(FetchError, match="ARGTCA_DOWNLOAD_DEADLINE='soon' is not a number"):
        fetch.fetch("Caltech101_2_V.json")
