"""argtca.graph: nodes, edges, AttributeGAT, attention scores, SupCon, training."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv

from argtca.config import get_cfg_default
from argtca.graph import (AttributeGAT, GraphInputError, ShortClassWarning, SparseGATConv,
                          build_graph,
                          incoming_attention, make_nodes, source_attention, supcon_loss, train_gat)

# 3 classes x 3 attributes; shared strings (after lower/trim): red (n0, n3), round (n1, n7),
# big (n2, n5)
CLASSES = ["apple", "box", "ball"]
ATTRS = {"apple": ["red", "round", "big"], "box": [" Red", "square", "BIG"],
         "ball": ["blue", "round ", "tiny"]}


def edge_set(ei):
    return {(int(a), int(b)) for a, b in ei.T}


def hand_graph():
    nodes = make_nodes(CLASSES, ATTRS, 3)
    return nodes, nodes.node_class, nodes.attrs


def test_nodes_order_texts_and_dedupe():
    nodes = make_nodes(["cat", "dog"], {"cat": ["fur", "Fur", "whiskers", "tail"],
                                        "dog": ["bark", "tail", "paws", "x"]}, 3)
    assert nodes.attrs == ["fur", "whiskers", "tail", "bark", "tail", "paws"]
    assert nodes.node_class.tolist() == [0, 0, 0, 1, 1, 1]
    assert nodes.texts[1] == "a whiskers of a cat" and nodes.texts[3] == "a bark of a dog"



def test_a_warning_about_many_short_classes_names_ten_and_counts_the_rest():
    """Stanford Cars' 196 classes, each short, would be a screen of names: 10 are named, the
    other 2 of these 12 counted, and every one is kept in ``nodes.short`` (phase1.json)."""
    names = [f"class{i:02d}" for i in range(12)]
    with pytest.warns(ShortClassWarning) as rec:
        nodes = make_nodes(names, {c: ["a", "b", "c"] for c in names}, 4)
    msg = str(rec[0].message)
    assert "12 of 12 classes" in msg and "and 2 more" in msg
    assert [c for c in names if f"'{c}' (3)" in msg] == names[:10]
    assert nodes.short == {c: 3 for c in names}


def test_short_classes_get_fewer_nodes_one_warning_and_error_below_m_prime():
    attrs = {"cat": ["fur", "FUR ", "a", "b"], "dog": list("abcd"), "owl": ["x", "X", "x"]}
    with pytest.warns(ShortClassWarning) as rec:
        nodes = make_nodes(["cat", "dog", "owl"], attrs, 4)
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "'cat' (3)" in msg and "'owl' (1)" in msg and "'dog'" not in msg and "M=4" in msg
    assert nodes.sizes == [3, 4, 1] and nodes.short == {"cat": 3, "owl": 1}
    assert nodes.attrs == ["fur", "a", "b", "a", "b", "c", "d", "x"]
    assert nodes.nodes_of(0) == [0, 1, 2] and nodes.nodes_of(1) == [3, 4, 5, 6]
    assert nodes.nodes_of(2) == [7]
    assert nodes.raw[0] == ["fur", "FUR ", "a", "b"]
    # sum_k M_k (M_k - 1) intra edges: 3*2 + 4*3 + 0
    assert build_graph(nodes.node_class, nodes.attrs, "intra").shape[1] == 18
    # an error only where M_k < M' (here M' = 2: owl), naming the class and the file
    with pytest.raises(GraphInputError, match=r"'owl' has 1") as e:
        make_nodes(["cat", "dog", "owl"], attrs, 4, min_per_class=2, source="f.json")
    assert "'cat'" not in str(e.value) and "f.json" in str(e.value)
    assert "NUM_ATTRIBUTES" in str(e.value)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when every class has M distinct attributes
        make_nodes(["dog"], attrs, 4)


def test_edges_counted_by_hand():
    _, cls, attrs = hand_graph()
    intra = build_graph(cls, attrs, "intra")
    inter = build_graph(cls, attrs, "inter")
    full = build_graph(cls, attrs, "full")
    assert intra.shape[1] == 3 * 3 * 2                       # K*M*(M-1)
    expected_intra = {(i, j) for k in range(3) for i in range(3 * k, 3 * k + 3)
                      for j in range(3 * k, 3 * k + 3) if i != j}
    assert edge_set(intra) == expected_intra
    assert edge_set(inter) == {(0, 3), (3, 0), (1, 7), (7, 1), (2, 5), (5, 2)}
    assert edge_set(full) == expected_intra | edge_set(inter) and full.shape[1] == 24
    assert build_graph(cls, attrs, "none").shape == (2, 0)
    for ei in (intra, inter, full):
        assert (ei[0] != ei[1]).all() and len(edge_set(ei)) == ei.shape[1]
    # a string repeated inside one class gives no inter-class edge
    ei = build_graph(torch.tensor([0, 0, 1]), ["a", "A", "b"], "inter")
    assert ei.shape[1] == 0
    with pytest.raises(GraphInputError, match="EDGES"):
        build_graph(cls, attrs, "dense")


def test_residual_identity_init():
    x = torch.randn(5, 8)
    assert torch.equal(AttributeGAT(8, hidden=8, heads=2).res(x), x)
    assert torch.equal(AttributeGAT(8, hidden=12, heads=2).res(x)[:, :8], x)
    assert torch.equal(AttributeGAT(8, hidden=12, heads=2).res(x)[:, 8:], torch.zeros(5, 4))
    assert torch.equal(AttributeGAT(8, hidden=4, heads=2).res(x), x[:, :4])


def layer_bias(conv):
    """The layer's trained bias (GAT.BIAS True), or 0: Eq. 6 has none (the default)."""
    return 0.0 if conv.bias is None else conv.bias


