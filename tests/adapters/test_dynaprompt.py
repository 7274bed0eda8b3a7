"""DynaPrompt (argtca/adapters/dynaprompt.py): the prompt selection on logits worked out by hand,
the buffer's update and replacement rule by hand, a stream through the official
``test_time_tuning`` (zzzx1224/DynaPrompt dynap_classification.py, read from a fetched copy) on
a tiny text tower, and an exact state round trip mid-stream."""
import ast
import contextlib
import copy
import io
import math
import types

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import argtca.adapters.dynaprompt as dyn
from argtca.adapters.dynaprompt import DynaPromptAdapter, select_prompts
from argtca.config import ConfigError, get_cfg_default
from argtca.engine.reference import TunableText
from helpers_official import official_source

OFFICIAL = ("zzzx1224/DynaPrompt", "dynap_classification.py",
            "acd33cf71f5be817512f99ba3b81ec019595ad59")
N_CTX, WIDTH, E = 2, 3, 4


class TinyTower(nn.Module):
    """A text tower small enough to reason about: class k's feature under context ``c`` [n, W]
    is normalise(B_k + flatten(c)·A)."""

    def __init__(self, K, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.B = F.normalize(torch.randn(K, E, generator=g), dim=-1)
        self.A = 0.5 * torch.randn(N_CTX * WIDTH, E, generator=g)
        self.ctx_init = 0.3 * torch.randn(N_CTX, WIDTH, generator=g)

    def forward(self, ctx):                                    # [m, n, W] -> [m, K, E]
        return F.normalize(self.B[None] + (ctx.flatten(1) @ self.A)[:, None], dim=-1)


def tunable(tower):
    """What the trainer hands DynaPrompt: the engine's text tower alone (CPU: no AMP)."""
    return TunableText(tower, False, contextlib.nullcontext)


def make(tower, K, views=8, lr=5e-3, **keys):
    cfg = get_cfg_default()
    cfg.TTA.N_VIEWS = views
    cfg.TTA.LR = lr
    cfg.TTA.SELECTION_P = 0.25
    for k, v in keys.items():
        cfg.TRAINER.DYNAPROMPT[k] = v
    return DynaPromptAdapter(cfg.TRAINER.DYNAPROMPT, cfg, tower.B, 10.0,
                             tower=tunable(tower))


def h(x):
    """Entropy (nats) of the two-class softmax of logits [x, 0]."""
    p = 1 / (1 + math.exp(-x))
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def two_class_logits(x0, x_aug):
    """Logits [V=3, M, 2]: prompt m gives view 0 the logits [x0[m], 0] and both augmented views
    [x_aug[m], 0]."""
    rows = [[[a, 0.0] for a in x0]] + [[[a, 0.0] for a in x_aug]] * 2
    return torch.tensor(rows, dtype=torch.float64)


def test_selection_by_hand():
    # four prompts; every logit positive, so a prompt's largest logit is its first one
    x0, xa = [2.0, 3.6, 1.2, 4.0], [2.0, 2.5, 1.0, 3.0]
    ent = [(h(a) + 2 * h(b)) / 3 for a, b in zip(x0, xa)]
    diff = [a - b for a, b in zip(x0, xa)]                    # 0, 1.1, 0.2, 1.0
    # by entropy, highest first: slot 2 (smallest logits), 0, 1, 3
    assert sorted(range(4), key=lambda m: -ent[m]) == [2, 0, 1, 3]
    # by difference, highest first: 1, 3, 2, 0
    assert sorted(range(4), key=lambda m: -diff[m]) == [1, 3, 2, 0]
    logits = two_class_logits(x0, xa)
    got_ent, got_diff = dyn.prompt_entropy_and_difference(logits)
    np.testing.assert_allclose(got_ent.numpy(), ent, rtol=1e-12)
    np.testing.assert_allclose(got_diff.numpy(), diff, rtol=1e-12)
    # reference slot 0 at place 1 of the entropy ranking: lower entropy = slots {1, 3}, the
    # first 1 by difference = {1}; candidate 1 -> the slot at place 1 of the entropy ranking,
    # which is slot 0 itself: picked twice (the paper's rule would pick slots 1 and 0)
    assert select_prompts(logits, [0, 1, 2, 3]) == [0, 0]
    # reference slot 2 has the highest entropy: no slot is among the first 0 by difference
    assert select_prompts(logits, [2, 0, 1, 3]) == [2]
    # reference slot 3 is last by entropy: the "lower" list is slot 3 itself (the official
    # min(r + 1, M - 1)), among the first 3 by difference (1, 3, 2): candidate 3, the slot at
    # place 3 of the entropy ranking = 3, then the reference again
    assert select_prompts(logits, [3, 0, 1, 2]) == [3, 3]
    # reference slot 1 at place 2: lower = {3}, first 2 by difference = {1, 3}: candidate 3,
    # the slot at place 3 of the entropy ranking = 3, then the reference
    assert select_prompts(logits, [1, 0, 2, 3]) == [3, 1]


def test_confident_views_loss_by_hand():
    # V = 4 views, one prompt, two classes; p = 0.5 keeps the 2 lowest-entropy views (logit gaps
    # 3 and -2.5), whose mean probability of class 0 is (σ(3) + σ(-2.5)) / 2
    logits = torch.tensor([[[0.5, 0.0]], [[3.0, 0.0]], [[-1.0, 0.0]], [[-2.5, 0.0]]],
                          dtype=torch.float64)
    s = lambda x: 1 / (1 + math.exp(-x))   # noqa: E731
    q = (s(3.0) + s(-2.5)) / 2
    want = -(q * math.log(q) + (1 - q) * math.log(1 - q))
    assert float(dyn.confident_views_loss(logits, 0.5)) == pytest.approx(want, rel=1e-12)
    # two prompts: the views are ranked by their entropy averaged over the prompts, the loss is
    # the prompts' mean
    two = torch.cat([logits, logits.flip(0)], dim=1)          # view v of prompt 2 = view 3-v
    # mean entropies: views 0 and 3 -> (h(.5) + h(2.5))/2, views 1 and 2 -> (h(3) + h(1))/2
    assert (h(.5) + h(2.5)) / 2 > (h(3) + h(1)) / 2
    q1, q2 = (s(3.0) + s(-1.0)) / 2, (s(-1.0) + s(3.0)) / 2
    want2 = -(q1 * math.log(q1) + (1 - q1) * math.log(1 - q1))
    want2 = (want2 + -(q2 * math.log(q2) + (1 - q2) * math.log(1 - q2))) / 2
    assert float(dyn.confident_views_loss(two, 0.5)) == pytest.approx(want2, rel=1e-12)


@pytest.mark.parametrize("append", [True, False])
def test_buffer_update_and_replacement_by_hand(append, monkeypatch):
    K, M = 3, 4
    tower = TinyTower(K)
    a = make(tower, K, NUM_PROMPTS=M, APPEND=append)
    g = torch.Generator().manual_seed(3)
    old = 0.05 * torch.randn(M, N_CTX, WIDTH, generator=g)
    # every slot used: slot 2, the least recently picked, is replaced when APPEND is on
    a.state.update(ctx=old.clone(), use=[1, 2, 1, 3], order=[2, 0, 1, 3])
    seen = {}

    def pick(logits, order):
        seen["order"] = list(order)
        return [1, order[0]]

    monkeypatch.setattr(dyn, "select_prompts", pick)
    img = F.normalize(torch.randn(8, E, generator=g), dim=-1)
    probs = a.step(img)
    assert seen["order"] == [2, 0, 1, 3]                      # the reference is still slot 2
    # picked slots: use + 1 (slot 2 first reset to 0 when appending), moved to the end in turn
    assert a.state["use"] == ([1, 3, 1, 3] if append else [1, 3, 2, 3])
    assert a.state["order"] == [0, 3, 1, 2]
    new = a.state["ctx"]
    lr, wd = 5e-3, 0.01
    # slots not picked: no gradient, so AdamW's first step moves them by its weight decay only
    for m in (0, 3):
        torch.testing.assert_close(new[m], old[m] * (1 - lr * wd), rtol=0, atol=1e-9)
    # picked slots: AdamW's first step is lr · g / (|g| + eps) ≈ ±lr on every coordinate, from
    # the decayed start (0 for the replaced slot)
    start2 = torch.zeros_like(old[2]) if append else old[2] * (1 - lr * wd)
    for m, start in ((1, old[1] * (1 - lr * wd)), (2, start2)):
        step = (new[m] - start).abs()
        torch.testing.assert_close(step, torch.full_like(step, lr), rtol=1e-4, atol=0)
    # the prediction: view 0's logits under the two picked prompts after the step, averaged
    feats = tower(tower.ctx_init + new[[1, 2]])                # [2, K, E]
    want = (10.0 * feats @ img[0]).mean(0).softmax(-1)
    torch.testing.assert_close(probs, want)


def test_fresh_slots_are_used_before_any_is_replaced():
    K, M = 3, 3
    tower = TinyTower(K, seed=1)
    a = make(tower, K, NUM_PROMPTS=M)
    g = torch.Generator().manual_seed(5)
    for t in range(8):
        before_use, before_order = list(a.state["use"]), list(a.state["order"])
        a.step(F.normalize(torch.randn(8, E, generator=g), dim=-1))
        ref = before_order[0]
        # the reference (least recently picked) is always picked: now last in the order
        assert a.state["order"][-1] == ref
        if 0 in before_use:
            assert a.state["use"][ref] >= before_use[ref] + 1   # not replaced: counts grow
        else:
            assert a.state["use"][ref] >= 1 and a.state["use"][ref] <= 2   # reset, then picked
    assert sorted(a.state["order"]) == [0, 1, 2]


# ----------------------------------------------------------------------------- the official code
def _official_functions():
    """The official module's helper functions and ``test_time_tuning``, compiled from the
    fetched source (the module's own imports need its CLIP package and datasets)."""
    tree = ast.parse(official_source(*OFFICIAL))
    names = {"select_confident_samples", "avg_entropy", "entropy", "test_time_tuning",
             "log_string"}
    body = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in names]
    assert {f.name for f in body} == names
    ns = {"torch": torch, "np": np}
    exec(compile(ast.fix_missing_locations(ast.Module(body, [])), OFFICIAL[1], "exec"), ns)
    return ns


