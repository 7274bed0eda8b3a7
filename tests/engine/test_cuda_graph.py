"""TTA.FAST.CUDA_GRAPH: a batch's work captured once and replayed (argtca/engine/graphs.py).

CUDA graphs need CUDA; the protocol around them (static input refreshed per batch, everything an
image starts from created inside the replayed function, outputs that the next replay overwrites)
runs on the CPU through ``cuda_graph="emulate"``: it must give the eager numbers exactly."""
import pytest
import torch

from argtca.config import get_cfg_default
from argtca.config.checks import CFG_CHOICES
from argtca.engine.fast import FastEngine
from argtca.engine.graphs import GraphedBatch, objective_key
from argtca.models.text import PromptTextEncoder
from argtca.registry import OBJECTIVE_REGISTRY
from conftest import tiny_cfg

CLASSES = ["dog", "cat", "fish", "bird", "red car"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _engine(tiny_clip, name="tpt", steps=1, **kw):
    model, tok = tiny_clip
    d = get_cfg_default()
    obj = OBJECTIVE_REGISTRY.get(name)({"tpt": d.TRAINER.TPT, "tca": d.TRAINER.TCA}[name])
    suffixes = ([f"{a} {c}." for c in CLASSES for a in ("small", "furry")] if name == "tca"
                else [f"{c}." for c in CLASSES])
    enc = PromptTextEncoder(model, tok, suffixes)
    return FastEngine(model, enc, obj, tiny_cfg(**{"TTA.STEPS": steps}), "cpu", **kw)


def _views(seed, B=3, V=12):
    return torch.randn(B, V, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name,grad_mode,steps", [("tpt", "jacobian", 1), ("tpt", "recompute", 2),
                                                  ("tca", "jacobian", 1), ("tpt", "vjp", 0)])
def test_replayed_batches_give_the_eager_numbers(tiny_clip, name, grad_mode, steps):
    eager = _engine(tiny_clip, name, steps, grad_mode=grad_mode, cuda_graph="off")
    graph = _engine(tiny_clip, name, steps, grad_mode=grad_mode, cuda_graph="emulate")
    assert graph.cuda_graph and not eager.cuda_graph
    # batch 0 eager (warm-up), 1 captured, 2-4 replayed; 4 repeats 1's views after others ran
    batches = [_views(s) for s in (1, 2, 3, 4)] + [_views(2)]
    # every batch submitted before any result is read: a replay overwrites the previous
    # batch's outputs, so a Pending that kept them would read the last batch's numbers
    jobs = [graph.submit(v, [f"{i}.jpg"] * 3) for i, v in enumerate(batches)]
    got = [j.result() for j in jobs]
    want = [eager.submit(v).result() for v in batches]
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    assert torch.equal(got[4], got[1])            # nothing carried over from batches 2-3
    assert not torch.equal(got[1], got[2])        # the static input is refreshed per batch
    (g,) = graph._graphs.values()
    assert g.replays == 4                          # batches 1-4 through the graph
    if steps:   # tuning moved the prediction: the comparison covers the steps
        zero = _engine(tiny_clip, name, 0, cuda_graph="off").submit(batches[1]).result()
        assert (zero - want[1]).abs().max() > 1e-6


def test_a_new_shape_or_objective_state_gets_its_own_graph(tiny_clip):
    e = _engine(tiny_clip, grad_mode="jacobian", cuda_graph="emulate")
    eager = _engine(tiny_clip, grad_mode="jacobian", cuda_graph="off")
    for v in (_views(1), _views(2), _views(3, B=2), _views(4)):
        assert torch.equal(e.submit(v).result(), eager.submit(v).result())
    assert len(e._graphs) == 1 and len(e._graph_seen) == 2   # the 2-image batch ran once, eager
    # a plain attribute the replayed code reads is part of the key: no stale constant
    e.objective.extra_scale = 2.0
    assert torch.equal(e.submit(_views(5)).result(), eager.submit(_views(5)).result())
    assert len(e._graphs) == 1 and len(e._graph_seen) == 3
    # an objective collecting on the host (temperature scaling's capture) never replays
    e.objective.capture = []
    assert objective_key(e.objective) is None
    e.submit(_views(6)).result()
    e.submit(_views(7)).result()
    assert len(e._graphs) == 1
    # a new dataset drops the graphs (they read θ0's features and Jᵀ in place)
    e.forget_dataset()
    assert e._graphs == {} and e._graph_seen == set()


def test_graphs_only_where_they_can_run(tiny_clip):
    assert not _engine(tiny_clip, grad_mode="jacobian").cuda_graph              # auto: CUDA only
    assert not _engine(tiny_clip, grad_mode="jacobian", cuda_graph="on").cuda_graph
    # vjp/loop differentiate the θ0 graph kept across batches: never captured
    assert not _engine(tiny_clip, grad_mode="vjp", cuda_graph="emulate").cuda_graph
    assert _engine(tiny_clip, steps=0, grad_mode="vjp", cuda_graph="emulate").cuda_graph
    assert set(CFG_CHOICES["TTA.FAST.CUDA_GRAPH"]) == {"auto", "on", "off"}
    assert get_cfg_default().TTA.FAST.CUDA_GRAPH == "auto"


