"""An input file is known by its content at every resume, whatever a user does to its path
(argtca/utils/hashing.py): for every input role (weights, attribute file, split file, an own
ImageFolder's class-name and split files, CoOp's context checkpoint, a --plugin selector file), a
same-size file written over it with its mtime restored (``touch -r``), a same-size file copied over
it with ``cp -p`` from one archive (the same mtime), and two same-size files swapped with ``mv``
all give the new content's sha256 in the run fingerprint. The old cache key (path, size, mtime)
answered the old hash in each case. Then real resumes refuse such a change in one line."""
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from argtca.config import get_cfg_default
from argtca.run import main
from argtca.plugins import load_plugins, loaded_plugin_files
from argtca.trainers.argtca import ArgTCA
from argtca.trainers.methods import TCA, TPT
from argtca.utils import hashing
from conftest import set_keys, tiny_cfg
from helpers_data import ATTRS, make_caltech, make_tree
from helpers_registry import registries_restored

REPO = Path(__file__).resolve().parents[2]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _freeze(cfg):
    cfg.freeze()
    return cfg


# ------------------------------------------------------------------ the roles, two versions each
def _weights(tmp_path):
    def version(seed):
        torch.manual_seed(seed)
        path = tmp_path / f"weights{seed}.pt"
        torch.save({"visual.proj": torch.randn(16, 8)}, path)
        return path.read_bytes()
    data = make_caltech(tmp_path / "data")
    f = tmp_path / "w.pt"
    return f, version(0), version(1), "MODEL.PRETRAINED", lambda: TPT(_freeze(tiny_cfg(**{
        "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data), "MODEL.PRETRAINED": str(f)})))


def _attributes(tmp_path):
    data = make_caltech(tmp_path / "data")
    a = json.dumps(ATTRS).encode()
    first = next(iter(ATTRS))
    b = json.dumps(dict(ATTRS, **{first: " ".join(reversed(ATTRS[first].split()))})).encode()
    f = tmp_path / "attrs.json"
    return f, a, b, "DATASET.ATTRIBUTE_FILE", lambda: TCA(_freeze(tiny_cfg(**{
        "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
        "DATASET.ATTRIBUTE_FILE": str(f)})))


def _split(tmp_path):
    data = make_caltech(tmp_path / "data")
    f = data / "caltech-101" / "split_zhou_Caltech101.json"
    split = json.loads(f.read_text())
    a = json.dumps(split).encode()
    b = json.dumps(dict(split, val=split["test"][1:2])).encode()   # image_0001: the same size
    return f, a, b, "SPLIT_FILE", lambda: TPT(_freeze(tiny_cfg(**{
        "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data)})))


def _imagefolder_cfg(root, **kw):
    cfg = get_cfg_default()
    cfg.merge_from_file(str(REPO / "configs/datasets/imagefolder.yaml"))
    over = tiny_cfg()
    cfg.MODEL.BACKBONE.NAME, cfg.MODEL.PRETRAINED = "argtca-tiny-test", "random"
    cfg.USE_CUDA, cfg.VERBOSE, cfg.DATALOADER.NUM_WORKERS = False, False, 0
    cfg.INPUT.SIZE = over.INPUT.SIZE
    cfg.DATASET.ROOT = str(root)
    return _freeze(set_keys(cfg, kw))


def _classnames(tmp_path):
    root = make_tree(tmp_path / "imgs")
    f = tmp_path / "names.txt"
    a = b"tabby_cat cat\nred_fox fox\ngolden_retriever dog\n"
    b = b"tabby_cat cot\nred_fox fox\ngolden_retriever dog\n"
    return f, a, b, "DATASET.IMAGEFOLDER.CLASSNAMES", lambda: TPT(_imagefolder_cfg(
        root, **{"DATASET.IMAGEFOLDER.CLASSNAMES": str(f)}))


def _imagefolder_split(tmp_path):
    root = make_tree(tmp_path / "imgs")
    f = root / "split.json"
    test = [["tabby_cat/img_01.png", 0, "tabby_cat"], ["red_fox/img_02.jpg", 1, "red_fox"]]
    a = json.dumps({"train": [], "val": [["red_fox/img_00.jpg", 1, "red_fox"]],
                    "test": test}).encode()
    b = json.dumps({"train": [], "val": [["red_fox/img_01.png", 1, "red_fox"]],
                    "test": test}).encode()
    return f, a, b, "DATASET.IMAGEFOLDER.SPLIT_FILE", lambda: TPT(_imagefolder_cfg(
        root, **{"DATASET.IMAGEFOLDER.SPLIT_FILE": "split.json"}))


def _ctx_checkpoint(tmp_path):
    data = make_caltech(tmp_path / "data")
    n_ctx = int(get_cfg_default().TTA.N_CTX)

    def version(seed):
        torch.manual_seed(seed)
        path = tmp_path / f"ctx{seed}.pth.tar"
        torch.save({"state_dict": {"ctx": torch.randn(n_ctx, 32)}, "epoch": 2}, path)
        return path.read_bytes()
    f = tmp_path / "model.pth.tar-2"
    return f, version(0), version(1), "TTA.CTX_CHECKPOINT", lambda: TPT(_freeze(tiny_cfg(**{
        "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
        "TTA.CTX_CHECKPOINT": str(f)})))


def _plugin(tmp_path):
    """A ``--plugin`` file whose selector the run uses (a plug-in the run does not use is not
    one of its inputs: tests/plugins/test_plugin_scope.py)."""
    data = make_caltech(tmp_path / "data")
    attrs = tmp_path / "attrs.json"
    attrs.write_text(json.dumps(ATTRS))
    f = tmp_path / "my_selector.py"
    rule = ("from argtca.registry import SELECTOR_REGISTRY\n"
            "from argtca.selectors.rand import select_random\n"
            "LIMIT = {}\n"
            "@SELECTOR_REGISTRY.register(name='zz_versions', needs_graph=False, override=True)\n"
            "def pick(*a, **kw):\n"
            "    return select_random(*a, **kw)\n")

    def build():
        with registries_restored():   # the file as it is now, imported afresh
            load_plugins([str(f)])
            t = ArgTCA(_freeze(tiny_cfg(**{
                "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
                "DATASET.ATTRIBUTE_FILE": str(attrs), "TRAINER.ARGTCA.SELECTOR": "zz_versions"})))
        t.plugin_files = loaded_plugin_files([str(f)])
        return t
    return (f, rule.format(1).encode(), rule.format(2).encode(), "PLUGIN.my_selector", build)


ROLES = {"weights": _weights, "attribute file": _attributes, "split file": _split,
         "class-name file": _classnames, "imagefolder split file": _imagefolder_split,
         "CoOp context checkpoint": _ctx_checkpoint, "--plugin selector file": _plugin}


# ------------------------------------------------------------------ what users do to a file
def _restore_mtime(f: Path, b: bytes, tmp_path) -> None:
    """``cp new f; touch -r old f``: same size, the old mtime."""
    st = f.stat()
    f.write_bytes(b)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def _cp_p(f: Path, b: bytes, tmp_path) -> None:
    """``cp -p other f``, other extracted from the same archive (the same mtime)."""
    other = tmp_path / "from_archive" / f.name
    shutil.copy2(f, other)      # a sibling of the same age ...
    other.write_bytes(b)        # ... holding the other content
    os.utime(other, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns))
    shutil.copy2(other, f)


def _mv_swap(f: Path, b: bytes, tmp_path) -> None:
    """Two same-size files of one archive swapped with ``mv``."""
    other = tmp_path / "from_archive" / f.name
    tmp = tmp_path / "from_archive" / "swap.tmp"
    os.rename(f, tmp)
    os.rename(other, f)
    os.rename(tmp, other)


def _prepare_mv(f: Path, b: bytes, tmp_path) -> None:
    other = tmp_path / "from_archive" / f.name
    other.write_bytes(b)
    os.utime(other, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns))


CHANGES = {"same size, mtime restored": (None, _restore_mtime),
           "cp -p from one archive": (None, _cp_p),
           "mv swap within one archive": (_prepare_mv, _mv_swap)}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("role", list(ROLES))
def test_every_input_role_is_hashed_again_after_a_same_size_same_mtime_change(
        role, change, tmp_path, monkeypatch):
    # the timestamps alone are tested here: a file written just now would not be cached at all
    monkeypatch.setattr(hashing, "RACY_SECONDS", 0.0, raising=False)
    f, a, b, key, build = ROLES[role](tmp_path)
    assert len(a) == len(b) and a != b
    (tmp_path / "from_archive").mkdir()
    f.write_bytes(a)
    prepare, apply = CHANGES[change]
    if prepare:
        prepare(f, b, tmp_path)
    fp = build().fingerprint()
    assert fp["FILE_SHA256." + key] == _sha(a)
    before = f.stat()
    time.sleep(0.05)   # file-system timestamps tick at a coarse clock (a few ms)
    apply(f, b, tmp_path)
    after = f.stat()
    # what fooled a (path, size, mtime) key
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert f.read_bytes() == b
    assert build().fingerprint()["FILE_SHA256." + key] == _sha(b)   # this process's memo
    hashing._MEMO.clear()                                             # a resume: a new process
    assert build().fingerprint()["FILE_SHA256." + key] == _sha(b)


def test_a_file_changed_within_the_timestamp_tick_is_not_cached(tmp_path):
    """Rewritten right after it was hashed (no time for the ctime to tick): hashed again."""
    f = tmp_path / "w.bin"
    f.write_bytes(b"a" * 4096)
    assert hashing.file_sha256(str(f)) == _sha(b"a" * 4096)
    st = f.stat()
    f.write_bytes(b"b" * 4096)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert hashing.file_sha256(str(f)) == _sha(b"b" * 4096)


# ------------------------------------------------------------------ real resumes
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "INPUT.SIZE", "32",
        "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False", "VERBOSE", "False", "TTA.N_VIEWS", "4"]


def _interrupt(out, keep=3):
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines[:keep]) + "\n")
    (out / "summary.json").unlink()
    return (out / "records.jsonl").read_bytes()


def test_weights_switched_with_cp_p_refuse_the_resume(tmp_path, monkeypatch, capsys):
    """Two fine-tuned checkpoints of one architecture, extracted from one archive (one mtime):
    ``cp -p ft2.pt weights.pt`` between a kill and the resume."""
    from argtca.models.clip import load_clip
    monkeypatch.setattr(hashing, "RACY_SECONDS", 0.0, raising=False)
    data = make_caltech(tmp_path / "data")
    (tmp_path / "archive").mkdir()
    for seed in (0, 1):
        torch.manual_seed(seed)
        torch.save(load_clip(tiny_cfg())[0].state_dict(), tmp_path / "archive" / f"ft{seed}.pt")
    ft0, ft1 = tmp_path / "archive" / "ft0.pt", tmp_path / "archive" / "ft1.pt"
    assert ft0.stat().st_size == ft1.stat().st_size
    os.utime(ft1, ns=(ft0.stat().st_atime_ns, ft0.stat().st_mtime_ns))
    w = tmp_path / "weights.pt"
    shutil.copy2(ft0, w)
    out = tmp_path / "run"
    argv = ["--root", str(data), "--output-dir", str(out), "--dataset-config-file",
            str(REPO / "configs/datasets/caltech101.yaml"), "--config-file",
            str(REPO / "configs/trainers/tpt.yaml"), "MODEL.PRETRAINED", str(w), *TINY]
    assert main(argv) == 0
    kept = _interrupt(out)
    time.sleep(0.05)
    shutil.copy2(ft1, w)                     # cp -p: same size, same mtime
    capsys.readouterr()
    assert main(argv) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    old, new = _sha(ft0.read_bytes()), _sha(ft1.read_bytes())
    assert len(err) == 1 and "MODEL.PRETRAINED" in err[0] and str(w) in err[0]
    assert old in err[0] and new in err[0]
    assert (out / "records.jsonl").read_bytes() == kept


def test_a_selector_plugin_edited_in_place_refuses_the_resume_on_the_demo(tmp_path, monkeypatch,
                                                                         capsys):
    """``--plugin my_rule.py`` edited between a kill and the resume, same size, mtime restored."""
    monkeypatch.setattr(hashing, "RACY_SECONDS", 0.0, raising=False)
    rule = ("from argtca.registry import SELECTOR_REGISTRY\n"
            "@SELECTOR_REGISTRY.register(name='zz_edge', needs_graph=False)\n"
            "def pick(emb, node_class, attrs, m_prime, seed=42, **kw):\n"
            "    ks = node_class.tolist()\n"
            "    return {k: [(i, 0.0) for i, c in enumerate(ks) if c == k][{}:][:m_prime]\n"
            "            for k in sorted(set(ks))}\n")
    plugin = tmp_path / "my_rule_zz.py"
    plugin.write_text(rule.replace("{}", "0"))   # the first M' candidates of each class ...
    out = tmp_path / "run"
    argv = ["--plugin", str(plugin), "--output-dir", str(out), "--dataset-config-file",
            str(REPO / "configs/datasets/demo.yaml"), "--config-file",
            str(REPO / "configs/trainers/argtca.yaml"), "TRAINER.ARGTCA.SELECTOR", "zz_edge",
            "DATASET.NUM_IMAGES", "8", "TTA.N_VIEWS", "4", "USE_CUDA", "False", "VERBOSE",
            "False", "DATALOADER.NUM_WORKERS", "0"]
    assert main(argv) == 0
    kept = _interrupt(out)
    old = _sha(plugin.read_bytes())
    st = plugin.stat()
    time.sleep(0.05)
    plugin.write_text(rule.replace("{}", "1"))   # ... or from the second on
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert plugin.stat().st_size == st.st_size
    capsys.readouterr()
    assert main(argv) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "PLUGIN.my_rule_zz" in err[0] and str(plugin) in err[0]
    assert old in err[0] and _sha(plugin.read_bytes()) in err[0]
    assert (out / "records.jsonl").read_bytes() == kept