@pytest.mark.parametrize("sparse,bias", [(True, False), (False, False), (True, True),
                                         (False, True)])
def test_zero_edge_gat_is_a_per_node_map(sparse, bias):
    torch.manual_seed(0)
    model = AttributeGAT(6, hidden=8, heads=2, dropout=0.3, proj_dim=5, sparse=sparse,
                         bias=bias).eval()
    with torch.no_grad():  # make the residual non-trivial
        model.res.weight.add_(0.1 * torch.randn_like(model.res.weight))
        if bias:
            model.conv1.bias.normal_()
            model.conv2.bias.normal_()
    b1, b2 = layer_bias(model.conv1), layer_bias(model.conv2)
    x = torch.randn(4, 6)
    empty = torch.zeros(2, 0, dtype=torch.long)
    out = model(x, empty)
    # each GATConv alone: only the self-loop, attention 1, so lin(x) (+ bias)
    c1 = model.conv1(x, empty, return_attention_weights=True)
    assert torch.allclose(c1[0], x @ model.conv1.lin.weight.T + b1, atol=1e-6)
    assert torch.equal(c1[1][1], torch.ones(4, 2))
    for i in range(4):  # explicit computation, one node at a time
        xi = x[i]
        a = F.elu(model.conv1.lin.weight @ xi + b1)
        g = F.elu(model.conv2.lin.weight @ a + b2) + model.res.weight @ xi
        h = g / g.norm()
        z = model.head[2].weight @ F.gelu(model.head[0].weight @ h + model.head[0].bias)
        assert torch.allclose(out.h[i], h, atol=1e-6)
        assert torch.allclose(out.z[i], z, atol=1e-6)


