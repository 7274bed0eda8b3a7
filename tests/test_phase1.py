"""argtca.graph.phase1 (runner, cache) and the real TCA vocabularies, with random text features
(no CLIP)."""
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argtca.attributes import load_attributes, normalize_attribute
from argtca.config import get_cfg_default
from argtca.graph import GraphInputError, build_graph, make_nodes, run_phase1
from argtca.registry import SELECTOR_REGISTRY
from argtca.select_attributes import comparison_table

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "tca_attributes"
CLASSES = ["cat", "dog", "owl"]
ATTRS = {"cat": ["fur", "whiskers", "tail", "purr", "paws"],
         "dog": ["bark", "tail", "paws", "fetch", "leash"],
         "owl": ["feathers", "beak", "night", "wings", "eyes"]}


class TextFn:
    """Deterministic pseudo-random features per text; counts calls."""

    def __init__(self, width=24):
        self.width, self.calls = width, 0

    def __call__(self, texts):
        self.calls += 1
        rows = []
        for t in texts:
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            rows.append(torch.randn(self.width, generator=torch.Generator().manual_seed(seed)))
        return torch.stack(rows)


def node(**over):
    n = get_cfg_default().TRAINER.ARGTCA
    n.NUM_CANDIDATES, n.NUM_ATTRIBUTES = 4, 2
    n.GAT.HIDDEN, n.GAT.HEADS, n.GAT.EPOCHS = 16, 4, 5
    for k, v in over.items():
        target = n
        *path, last = k.split(".")
        for p in path:
            target = target[p]
        target[last] = v
    return n


def test_run_phase1_result_and_json(tmp_path):
    fn = TextFn()
    res = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert fn.calls == 1 and res["cached"] is False
    assert res["candidates"] == {c: ATTRS[c][:4] for c in CLASSES}
    for c in CLASSES:
        assert len(res["selected"][c]) == 2 and set(res["selected"][c]) <= set(ATTRS[c][:4])
        assert len(res["scores"][c]) == 2
        assert set(res["attention"][c]) == set(ATTRS[c][:4])
    assert res["selected_by_index"] == [res["selected"][c] for c in CLASSES]
    assert len(res["loss_curve"]) == 5
    assert res["settings"]["SELECTOR"] == "div" and res["cache_key"] == {"dataset": "toy"}
    path = res["cache_file"]
    assert os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path) == f"phase1-{res['fingerprint']}.json"
    on_disk = json.loads(Path(path).read_text())
    assert on_disk["selected"] == res["selected"] and on_disk["loss_curve"] == res["loss_curve"]


def test_cache_reuse_mismatch_and_corruption(tmp_path):
    fn = TextFn()
    first = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    again = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert fn.calls == 1 and again["cached"] is True and again["selected"] == first["selected"]
    other = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy2"})
    assert fn.calls == 2 and other["cached"] is False
    assert other["cache_file"] != first["cache_file"]
    seeded = run_phase1(CLASSES, ATTRS, fn, node(**{"GAT.SEED": 3}), str(tmp_path),
                        {"dataset": "toy"})
    assert fn.calls == 3 and seeded["cache_file"] != first["cache_file"]
    Path(first["cache_file"]).write_text("{broken")        # a bad cache is recomputed
    redo = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert fn.calls == 4 and redo["cached"] is False and redo["selected"] == first["selected"]
    assert json.loads(Path(first["cache_file"]).read_text())["selected"] == first["selected"]
    # a file under the right name whose stored key differs is overwritten too
    stale = json.loads(Path(first["cache_file"]).read_text())
    stale["cache_key"] = {"dataset": "other"}
    Path(first["cache_file"]).write_text(json.dumps(stale))
    run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert fn.calls == 5


def test_deterministic_without_cache():
    a = run_phase1(CLASSES, ATTRS, TextFn(), node(), None, {})
    b = run_phase1(CLASSES, ATTRS, TextFn(), node(), None, {})
    assert a["selected"] == b["selected"] and a["loss_curve"] == b["loss_curve"]
    assert a["cache_file"] is None


def test_tca_needs_no_text_features():
    def boom(texts):
        raise AssertionError("text_fn must not be called for tca")
    res = run_phase1(CLASSES, ATTRS, boom, node(SELECTOR="tca", NUM_ATTRIBUTES=3), None, {})
    assert res["selected"] == {c: ATTRS[c][:3] for c in CLASSES}
    assert res["loss_curve"] == [] and res["attention"] == {}


def test_raw_embeddings_select_on_h0():
    fn = TextFn()
    n = node(EMBEDDINGS="raw", SELECTOR="disc")
    res = run_phase1(CLASSES, ATTRS, fn, n, None, {})
    assert res["loss_curve"] == [] and res["attention"] == {}
    nodes = make_nodes(CLASSES, ATTRS, 4)
    h0 = F.normalize(fn(nodes.texts), dim=1)
    sel = SELECTOR_REGISTRY.get("disc")(h0, nodes.node_class, nodes.attrs, 2)
    assert res["selected_by_index"] == [[nodes.attrs[i] for i, _ in sel[k]] for k in range(3)]


