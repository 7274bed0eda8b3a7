"""argtca.selectors: the plug-ins against brute force, ties, reproducibility, validation."""
import itertools
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

import argtca.selectors
from argtca.registry import SELECTOR_REGISTRY
from argtca.selectors import SelectorError

K, M = 4, 6


def setup(seed=0, k=K, m=M, d=5):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(k * m, d, generator=g, dtype=torch.float64)
    node_class = torch.arange(k).repeat_interleave(m)
    attrs = [f"a{i}" for i in range(k * m)]
    return emb, node_class, attrs


def cos(a, b):
    a, b = a.tolist(), b.tolist()
    norm = math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b)) / norm


def run(name, emb, node_class, attrs, m_prime, **kw):
    return SELECTOR_REGISTRY.get(name)(emb, node_class, attrs, m_prime, **kw)


def nodes(sel):
    return {k: [e[0] for e in v] for k, v in sel.items()}


def test_registered_and_every_module_imported():
    for name in ("tca", "div", "disc", "random", "joint"):
        assert name in SELECTOR_REGISTRY
    pkg = Path(argtca.selectors.__file__).parent
    for f in pkg.glob("*.py"):
        if f.stem != "__init__":
            assert f"argtca.selectors.{f.stem}" in sys.modules


def test_new_file_is_picked_up(tmp_path):
    """The package's __init__ imports every module beside it: copy it into a fresh package
    with one extra file and import that package."""
    pkg = tmp_path / "plugin_pkg_for_test"
    pkg.mkdir()
    shutil.copy(Path(argtca.selectors.__file__), pkg / "__init__.py")
    (pkg / "mine.py").write_text(
        "from argtca.registry import SELECTOR_REGISTRY\n"
        "@SELECTOR_REGISTRY.register(name='zz_test_selector')\n"
        "def pick_last(emb, node_class, attrs, m_prime, seed=42, **kw):\n"
        "    return {}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert "zz_test_selector" not in SELECTOR_REGISTRY
        __import__("plugin_pkg_for_test")
        assert SELECTOR_REGISTRY.get("ZZ_TEST_SELECTOR").__name__ == "pick_last"
    finally:
        sys.path.remove(str(tmp_path))
        for mod in [m for m in sys.modules if m.startswith("plugin_pkg_for_test")]:
            del sys.modules[mod]
        SELECTOR_REGISTRY._obj_map.pop("zz_test_selector", None)


@pytest.mark.parametrize("name", ["tca", "div", "disc", "random", "joint"])
def test_validation(name):
    emb, nc, attrs = setup()
    with pytest.raises(SelectorError, match=r"M'=7\) exceeds .*class 0 has 6"):
        run(name, emb, nc, attrs, M + 1)
    with pytest.raises(SelectorError, match=">= 1"):
        run(name, emb, nc, attrs, 0)
    with pytest.raises(SelectorError):
        run(name, emb, nc, attrs[:-1], 2)
    sel = run(name, emb, nc, attrs, M)          # M' = M: everything, each node once
    assert {k: sorted(v) for k, v in nodes(sel).items()} == \
        {k: list(range(k * M, (k + 1) * M)) for k in range(K)}
    assert all(isinstance(e[1], float) for v in sel.values() for e in v)


def test_tca_is_file_order():
    emb, nc, attrs = setup()
    assert nodes(run("tca", None, nc, attrs, 3)) == {k: [k * M, k * M + 1, k * M + 2]
                                                      for k in range(K)}


def test_tca_with_the_files_lists_keeps_repeats_and_spelling():
    # nodes: first 3 distinct per class; raw: the lists as the file gives them
    node_class = torch.tensor([0, 0, 0, 1, 1, 1])
    attrs = ["Terrier", "dog", "small", "red", "round", "big"]
    raw = [["Terrier", "terrier", "dog", "small"], ["red", "round", "red", "big"]]
    sel = run("tca", None, node_class, attrs, 2, raw=raw)
    assert sel[0] == [(0, 1.0, "Terrier"), (0, 0.75, "terrier")]     # TCA: "Terrier terrier"
    assert sel[1] == [(3, 1.0, "red"), (4, 0.75, "round")]
    assert [e[0] for e in run("tca", None, node_class, attrs, 3, raw=raw)[1]] == [3, 4, 3]
    with pytest.raises(SelectorError, match="fewer than"):
        run("tca", None, node_class, attrs, 2, raw=[["Terrier"], raw[1]])


def div_brute(emb, members, m_prime):
    pairs = [(cos(emb[i], emb[j]), i, j) for i, j in itertools.combinations(members, 2)]
    _, i, j = min(pairs)  # smallest similarity, ties -> lowest (i, j)
    chosen = [i, j]
    while len(chosen) < m_prime:
        rest = [(max(cos(emb[c], emb[o]) for o in chosen), c) for c in members if c not in chosen]
        chosen.append(min(rest)[1])
    return chosen[:m_prime]


@pytest.mark.parametrize("m_prime", [1, 2, 3, 5])
def test_div_against_brute_force(m_prime):
    for seed in range(3):
        emb, nc, attrs = setup(seed)
        got = nodes(run("div", emb, nc, attrs, m_prime))
        for k in range(K):
            assert got[k] == div_brute(emb, list(range(k * M, (k + 1) * M)), m_prime)


def test_div_scores_and_ties():
    emb, nc, attrs = setup()
    sel = run("div", emb, nc, attrs, 3)
    (i, s_i), (j, s_j), (c, s_c) = sel[0]
    assert s_i == s_j == pytest.approx(1 - cos(emb[i], emb[j]))
    assert s_c == pytest.approx(1 - max(cos(emb[c], emb[i]), cos(emb[c], emb[j])))
    same = torch.ones(K * M, 3)          # every similarity equal: lowest indices win
    assert nodes(run("div", same, nc, attrs, 3))[1] == [M, M + 1, M + 2]


def disc_brute(emb, nc):
    n = len(nc)
    return [sum(1 - cos(emb[i], emb[j]) for j in range(n) if nc[j] != nc[i])
            / sum(1 for j in range(n) if nc[j] != nc[i]) for i in range(n)]


@pytest.mark.parametrize("m_prime", [1, 2, 4])
def test_disc_against_brute_force(m_prime):
    emb, nc, attrs = setup(5)
    score = disc_brute(emb, nc.tolist())
    sel = run("disc", emb, nc, attrs, m_prime)
    for k in range(K):
        members = range(k * M, (k + 1) * M)
        want = sorted(members, key=lambda i: -score[i])[:m_prime]
        assert [i for i, _ in sel[k]] == want
        assert [s for _, s in sel[k]] == pytest.approx([score[i] for i in want])


def test_disc_ties_and_unequal_class_sizes():
    same = torch.ones(K * M, 3)
    nc = torch.arange(K).repeat_interleave(M)
    assert nodes(run("disc", same, nc, [""] * (K * M), 2))[2] == [2 * M, 2 * M + 1]
    emb = torch.randn(9, 4, dtype=torch.float64)
    nc = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])
    score = disc_brute(emb, nc.tolist())
    sel = run("disc", emb, nc, [""] * 9, 2)
    assert [s for _, s in sel[1]] == pytest.approx(sorted([score[4], score[5]], reverse=True))