def appendix_forward(model, x, edges):
    """The appendix's equations written out with loops, from the model's parameters only:
    per layer, per target node i and head k, attention over N(i) + {i} (edges j -> i),
    LeakyReLU(0.2) scores, softmax, weighted sum, heads concatenated (+ bias), ELU; then
    h^L = normalize(h^(2) + W_res h^(0))."""
    n = x.shape[0]
    nbrs = {i: [i] + [int(j) for j, t in edges.T.tolist() if t == i and j != i] for i in range(n)}
    h = x
    for conv in (model.conv1, model.conv2):
        heads, ch = conv.heads, conv.out_channels
        wh = (h @ conv.lin.weight.T).view(n, heads, ch)
        a_src, a_dst = conv.att_src[0], conv.att_dst[0]          # [heads, ch]
        rows = []
        for i in range(n):
            parts = []
            for k in range(heads):
                e = torch.stack([F.leaky_relu((a_src[k] * wh[j, k]).sum()
                                              + (a_dst[k] * wh[i, k]).sum(), 0.2)
                                 for j in nbrs[i]])
                alpha = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
                parts.append(sum(alpha[q] * wh[j, k] for q, j in enumerate(nbrs[i])))
            rows.append(F.elu(torch.cat(parts) + layer_bias(conv)))
        h = torch.stack(rows)
    g = h + x @ model.res.weight.T
    return g / g.norm(dim=1, keepdim=True)


@pytest.mark.parametrize("sparse,bias", [(True, False), (False, False), (True, True),
                                         (False, True)])
def test_h_L_equals_the_appendix_equations(sparse, bias):
    nodes, cls, attrs = hand_graph()
    edges = build_graph(cls, attrs, "full")
    torch.manual_seed(3)
    model = AttributeGAT(6, hidden=8, heads=2, dropout=0.5, sparse=sparse, bias=bias).eval()
    with torch.no_grad():  # non-trivial residual and biases
        model.res.weight.add_(0.3 * torch.randn_like(model.res.weight))
        if bias:
            model.conv1.bias.normal_()
            model.conv2.bias.normal_()
    x = torch.randn(nodes.num_nodes, 6)
    with torch.no_grad():
        got = model(x, edges).h
        want = appendix_forward(model, x, edges)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    # without the ELU after layer 2 the result differs (so the test can fail)
    with torch.no_grad():
        h1 = F.elu(model.conv1(x, edges))
        no_elu = F.normalize(model.conv2(h1, edges) + model.res(x), dim=1)
    assert not torch.allclose(no_elu, want, atol=1e-3)


