"""The Phase-1 store shared by runs: reuse across selectors through the CLI, identical embeddings,
and two real processes needing the same graph at once."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import argtca.selectors  # noqa: F401  (registers the selectors)
from argtca.graph import make_nodes
from argtca.registry import SELECTOR_REGISTRY
from argtca.run import main
from helpers_data import ATTRS, make_caltech, write_attributes

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "8", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "VERBOSE", "False", "TRAINER.ARGTCA.GAT.EPOCHS", "3"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    make_caltech(root)
    return root, write_attributes(root / "attrs.json")


def _argtca(root, attr, out, *extra):
    return ["--root", str(root), "--output-dir", str(out), "--seed", "1",
            "--dataset-config-file", "configs/datasets/caltech101.yaml",
            "--config-file", "configs/trainers/argtca.yaml", *TINY,
            "DATASET.ATTRIBUTE_FILE", str(attr), *extra]


def test_second_run_with_another_selector_reuses_the_stored_graph(data, tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    root, attr = data
    assert main(_argtca(root, attr, tmp_path / "div", "TRAINER.ARGTCA.SELECTOR", "div")) == 0
    first = json.loads((tmp_path / "div" / "phase1.json").read_text())
    key = first["store_key"]
    out = capsys.readouterr().out
    assert "[phase 1] trained graph" in out and f"stored as {key}" in out
    assert first["reused"] is False
    store = tmp_path / "cache" / "phase1"
    assert [p.name for p in store.glob("*.pt")] == [f"{key}.pt"]
    h = torch.load(store / f"{key}.pt", weights_only=True)["h"].clone()
    raw = {c: v.split() for c, v in ATTRS.items()}
    names = list(first["classnames"])
    nodes = make_nodes(names, raw, 10)
    for sel_name, extra in (("disc", []), ("joint", []), ("div", ["TRAINER.ARGTCA.ALPHA", "40.0"]),
                            ("div", ["TRAINER.ARGTCA.BETA", "15.0"])):
        out_dir = tmp_path / f"{sel_name}{len(extra)}{extra[-1] if extra else ''}"
        assert main(_argtca(root, attr, out_dir, "TRAINER.ARGTCA.SELECTOR", sel_name,
                            *extra)) == 0
        printed = capsys.readouterr().out
        assert f"[phase 1] reused stored graph {key}" in printed
        assert "trained graph" not in printed
        p1 = json.loads((out_dir / "phase1.json").read_text())
        assert p1["store_key"] == key and p1["reused"] is True
        # the selection is the selector applied to the very embeddings stored by the first run
        sel = SELECTOR_REGISTRY.get(sel_name)(h, nodes.node_class, nodes.attrs, 2)
        assert p1["selected_by_index"] == [[nodes.attrs[e[0]] for e in sel[k]]
                                           for k in range(len(names))]
    assert len(list(store.glob("*.pt"))) == 1
    # and the stored bytes were not rewritten
    assert torch.equal(torch.load(store / f"{key}.pt", weights_only=True)["h"], h)


WORKER = textwrap.dedent("""
    import hashlib, json, sys, time
    import torch
    from argtca.config import get_cfg_default
    from argtca.graph import run_phase1

    def text_fn(texts):          # slow on purpose: the other process arrives while this trains
        time.sleep(3.0)
        rows = [torch.randn(16, generator=torch.Generator().manual_seed(
            int(hashlib.sha256(t.encode()).hexdigest()[:8], 16))) for t in texts]
        return torch.stack(rows)

    n = get_cfg_default().TRAINER.ARGTCA
    n.NUM_CANDIDATES, n.NUM_ATTRIBUTES = 4, 2
    n.GAT.HIDDEN, n.GAT.HEADS, n.GAT.EPOCHS = 16, 4, 5
    attrs = {"cat": ["fur", "whiskers", "tail", "purr"], "dog": ["bark", "tail", "paws", "leash"]}
    logs = []
    res = run_phase1(["cat", "dog"], attrs, text_fn, n, store_dir=sys.argv[1],
                     identity={"dataset": "toy"}, log=logs.append)
    print(json.dumps({"reused": res["reused"], "key": res["store_key"], "logs": logs,
                      "selected": res["selected"]}))