class OfficialModel(nn.Module):
    """The official ``ClipTestTimeTuning`` over :class:`TinyTower`: the buffer is the prompt
    learner's ``ctx`` parameter (residuals on ``init_ctx``), its use counts and order are lists,
    the inputs are image features already (its image encoder is the identity here)."""

    def __init__(self, tower, M, scale):
        super().__init__()
        self.tower, self.scale = tower, scale
        self.prompt_learner = nn.Module()
        self.prompt_learner.ctx = nn.Parameter(torch.zeros(M, N_CTX, WIDTH))
        self.prompt_learner.ctx_order = list(range(M))
        self.prompt_learner.ctx_use = [0] * M

    def forward(self, image, p_s=None):
        ctx = self.prompt_learner.ctx + self.tower.ctx_init
        if p_s is not None:
            ctx = ctx[p_s - 1]                                   # get_text_features(p_s)
        text = self.tower(ctx).reshape(-1, E)                    # prompt-major, as prompts.view
        return self.scale * image @ text.t()


# the official code asks for CUDA autocast, which the CPU turns off with a warning
@pytest.mark.filterwarnings("ignore:.*autocast:FutureWarning",
                            "ignore:CUDA is not available:UserWarning")
def test_matches_the_official_stream(monkeypatch):
    ns = _official_functions()
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    K, M, V, n, scale, LR = 4, 5, 16, 24, 10.0, 0.3
    tower = TinyTower(K, seed=2)
    g = torch.Generator().manual_seed(7)
    labels = torch.randint(0, K, (n,), generator=g)
    imgs = F.normalize(tower.B[labels, None] + 0.9 * torch.randn(n, V, E, generator=g), dim=-1)

    # the official loop (test_time_adapt_eval) around its test_time_tuning, on the CPU
    model = OfficialModel(tower, M, scale)
    # a large step, so that tuned prompts end up on both sides of a fresh one in entropy (with
    # small steps every tuned prompt is surer than a fresh one and the fresh one is picked alone)
    opt = torch.optim.AdamW(model.prompt_learner.parameters(), LR)
    optim_state = copy.deepcopy(opt.state_dict())
    scaler = torch.amp.GradScaler("cuda", init_scale=1000, enabled=False)
    args = types.SimpleNamespace(cocoop=False, tta_steps=1, num_prompts=M, onlinetpt=True,
                                 batch_size=V, selection_p=0.25)
    pl = model.prompt_learner
    official, n_picked = [], []
    for i in range(n):
        with torch.no_grad():
            if pl.ctx_use.count(0) == 0:
                pl.ctx_use[pl.ctx_order[0]] = 0
                pl.ctx[pl.ctx_order[0]] = pl.ctx[pl.ctx_order[0]] * 0
        opt.load_state_dict(optim_state)
        p_s, _, _ = ns["test_time_tuning"](model, imgs[i], opt, scaler, args, io.StringIO())
        with torch.no_grad():
            p_s = np.asarray(p_s).reshape(-1)
            n_picked.append(len(p_s))
            out = model(imgs[i, :1], torch.as_tensor(p_s) + 1)
            official.append(out.view(1, len(p_s), -1).mean(1)[0].softmax(-1))

    a = make(tower, K, views=V, lr=LR, NUM_PROMPTS=M)
    a.logit_scale = scale
    got = a(imgs)
    torch.testing.assert_close(got, torch.stack(official), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.state["ctx"], pl.ctx.detach(), rtol=1e-5, atol=1e-7)
    assert a.state["use"] == pl.ctx_use and a.state["order"] == pl.ctx_order
    # the buffer was exercised: several prompts picked for many images, slots replaced
    assert sum(k > 1 for k in n_picked) >= 8 and max(pl.ctx_use) > 1


