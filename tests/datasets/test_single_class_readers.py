"""A task of a single class scores accuracy 100 and ECE 0 by construction (every image gets the
only label): every dataset reader refuses it at load time in one line naming the file (CoOp split
JSONs, SUN397, FGVC-Aircraft's variants, one's own ImageFolder split file or folders, the demo,
an ImageNet-style folder reader, the Dassl bridge). Before, only ImageFolder refused it."""
import json
from pathlib import Path

import pytest

from argtca.datasets import DataError, build_dataset
from argtca.datasets.base import Datum
from argtca.datasets.imagenet import ImageNetFolderDataset

from tests.conftest import tiny_cfg
from tests.helpers_data import make_caltech, make_tree

WHY = "every image would get the only label, so accuracy is 100 and ECE 0 by construction"


def _one_class_split(path: Path, rel: str, cname: str) -> None:
    rows = [[rel, 0, cname]]
    path.write_text(json.dumps({"train": rows, "val": rows, "test": rows}))


def _caltech(tmp):
    root = make_caltech(tmp)
    split = root / "caltech-101" / "split_zhou_Caltech101.json"
    _one_class_split(split, "red_apple/image_0000.jpg", "red apple")
    return tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root)}), split, \
        "red apple"


def _sun397(tmp):
    d = tmp / "sun397" / "SUN397" / "a" / "abbey"
    d.mkdir(parents=True)
    make_tree(tmp / "scratch", {"x": 1})
    (d / "sun_1.jpg").write_bytes((tmp / "scratch" / "x" / "img_00.jpg").read_bytes())
    split = tmp / "sun397" / "split_zhou_SUN397.json"
    _one_class_split(split, "a/abbey/sun_1.jpg", "abbey")
    return tiny_cfg(**{"DATASET.NAME": "SUN397", "DATASET.ROOT": str(tmp)}), split, "abbey"


def _aircraft(tmp):
    d = tmp / "fgvc_aircraft"
    (d / "images").mkdir(parents=True)
    (d / "variants.txt").write_text("707-320\n")
    (d / "images_variant_test.txt").write_text("0001 707-320\n")
    return tiny_cfg(**{"DATASET.NAME": "FGVCAircraft", "DATASET.ROOT": str(tmp)}), \
        d / "variants.txt", "707-320"


def _imagefolder_split(tmp):
    root = make_tree(tmp / "imgs", {"tomato": 2, "lime": 1})
    split = root / "split.json"
    split.write_text(json.dumps({"test": [["tomato/img_00.jpg", 0, "tomato"]]}))
    return tiny_cfg(**{"DATASET.NAME": "ImageFolder", "DATASET.ROOT": str(root),
                       "DATASET.IMAGEFOLDER.SPLIT_FILE": "split.json"}), split, "tomato"


def _imagefolder_folders(tmp):
    root = make_tree(tmp / "imgs", {"tomato": 2})
    return tiny_cfg(**{"DATASET.NAME": "ImageFolder", "DATASET.ROOT": str(root)}), root, \
        "tomato"


def _demo(tmp, monkeypatch):
    """The demo reader on a cache folder whose split file was edited down to one class."""
    import argtca.datasets.demo as demo
    from argtca.demo.generator import IMAGE_DIR, SPLIT_FILE
    folder = tmp / "demo-cache"
    (folder / IMAGE_DIR).mkdir(parents=True)
    split = folder / SPLIT_FILE
    _one_class_split(split, "test/0/0000.png", "apple")
    monkeypatch.setattr(demo, "ensure_dataset", lambda seed: folder)
    return tiny_cfg(**{"DATASET.NAME": "Demo"}), split, "apple"


class _OneClassNet(ImageNetFolderDataset):
    """An ImageNet-style folder reader (a plug-in's subset of ImageNet) of one class."""
    layouts = (("net", "val"),)
    expected_classes = 1


def _imagenet_style(tmp):
    wnids = [f"n{i:08d}" for i in range(1000)]
    (tmp / "net").mkdir()
    (tmp / "net" / "classnames.txt").write_text("".join(f"{w} class {i}\n"
                                                        for i, w in enumerate(wnids)))
    make_tree(tmp / "net" / "val", {wnids[7]: 2})
    cfg = tiny_cfg(**{"DATASET.ROOT": str(tmp)})
    return cfg, tmp / "net" / "val", "class 7"


READERS = {"coop-json": _caltech, "sun397": _sun397, "fgvc-aircraft": _aircraft,
           "imagefolder-split": _imagefolder_split, "imagefolder-folders": _imagefolder_folders,
           "demo": _demo, "imagenet-style": _imagenet_style}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_single_class_is_refused_by_every_reader(reader, tmp_path, monkeypatch):
    make = READERS[reader]
    cfg, source, cname = make(tmp_path, monkeypatch) if reader == "demo" else make(tmp_path)
    with pytest.raises(DataError) as e:
        _OneClassNet(cfg) if reader == "imagenet-style" else build_dataset(cfg)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{source} holds a single class ({cname!r}): "
                                              f"{WHY}; "), msg


def test_two_classes_still_read(tmp_path):
    """The same readers with two classes load (the check refuses only fewer than two)."""
    root = make_caltech(tmp_path)
    ds = build_dataset(tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root)}))
    assert ds.num_classes == 3
    root = make_tree(tmp_path / "imgs", {"tomato": 1, "lime": 1})
    ds = build_dataset(tiny_cfg(**{"DATASET.NAME": "ImageFolder", "DATASET.ROOT": str(root)}))
    assert ds.classnames == ["lime", "tomato"]


def test_dassl_bridge_refuses_a_single_class(tmp_path):
    from argtca.dassl_plugin.datasets import DasslTestSet
    with pytest.raises(DataError, match=rf"^{tmp_path} holds a single class \('a'\): {WHY}"):
        DasslTestSet([Datum("/d/a.jpg", 0, "a")], ["a"], root=str(tmp_path), name="X", key="x",
                     fine=True)
