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

import argtca.selectors  # noqa: F401  (registers the selectors)
from argtca.attributes import dedupe_attributes, load_attributes, normalize_attribute
from argtca.config import get_cfg_default
from argtca.graph import (GraphInputError, ShortClassWarning, build_graph, make_nodes,
                          run_phase1)
from argtca.graph.nodes import SHORT_LISTED
from argtca.registry import SELECTOR_REGISTRY
from argtca.experiments.select_attributes import comparison_table
from conftest import set_keys

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "tca_attributes"
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
    return set_keys(n, over)


def test_run_phase1_result_and_json(tmp_path):
    fn = TextFn()
    res = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert fn.calls == 1 and res["reused"] is False
    assert res["candidates"] == {c: ATTRS[c][:4] for c in CLASSES}
    for c in CLASSES:
        assert len(res["selected"][c]) == 2 and set(res["selected"][c]) <= set(ATTRS[c][:4])
        assert len(res["scores"][c]) == 2
        assert set(res["attention"][c]) == set(ATTRS[c][:4])
    assert res["selected_by_index"] == [res["selected"][c] for c in CLASSES]
    assert len(res["loss_curve"]) == 5 and res["short_classes"] == {}
    assert res["settings"]["SELECTOR"] == "div" and res["identity"] == {"dataset": "toy"}
    path = res["store_file"]
    assert os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path) == f"{res['store_key']}.pt"
    assert res["store_key"].startswith("toy-") and len(res["store_key"]) == len("toy-") + 16
    meta = json.loads((tmp_path / f"{res['store_key']}.json").read_text())
    assert meta["payload"]["identity"] == {"dataset": "toy"} and meta["key"] == res["store_key"]
    stored = torch.load(path, weights_only=True)
    assert stored["h"].shape == (12, 16) and stored["h0"].shape == (12, 24)
    assert stored["loss_curve"] == res["loss_curve"]


def test_store_key_covers_the_graph_not_the_selection(tmp_path):
    fn = TextFn()
    first = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    logs = []
    again = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"},
                       log=logs.append)
    assert fn.calls == 1 and again["reused"] is True and again["selected"] == first["selected"]
    assert logs == [f"[phase 1] reused stored graph {first['store_key']} ({first['store_file']})"]
    # selector, M', selector seed, joint weight, alpha/beta: same stored graph, nothing trained
    for over in ({"SELECTOR": "disc"}, {"SELECTOR": "joint", "JOINT_WEIGHT": 0.3},
                 {"NODE_ATTENTION": "incoming"},
                 {"NUM_ATTRIBUTES": 3}, {"ALPHA": 40.0, "BETA": 15.0}, {"SELECTOR_SEED": 7}):
        r = run_phase1(CLASSES, ATTRS, fn, node(**over), str(tmp_path), {"dataset": "toy"})
        assert fn.calls == 1 and r["reused"] is True and r["store_key"] == first["store_key"]
    # what determines the graph: a new key each
    keys = {first["store_key"]}
    for over, ident in (({}, {"dataset": "toy2"}), ({"GAT.SEED": 3}, {"dataset": "toy"}),
                        ({"EDGES": "intra"}, {"dataset": "toy"}),
                        ({"GAT.LOSS_ON": "z"}, {"dataset": "toy"}),
                        ({"GAT.EPOCHS": 6}, {"dataset": "toy"}),
                        ({"NUM_CANDIDATES": 3}, {"dataset": "toy"}),
                        ({"EMBEDDINGS": "raw"}, {"dataset": "toy"}),
                        ({"GAT.SELF_LOOPS": False}, {"dataset": "toy"}),
                        ({"GAT.BIAS": True}, {"dataset": "toy"})):
        r = run_phase1(CLASSES, ATTRS, fn, node(**over), str(tmp_path), ident)
        assert r["reused"] is False and r["store_key"] not in keys
        keys.add(r["store_key"])
    assert fn.calls == 10
    assert first["settings"]["GAT"]["BIAS"] is False and r["settings"]["GAT"]["BIAS"] is True
    # other class names (same file): a new key
    r = run_phase1(["cat", "dog"], ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert r["reused"] is False and r["store_key"] not in keys


def test_node_attention_formula_is_a_reporting_choice(tmp_path):
    inc = run_phase1(CLASSES, ATTRS, TextFn(), node(NODE_ATTENTION="incoming"), str(tmp_path),
                     {"dataset": "toy"})
    src = run_phase1(CLASSES, ATTRS, TextFn(), node(), str(tmp_path), {"dataset": "toy"})
    assert src["reused"] and src["selected"] == inc["selected"]
    assert inc["node_attention"] == "incoming" and src["node_attention"] == "source"
    # the appendix's incoming mean is 1 / (in-degree + self-loop) under GAT's softmax
    nodes = make_nodes(CLASSES, ATTRS, 4)
    ei = build_graph(nodes.node_class, nodes.attrs, "full")
    deg = torch.bincount(ei[1], minlength=nodes.num_nodes) + 1
    for k, c in enumerate(CLASSES):
        for i in nodes.nodes_of(k):
            assert inc["attention"][c][nodes.attrs[i]] == pytest.approx(1 / float(deg[i]))
    assert src["attention"] != inc["attention"]


def test_damaged_or_foreign_store_file_is_recomputed(tmp_path):
    fn = TextFn()
    first = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    Path(first["store_file"]).write_bytes(b"broken")          # a bad file is recomputed
    redo = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert fn.calls == 2 and redo["reused"] is False and redo["selected"] == first["selected"]
    # a file under the right name made for another payload is recomputed too
    other = run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "other"})
    os.replace(other["store_file"], first["store_file"])
    run_phase1(CLASSES, ATTRS, fn, node(), str(tmp_path), {"dataset": "toy"})
    assert fn.calls == 4
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_same_key_twice_gives_bit_identical_embeddings(tmp_path):
    a = run_phase1(CLASSES, ATTRS, TextFn(), node(), str(tmp_path / "a"), {"dataset": "toy"})
    b = run_phase1(CLASSES, ATTRS, TextFn(), node(), str(tmp_path / "b"), {"dataset": "toy"})
    assert a["store_key"] == b["store_key"] and not a["reused"] and not b["reused"]
    ta = torch.load(a["store_file"], weights_only=True)
    tb = torch.load(b["store_file"], weights_only=True)
    for k in ("h", "h0", "attention"):
        assert torch.equal(ta[k], tb[k]), k
    assert ta["loss_curve"] == tb["loss_curve"]
    c = run_phase1(CLASSES, ATTRS, TextFn(), node(), None, {})   # no store: trained here
    assert c["store_key"] is None and c["selected"] == a["selected"]