def test_graphed_batch_reads_only_its_static_input():
    calls = []

    def fn(x):
        calls.append(x.data_ptr())
        return (x * 2, None)
    a, b = torch.ones(2, 3), torch.full((2, 3), 5.0)
    g = GraphedBatch(fn, a, dtype=torch.float64, emulate=True)
    out = g(b)
    assert out[0].dtype == torch.float64 and torch.equal(out[0], torch.full((2, 3), 10.0,
                                                                           dtype=torch.float64))
    assert out[1] is None and len(set(calls)) == 1          # always the same static buffer
    first = out[0]
    assert g(a)[0] is first and torch.equal(first, torch.full((2, 3), 2.0, dtype=torch.float64))


# ---------------------------------------------------------------------------- FOLD_QUICKGELU
def test_quick_gelu_folded_into_the_mlp_weights_is_one_silu_pass():
    """QuickGELU(h) = h·σ(1.702h) = silu(1.702h)/1.702: c_proj(QuickGELU(c_fc x)) computed with
    1.702·c_fc and c_proj/1.702 around one SiLU, in float64 to 1e-12, with one element-wise op."""
    from collections import OrderedDict

    from torch.utils._python_dispatch import TorchDispatchMode

    from argtca.engine.towers import SiluMLP, is_quick_gelu

    class QuickGELU(torch.nn.Module):   # open_clip's definition
        def forward(self, x):
            return x * torch.sigmoid(1.702 * x)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(OrderedDict([("c_fc", torch.nn.Linear(8, 32)), ("gelu", QuickGELU()),
                                           ("c_proj", torch.nn.Linear(32, 8))])).double()
    assert SiluMLP.supports(mlp) and is_quick_gelu(QuickGELU())
    assert not is_quick_gelu(torch.nn.GELU()) and not is_quick_gelu(torch.nn.SiLU())
    gelu = torch.nn.Sequential(OrderedDict([("c_fc", torch.nn.Linear(8, 32)),
                                            ("gelu", torch.nn.GELU()),
                                            ("c_proj", torch.nn.Linear(32, 8))]))
    assert not SiluMLP.supports(gelu)
    folded = SiluMLP(mlp)
    x = 3 * torch.randn(5, 7, 8, dtype=torch.float64)
    with torch.no_grad():
        want = mlp(x)
        h = x @ mlp.c_fc.weight.T + mlp.c_fc.bias           # by hand: the definition
        by_hand = (h * torch.sigmoid(1.702 * h)) @ mlp.c_proj.weight.T + mlp.c_proj.bias
        assert torch.allclose(want, by_hand, rtol=0, atol=1e-12)
        assert torch.allclose(folded(x), want, rtol=0, atol=1e-12)

    class Ops(TorchDispatchMode):
        seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))
    with Ops() as o, torch.no_grad():
        folded(x)
    pointwise = [n for n in o.seen if n not in ("addmm", "view", "t", "_unsafe_view", "mm",
                                                 "add", "reshape", "expand")]
    assert pointwise == ["silu_"], o.seen


def test_fast_image_tower_folds_only_quick_gelu(tiny_clip):
    from argtca.engine.towers import SiluMLP, fast_image_tower
    model, _ = tiny_clip
    blocks = model.visual.transformer.resblocks
    quick = [SiluMLP.supports(b.mlp) for b in blocks]
    assert all(quick)   # the tiny test model has open_clip's QuickGELU blocks
    folded = fast_image_tower(model.visual, torch.float32)
    plain = fast_image_tower(model.visual, torch.float32, fold_gelu=False)
    assert [isinstance(b.mlp, SiluMLP) for b in folded.transformer.resblocks] == quick
    assert not any(isinstance(b.mlp, SiluMLP) for b in plain.transformer.resblocks)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(folded(x), model.encode_image(x), atol=1e-5)


def test_capture_lets_other_threads_work(monkeypatch):
    """The DataLoader's pin-memory thread allocates pinned memory while the main thread captures:
    under the default ("global") capture mode that call fails and invalidates the capture (seen
    through the CLI on an H200), so the capture is thread_local. CUDA is faked here: the test
    checks what GraphedBatch asks of torch.cuda and that the warm-up and capture both ran."""
    import contextlib
    seen = {}

    class FakeGraph:
        def replay(self):
            seen["replays"] = seen.get("replays", 0) + 1

    @contextlib.contextmanager
    def graph(g, **kw):
        seen["graph_kw"] = kw
        yield

    class FakeStream:
        def __init__(self, device=None):
            pass

        def wait_stream(self, other):
            pass
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    phases = []

    def fn(x):
        phases.append("run")
        return (x + 1,)
    g = GraphedBatch(fn, torch.zeros(2), setup=lambda on: phases.append(on))
    assert seen["graph_kw"] == {"capture_error_mode": "thread_local"}
    assert phases == [True, "run", False, True, "run", False]   # warm-up, then capture
    g(torch.ones(2))
    assert seen["replays"] == 1 and torch.equal(g.static, torch.ones(2))