def test_state_round_trip_mid_stream_is_exact():
    K = 4
    tower = TinyTower(K, seed=4)
    g = torch.Generator().manual_seed(9)
    imgs = F.normalize(torch.randn(30, 8, E, generator=g), dim=-1)
    a = make(tower, K, lr=0.3, NUM_PROMPTS=4)
    a(imgs[:15])
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make(tower, K, lr=0.3, NUM_PROMPTS=4)
    b.load_state_dict(torch.load(buf, weights_only=True))
    rest = b(imgs[15:])
    assert torch.equal(a(imgs[15:]), rest)
    fresh = make(tower, K, lr=0.3, NUM_PROMPTS=4)
    assert not torch.allclose(fresh(imgs[15:]), rest)   # the saved buffer made the difference


def test_one_view_is_refused():
    with pytest.raises(ConfigError, match="TTA.N_VIEWS >= 2"):
        make(TinyTower(3), 3, views=1)


def _stream(tower_for, K=4, n=12, M=4):
    g = torch.Generator().manual_seed(11)
    tower = TinyTower(K, seed=5)
    imgs = F.normalize(torch.randn(n, 8, E, generator=g), dim=-1)
    a = make(tower, K, lr=0.3, NUM_PROMPTS=M)
    a.encoder = tower_for(a.encoder)
    return a, a(imgs)


