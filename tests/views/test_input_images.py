"""Image input: every PIL mode read as the right 8-bit RGB pixels (values worked out by hand), bad
files (zero-byte, non-image, truncated, decompression bomb) as one DataError line naming the file —
at load (header check) or at view time, in the main process and from DataLoader workers."""
import io
import json
import multiprocessing as mp
import os
import struct
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

from argtca.datasets import DataError, Datum, build_dataset
from argtca.datasets.images import check_images, image_problem, open_rgb, to_rgb
from argtca.views.cpu import ViewGenerator
from argtca.views.dataset import TestTimeDataset, build_test_loader
from conftest import tiny_cfg
from helpers_data import make_caltech


def _rgb(img):
    return np.asarray(to_rgb(img)).tolist()


def _png(w, h, bitdepth, colortype, rows, extra=b""):
    """A PNG written byte by byte (Pillow cannot write 16-bit colour PNGs)."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    ihdr = struct.pack(">IIBBBBB", w, h, bitdepth, colortype, 0, 0, 0)
    data = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra
            + chunk(b"IDAT", zlib.compress(data)) + chunk(b"IEND", b""))


def _trns(payload):
    return struct.pack(">I", len(payload)) + b"tRNS" + payload + struct.pack(
        ">I", zlib.crc32(b"tRNS" + payload))


# ---------------------------------------------------------------------------- modes, by hand
U16 = [0, 128, 129, 257, 32896, 65535, 1000]
U16_TO_8 = [0, 0, 1, 1, 128, 255, 4]          # round(v / 257): 128/257=0.498, 1000/257=3.89


def test_16bit_png_is_scaled_not_white(tmp_path):
    p = tmp_path / "g16.png"
    Image.fromarray(np.array([U16], dtype=np.uint16)).save(p)
    with Image.open(p) as im:
        assert im.mode == "I;16"
        assert np.asarray(im.convert("RGB"))[0, :, 0].tolist() == [0, 128, 129, 255, 255, 255,
                                                                     255]   # the old bug
    got = np.asarray(open_rgb(str(p)))
    assert got.shape == (1, 7, 3)
    assert got[0, :, 0].tolist() == U16_TO_8 and (got == got[..., :1]).all()


def test_16bit_big_endian_and_int32_modes():
    be = Image.frombytes("I;16B", (7, 1), np.array(U16, dtype=">u2").tobytes())
    assert be.mode == "I;16B" and [p[0] for p in _rgb(be)[0]] == U16_TO_8
    i32 = Image.fromarray(np.array([[0, 257, 65535, 32896]], dtype=np.int32))
    assert i32.mode == "I" and [p[0] for p in _rgb(i32)[0]] == [0, 1, 255, 128]
    for bad in (70000, -5):
        img = Image.fromarray(np.array([[0, bad]], dtype=np.int32))
        with pytest.raises(DataError, match=rf"/x/i\.tif: I data range .*{bad}"):
            to_rgb(img, "/x/i.tif")


def test_16bit_grey_with_transparent_value():
    raw = np.array([0, 1000, 65535], dtype=">u2").tobytes()
    im = Image.open(io.BytesIO(_png(3, 1, 16, 0, [raw], _trns(struct.pack(">H", 1000)))))
    assert im.mode == "I;16" and im.info["transparency"] == 1000
    assert _rgb(im) == [[[0, 0, 0], [255, 255, 255], [255, 255, 255]]]


def test_16bit_colour_png_keeps_its_colours():
    # Pillow's decoder keeps the high byte: within one level of round(v / 257)
    px = [[0, 0, 0], [300, 600, 900], [65535, 32896, 257], [65280, 65407, 65408]]
    im = Image.open(io.BytesIO(_png(4, 1, 16, 2, [np.array(px, dtype=">u2").tobytes()])))
    want = [[round(v / 257) for v in p] for p in px]   # [[0,0,0],[1,2,4],[255,128,1],[254,254,255]]
    got = _rgb(im)[0]
    assert all(abs(g - w) <= 1 for gp, wp in zip(got, want) for g, w in zip(gp, wp))


def test_float_images_are_0_1():
    f = Image.fromarray(np.array([[0.0, 0.5, 1.0, 0.2]], dtype=np.float32))
    assert f.mode == "F"
    assert [p[0] for p in _rgb(f)[0]] == [0, 128, 255, 51]   # 127.5 -> 128, 51.0 -> 51
    for arr, what in (([0.0, 2.0], r"\[0, 2\]"), ([0.5, np.nan], "NaN")):
        img = Image.fromarray(np.array([arr], dtype=np.float32))
        with pytest.raises(DataError, match=f"/x/f.tif: float .*{what}"):
            to_rgb(img, "/x/f.tif")


def test_alpha_is_composited_on_white():
    rgba = Image.new("RGBA", (3, 1))
    rgba.putdata([(200, 100, 0, 128), (10, 20, 30, 0), (10, 20, 30, 255)])
    # c*a/255 + 255*(1 - a/255): 200*128/255 + 127 = 227.39, 100*128/255 + 127 = 177.20, 127
    assert _rgb(rgba) == [[[227, 177, 127], [255, 255, 255], [10, 20, 30]]]
    la = Image.new("LA", (3, 1))
    la.putdata([(100, 0), (100, 255), (100, 51)])
    # 100*51/255 + 255*204/255 = 20 + 204
    assert _rgb(la) == [[[255] * 3, [100] * 3, [224] * 3]]


def test_palette_transparency_and_colour_keys(tmp_path):
    p = Image.new("P", (2, 1))
    p.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    p.putdata([0, 1])
    p.save(tmp_path / "p.png", transparency=1)
    with Image.open(tmp_path / "p.png") as im:
        assert im.mode == "P" and im.info.get("transparency") == 1
        assert _rgb(im) == [[[255, 0, 0], [255, 255, 255]]]
    p.save(tmp_path / "p_opaque.png")
    with Image.open(tmp_path / "p_opaque.png") as im:
        assert _rgb(im) == [[[255, 0, 0], [0, 0, 255]]]
    grey = Image.open(io.BytesIO(_png(3, 1, 8, 0, [bytes([0, 100, 255])],
                                      _trns(struct.pack(">H", 100)))))
    assert grey.mode == "L" and _rgb(grey) == [[[0] * 3, [255] * 3, [255] * 3]]
    rgb = Image.open(io.BytesIO(_png(2, 1, 8, 2, [bytes([1, 2, 3, 4, 5, 6])],
                                     _trns(struct.pack(">HHH", 1, 2, 3)))))
    assert rgb.mode == "RGB" and _rgb(rgb) == [[[255, 255, 255], [4, 5, 6]]]


def test_cmyk_l_1_ycbcr():
    # CMYK -> RGB: (255 - c)(255 - k)/255: 245*215/255 = 206.57, 235*215/255 = 198.14,
    # 225*215/255 = 189.71
    assert _rgb(Image.new("CMYK", (1, 1), (10, 20, 30, 40))) == [[[207, 198, 190]]]
    assert _rgb(Image.new("L", (1, 1), 77)) == [[[77, 77, 77]]]
    one = Image.new("1", (2, 1))
    one.putdata([0, 1])
    assert _rgb(one) == [[[0, 0, 0], [255, 255, 255]]]
    assert _rgb(Image.new("YCbCr", (1, 1), (100, 128, 128))) == [[[100, 100, 100]]]
    # JFIF: R = Y + 1.402 (Cr-128), G = Y - 0.344136 (Cb-128) - 0.714136 (Cr-128),
    # B = Y + 1.772 (Cb-128), for (100, 120, 140): 116.82, 94.18, 85.82 (Pillow: fixed point)
    got = _rgb(Image.new("YCbCr", (1, 1), (100, 120, 140)))[0][0]
    assert all(abs(g - w) <= 1 for g, w in zip(got, (116.82, 94.18, 85.82)))


def test_rgb_image_passes_through_unchanged():
    img = Image.fromarray(np.arange(12, dtype=np.uint8).reshape(2, 2, 3))
    assert to_rgb(img) is img


def test_views_of_a_16bit_png_equal_those_of_its_8bit_copy(tmp_path):
    rng = np.random.default_rng(0)
    g8 = rng.integers(0, 256, (24, 20), dtype=np.uint16)
    Image.fromarray(g8 * 257).save(tmp_path / "a16.png")                # exact: v*257/257 = v
    Image.fromarray(g8.astype(np.uint8), "L").save(tmp_path / "a8.png")
    ds = TestTimeDataset([Datum(str(tmp_path / "a16.png"), 0, "a"),
                          Datum(str(tmp_path / "a8.png"), 0, "a")],
                         ViewGenerator(size=16, n_views=3, augmix=True), seed=3)
    # same views for the same index: compare item 0 (16-bit) with item 1 re-indexed as 0
    v16 = ds[0]["views"]
    v8 = ds.view_gen(open_rgb(str(tmp_path / "a8.png")), 3, 0)
    assert torch.equal(v16, v8)
    assert ds.view_gen(Image.open(tmp_path / "a16.png"), 3, 0).equal(v8)   # library path too


# ---------------------------------------------------------------------------- bad files
def _bad_files(tmp_path):
    good = tmp_path / "good.png"
    Image.fromarray(np.full((40, 40, 3), 90, np.uint8)).save(good)
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    text = tmp_path / "notes.jpg"
    text.write_text("this is not an image\n")
    noise = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, format="JPEG", quality=95)
    trunc_jpg = tmp_path / "trunc.jpg"
    trunc_jpg.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, format="PNG")
    trunc_png = tmp_path / "trunc.png"
    trunc_png.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    bomb = tmp_path / "bomb.png"   # a valid header claiming 30000 x 30000 pixels (9e8 > 2 * 8.9e7)
    bomb.write_bytes(_png(30000, 30000, 8, 0, [b"\x00" * 10]))
    return {"good": good, "empty": empty, "text": text, "trunc_jpg": trunc_jpg,
            "trunc_png": trunc_png, "bomb": bomb}


def test_each_bad_file_is_one_line_naming_it(tmp_path):
    f = _bad_files(tmp_path)
    assert np.asarray(open_rgb(str(f["good"]))).shape == (40, 40, 3)
    why = {"empty": "empty file", "text": "not an image", "trunc_jpg": "truncated",
           "trunc_png": "", "bomb": "decompression"}
    for key, reason in why.items():
        with pytest.raises(DataError) as e:
            open_rgb(str(f[key]))
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"cannot read image {f[key]}: ") and reason in msg
        assert msg.endswith("replace or re-download the file")


def test_header_check_catches_all_but_truncation_and_decode_catches_that(tmp_path):
    f = _bad_files(tmp_path)
    assert image_problem(str(f["good"])) is None
    assert image_problem(str(f["empty"])) == "empty file (0 bytes)"
    assert image_problem(str(f["text"])) == "not an image file Pillow can read"
    assert "decompression" in image_problem(str(f["bomb"]))
    assert image_problem(str(tmp_path / "gone.png")) == "file not found"
    for t in ("trunc_jpg", "trunc_png"):      # the header is intact: caught when decoded
        assert image_problem(str(f[t])) is None and image_problem(str(f[t]), decode=True)
    items = [Datum(str(p), 0, "a") for p in f.values()]
    with pytest.raises(DataError) as e:
        check_images(items, "test split", "header", threads=4)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("3 of 6 images of test split cannot be read: ")
    assert f"{f['empty']} (empty file (0 bytes))" in msg and str(f["bomb"]) in msg
    with pytest.raises(DataError, match=r"^5 of 6 images .*; and 2 more; replace"):
        check_images(items, "test split", "decode", threads=1)
    check_images(items, "test split", "off")
    check_images(items[:1], "test split", "decode")
    with pytest.raises(DataError, match="DATASET.CHECK_IMAGES='full'"):
        check_images(items, "x", "full")


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("bad", ["empty", "text", "trunc_jpg", "trunc_png", "bomb"])
def test_loader_raises_the_files_own_line_from_workers(tmp_path, workers, bad):
    f = _bad_files(tmp_path)
    items = [Datum(str(f["good"]), 0, "a"), Datum(str(f[bad]), 1, "b"),
             Datum(str(f["good"]), 0, "a")]
    ds = TestTimeDataset(items, ViewGenerator(size=16, n_views=2), seed=0)
    seen = []
    before = set(mp.active_children())
    with pytest.raises(DataError) as e:
        for batch in build_test_loader(ds, num_workers=workers, prefetch=1):
            seen.extend(batch["index"].tolist())
    # the workers end with the error, though its traceback (held by e) holds the loader
    assert not [p for p in set(mp.active_children()) - before if p.is_alive()]
    msg = str(e.value)
    assert "\n" not in msg and "Caught" not in msg and "Traceback" not in msg
    assert msg.startswith(f"cannot read image {f[bad]}: ")
    assert seen == [0]
    with pytest.raises(DataError, match="cannot read image"):   # direct use still raises
        ds[1]


def test_gpu_views_loader_raises_the_same_line(tmp_path):
    from argtca.views.loader import build_views_loader
    f = _bad_files(tmp_path)

    class DS:
        test = [Datum(str(f["good"]), 0, "a"), Datum(str(f["text"]), 0, "a")]
        fine_grained = False
    cfg = tiny_cfg(**{"TTA.N_VIEWS": 4, "TTA.VIEWS_DEVICE": "gpu"})
    loader = build_views_loader(cfg, DS(), 0, [0, 1], 1, "cpu", num_workers=1, prefetch=1)
    with pytest.raises(DataError) as e:
        for _ in loader:
            pass
    assert str(e.value) == (f"cannot read image {f['text']}: not an image file Pillow can read; "
                            f"replace or re-download the file")


# ---------------------------------------------------------------------------- dataset and CLI
def _break(root, k, data: bytes):
    split = json.loads((root / "caltech-101" / "split_zhou_Caltech101.json").read_text())
    path = root / "caltech-101" / "101_ObjectCategories" / split["test"][k][0]
    path.write_bytes(data)
    return path


def test_dataset_load_checks_every_header(tmp_path):
    make_caltech(tmp_path)
    bad = _break(tmp_path, 4, b"")
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(tmp_path)})
    with pytest.raises(DataError, match=rf"^1 of 6 images of Caltech101 split 'test' cannot be "
                                        rf"read: {bad} \(empty file \(0 bytes\)\)"):
        build_dataset(cfg)
    cfg.DATASET.NUM_IMAGES = 4            # only the evaluated images are checked
    assert len(build_dataset(cfg).test) == 4
    cfg.DATASET.NUM_IMAGES = -1
    cfg.DATASET.CHECK_IMAGES = "off"
    assert len(build_dataset(cfg).test) == 6


def test_cli_truncated_image_is_one_line_and_keeps_finished_work(tmp_path, capsys, monkeypatch):
    from argtca.run import main
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    make_caltech(tmp_path / "data", size=(64, 48))
    bad = _break(tmp_path / "data", 5, b"")            # the last test image
    noise = np.random.default_rng(2).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, format="JPEG")
    bad.write_bytes(buf.getvalue()[:len(buf.getvalue()) // 2])    # header kept, data cut
    out = tmp_path / "out"
    argv = ["--root", str(tmp_path / "data"), "--output-dir", str(out), "--seed", "1",
            "--dataset-config-file", "configs/datasets/caltech101.yaml",
            "--config-file", "configs/trainers/tpt.yaml",
            "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
            "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "1",
            "USE_CUDA", "False", "VERBOSE", "False"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"cannot read image {bad}" in err and "truncated" in err
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["index"] for r in recs] == [0, 1, 2, 3, 4]


def test_cached_headers_are_checked_in_one_thread_slow_files_in_many(tmp_path, monkeypatch):
    """Header checks of files that answer at once stay in the calling thread (threads only
    contend for the GIL there); when the first files are slow (a cold disk), the rest go to the
    pool. Either way every file is checked and the bad ones named."""
    import argtca.datasets.images as images
    f = _bad_files(tmp_path)
    items = [Datum(str(f["good"]), 0, "a")] * 99 + [Datum(str(f["empty"]), 0, "a")]
    pools = []

    class Pool(ThreadPoolExecutor):
        def __init__(self, n):
            pools.append(n)
            super().__init__(n)
    monkeypatch.setattr(images, "ThreadPoolExecutor", Pool)
    with pytest.raises(DataError, match=r"^1 of 100 images"):
        check_images(items, "test split", "header", threads=8)
    assert pools == []                           # cached: no thread pool
    real, checked = images.image_problem, []

    def slow(p, decode=False):                   # 1 ms a file, as on a cold disk
        checked.append(p)
        time.sleep(1e-3)
        return real(p, decode)
    monkeypatch.setattr(images, "image_problem", slow)
    with pytest.raises(DataError, match=r"^1 of 100 images"):
        check_images(items, "test split", "header", threads=8)
    assert pools == [8] and len(checked) == 100  # 64 here, then 36 in the pool
    check_images(items[:1], "test split", "decode", threads=8)
    assert pools == [8]                          # one file: one thread
