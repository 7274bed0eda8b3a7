"""The selector contract: a selector resolved once into an object with its declared traits, one
check of every answer (built-in or plug-in) before it is used, plug-in files imported under a
private package name, and a built-in name replaced only on request."""
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from argtca.config import get_cfg_default
from argtca.graph import make_nodes, run_phase1, select_nodes
from argtca.registry import SELECTOR_REGISTRY, Registry
from argtca.plugins import load_plugins
from argtca.selectors import (PLUGIN_PACKAGE, PluginError, SelectorError, check_selection,
                              resolve_selector)
from argtca.selectors.div import select_div

REPO = Path(__file__).resolve().parents[2]
CLASSES = ["cat", "dog", "owl"]
ATTRS = {"cat": ["fur", "whiskers", "tail", "purr"],
         "dog": ["bark", "wag", "paws", "fetch"],
         "owl": ["feathers", "beak", "night", "wings"]}
NODES = make_nodes(CLASSES, ATTRS, 4)   # nodes 0-3 cat, 4-7 dog, 8-11 owl
THIS_FILE = Path(__file__).name


def node(**over):
    n = get_cfg_default().TRAINER.ARGTCA
    n.NUM_CANDIDATES, n.NUM_ATTRIBUTES = 4, 2
    n.GAT.HIDDEN, n.GAT.HEADS, n.GAT.EPOCHS = 8, 2, 2
    for k, v in over.items():
        setattr(n, k, v)
    return n


def good():
    return {0: [(0, 1.0), (1, 0.5)], 1: [(4, 1.0), (5, 0.5)], 2: [(8, 1.0), (9, 0.5)]}


def with_class(k, entries):
    sel = good()
    sel[k] = entries
    return sel


@pytest.fixture
def plug_in():
    """Register a test function as a plug-in selector; removed afterwards."""
    names = []

    def register(answer, name="zz_contract", **traits):
        def fn(emb, node_class, attrs, m_prime, seed=42, **kw):
            return answer() if callable(answer) else answer
        SELECTOR_REGISTRY.register(fn, name=name, **traits)
        names.append(name)
        return resolve_selector(name)
    yield register
    for n in names:
        SELECTOR_REGISTRY._obj_map.pop(n, None)