def test_graphed_text_protocol_gives_the_eager_stream():
    """TTA.FAST.TEXT_GRAPH's protocol (argtca/engine/text_graph.py, emulated on the CPU: static
    input, a replay's output the buffer the next replay of that shape overwrites): DynaPrompt
    consumes each pass before the next, so its stream is the eager one, value for value."""
    from argtca.engine.text_graph import GraphedText
    plain, want = _stream(lambda t: t)
    graphed, got = _stream(lambda t: GraphedText(t, emulate=True))
    assert torch.equal(got, want)
    assert torch.equal(graphed.state["ctx"], plain.state["ctx"])
    assert graphed.state["order"] == plain.state["order"]
    # one graph for the buffer with gradient, one per count of picked prompts (1 to M, a slot
    # may be picked twice: M + 1) seen without
    assert 2 <= graphed.encoder.captured <= 1 + 4 + 1
    # a forward-only replay's output is the graph's buffer: the next replay overwrites it
    t = graphed.encoder
    with torch.no_grad():
        x0 = t(t.ctx_init[None].clone())
        kept = x0.clone()
        x1 = t(t.ctx_init[None] + 1.0)
    assert x1 is x0 and not torch.equal(x1, kept)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graphed_text_on_cuda_is_the_eager_tower(tiny_clip):
    """On CUDA, the captured passes run the eager tower's kernels: features and the context's
    gradient equal (torch.equal) to the eager tower's under the same fp16 autocast."""
    from argtca.engine.text_graph import GraphedText
    from argtca.models.text import PromptTextEncoder
    model, tok = tiny_clip
    model = model.cuda()
    enc = PromptTextEncoder(model, tok, [f"class {i}." for i in range(7)])
    ac = lambda: torch.autocast("cuda", dtype=torch.float16)   # noqa: E731
    eager = TunableText(enc, True, ac)
    graphed = GraphedText(TunableText(enc, True, ac))
    g = torch.Generator(device="cuda").manual_seed(0)
    for i in range(3):   # the first call captures, the later ones replay on new inputs
        delta = (0.1 * torch.randn((5,) + tuple(enc.ctx_init.shape), device="cuda",
                                   generator=g)).requires_grad_(True)
        outs = []
        for tower in (eager, graphed):
            d = delta.detach().clone().requires_grad_(True)
            with tower.autocast():
                f = tower(enc.ctx_init.float() + d)
            (f.float() * torch.arange(f.numel(), device="cuda").view_as(f).sin()).sum().backward()
            outs.append((f.detach().clone(), d.grad.clone()))
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
        with torch.no_grad(), eager.autocast():
            e = eager(enc.ctx_init.float() + delta[:2]).clone()
            r = graphed(enc.ctx_init.float() + delta[:2]).clone()
        assert torch.equal(e, r)
    assert graphed.captured == 2