def test_bad_settings():
    with pytest.raises(GraphInputError, match="NUM_ATTRIBUTES"):
        run_phase1(CLASSES, ATTRS, TextFn(), node(NUM_ATTRIBUTES=5), None, {})
    with pytest.raises(GraphInputError, match="EMBEDDINGS"):
        run_phase1(CLASSES, ATTRS, TextFn(), node(EMBEDDINGS="clip"), None, {})
    with pytest.raises(GraphInputError, match="'owl' has 5"):
        run_phase1(CLASSES, ATTRS, TextFn(), node(NUM_CANDIDATES=6), None, {})
    with pytest.raises(GraphInputError, match="text_fn"):
        run_phase1(CLASSES, ATTRS, lambda t: torch.zeros(2, 3), node(), None, {})
    with pytest.raises(KeyError, match="registered"):
        run_phase1(CLASSES, ATTRS, TextFn(), node(SELECTOR="best"), None, {})


def test_comparison_table():
    sel = {"tca": {"cat": ["fur", "whiskers"], "dog": ["bark", "tail"]},
           "div": {"cat": ["fur", "purr"], "dog": ["bark", "leash"]},
           "disc": {"cat": ["whiskers", "purr"]}}
    lines = comparison_table(["cat", "dog"], sel).splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["class", "tca", "div", "disc"]
    assert [c.strip() for c in lines[2].split("|")] == ["cat", "fur, whiskers", "fur, purr",
                                                         "whiskers, purr"]
    assert [c.strip() for c in lines[3].split("|")] == ["dog", "bark, tail", "bark, leash", "-"]
    assert len(lines) == 4 and set(lines[1]) <= {"-", "+"}
    assert len({line.index("|") for line in (lines[0], lines[2], lines[3])}) == 1  # aligned


# ----------------------------------------------------------------------------- real vocabularies
REAL = sorted(SHARED.glob("*_2_V.json")) if SHARED.is_dir() else []


@pytest.mark.skipif(not REAL, reason="../shared/data/tca_attributes absent")
def test_all_eleven_files_present():
    assert len(REAL) == 11


@pytest.mark.skipif(not REAL, reason="../shared/data/tca_attributes absent")
@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_real_vocabulary_graph_and_selection(path):
    m, m_prime = 10, 2
    names = list(json.loads(path.read_text()))
    attrs = load_attributes(str(path), names, 1, dedupe=True)
    n_distinct = {c: len({normalize_attribute(a) for a in attrs[c]}) for c in names}
    short = [c for c in names if n_distinct[c] < m]
    if short:  # (DTD 'grid', ImageNet 'grey whale', ...): a clear error naming them
        with pytest.raises(GraphInputError) as e:
            make_nodes(names, attrs, m)
        assert all(f"{c!r} has {n_distinct[c]}" in str(e.value) for c in short)
    names = [c for c in names if n_distinct[c] >= m]
    nodes = make_nodes(names, attrs, m)
    k = len(names)
    assert nodes.num_nodes == k * m
    intra = build_graph(nodes.node_class, nodes.attrs, "intra")
    inter = build_graph(nodes.node_class, nodes.attrs, "inter")
    full = build_graph(nodes.node_class, nodes.attrs, "full")
    assert intra.shape[1] == k * m * (m - 1)
    # separate count: first m distinct normalised strings per class; a string shared by n classes
    # gives n(n-1) directed edges (within a class strings are distinct, so no same-class pairs)
    per_class = []
    for c in names:
        seen = []
        for a in attrs[c]:
            if normalize_attribute(a) not in seen:
                seen.append(normalize_attribute(a))
        per_class.append(seen[:m])
    counts = Counter(s for strings in per_class for s in strings)
    assert inter.shape[1] == sum(n * (n - 1) for n in counts.values())
    assert full.shape[1] == intra.shape[1] + inter.shape[1]
    assert (full[0] != full[1]).all()
    # selection on random h0 (no CLIP, no training): every class gets M' of its candidates
    g = torch.Generator().manual_seed(0)
    emb = F.normalize(torch.randn(nodes.num_nodes, 32, generator=g), dim=1)
    for name in ("tca", "div", "disc", "random", "joint"):
        sel = SELECTOR_REGISTRY.get(name)(emb, nodes.node_class, nodes.attrs, m_prime)
        assert sorted(sel) == list(range(k))
        for ci in range(k):
            picked = [i for i, _ in sel[ci]]
            assert len(set(picked)) == m_prime
            assert all(int(nodes.node_class[i]) == ci for i in picked)


@pytest.mark.skipif(not (SHARED / "EuroSAT_2_V.json").is_file(), reason="EuroSAT file absent")
def test_real_inter_edges_brute_force_and_gat_phase1():
    path = SHARED / "EuroSAT_2_V.json"
    names = list(json.loads(path.read_text()))
    attrs = load_attributes(str(path), names, 10, dedupe=True)
    nodes = make_nodes(names, attrs, 10)
    want = {(i, j) for i in range(nodes.num_nodes) for j in range(nodes.num_nodes)
            if nodes.node_class[i] != nodes.node_class[j]
            and nodes.attrs[i].lower().strip() == nodes.attrs[j].lower().strip()}
    got = build_graph(nodes.node_class, nodes.attrs, "inter")
    assert {(int(a), int(b)) for a, b in got.T} == want and got.shape[1] == len(want)
    res = run_phase1(names, attrs, TextFn(64), node(NUM_CANDIDATES=10, **{"GAT.EPOCHS": 3}),
                     None, {})
    assert all(len(res["selected"][c]) == 2 for c in names)
    assert len(res["loss_curve"]) == 3