def random_graph(n=40, e=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei = torch.unique(ei[:, ei[0] != ei[1]], dim=1)
    return ei


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_sparse_gatconv_matches_gatconv(dropout):
    ei = random_graph()
    x = torch.randn(40, 12, requires_grad=True)
    torch.manual_seed(1)
    ref = GATConv(12, 5, heads=3, dropout=dropout)
    torch.manual_seed(1)
    fast = SparseGATConv(12, 5, heads=3, dropout=dropout)
    torch.manual_seed(2)
    o_ref, (ei_ref, a_ref) = ref(x, ei, return_attention_weights=True)
    torch.manual_seed(2)
    o_fast, (ei_fast, a_fast) = fast(x, ei, return_attention_weights=True)
    assert torch.equal(ei_ref, ei_fast) and torch.allclose(a_ref, a_fast)
    assert torch.allclose(o_ref, o_fast, atol=1e-5)
    w = torch.randn_like(o_ref)
    g_ref = torch.autograd.grad((o_ref * w).sum(), [x] + list(ref.parameters()))
    g_fast = torch.autograd.grad((o_fast * w).sum(), [x] + list(fast.parameters()))
    for a, b in zip(g_ref, g_fast):
        assert torch.allclose(a, b, atol=1e-5)


def test_incoming_attention_is_one_over_degree():
    nodes, cls, attrs = hand_graph()
    ei = build_graph(cls, attrs, "full")
    torch.manual_seed(0)
    model = AttributeGAT(7, hidden=8, heads=4).eval()
    out = model(torch.randn(nodes.num_nodes, 7), ei)
    deg = torch.bincount(ei[1], minlength=nodes.num_nodes) + 1      # + self-loop
    assert sorted(set(deg.tolist())) == [3, 4]                        # the hand graph: 2 or 3 + 1
    assert torch.allclose(incoming_attention(out.attention, nodes.num_nodes), 1.0 / deg.float(),
                          atol=1e-6)


def test_source_attention_against_loops():
    ei = random_graph(n=15, e=40, seed=3)
    ei = ei[:, ei[0] != 14]  # node 14 never a source (only its self-loop)
    torch.manual_seed(0)
    model = AttributeGAT(6, hidden=8, heads=2).eval()
    with torch.no_grad():
        out = model(torch.randn(15, 6), ei)
    got = source_attention(out.attention, 15)
    for v in range(15):
        per = []
        for e_idx, alpha in out.attention:
            for h in range(alpha.shape[1]):
                vals = [float(alpha[e, h]) for e in range(e_idx.shape[1])
                        if int(e_idx[0, e]) == v and int(e_idx[1, e]) != v]
                per.append(sum(vals) / len(vals) if vals else 0.0)
        assert got[v].item() == pytest.approx(sum(per) / len(per), abs=1e-6)
    assert got[14].item() == 0.0


def supcon_by_loops(feats, labels, tau):
    f = [[t / math.sqrt(sum(u * u for u in v)) for t in v] for v in feats.double().tolist()]
    dot = lambda a, b: sum(p * q for p, q in zip(a, b))  # noqa: E731
    n, terms = len(f), []
    for i in range(n):
        pos = [p for p in range(n) if p != i and labels[p] == labels[i]]
        if not pos:
            continue
        denom = sum(math.exp(dot(f[i], f[a]) / tau) for a in range(n) if a != i)
        terms.append(-sum(math.log(math.exp(dot(f[i], f[p]) / tau) / denom) for p in pos)
                     / len(pos))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("tau", [0.07, 0.5])
def test_supcon_matches_khosla_loops(tau):
    torch.manual_seed(0)
    feats = torch.randn(11, 5, dtype=torch.float64)
    labels = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 4]   # classes 3 and 4 have no positive
    got = supcon_loss(feats, torch.tensor(labels), tau=tau)
    assert got.item() == pytest.approx(supcon_by_loops(feats, labels, tau), rel=1e-9)
    none = supcon_loss(feats, torch.arange(11), tau=tau)
    assert none.item() == 0.0


def gat_cfg(**over):
    g = get_cfg_default().TRAINER.ARGTCA.GAT
    g.HIDDEN, g.HEADS, g.EPOCHS = 16, 4, 30
    for k, v in over.items():
        g[k] = v
    return g


def test_training_is_seeded_reduces_loss_and_keeps_global_rng():
    nodes, cls, attrs = hand_graph()
    ei = build_graph(cls, attrs, "full")
    h0 = F.normalize(torch.randn(nodes.num_nodes, 10), dim=1)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    m1, c1 = train_gat(h0, ei, cls, gat_cfg())
    assert torch.equal(torch.rand(3), expected_next)      # global RNG untouched
    m2, c2 = train_gat(h0, ei, cls, gat_cfg())
    assert c1 == c2 and len(c1) == 30 and c1[-1] < c1[0]
    assert not m1.training
    _, c3 = train_gat(h0, ei, cls, gat_cfg(SEED=1))
    assert c3 != c1
    _, c4 = train_gat(h0, ei, cls, gat_cfg(LOSS_ON="z"))
    assert c4 != c1
    # GAT.BIAS: none by default (Eq. 6); True trains one per layer, as earlier builds did
    m5, c5 = train_gat(h0, ei, cls, gat_cfg(BIAS=True))
    assert m1.conv1.bias is None and m1.conv2.bias is None
    assert m5.conv1.bias.shape == (16,) and m5.conv2.bias.abs().sum() > 0 and c5 != c1
    # the default loss is SupCon on h^L (Eq. 7): the first epoch's loss recomputed by hand
    g = gat_cfg()
    assert get_cfg_default().TRAINER.ARGTCA.GAT.LOSS_ON == "h"
    with torch.random.fork_rng():
        torch.manual_seed(int(g.SEED))
        model = AttributeGAT(10, hidden=int(g.HIDDEN), heads=int(g.HEADS),
                             dropout=float(g.DROPOUT)).train()
        out = model(h0, ei)
    assert math.isclose(float(supcon_loss(out.h, cls, tau=float(g.TAU)).detach()), c1[0],
                        rel_tol=1e-6)
    assert not math.isclose(float(supcon_loss(out.z, cls, tau=float(g.TAU)).detach()), c1[0],
                            rel_tol=1e-3)


