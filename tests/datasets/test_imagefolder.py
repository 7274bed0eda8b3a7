"""DATASET.NAME ImageFolder (your own class folders) and the "Your own data" path end to end:
folder -> generated attributes (local chat server, tiny CLIP ranking) -> scripts/argtca.sh and
scripts/select_attributes.sh; the demo's 16 classes through the same path."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from argtca.config import get_cfg_default
from argtca.data.doctor import check_dataset
from argtca.datasets import build_dataset
from argtca.datasets.base import DataError
from argtca.datasets.imagefolder import ImageFolder
from conftest import set_keys
from helpers_data import make_tree

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "VERBOSE", "False", "TRAINER.ARGTCA.GAT.EPOCHS", "2"]


def _cfg(root, **kw):
    cfg = get_cfg_default()
    cfg.merge_from_file(str(REPO / "configs/datasets/imagefolder.yaml"))
    cfg.DATASET.ROOT = str(root)
    return set_keys(cfg, kw)


def _snapshot(root: Path):
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*"))


def test_folders_names_order_and_balanced_prefix(tmp_path, caplog):
    root = make_tree(tmp_path / "imgs")
    (root / "tabby_cat" / "more").mkdir()
    Image.new("RGB", (9, 9)).save(root / "tabby_cat" / "more" / "deep.jpg")
    (root / "tabby_cat" / "notes.txt").write_text("not an image")
    (root / "tabby_cat" / ".DS_Store").write_bytes(b"\0")
    (root / "classes_at_root.txt").write_text("ignored: files at the root are not classes")
    (root / ".hidden_class").mkdir()
    before = _snapshot(root)
    ds = build_dataset(_cfg(root))
    assert isinstance(ds, ImageFolder)
    assert ds.classnames == ["golden retriever", "red fox", "tabby cat"]   # sorted folders
    assert ds.raw_classnames == ["golden_retriever", "red_fox", "tabby_cat"]
    rel = [(os.path.relpath(d.impath, root), d.label) for d in ds.test]
    assert rel == [("golden_retriever/img_00.jpg", 0), ("red_fox/img_00.jpg", 1),
                   ("tabby_cat/img_00.jpg", 2),
                   ("golden_retriever/img_01.png", 0), ("red_fox/img_01.png", 1),
                   ("tabby_cat/img_01.png", 2),
                   ("golden_retriever/img_02.jpg", 0), ("red_fox/img_02.jpg", 1),
                   ("tabby_cat/more/deep.jpg", 2)]
    assert all(d.classname == ds.classnames[d.label] for d in ds.test)
    assert sorted(os.path.basename(p) for p in ds.skipped) == [".DS_Store", "notes.txt"]
    assert "2 files are not images by their extension and are skipped" in caplog.text
    first3 = build_dataset(_cfg(root, **{"DATASET.NUM_IMAGES": 3}))
    assert [d.label for d in first3.test] == [0, 1, 2]
    assert _snapshot(root) == before                     # nothing written into the root


def test_class_name_file_sets_names_and_label_order(tmp_path):
    root = make_tree(tmp_path / "imgs")
    names = tmp_path / "names.txt"
    names.write_text("# folder name\ntabby_cat Tabby  cat\nred_fox red fox\ngolden_retriever "
                     "golden retriever dog\n")
    ds = build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": str(names)}))
    assert ds.classnames == ["Tabby cat", "red fox", "golden retriever dog"]
    assert [os.path.basename(os.path.dirname(d.impath)) for d in ds.test[:3]] == \
        ["tabby_cat", "red_fox", "golden_retriever"]
    (tmp_path / "names.json").write_text(json.dumps({"red_fox": "fox", "tabby_cat": "cat",
                                                      "golden_retriever": "dog"}))
    ds = build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": "../names.json"}))
    assert ds.classnames == ["fox", "cat", "dog"]         # relative to the root
    names.write_text("tabby_cat cat\nred_fox fox\n")
    with pytest.raises(DataError, match=r"folders without a name: \['golden_retriever'\]"):
        build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": str(names)}))
    names.write_text("tabby_cat cat\nred_fox fox\ngolden_retriever dog\nwolf wolf\n")
    with pytest.raises(DataError, match=r"named folders that do not exist: \['wolf'\]"):
        build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": str(names)}))


def test_coop_split_file(tmp_path):
    root = make_tree(tmp_path / "imgs")
    split = {"train": [["red_fox/img_00.jpg", 1, "red_fox"]],
             "val": [["tabby_cat/img_00.jpg", 0, "tabby_cat"]],
             "test": [["tabby_cat/img_01.png", 0, "tabby_cat"],
                      ["red_fox/img_02.jpg", 1, "red_fox"]]}
    (root / "split.json").write_text(json.dumps(split))
    ds = build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.SPLIT_FILE": "split.json"}))
    assert ds.classnames == ["tabby cat", "red fox"]
    assert [(os.path.relpath(d.impath, root), d.label) for d in ds.test] == \
        [("tabby_cat/img_01.png", 0), ("red_fox/img_02.jpg", 1)]
    val = build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.SPLIT_FILE": "split.json",
                                      "DATASET.SPLIT": "val"}))
    assert [d.label for d in val.test] == [0]
    with pytest.raises(DataError, match="DATASET.SPLIT test or give a split file"):
        build_dataset(_cfg(root, **{"DATASET.SPLIT": "val"}))


def test_bad_trees_are_one_clear_error(tmp_path):
    root = make_tree(tmp_path / "imgs")
    (root / "empty_class").mkdir()
    (root / "empty_class" / "readme.md").write_text("x")
    with pytest.raises(DataError,
                       match=r"1 of 4 class folders hold no image files .*'empty_class'"):
        build_dataset(_cfg(root))
    (root / "empty_class" / "readme.md").unlink()
    (root / "empty_class").rmdir()
    (root / "red_fox" / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match=r"1 of 9 images of ImageFolder .*broken.jpg"):
        build_dataset(_cfg(root))
    assert len(build_dataset(_cfg(root, **{"DATASET.CHECK_IMAGES": "off"})).test) == 9
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.new("RGB", (4, 4)).save(flat / "a.jpg")
    with pytest.raises(DataError, match="holds no class folders"):
        build_dataset(_cfg(flat))
    (root / "red_fox" / "broken.jpg").unlink()
    os.rename(root / "red_fox", root / "tabby__cat")
    with pytest.raises(DataError, match="tabby cat"):   # "tabby__cat" and "tabby_cat" collide
        build_dataset(_cfg(root))


def test_data_doctor_checks_it_when_named(tmp_path):
    root = make_tree(tmp_path / "imgs")
    rep = check_dataset(ImageFolder, str(root))
    assert rep.status == "present" and rep.n_images == 8
    (root / "red_fox" / "img_01.png").write_bytes(b"")
    rep = check_dataset(ImageFolder, str(root))
    assert rep.status == "broken" and "red_fox/img_01.png (empty file (0 bytes))" in rep.notes[0]
    from argtca.data.doctor import check_root
    assert "ImageFolder" not in [r.name for r in check_root(str(root))]   # not in "check all"


def _env(tmp_path, **extra):
    env = dict(os.environ, PYTHON=sys.executable, ARGTCA_CACHE=str(tmp_path / "cache"), **extra)
    for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        env.pop(k, None)
    return env


def test_own_data_end_to_end(tmp_path, monkeypatch):
    """README "Your own data": folder -> generate (local server, tiny CLIP) -> argtca.sh ->
    picks."""
    pytest.importorskip("openai")
    from helpers_llm import FakeChatServer, answer
    from argtca.attributes.generate import main as generate_main
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "imgs", {"golden_retriever": 2, "tabby_cat": 2, "red_fox": 2})
    before = _snapshot(root)
    words = {"golden retriever": ["Golden fur", "floppy ears", "dog", "retriever", "tail"],
             "tabby cat": ["striped coat", "whiskers", "Tabby Cat", "green eyes", "paws"],
             "red fox": ["orange fur", "bushy tail", "pointed ears", "snout", "forest"]}
    out = tmp_path / "generated.json"
    with FakeChatServer({c: [answer(w)] for c, w in words.items()}) as srv:
        rc = generate_main(["--dataset", "imagefolder", "--root", str(root), "--out", str(out),
                            "--base-url", srv.url, "--model", "fake", "--num", "4",
                            *TINY[:4]])
    assert rc == 0 and sorted(srv.classes_asked()) == sorted(words)
    got = {k: v.split() for k, v in json.loads(out.read_text()).items()}
    assert list(got) == ["golden retriever", "red fox", "tabby cat"]
    assert all(len(v) == 4 for v in got.values()) and "tabby-cat" not in got["tabby cat"]
    env = _env(tmp_path, DATA=str(root), ATTRIBUTES=str(out), OUTPUT_DIR=str(tmp_path / "run"))
    r = subprocess.run(["bash", "scripts/argtca.sh", "imagefolder", "div", *TINY], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = [json.loads(l) for l in (tmp_path / "run" / "records.jsonl").read_text().splitlines()
            if l.strip()]
    assert len(recs) == 6 and sorted(r["label"] for r in recs) == [0, 0, 1, 1, 2, 2]
    picks = json.loads((tmp_path / "run" / "phase1.json").read_text())["selected"]
    assert set(picks) == set(got)
    assert all(set(v) <= set(got[c]) and len(v) == 2 for c, v in picks.items())
    r = subprocess.run(["bash", "scripts/select_attributes.sh", "imagefolder", "--num-classes",
                        "3", "--selectors", "tca,div", *TINY], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    row = next(l for l in r.stdout.splitlines() if l.startswith("red fox"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[1] == ", ".join(got["red fox"][:2])      # tca: the file's first M'
    div = cells[2].split(", ")                             # div: 2 of the generated attributes
    assert len(set(div)) == 2 and set(div) <= set(got["red fox"])
    assert _snapshot(root) == before


def test_demo_classes_through_generated_attributes(tmp_path, monkeypatch):
    """The demo's 16 classes: attributes from the local server (answering with the demo's own
    attribute lists, shuffled), then argtca.sh demo on the generated file."""
    pytest.importorskip("openai")
    from helpers_llm import FakeChatServer, answer
    from argtca.attributes.generate import main as generate_main
    from argtca.demo.render import CLASSNAMES
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    demo = json.loads((REPO / "argtca/demo/assets/demo_attributes.json").read_text())
    rng = np.random.default_rng(0)
    script = {c: [answer(list(rng.permutation(demo[c].split())))] for c in CLASSNAMES}
    classes = tmp_path / "classes.txt"
    classes.write_text("\n".join(CLASSNAMES) + "\n")
    out = tmp_path / "demo_generated.json"
    with FakeChatServer(script) as srv:
        rc = generate_main(["--classes", str(classes), "--out", str(out), "--base-url", srv.url,
                            "--model", "fake", "--num", "10",
                            "--config-file", str(REPO / "configs/datasets/demo.yaml")])
    assert rc == 0 and len(srv.requests) == 16
    got = json.loads(out.read_text())
    assert list(got) == list(CLASSNAMES)
    for c in CLASSNAMES:   # the same words, re-ranked by the demo CLIP, class name removed
        assert set(got[c].split()) <= set(demo[c].split()) - {c.replace(" ", "-")}
    env = _env(tmp_path, ATTRIBUTES=str(out), OUTPUT_DIR=str(tmp_path / "run"))
    r = subprocess.run(["bash", "scripts/argtca.sh", "demo", "div", "DATASET.NUM_IMAGES", "8",
                        "TTA.N_VIEWS", "4", "USE_CUDA", "False", "VERBOSE", "False",
                        "DATALOADER.NUM_WORKERS", "0", "TRAINER.ARGTCA.GAT.EPOCHS", "2"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "* accuracy:" in r.stdout
    picks = json.loads((tmp_path / "run" / "phase1.json").read_text())["selected"]
    assert sorted(picks) == sorted(CLASSNAMES)


# --- folders mean what the user means: one class, links, names CLIP reads as one ---------------

def _fruit(root: Path, n=2) -> Path:
    return make_tree(root, {"lime": n, "tomato": n})


def test_a_single_class_folder_is_refused_with_the_reason(tmp_path):
    root = make_tree(tmp_path / "imgs", {"tomato": 3})
    with pytest.raises(DataError, match=r"single class \('tomato'\).*accuracy is 100 and ECE 0"):
        build_dataset(_cfg(root))
    names = tmp_path / "names.txt"
    names.write_text("tomato red tomato\n")
    with pytest.raises(DataError, match="single class"):
        build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": str(names)}))
    root2 = make_tree(tmp_path / "two", {"tomato": 2, "lime": 1})
    (root2 / "split.json").write_text(json.dumps(
        {"test": [["tomato/img_00.jpg", 0, "tomato"], ["tomato/img_01.png", 0, "tomato"]]}))
    with pytest.raises(DataError, match="split.json holds a single class"):
        build_dataset(_cfg(root2, **{"DATASET.IMAGEFOLDER.SPLIT_FILE": "split.json"}))


def test_symlink_loops_are_not_followed_and_each_image_counts_once(tmp_path, caplog):
    root = _fruit(tmp_path / "imgs")
    os.symlink(".", root / "tomato" / "loop")                 # tomato/loop -> tomato
    (root / "tomato" / "sub").mkdir()
    os.symlink("..", root / "tomato" / "sub" / "back")         # tomato/sub/back -> tomato
    os.symlink("img_00.jpg", root / "tomato" / "again.jpg")    # the same real file twice
    os.symlink("sub", root / "tomato" / "a_alias")             # a folder twice
    Image.new("RGB", (9, 9)).save(root / "tomato" / "sub" / "deep.jpg")
    ds = build_dataset(_cfg(root))
    rel = sorted((os.path.relpath(d.impath, root), d.label) for d in ds.test)
    assert rel == [("lime/img_00.jpg", 0), ("lime/img_01.png", 0),
                   ("tomato/img_00.jpg", 1), ("tomato/img_01.png", 1), ("tomato/sub/deep.jpg", 1)]
    assert "3 symbolic links not followed" in caplog.text
    assert "tomato/loop -> . (a loop)" in caplog.text
    assert "tomato/sub/back -> .. (a loop)" in caplog.text
    assert "tomato/a_alias/back -> .. (a loop)" in caplog.text
    assert "2 files or folders reached a second time" in caplog.text
    assert len([r for r in caplog.records if "not followed" in r.getMessage()]) == 1


def test_symlinks_cannot_relabel_another_class_or_escape_the_root(tmp_path, caplog):
    root = _fruit(tmp_path / "imgs")
    os.symlink("..", root / "tomato" / "up")                   # the root: lime images as tomato
    os.symlink("../lime", root / "tomato" / "limes")           # another class's folder
    os.symlink("../lime/img_00.jpg", root / "tomato" / "x.jpg")  # another class's file
    outside = make_tree(tmp_path / "elsewhere", {"kiwi": 3})
    os.symlink(outside / "kiwi", root / "tomato" / "kiwis")    # out of the root
    os.symlink(outside / "kiwi" / "img_00.jpg", root / "tomato" / "k.jpg")
    os.symlink(outside / "kiwi", root / "kiwi")                # a class folder out of the root
    ds = build_dataset(_cfg(root))
    assert ds.classnames == ["lime", "tomato"]
    assert [d.label for d in ds.test] == [0, 1, 0, 1]
    assert all(os.path.relpath(d.impath, root).split(os.sep)[0] == ds.classnames[d.label]
               for d in ds.test)
    assert len(ds.skipped_links) == 6
    text = "; ".join(ds.skipped_links)
    assert "tomato/up -> .. (a loop)" in text
    assert "tomato/limes -> ../lime (into class folder 'lime')" in text
    assert "tomato/x.jpg -> ../lime/img_00.jpg (into class folder 'lime')" in text
    assert "6 symbolic links not followed" in caplog.text and "and 3 more" in caplog.text
    assert "(outside the root)" in "; ".join(ds.skipped_links)
    assert "kiwi -> " in "; ".join(ds.skipped_links)
    # links inside the root that lead to no other class are followed
    make_tree(root / ".store", {"more_tomatoes": 2})
    os.symlink("../.store/more_tomatoes", root / "tomato" / "extra")
    ds = build_dataset(_cfg(root))
    assert sorted(os.path.relpath(d.impath, root) for d in ds.test if d.label == 1) == \
        ["tomato/extra/img_00.jpg", "tomato/extra/img_01.png", "tomato/img_00.jpg",
         "tomato/img_01.png"]


def test_two_class_folders_that_are_one_folder_are_refused(tmp_path):
    root = _fruit(tmp_path / "imgs")
    os.symlink("lime", root / "lime_copy")
    with pytest.raises(DataError, match=r"class folders 'lime' and 'lime_copy' are the same"):
        build_dataset(_cfg(root))


def test_class_names_clip_cannot_tell_apart_are_refused_naming_both_folders(tmp_path):
    root = make_tree(tmp_path / "imgs", {"Lemon": 1, "lemon": 1, "lime": 1})
    with pytest.raises(DataError, match=r"folders 'Lemon' and 'lemon' have class names 'Lemon' "
                                        r"and 'lemon', which CLIP cannot tell apart"):
        build_dataset(_cfg(root))
    root = make_tree(tmp_path / "b", {"Golden_Retriever": 1, "golden__retriever": 1})
    with pytest.raises(DataError, match=r"'Golden_Retriever' and 'golden__retriever'"):
        build_dataset(_cfg(root))
    root = make_tree(tmp_path / "c", {"a": 1, "b": 1})
    names = tmp_path / "names.txt"
    names.write_text("a Red Fox\nb red fox\n")
    with pytest.raises(DataError, match=r"names.txt: folders 'a' and 'b' have class names 'Red "
                                        r"Fox' and 'red fox'"):
        build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": str(names)}))
    names.write_text("a fox\nb red fox\n")
    assert build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": str(names)})
                         ).classnames == ["fox", "red fox"]


def test_errors_about_ones_own_folder_do_not_send_the_user_to_coop_or_tca(tmp_path):
    from argtca.attributes.files import AttributeFileError, attribute_file_for
    root = _fruit(tmp_path / "imgs")
    msgs = []
    for kw in ({"DATASET.ROOT": str(tmp_path / "nope")}, {"DATASET.ROOT": ""}):
        with pytest.raises(DataError) as e:
            build_dataset(_cfg(root, **kw))
        msgs.append(str(e.value))
    assert "image folder" in msgs[0] and "one sub-folder of images per class" in msgs[0]
    os.symlink(tmp_path / "gone.jpg", root / "lime" / "gone.jpg")   # dangling
    with pytest.raises(DataError, match=r"1 of 5 images of ImageFolder .* missing \(e.g. "
                                        r"lime/gone.jpg") as e:
        build_dataset(_cfg(root))
    msgs.append(str(e.value))
    (root / "lime" / "gone.jpg").unlink()
    (root / "split.json").write_text(json.dumps({"test": [["lime/img_00.jpg", -1, "lime"]]}))
    with pytest.raises(DataError) as e:
        build_dataset(_cfg(root, **{"DATASET.IMAGEFOLDER.SPLIT_FILE": "split.json"}))
    msgs.append(str(e.value))
    assert "fix DATASET.IMAGEFOLDER.SPLIT_FILE" in msgs[-1]
    for kw in ({}, {"DATASET.ATTRIBUTE_FILE": str(tmp_path / "mine.json")}):
        with pytest.raises(AttributeFileError) as e:
            attribute_file_for(_cfg(root, **kw))
        msgs.append(str(e.value))
    assert "--dataset imagefolder --root $DATA" in msgs[-1] and "mine.json" in msgs[-1]
    assert "your image folder" in msgs[-2]
    for m in msgs:
        assert "CoOp datasets" not in m and "DATASETS.md" not in m and "re-download" not in m
        assert "TCA" not in m and "Caltech101" not in m, m
