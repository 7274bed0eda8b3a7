"""python -m argtca.data: the doctor on a tree with one problem of each kind, and the downloader's
refusals and layout step (no network)."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from argtca.data.__main__ import main
from argtca.data.download import place, staging_dir
from argtca.datasets import resolve_dataset_class

from helpers_data import make_caltech


def _jpg(path: Path, seed: int = 0):
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.random.default_rng(seed).integers(0, 256, (12, 12, 3), dtype=np.uint8)
    Image.fromarray(arr).save(path)


def _split(base: Path, name: str, rels):
    base.mkdir(parents=True, exist_ok=True)
    rows = [[r, i % 2, f"class_{i % 2}"] for i, r in enumerate(rels)]
    (base / name).write_text(json.dumps({"train": [], "val": [], "test": rows}))
    return rows


def snapshot(root: Path):
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*"))


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "data"
    make_caltech(root)                                                   # sound
    (root / "dtd" / "images").mkdir(parents=True)                        # split file missing
    (root / "eurosat" / "2750").mkdir(parents=True)                      # split file broken
    (root / "eurosat" / "split_zhou_EuroSAT.json").write_text("{not json")
    ucf = root / "ucf101"                                                # images missing
    rels = [f"A/v{i}.jpg" for i in range(5)]
    _split(ucf, "split_zhou_UCF101.json", rels)
    for i, r in enumerate(rels[:3]):
        _jpg(ucf / "UCF-101-midframes" / r, i)
    fl = root / "oxford_flowers"                                         # unreadable images
    rels = [f"image_{i:05d}.jpg" for i in range(5)]
    _split(fl, "split_zhou_OxfordFlowers.json", rels)
    for i, r in enumerate(rels):
        _jpg(fl / "jpg" / r, i)
    (fl / "jpg" / rels[1]).write_text("this is not a jpeg")
    (fl / "jpg" / rels[3]).write_bytes(b"")
    ia = root / "imagenet-adversarial"                                   # layout: 3 of 200 classes
    for k in range(3):
        _jpg(ia / "imagenet-a" / f"n0{k:07d}" / "a.jpg", k)
    (ia / "classnames.txt").write_text("".join(f"n{i:08d} thing {i}\n" for i in range(1000)))
    return root


def test_check_one_problem_of_each_kind(tree, capsys):
    before = snapshot(tree)
    names = ["caltech101", "oxford_pets", "dtd", "eurosat", "ucf101", "oxford_flowers",
             "imagenet_a"]
    rc = main(["check", *names, "--root", str(tree), "--limit", "1"])
    out = capsys.readouterr().out
    assert rc == 1
    assert snapshot(tree) == before, "the doctor wrote into the data root"
    blocks = {}
    for line in out.splitlines()[1:]:
        if not line.startswith(" "):
            key = line.split()[0]
            blocks[key] = [line]
        else:
            blocks[key].append(line.strip())
    text = {k: "\n".join(v) for k, v in blocks.items()}
    assert text["caltech101"].startswith("caltech101")
    assert "PRESENT  6 test images" in text["caltech101"]
    assert "fix" not in text["caltech101"]
    assert "MISSING" in text["oxford_pets"]
    assert f"python -m argtca.data download oxford_pets --root {tree}" in text["oxford_pets"]
    assert "BROKEN" in text["dtd"] and str(tree / "dtd" / "split_zhou_DescribableTextures.json") \
        in text["dtd"] and "network" in text["dtd"]
    assert "BROKEN" in text["eurosat"] and "not valid JSON" in text["eurosat"]
    assert "BROKEN" in text["ucf101"] and "2 of 5 images listed by the split are missing" in \
        text["ucf101"] and "ucf101/UCF-101-midframes/A/v3.jpg (and 1 more)" in text["ucf101"]
    f = text["oxford_flowers"]
    assert "BROKEN" in f and "2 of 5 images cannot be read" in f
    assert "oxford_flowers/jpg/image_00001.jpg" in f and "(and 1 more)" in f
    assert "BROKEN" in text["imagenet_a"] and "3 class folders" in text["imagenet_a"] and \
        "200" in text["imagenet_a"]


def test_check_all_and_sound_tree(tmp_path, capsys):
    root = tmp_path / "data"
    make_caltech(root)
    assert main(["check", "--root", str(root), "--present-only"]) == 0
    out = capsys.readouterr().out
    assert "caltech101" in out and "oxford_pets" not in out
    assert main(["check", "caltech101", "--root", str(tmp_path / "absent")]) == 2


def test_download_refusals(tmp_path, capsys, monkeypatch):
    assert main(["download", "stanford_cars", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot be downloaded automatically" in err and "URL is gone" in err
    assert main(["download", "imagenet", "--root", str(tmp_path)]) == 2
    assert "image-net.org" in capsys.readouterr().err
    assert main(["download", "eurosat", "--root", str(tmp_path)]) == 2   # tests are offline
    assert "ARGTCA_OFFLINE" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_torchvision_folders_are_laid_out_as_the_loader_reads(tmp_path):
    import torchvision.datasets as tvd
    root = tmp_path / "data"
    cls = resolve_dataset_class("eurosat")
    staging = Path(staging_dir(str(root), cls))
    _jpg(staging / "eurosat" / "2750" / "Forest" / "Forest_1.jpg")
    (staging / "eurosat" / "EuroSAT.zip").write_bytes(b"archive")
    assert len(tvd.EuroSAT(str(staging))) == 1          # torchvision itself reads this staging tree
    place(cls, str(staging), str(root))
    assert (root / "eurosat" / "2750" / "Forest" / "Forest_1.jpg").is_file()
    assert not staging.exists()                          # archives and staging removed
    dtd = resolve_dataset_class("dtd")
    st = Path(staging_dir(str(root), dtd))
    _jpg(st / "dtd" / "dtd" / "images" / "banded" / "banded_0001.jpg")
    for d in ("labels", "imdb"):
        (st / "dtd" / "dtd" / d).mkdir(parents=True)
    place(dtd, str(st), str(root))
    assert (root / "dtd" / "images" / "banded" / "banded_0001.jpg").is_file()
    # a second download never overwrites
    _jpg(st / "dtd" / "dtd" / "images" / "banded" / "banded_0001.jpg")
    with pytest.raises(ValueError, match="already exists"):
        place(dtd, str(st), str(root))


def test_dataset_download_from_a_trickling_server_stops_with_the_resume_hint(tmp_path, capsys,
                                                                          monkeypatch):
    """torchvision's downloader has no timeout: through a server that sends a byte every 50 ms
    it would run for hours. It stops at the minimum rate, keeps the staging folder (what was
    verified is not fetched again) and says how to go on."""
    import time

    import torchvision.datasets as tvd
    from argtca import fetch
    from helpers_http import TrickleServer
    srv = TrickleServer(size=100_000, chunk=1, every=0.05)
    monkeypatch.delenv("ARGTCA_OFFLINE", raising=False)
    monkeypatch.setattr(fetch, "RATE_WINDOW_S", 0.5)
    monkeypatch.setenv("ARGTCA_DOWNLOAD_MIN_RATE", "100")

    class SlowEuroSAT:                   # torchvision's own download_url, from the local server
        def __init__(self, root, download=False):
            from torchvision.datasets.utils import download_url
            download_url(f"{srv.url}/EuroSAT.zip", os.path.join(root, "eurosat"))

    monkeypatch.setattr(tvd, "EuroSAT", SlowEuroSAT)
    root = tmp_path / "data"
    t0 = time.monotonic()
    try:
        assert main(["download", "eurosat", "--root", str(root)]) == 2
    finally:
        srv.close()
    assert time.monotonic() - t0 < 15
    err = capsys.readouterr().err
    assert "torchvision's EuroSAT download into" in err and "stopped" in err
    assert "below the minimum rate of 100 bytes/s" in err
    assert "Run the same command again to go on" in err
    assert "/EuroSAT.zip" in srv.requests
    assert os.path.isdir(staging_dir(str(root), resolve_dataset_class("eurosat")))
    import socket
    assert socket.getdefaulttimeout() is None            # restored