# (answer, the words the one error line must contain): several cases per class of error
BAD = {
    "out of range": (with_class(1, [(4, 1.0), (12, 0.5)]), "class 'dog' (index 1), entry 1: "
                     "node 12 is out of range (the graph has 12 nodes, 0..11)"),
    "far out of range": (with_class(2, [(999, 1.0), (8, 0.5)]), "class 'owl' (index 2), entry 0: "
                         "node 999 is out of range"),
    "negative": (with_class(0, [(0, 1.0), (-1, 0.5)]), "class 'cat' (index 0), entry 1: "
                 "node -1 is negative"),
    "negative numpy": (with_class(1, [(np.int64(-3), 1.0), (5, 0.5)]), "node -3 is negative"),
    "other class": (with_class(0, [(0, 1.0), (5, 0.5)]), "class 'cat' (index 0), entry 1: node 5 "
                    "('wag') belongs to class 'dog' (index 1)"),
    "other class first": (with_class(2, [(3, 1.0), (8, 0.5)]), "class 'owl' (index 2), entry 0: "
                          "node 3 ('purr') belongs to class 'cat' (index 0)"),
    "twice": (with_class(1, [(4, 1.0), (4, 0.5)]), "class 'dog' (index 1), entry 1: node 4 "
              "('bark') chosen twice"),
    "twice with text": (with_class(0, [(1, 1.0, "x"), (1, 0.5, "x")]), "node 1 ('whiskers') "
                        "chosen twice"),
    "more": (with_class(1, [(4, 1.0), (5, 0.5), (6, 0.2)]), "class 'dog' (index 1): 3 node(s) "
             "chosen, not M'=2"),
    "fewer": (with_class(2, [(8, 1.0)]), "class 'owl' (index 2): 1 node(s) chosen, not M'=2"),
    "empty": (with_class(0, []), "class 'cat' (index 0): 0 node(s) chosen, not M'=2"),
    "nan score": (with_class(1, [(4, float("nan")), (5, 0.5)]), "class 'dog' (index 1), entry 0: "
                  "score of node 4 is nan (scores must be finite)"),
    "inf score": (with_class(2, [(8, 1.0), (9, float("-inf"))]), "score of node 9 is -inf"),
    "numpy nan": (with_class(0, [(0, np.float32("nan")), (1, 0.5)]), "score of node 0 is nan"),
    "text score": (with_class(0, [(0, "high"), (1, 0.5)]), "score 'high' is not a number"),
    "None": (None, "its answer: got NoneType, not a dict"),
    "list": ([[(0, 1.0), (1, 0.5)]], "its answer: got list"),
    "class entry None": (with_class(1, None), "class 'dog' (index 1): got NoneType None, not a "
                         "list"),
    "left out": ({0: good()[0], 1: good()[1]}, "class 'owl' (index 2): left out"),
    "two left out": ({1: good()[1]}, "class 'cat' (index 0), class 'owl' (index 2): left out"),
    "name as key": ({**good(), "cat": good()[0]}, "key 'cat': not a class index"),
    "extra class": ({**good(), 3: [(8, 1.0), (9, 0.5)]}, "key 3: not a class index (there are "
                    "3 classes, 0..2)"),
    "float node": (with_class(0, [(0.0, 1.0), (1, 0.5)]), "node 0.0 is not an integer index"),
    "bare node": (with_class(0, [0, 1]), "entry 0: 0 is not a (node, score) pair"),
    "empty text": (with_class(0, [(0, 1.0, " "), (1, 0.5)]), "attribute text ' ' is not a "
                   "non-empty string"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_wrong_answer_is_one_line_naming_selector_file_class_and_fault(case, plug_in):
    answer, words = BAD[case]
    selector = plug_in(answer)
    assert not selector.builtin and selector.file.endswith(THIS_FILE)
    with pytest.raises(SelectorError) as e:
        select_nodes(NODES, torch.randn(12, 5), selector, 2)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f'selector "zz_contract" (plug-in {selector.file}): ')
    assert words in msg, msg


@pytest.mark.parametrize("case", ["out of range", "nan score", "left out", "None"])
def test_the_check_is_the_same_for_a_run_and_for_a_built_in(case, plug_in):
    """run_phase1 checks before it uses the answer (the CLI prints the error and exits 2), and
    a built-in's answer goes through the same check (named without a plug-in file)."""
    answer, words = BAD[case]
    plug_in(answer, needs_graph=False)
    with pytest.raises(SelectorError, match="zz_contract.*" + words.split(":")[-1].strip()[:20]):
        run_phase1(CLASSES, ATTRS, None, node(SELECTOR="zz_contract"), None, {})
    with pytest.raises(SelectorError) as e:
        check_selection(answer, NODES.node_class, NODES.attrs, 2, classnames=CLASSES,
                        who='selector "div"')
    assert str(e.value).startswith('selector "div": ') and words in str(e.value)


def test_a_good_answer_comes_back_in_plain_types(plug_in):
    answer = {np.int64(1): [(torch.tensor(5), np.float32(0.25)), (4, 1)],
              0: [(0, 1.0, "fur!"), (1, 0.5)], 2: ((8, 1.0), (9, 0.5))}
    sel = select_nodes(NODES, None, plug_in(answer), 2)
    assert list(sel) == [0, 1, 2]
    assert sel[1] == [(5, 0.25), (4, 1.0)] and sel[0][0] == (0, 1.0, "fur!")
    assert all(type(i) is int and type(s) is float for v in sel.values() for i, s, *_ in v)


def test_a_plugin_that_raises_is_named_and_the_builtins_pass(plug_in):
    def boom():
        raise IndexError("list index out of range")
    selector = plug_in(boom)
    with pytest.raises(SelectorError, match=r'"zz_contract" \(plug-in .*test_selector_contract'
                       r'\.py\) failed: IndexError: list index out of range'):
        select_nodes(NODES, None, selector, 2)
    emb = torch.randn(12, 5, generator=torch.Generator().manual_seed(0))
    for name in ("div", "disc", "joint", "random", "tca"):
        sel = select_nodes(NODES, emb, name, 2)
        assert all(math.isfinite(e[1]) for v in sel.values() for e in v)


def test_repeats_only_for_a_selector_that_declares_them(plug_in):
    raw = [["fur", "fur", "tail"], ["bark", "wag"], ["beak", "beak", "wings"]]
    nodes = make_nodes(CLASSES, {c: r for c, r in zip(CLASSES, raw)}, 2)
    sel = select_nodes(nodes, None, "tca", 2)   # TCA keeps the file's repeats: declared
    assert [e[0] for e in sel[0]] == [0, 0] and [e[2] for e in sel[2]] == ["beak", "beak"]
    assert resolve_selector("tca").repeats and not resolve_selector("div").repeats
    twice = {0: [(0, 1.0), (0, 0.5)], 1: [(2, 1.0), (3, 0.5)], 2: [(4, 1.0), (4, 0.5)]}
    with pytest.raises(SelectorError, match="node 0 .'fur'. chosen twice"):
        select_nodes(nodes, None, plug_in(twice), 2)
    assert select_nodes(nodes, None, plug_in(twice, name="zz_rep", repeats=True), 2)[2] == \
        [(4, 1.0), (4, 0.5)]


def test_traits_are_declared_at_registration_and_checked():
    assert not resolve_selector("tca").needs_graph and not resolve_selector("random").needs_graph
    assert all(resolve_selector(n).needs_graph for n in ("div", "disc", "joint"))
    assert resolve_selector("DIV").builtin and resolve_selector("div").fn is select_div
    reg = Registry("THING")       # other registries: no traits given, none kept
    reg.register(name="a")(len)
    assert reg.traits("A") == {}
    SELECTOR_REGISTRY.register(len, name="zz_typo", needs_grpah=False)
    try:
        with pytest.raises(SelectorError, match='"zz_typo" .* unknown trait.* needs_grpah; a '
                           'selector may declare needs_graph, repeats'):
            resolve_selector("zz_typo")
    finally:
        SELECTOR_REGISTRY._obj_map.pop("zz_typo")


def test_a_selector_without_needs_graph_trains_no_gat(plug_in, tmp_path):
    """A plug-in registered with needs_graph=False: Phase 1 neither encodes the nodes nor trains
    the GAT (EMBEDDINGS gat); one that does not say so gets the trained embeddings."""
    def no_text(texts):
        raise AssertionError("text_fn must not be called")
    plug_in(good(), needs_graph=False)
    res = run_phase1(CLASSES, ATTRS, no_text, node(SELECTOR="zz_contract"), str(tmp_path),
                     {"dataset": "toy"})
    assert res["loss_curve"] == [] and res["store_key"] is None and res["reused"] is None
    assert res["selected"] == {"cat": ["fur", "whiskers"], "dog": ["bark", "wag"],
                               "owl": ["feathers", "beak"]}
    assert res["selector"]["needs_graph"] is False and res["selector"]["file"].endswith(THIS_FILE)
    assert list(tmp_path.iterdir()) == []

    seen = {}

    def keep(emb, node_class, attrs, m_prime, **kw):
        seen["emb"] = emb
        return good()
    SELECTOR_REGISTRY.register(keep, name="zz_needs")
    try:
        res = run_phase1(CLASSES, ATTRS, lambda t: torch.randn(len(t), 16),
                         node(SELECTOR="zz_needs"), str(tmp_path), {"dataset": "toy"})
    finally:
        SELECTOR_REGISTRY._obj_map.pop("zz_needs")
    assert len(res["loss_curve"]) == 2 and seen["emb"].shape == (12, 8)


def _plugin(folder, name, body):
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def test_a_plugin_file_named_like_a_stdlib_module_does_not_replace_it(tmp_path):
    (tmp_path / "mine").mkdir()
    path = _plugin(tmp_path / "mine", "random.py", '''
        from argtca.registry import SELECTOR_REGISTRY
        @SELECTOR_REGISTRY.register(name="zz_stdlib_name", needs_graph=False)
        def pick(emb, node_class, attrs, m_prime, seed=42, **kw):
            return {}
    ''')
    code = textwrap.dedent(f'''
        import random, sys
        from argtca.plugins import load_plugins
        from argtca.selectors import resolve_selector
        load_plugins([{str(path)!r}])
        import random as again
        assert sys.modules["random"] is random is again and hasattr(random, "shuffle")
        s = resolve_selector("zz_stdlib_name")
        print(s.module, s.file, random.__file__ != s.file)
    ''')
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == [f"{PLUGIN_PACKAGE}.random", str(path), "True"]


def test_replacing_a_builtin_needs_override_and_is_recorded(tmp_path):
    clash = _plugin(tmp_path, "clash.py", '''
        from argtca.registry import SELECTOR_REGISTRY
        @SELECTOR_REGISTRY.register(name="Div")
        def my_div(emb, node_class, attrs, m_prime, seed=42, **kw):
            return {}
    ''')
    with pytest.raises(PluginError) as e:
        load_plugins([str(clash)])
    msg = str(e.value)
    assert msg.startswith(f"--plugin {clash}: importing it failed: KeyError: ")
    assert "argtca.selectors.div.select_div" in msg and str(clash) in msg
    assert "override=True" in msg and "\n" not in msg
    assert resolve_selector("div").fn is select_div
    mine = _plugin(tmp_path, "mine.py", '''
        from argtca.registry import SELECTOR_REGISTRY
        @SELECTOR_REGISTRY.register(name="div", override=True)
        def first_two(emb, node_class, attrs, m_prime, seed=42, **kw):
            ks = node_class.tolist()
            return {k: [(i, 0.0) for i, c in enumerate(ks) if c == k][:m_prime]
                    for k in sorted(set(ks))}
    ''')
    try:
        load_plugins([str(mine)])
        s = resolve_selector("div")
        assert not s.builtin and s.file == str(mine) and s.module == f"{PLUGIN_PACKAGE}.mine"
        res = run_phase1(CLASSES, ATTRS, lambda t: torch.randn(len(t), 16), node(), None, {})
        assert res["selector"] == {"name": "div", "builtin": False, "module": s.module,
                                   "file": str(mine), "needs_graph": True}
        assert res["selected"]["owl"] == ["feathers", "beak"]
    finally:
        SELECTOR_REGISTRY.register(select_div, name="div", override=True)
    assert resolve_selector("div").describe()["builtin"] is True