def test_every_selector_selects_from_the_stored_embeddings(tmp_path):
    nodes = make_nodes(CLASSES, ATTRS, 4)
    first = run_phase1(CLASSES, ATTRS, TextFn(), node(), str(tmp_path), {"dataset": "toy"})
    h = torch.load(first["store_file"], weights_only=True)["h"]
    for name in ("div", "disc", "joint"):
        r = run_phase1(CLASSES, ATTRS, TextFn(), node(SELECTOR=name), str(tmp_path),
                       {"dataset": "toy"})
        assert r["reused"] is True
        sel = SELECTOR_REGISTRY.get(name)(h, nodes.node_class, nodes.attrs, 2)
        assert r["selected_by_index"] == [[nodes.attrs[i] for i, _ in sel[k]] for k in range(3)]


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
    few = dict(ATTRS, owl=["feathers", "Feathers", "beak"])
    with pytest.raises(GraphInputError, match="'owl' has 2"):
        run_phase1(CLASSES, few, TextFn(), node(NUM_ATTRIBUTES=3), None, {})
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
    """Every real file builds at M = 10 (short classes get M_k = their distinct count), with
    sum_k M_k (M_k - 1) intra edges and the inter edges counted separately."""
    m, m_prime = 10, 2
    names = list(json.loads(path.read_text()))
    raw = load_attributes(str(path), names, m_prime)
    # independent count: the first distinct normalised strings of each list, at most m
    per_class = []
    for c in names:
        seen = []
        for a in raw[c]:
            if normalize_attribute(a) not in seen:
                seen.append(normalize_attribute(a))
        per_class.append(seen[:m])
    sizes = [len(x) for x in per_class]
    short = {c: n for c, n in zip(names, sizes) if n < m}
    if short:  # (DTD 'grid', ImageNet 'grey whale', ...): one warning naming them all
        with pytest.warns(ShortClassWarning) as rec:
            nodes = make_nodes(names, raw, m, min_per_class=m_prime)
        named = list(short.items())[:SHORT_LISTED]   # the rest are counted
        assert len(rec) == 1 and all(f"{c!r} ({n})" in str(rec[0].message) for c, n in named)
        if len(short) > SHORT_LISTED:
            assert f"and {len(short) - SHORT_LISTED} more" in str(rec[0].message)
    else:
        nodes = make_nodes(names, raw, m, min_per_class=m_prime)
    assert nodes.short == short and nodes.sizes == sizes
    assert [normalize_attribute(a) for a in nodes.attrs] == [s for x in per_class for s in x]
    k = len(names)
    intra = build_graph(nodes.node_class, nodes.attrs, "intra")
    inter = build_graph(nodes.node_class, nodes.attrs, "inter")
    full = build_graph(nodes.node_class, nodes.attrs, "full")
    assert intra.shape[1] == sum(n * (n - 1) for n in sizes)
    # a string shared by n classes gives n(n-1) directed edges (strings are distinct in a class)
    counts = Counter(s for strings in per_class for s in strings)
    assert inter.shape[1] == sum(n * (n - 1) for n in counts.values())
    assert full.shape[1] == intra.shape[1] + inter.shape[1]
    assert (full[0] != full[1]).all()
    # selection on random h0 (no CLIP, no training): every class gets M' of its candidates
    g = torch.Generator().manual_seed(0)
    emb = F.normalize(torch.randn(nodes.num_nodes, 32, generator=g), dim=1)
    for name in ("tca", "div", "disc", "random", "joint"):
        sel = SELECTOR_REGISTRY.get(name)(emb, nodes.node_class, nodes.attrs, m_prime,
                                          raw=nodes.raw)
        assert sorted(sel) == list(range(k))
        for ci in range(k):
            picked = [e[0] for e in sel[ci]]
            assert all(int(nodes.node_class[i]) == ci for i in picked)
            if name != "tca":  # tca keeps the file's repeats (see the test below)
                assert len(set(picked)) == m_prime