def eq6_dense(x, adj, layers, w_res):
    """Eq. 6 / Appendix B as dense matrices, no bias: per layer and head k,
    e_ij = LeakyReLU_0.2(a_src_k . W_k h_j + a_dst_k . W_k h_i) over j in N(i) + {i} (adj[i, j]),
    alpha = row softmax, h_i' = ELU(||_k sum_j alpha_ij W_k h_j); then normalize(h + W_res x)."""
    h = x
    for w, a_src, a_dst in layers:              # w [H*C, in], a_src/a_dst [H, C]
        heads, ch = a_src.shape
        wh = (h @ w.T).view(-1, heads, ch)      # [N, H, C]
        s_src = (wh * a_src).sum(-1)            # [N, H]: a_src . W h_j
        s_dst = (wh * a_dst).sum(-1)            # [N, H]: a_dst . W h_i
        e = F.leaky_relu(s_dst[:, None, :] + s_src[None, :, :], 0.2)   # [i, j, H]
        e = e.masked_fill(~adj[:, :, None], float("-inf"))
        alpha = torch.softmax(e, dim=1)
        h = F.elu(torch.einsum("ijk,jkc->ikc", alpha, wh).reshape(h.shape[0], heads * ch))
    g = h + x @ w_res.T
    return g / g.norm(dim=1, keepdim=True)


@pytest.mark.parametrize("sparse", [True, False])
def test_default_gat_has_no_bias_and_is_eq6_recomputed_by_hand(sparse):
    """GAT.BIAS False (the default, as the paper): no bias parameter in either layer, and the
    forward is Eq. 6 recomputed densely on a 4-node graph with hand-set weights."""
    assert get_cfg_default().TRAINER.ARGTCA.GAT.BIAS is False
    model = AttributeGAT(3, hidden=4, heads=2, dropout=0.0, sparse=sparse).eval()
    for conv in (model.conv1, model.conv2):
        assert conv.bias is None and not [n for n, _ in conv.named_parameters() if "bias" in n]
    assert AttributeGAT(3, hidden=4, heads=2, bias=True).conv1.bias.shape == (4,)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for conv in (model.conv1, model.conv2):
            conv.lin.weight.copy_(torch.randn(conv.lin.weight.shape, generator=g))
            conv.att_src.copy_(torch.randn(conv.att_src.shape, generator=g))
            conv.att_dst.copy_(torch.randn(conv.att_dst.shape, generator=g))
        model.res.weight.add_(0.5 * torch.randn(model.res.weight.shape, generator=g))
    x = torch.tensor([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0], [-1.0, 1.0, 1.0], [0.0, -0.5, 0.5]])
    edges = torch.tensor([[0, 2, 1, 3, 1], [1, 1, 0, 2, 3]])     # j -> i: source, target
    adj = torch.eye(4, dtype=torch.bool)
    adj[edges[1], edges[0]] = True                                # adj[i, j]: j in N(i) + {i}
    layers = [(c.lin.weight, c.att_src[0], c.att_dst[0]) for c in (model.conv1, model.conv2)]
    with torch.no_grad():
        got = model(x, edges).h
        want = eq6_dense(x, adj, layers, model.res.weight)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    # a bias of 0.5 in layer 1 moves the result (so the comparison can fail)
    biased = AttributeGAT(3, hidden=4, heads=2, dropout=0.0, sparse=sparse, bias=True).eval()
    biased.load_state_dict({**model.state_dict(), "conv1.bias": torch.full((4,), 0.5),
                            "conv2.bias": torch.zeros(4)})
    with torch.no_grad():
        assert not torch.allclose(biased(x, edges).h, want, atol=1e-3)