def test_random_reproducible_independent_and_uniform():
    emb, nc, attrs = setup()
    a = nodes(run("random", None, nc, attrs, 2, seed=7))
    assert a == nodes(run("random", None, nc, attrs, 2, seed=7))
    assert any(a != nodes(run("random", None, nc, attrs, 2, seed=s)) for s in range(8, 12))
    # class 2's draw does not depend on the other classes (class 2 kept alone, same index)
    keep = nc == 2
    alone = run("random", None, nc[keep], [x for x, k in zip(attrs, keep) if k], 2, seed=7)
    assert [i + 2 * M for i, _ in alone[2]] == a[2]
    # uniform: each candidate is chosen with probability M'/M = 1/3 over seeds
    counts = torch.zeros(M)
    subsets = set()
    for s in range(1500):
        pick = nodes(run("random", None, nc[:M], attrs[:M], 2, seed=s))[0]
        counts[pick] += 1
        subsets.add(tuple(sorted(pick)))
    assert (counts / 1500 - 1 / 3).abs().max() < 0.05
    assert len(subsets) == math.comb(M, 2)
    with pytest.raises(SelectorError, match="SELECTOR_SEED"):
        run("random", None, nc, attrs, 2, seed=-1)


def joint_brute(emb, nc, members, m_prime, w):
    d = disc_brute(emb, nc)
    best = None
    for i, j in itertools.combinations(members, 2):
        v = w * (1 - cos(emb[i], emb[j])) + (1 - w) * (d[i] + d[j]) / 2
        if best is None or v > best[0] + 1e-12:
            best = (v, i, j)
    _, i, j = best
    chosen = [j, i] if d[j] > d[i] else [i, j]
    while len(chosen) < m_prime:
        gains = [(w * (1 - max(cos(emb[c], emb[o]) for o in chosen)) + (1 - w) * d[c], c)
                 for c in members if c not in chosen]
        top = max(g for g, _ in gains)
        chosen.append(min(c for g, c in gains if g >= top - 1e-12))
    return chosen[:m_prime]


@pytest.mark.parametrize("w", [0.0, 0.3, 0.5, 1.0])
def test_joint_against_brute_force_and_limits(w):
    emb, nc, attrs = setup(2)
    for m_prime in (1, 2, 4):
        sel = nodes(run("joint", emb, nc, attrs, m_prime, weight=w))
        for k in range(K):
            members = list(range(k * M, (k + 1) * M))
            assert sel[k] == joint_brute(emb, nc.tolist(), members, m_prime, w)
        if m_prime >= 2 and w in (0.0, 1.0):   # the two ends are disc and div (as sets)
            other = nodes(run("disc" if w == 0 else "div", emb, nc, attrs, m_prime))
            assert {k: set(v) for k, v in sel.items()} == {k: set(v) for k, v in other.items()}
    with pytest.raises(SelectorError, match="JOINT_WEIGHT"):
        run("joint", emb, nc, attrs, 2, weight=1.5)
