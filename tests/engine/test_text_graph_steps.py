"""TTA.FAST.TEXT_GRAPH in the fast engine: the text tower's passes of the steps after the first
(RLCF's 3-5 steps, any TTA.STEPS > 1) and of the final prediction replay CUDA graphs, one per
shape (argtca/engine/text_graph.py). The protocol runs on the CPU through ``text_graph="emulate"``
(a forward-only replay returns the graph's buffer, overwritten by the next replay): it must give
the eager numbers exactly; on CUDA the graphs run the eager kernels (``torch.equal``)."""
import pytest
import torch

from argtca.config import get_cfg_default
from argtca.engine.fast import FastEngine
from argtca.engine.features import FeatureEngine
from argtca.models.text import PromptTextEncoder
from argtca.registry import OBJECTIVE_REGISTRY
from conftest import tiny_cfg

CLASSES = ["dog", "cat", "fish", "bird", "red car"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _engine(model, tok, device="cpu", steps=3, **kw):
    obj = OBJECTIVE_REGISTRY.get("tpt")(get_cfg_default().TRAINER.TPT)
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
    cfg = tiny_cfg(**{"TTA.STEPS": steps, "TTA.LR": 0.05})
    return FastEngine(model, enc, obj, cfg, device, **kw)


def _views(seed, B=3, V=12, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, V, 3, 32, 32, generator=g).to(device)


@pytest.mark.parametrize("grad_mode", ["recompute", "vjp"])
def test_graphed_steps_and_prediction_give_the_eager_numbers(tiny_clip, grad_mode):
    """One image a text call (``text_tokens`` tiny): three chunks a pass, so a replayed
    prediction whose chunks were not copied out would repeat the last image's features."""
    model, tok = tiny_clip
    eager = _engine(model, tok, grad_mode=grad_mode, text_graph="off", text_tokens=1)
    graph = _engine(model, tok, grad_mode=grad_mode, text_graph="emulate", text_tokens=1)
    assert graph.text_graph and not eager.text_graph
    for seed in (1, 2, 3):
        v = _views(seed)
        assert torch.equal(graph.submit(v).result(), eager.submit(v).result())
    # the graphs of one image's pass with gradient and of its prediction
    assert graph._graphed_text.captured == 2
    # the steps moved the prediction: the comparison covers them
    zero = _engine(model, tok, steps=0, text_graph="off").submit(_views(3)).result()
    assert (zero - eager.submit(_views(3)).result()).abs().max() > 1e-6


def test_text_graphs_stay_off_where_they_cannot_run(tiny_clip):
    model, tok = tiny_clip
    e = _engine(model, tok, text_graph="emulate", grad_mode="recompute", cuda_graph="emulate")
    assert e.cuda_graph and e.text_graph
    e._in_graph = True   # inside a whole-batch graph's capture: no capture within a capture
    assert e.graphed_text(compiled=False) is None
    e._in_graph = False
    assert e.graphed_text(compiled=True) is None   # a compiled pass is not captured
    assert e.graphed_text(compiled=False) is not None
    # "auto": off on the CPU; on CUDA, on for steps after the first only (the adapters' engine:
    # always)
    assert not _engine(model, tok, text_graph="auto").text_graph
    assert [_engine(model, tok, steps=n).text_graph_auto for n in (1, 3)] == [False, True]
    assert FeatureEngine.text_graph_auto is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("grad_mode", ["recompute", "vjp"])
def test_graphed_steps_on_cuda_are_the_eager_engine(tiny_clip, grad_mode):
    """On CUDA (fp16 autocast), the graphed passes run the eager kernels: the probabilities of
    three steps from θ0 are torch.equal to the eager engine's."""
    model, tok = tiny_clip
    model = model.cuda()
    eager = _engine(model, tok, "cuda", grad_mode=grad_mode, text_graph="off")
    graph = _engine(model, tok, "cuda", grad_mode=grad_mode, text_graph="on")
    for seed in (1, 2, 3):
        v = _views(seed, device="cuda")
        assert torch.equal(graph.submit(v).result(), eager.submit(v).result())
    assert graph._graphed_text.captured == 2