""")


def test_two_processes_needing_the_same_graph_train_it_once(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    store = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(store)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["reused"] for r in results) == [False, True]   # trained once, reused once
    assert results[0]["key"] == results[1]["key"]
    assert results[0]["selected"] == results[1]["selected"]
    reused = next(r for r in results if r["reused"])
    assert reused["logs"][-1].startswith(f"[phase 1] reused stored graph {reused['key']}")
    files = sorted(p.name for p in store.iterdir())
    key = results[0]["key"]
    assert files == [f"{key}.json", f"{key}.lock", f"{key}.pt"]      # no temporary left over
    assert torch.load(store / f"{key}.pt", weights_only=True)["h"].shape == (8, 16)


# --- integrity: a stored entry is reused only when its content is what was written -------------

def _toy_entry(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"h0": torch.randn(64, 32, generator=g), "h": torch.randn(64, 32, generator=g),
            "attention": None, "attention_incoming": None, "loss_curve": [0.5, 0.25],
            "seconds": 1.0, "meta": {"device": "cpu"}}


def _flip_tensor_bytes(pt_path, n=2048):
    """Flip n bytes inside the largest stored tensor record, leaving the zip directory and the
    metadata record untouched (torch.load still reads the file, without complaint)."""
    import zipfile
    with zipfile.ZipFile(pt_path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        assert info.compress_type == zipfile.ZIP_STORED and info.file_size >= n
    raw = bytearray(Path(pt_path).read_bytes())
    # the local header is 30 bytes + name + extra; the record's data follows it
    name_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    for i in range(start, start + n):
        raw[i] ^= 0x5A
    Path(pt_path).write_bytes(bytes(raw))


def _store_once(tmp_path):
    from argtca.graph.store import Phase1Store, store_key
    store = Phase1Store(str(tmp_path / "store"))
    payload = {"dataset": "toy", "m": 4}
    key = store_key(payload, "toy")
    calls = []

    def compute():
        calls.append(1)
        return _toy_entry()
    logs = []
    entry, reused = store.get_or_compute(key, payload, compute, log=logs.append)
    assert reused is False and calls == [1]
    return store, key, payload, compute, calls, entry


def test_intact_entry_is_reused_and_carries_its_content_hash(tmp_path):
    import hashlib
    store, key, payload, compute, calls, entry = _store_once(tmp_path)
    # the hash, worked out here independently over the stored values in key order
    h = hashlib.sha256()
    for name, t in (("attention", None), ("attention_incoming", None), ("h", entry["h"]),
                    ("h0", entry["h0"]), ("loss_curve", [0.5, 0.25]), ("seconds", 1.0)):
        if isinstance(t, torch.Tensor):
            h.update(f"{name}|tensor|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.contiguous().numpy().tobytes())
        else:
            h.update(f"{name}|json|{json.dumps(t, separators=(',', ':'))}|".encode())
    assert entry["meta"]["sha256"] == h.hexdigest()
    assert json.loads((tmp_path / "store" / f"{key}.json").read_text())["sha256"] == h.hexdigest()
    logs = []
    again, reused = store.get_or_compute(key, payload, compute, log=logs.append)
    assert reused is True and calls == [1] and logs == []
    assert torch.equal(again["h"], entry["h"])


def test_entry_with_flipped_bytes_is_rebuilt_not_reused(tmp_path):
    store, key, payload, compute, calls, entry = _store_once(tmp_path)
    path = store.path(key)
    _flip_tensor_bytes(path)
    # the damage is invisible to torch.load: the file still reads, with different numbers
    damaged = torch.load(path, weights_only=True)
    assert not torch.equal(damaged["h"], entry["h"]) or not torch.equal(damaged["h0"], entry["h0"])
    assert store.load(key, payload) is None
    logs = []
    rebuilt, reused = store.get_or_compute(key, payload, compute, log=logs.append)
    assert reused is False and calls == [1, 1]
    assert len(logs) == 1 and "failed its content check" in logs[0] and "rebuilding" in logs[0]
    assert key in logs[0]
    assert torch.equal(rebuilt["h"], entry["h"]) and torch.equal(rebuilt["h0"], entry["h0"])
    # the replacement is whole again and reused from now on
    logs.clear()
    _, reused = store.get_or_compute(key, payload, compute, log=logs.append)
    assert reused is True and calls == [1, 1] and logs == []


def test_entry_with_a_changed_loss_curve_or_no_hash_is_rebuilt(tmp_path):
    store, key, payload, compute, calls, _ = _store_once(tmp_path)
    path = store.path(key)
    data = torch.load(path, weights_only=True)
    data["loss_curve"] = [0.5, 0.125]             # same shape, other number: meta left as written
    torch.save(data, path)
    logs = []
    _, reused = store.get_or_compute(key, payload, compute, log=logs.append)
    assert reused is False and calls == [1, 1] and "failed its content check" in logs[0]
    # an entry written without a hash (by an older argtca) cannot be verified: rebuilt, saying so
    data = torch.load(path, weights_only=True)
    meta = json.loads(data["meta"])
    del meta["sha256"]
    data["meta"] = json.dumps(meta)
    torch.save(data, path)
    logs.clear()
    _, reused = store.get_or_compute(key, payload, compute, log=logs.append)
    assert reused is False and calls == [1, 1, 1] and "no content hash" in logs[0]


def test_cli_run_rebuilds_a_damaged_stored_graph(data, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    root, attr = data
    assert main(_argtca(root, attr, tmp_path / "a", "TRAINER.ARGTCA.SELECTOR", "div")) == 0
    first = json.loads((tmp_path / "a" / "phase1.json").read_text())
    key = first["store_key"]
    capsys.readouterr()
    _flip_tensor_bytes(tmp_path / "cache" / "phase1" / f"{key}.pt", n=256)
    assert main(_argtca(root, attr, tmp_path / "b", "TRAINER.ARGTCA.SELECTOR", "div")) == 0
    out = capsys.readouterr().out
    assert "reused stored graph" not in out
    assert f"stored graph {key}" in out and "failed its content check" in out
    second = json.loads((tmp_path / "b" / "phase1.json").read_text())
    assert second["reused"] is False
    assert second["selected_by_index"] == first["selected_by_index"]


def test_content_hash_covers_tensors_nested_in_dicts_and_lists():
    """An entry may nest tensors (a graph trained on other vocabularies): they are hashed by their
    bytes, so one changed value changes the hash, and JSON never sees a tensor."""
    from argtca.graph.store import content_sha256
    a = {"h": torch.ones(2), "transfer": {"emb": [torch.zeros(3), torch.ones(1)], "names": ["a"]}}
    b = {"h": torch.ones(2), "transfer": {"emb": [torch.tensor([0.0, 0.0, 1.0]), torch.ones(1)],
                                          "names": ["a"]}}
    assert content_sha256(a) == content_sha256({**a, "meta": {"x": 1}})
    assert content_sha256(a) != content_sha256(b)