def _trainer(cls, path, names, selector, out):
    """A TCA / ArgTCA trainer object with just what choosing attributes needs (no data, no
    CLIP)."""
    cfg = get_cfg_default()
    cfg.DATASET.ATTRIBUTE_FILE = str(path)
    cfg.OUTPUT_DIR = str(out)
    cfg.VERBOSE = False
    cfg.TRAINER.ARGTCA.SELECTOR = selector
    t = cls.__new__(cls)
    t.cfg, t.classnames, t.device, t.model = cfg, list(names), "cpu", None
    t.check_cfg(cfg)   # ArgTCA resolves its selector here
    return t


@pytest.mark.skipif(not REAL, reason="../shared/data/tca_attributes absent")
def test_tca_selector_puts_exactly_the_tca_baselines_prompts_into_phase_2(tmp_path):
    import warnings

    from argtca.trainers.argtca import ArgTCA
    from argtca.trainers.methods import TCA
    differs_from_distinct = 0
    for path in REAL:
        names = list(json.loads(path.read_text()))
        tca = _trainer(TCA, path, names, "tca", tmp_path / "tca")
        tca.attributes = tca.choose_attributes()
        want = tca.prompt_suffixes(names)
        arg = _trainer(ArgTCA, path, names, "tca", tmp_path / path.stem)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ShortClassWarning)
            arg.choose_attributes()
            arg.prepare()               # Phase 1 with the tca selector: no CLIP needed
        got = arg.prompt_suffixes(names)
        assert got == want, path.name
        assert json.loads((tmp_path / path.stem / "phase1.json").read_text())["selected"] \
            == tca.attributes
        raw = load_attributes(str(path), names, 2)
        differs_from_distinct += sum(tca.attributes[c] != dedupe_attributes(raw[c])[:2]
                                     for c in names)
    assert differs_from_distinct > 0   # files where "first two distinct" would differ exist


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


@pytest.mark.skipif(not (SHARED / "DescribableTextures_2_V.json").is_file(),
                    reason="DTD file absent")
def test_dtd_runs_phase1_at_m_10_with_its_short_class(tmp_path):
    path = SHARED / "DescribableTextures_2_V.json"
    names = list(json.loads(path.read_text()))
    raw = load_attributes(str(path), names, 2)
    with pytest.warns(ShortClassWarning, match=r"'grid' \(5\)"):
        res = run_phase1(names, raw, TextFn(32), node(NUM_CANDIDATES=10, **{"GAT.EPOCHS": 2}),
                         str(tmp_path), {"dataset": "DescribableTextures"}, source=str(path))
    assert res["short_classes"] == {"grid": 5} and len(res["candidates"]["grid"]) == 5
    assert all(len(v) == 10 for c, v in res["candidates"].items() if c != "grid")
    assert all(len(set(v)) == 2 for v in res["selected"].values())
    assert set(res["selected"]["grid"]) <= set(res["candidates"]["grid"])
    # M' above grid's 5 distinct attributes: one error naming grid and the file
    with pytest.raises(GraphInputError, match=r"'grid' has 5") as e:
        run_phase1(names, raw, TextFn(32), node(NUM_CANDIDATES=10, NUM_ATTRIBUTES=6), None, {},
                   source=str(path))
    assert "DescribableTextures_2_V.json" in str(e.value)
