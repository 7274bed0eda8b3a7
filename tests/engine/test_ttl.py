"""TTL (argtca/models/lora.py, argtca/engine/lora.py, objective ``ttl``): the confidence-weighted
entropy and its gradient worked out by hand on tiny logits, LoRA attention equal to the frozen one
at its initial value and after a reset and to the merged weights otherwise, one tuning step
against the official ``forward_and_adapt_sar`` (Razaimam45/TTL deyo.py) and against TTA-VLM's
``TTL`` and ``LoRAMultiheadAttention`` (read from fetched copies), batching, and the trainer's
checks of its configuration."""
import ast
import math
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import argtca.trainers  # noqa: F401  (registration)
from argtca.config import ConfigError
from argtca.engine.lora import LoRAEngine
from argtca.engine.objectives import TTLObjective
from argtca.models.lora import LoRAAttention, LoRATower, resolve_layers
from argtca.models.text import PromptTextEncoder
from conftest import tiny_cfg
from helpers_official import official_module, official_source

OFFICIAL = ("Razaimam45/TTL-Test-Time-Low-Rank-Adaptation", "deyo.py",
            "cc754dfdfeee0c85d0364b89112271714e43ce49")
TTA_VLM = "TomSheng21/tta-vlm", "bcc735fe49cbd2ab5b683781c41c66e1d3f78589"
CLASSES = ["cat", "dog", "car", "tree", "boat"]


def _node(margin=0.4):
    return types.SimpleNamespace(MARGIN=margin)


# --------------------------------------------------------------------- the objective by hand
def test_weighted_entropy_and_its_gradient_by_hand():
    z = [[2.0, 0.0, -1.0], [0.5, 0.4, 0.1], [3.0, -2.0, 0.0]]      # one image, 3 views, K=3
    want_loss, want_grad = 0.0, []
    for row in z:
        e = [math.exp(v) for v in row]
        p = [v / sum(e) for v in e]
        h = -sum(q * math.log(q) for q in p)
        w = math.exp(-(h - 0.4))                       # DeYO's weight, a constant
        want_loss += h * w / 3
        # dH/dz_j = -p_j (log p_j + H); the weight is not differentiated
        want_grad.append([w / 3 * -q * (math.log(q) + h) for q in p])
    logits = torch.tensor([z], dtype=torch.float64, requires_grad=True)
    loss = TTLObjective(_node()).loss(logits)
    assert loss.shape == (1,)
    assert abs(float(loss[0].detach()) - want_loss) < 1e-6       # computed in fp32
    loss.sum().backward()
    torch.testing.assert_close(logits.grad[0], torch.tensor(want_grad, dtype=torch.float64),
                               rtol=1e-5, atol=1e-7)
    # the mean over the views, not TPT's entropy of the mean softmax
    p_bar = torch.softmax(logits.detach()[0], -1).mean(0)
    assert abs(float(-(p_bar * p_bar.log()).sum()) - want_loss) > 0.1


def test_the_margin_scales_every_weight_alike():
    # exp(-(H - m)) = e^m · e^-H: the margin multiplies the loss and its gradient by e^m, which
    # AdamW's step g / (sqrt(g²) + eps) ignores but for eps (docs/methods.md says so)
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.4, 0.1]]])
    a, b = (TTLObjective(_node(m)).loss(logits) for m in (0.4, 1.9))
    assert abs(float(b[0] / a[0]) - math.exp(1.5)) < 1e-5


def test_views_above_the_entropy_cap_of_log_1000_are_left_out():
    # 1100 classes: a uniform view has entropy log 1100 > log 1000 and drops out of the mean
    peaked = torch.zeros(1100, dtype=torch.float64)
    peaked[0] = 8.0
    logits = torch.stack([torch.zeros(1100, dtype=torch.float64), peaked])[None]
    obj = TTLObjective(_node(0.4))
    assert obj.kept(logits).tolist() == [[False, True]]
    p = torch.softmax(peaked, -1)
    h = float(-(p * p.log()).sum())
    assert abs(float(obj.loss(logits)[0]) - h * math.exp(-(h - 0.4))) < 1e-6
    none = torch.zeros(1, 2, 1100, dtype=torch.float64)                # no view left
    assert float(obj.loss(none)[0]) == 0.0 and not obj.kept(none).any()


# --------------------------------------------------------------------- LoRA attention
def _mha(dim=16, heads=2, seed=0):
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(dim, heads, batch_first=True)
    with torch.no_grad():
        m.in_proj_bias.normal_()
        m.out_proj.bias.normal_()
    return m.eval()


def _merged(m, lora, g=0):
    """``m`` with the LoRA terms of group ``g`` merged into its weights: W' = W + s (A B)ᵀ."""
    out = nn.MultiheadAttention(m.embed_dim, m.num_heads, batch_first=True).eval()
    out.load_state_dict(m.state_dict())
    D, s = m.embed_dim, lora.scaling
    with torch.no_grad():
        for i, t in enumerate("qkv"):
            if t in lora.a:
                out.in_proj_weight[i * D:(i + 1) * D] += s * (lora.a[t][g] @ lora.b[t][g]).t()
        if "out" in lora.a:
            # out_proj(o) + s·o A B: the adapter reads the attention output before out_proj
            out.out_proj.weight += s * (lora.a["out"][g] @ lora.b["out"][g]).t()
    return out


def _randomise(lora, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in lora.targets:
            lora.b[t].copy_(torch.randn(lora.b[t].shape, generator=g) * 0.3)


def test_lora_attention_is_the_frozen_one_at_init_and_after_a_reset():
    m = _mha()
    x = torch.randn(3, 5, 16)
    frozen = m(x, x, x, need_weights=False)[0]
    lora = LoRAAttention(m, rank=4, alpha=8.0, targets=["q", "v"],
                         generator=torch.Generator().manual_seed(0))
    assert lora.scaling == 2.0 and lora.targets == ("q", "v")
    assert float(lora.a["q"].detach().abs().min()) > 0     # A is drawn, B is zero: term = 0
    torch.testing.assert_close(lora(x)[0], frozen, rtol=1e-5, atol=1e-6)
    a_q = lora.a["q"].detach().clone()
    _randomise(lora)
    moved = lora(x)[0]
    assert (moved - frozen).abs().max() > 1e-2
    torch.testing.assert_close(moved, _merged(m, lora)(x, x, x)[0], rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        lora.a["q"].mul_(3.0)
    lora.reset(1)
    torch.testing.assert_close(lora.a["q"], a_q)           # the saved initial A, not the tuned
    assert float(lora.b["v"].detach().abs().max()) == 0.0
    torch.testing.assert_close(lora(x)[0], frozen, rtol=1e-5, atol=1e-6)


def test_every_target_equals_its_merged_weights_per_group():
    m = _mha(seed=3)
    lora = LoRAAttention(m, rank=3, alpha=6.0, targets=["out", "k", "q", "v"],
                         generator=torch.Generator().manual_seed(2))
    assert lora.targets == ("q", "k", "v", "out")
    lora.reset(2)                                          # two images, 3 rows each
    _randomise(lora, seed=5)
    x = torch.randn(6, 4, 16)
    got = lora(x)[0]
    for g in range(2):
        rows = x[3 * g:3 * (g + 1)]
        want = _merged(m, lora, g)(rows, rows, rows)[0]
        torch.testing.assert_close(got[3 * g:3 * (g + 1)], want, rtol=1e-5, atol=1e-5)


def test_initial_a_is_xavier_normal_from_the_seed():
    m = _mha(dim=32)
    lora = LoRAAttention(m, rank=4, alpha=8.0, targets=["q", "v"],
                         generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    for t in ("q", "v"):                        # lora_A's weight [r, D], drawn q before v
        w = torch.empty(4, 32)
        nn.init.xavier_normal_(w, generator=g)
        torch.testing.assert_close(lora.a[t][0], w.t())


def test_layers_resolve_from_the_end():
    assert resolve_layers([-3, -2, -1], 12) == [9, 10, 11]       # TTL's --layer_range 9,11
    assert resolve_layers([11, 9, 10], 12) == [9, 10, 11]
    with pytest.raises(ValueError, match="block 12 is not among the 12 blocks"):
        resolve_layers([12], 12)
    with pytest.raises(ValueError, match="name a block twice"):
        resolve_layers([-1, 11], 12)


def test_tower_prefix_then_suffix_is_the_tower(tiny_clip):
    model, _ = tiny_clip
    tower = LoRATower(model.visual, [-1], rank=4, alpha=8.0, targets=["q", "v"])
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(tower(images), model.visual(images), rtol=1e-5, atol=1e-5)
    assert not any(p.requires_grad for p in model.visual.parameters())
    assert type(model.visual.transformer.resblocks[0].attn) is nn.MultiheadAttention  # a copy


def _three_block_visual():
    from open_clip.model import CLIPVisionCfg, _build_vision_tower
    torch.manual_seed(5)
    cfg = CLIPVisionCfg(layers=3, width=64, head_width=32, patch_size=8, image_size=32)
    return _build_vision_tower(32, cfg, quick_gelu=True).eval()


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 2e-2)])
def test_the_prefix_from_a_lean_copy_is_the_towers_prefix(dtype, tol):
    """The frozen prefix (stem and the 2 blocks before the adapted last one of a 3-block tower)
    from the fast engine's copy of the tower (patch embedding as a matmul, lean SDPA blocks,
    QuickGELU folded; in fp32 the same function up to rounding, in fp16 up to fp16's) gives the
    tokens of the tower's own prefix; its third block is dropped, the tower is untouched."""
    from argtca.engine.towers import LeanBlock, fast_image_tower
    visual = _three_block_visual()
    tower = LoRATower(visual, [-1], rank=4, alpha=8.0, targets=["q", "v"])
    images = torch.randn(4, 3, 32, 32)
    want = tower.prefix(images)
    tower.use_frozen_copy(fast_image_tower(visual, dtype))
    blocks = tower.frozen_copy.transformer.resblocks
    assert len(blocks) == 2 and all(isinstance(b, LeanBlock) for b in blocks)
    got = tower.prefix(images.to(dtype))
    assert got.dtype == dtype and got.shape == want.shape == (4, 17, 64)
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)
    assert len(tower.visual.transformer.resblocks) == 3
    with torch.no_grad():   # the adapted block after it (fp32 here; autocast on CUDA)
        torch.testing.assert_close(tower.suffix(got.float()), visual(images),
                                   rtol=max(tol, 1e-4), atol=max(tol, 1e-4))


def test_the_last_block_on_the_class_token_is_the_whole_blocks_class_token(tiny_clip):
    """The suffix's last block on the class token alone gives the features and the adapters'
    gradients of the whole block (every token through it, the class token read), with adapters
    away from their initial values (the tiny tower has one block)."""
    model, _ = tiny_clip
    tower = LoRATower(model.visual, [-1], rank=4, alpha=8.0, targets=["q", "v", "out"])
    assert tower.class_token_only
    g = torch.Generator().manual_seed(3)
    tower.reset(2)
    with torch.no_grad():
        for w in tower.parameters_to_tune():
            w.copy_(0.3 * torch.randn(w.shape, generator=g))
    with torch.no_grad():
        tokens = tower.prefix(torch.randn(6, 3, 32, 32, generator=g))
    out = []
    for cls_only in (True, False):
        tower.class_token_only = cls_only
        params = tower.parameters_to_tune()
        for w in params:
            w.grad = None
        f = tower.suffix(tokens)
        (f * torch.linspace(-1, 1, f.shape[-1])).sum().backward()
        out.append((f.detach(), [w.grad.clone() for w in params]))
    (f1, g1), (f0, g0) = out
    torch.testing.assert_close(f1, f0, rtol=1e-5, atol=1e-6)
    for a, b in zip(g1, g0):
        # fp32 sums of other lengths: on an H100 host's CPU (torch 2.11) 2 of 512 entries
        # differed by 6.6e-6 (1.3e-4 relative); each gradient's largest entry is ~3-6 here
        scale = float(b.abs().max())
        assert scale > 1e-3                   # a gradient that is not all zero
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * scale)
    assert all(float(a.abs().max()) > 0 for a in g1)


# --------------------------------------------------------------------- the engine
def _engine(tiny_clip, steps=1, lr=5e-3, **kw):
    model, tok = tiny_clip
    cfg = tiny_cfg(**{"TTA.STEPS": steps, "TTA.LR": lr})
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
    opts = dict(layers=[-1], rank=4, alpha=8.0, targets=["q", "v"], seed=0)
    opts.update(kw)
    return LoRAEngine(model, enc, TTLObjective(cfg.TRAINER.TTL), cfg, "cpu", **opts)


def _views(n_images, n_views=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_images, n_views, 3, 32, 32, generator=g)


class _Clip(nn.Module):
    """A tower and class texts as the official model's ``model(images) -> logits``."""

    def __init__(self, tower, text, scale):
        super().__init__()
        self.tower, self.text, self.scale = tower, text, scale

    def forward(self, images):
        return self.scale * F.normalize(self.tower(images), dim=-1) @ self.text.t()


def _deyo_functions():
    """deyo.py's ``softmax_entropy`` and ``forward_and_adapt_sar`` (the rest of the file imports
    einops and matplotlib, which its TTL path never uses), without their decorators
    (``torch.jit.script`` reads a source file; ``torch.enable_grad`` is on here anyway)."""
    tree = ast.parse(official_source(*OFFICIAL))
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("softmax_entropy", "forward_and_adapt_sar")]
    for n in keep:
        n.decorator_list = []
    ns = {"torch": torch, "math": math}
    exec(compile(ast.Module(keep, []), OFFICIAL[1], "exec"), ns)
    return ns


def test_two_steps_match_the_official_forward_and_adapt(tiny_clip):
    eng = _engine(tiny_clip, steps=2, lr=0.05)
    views = _views(1)
    got = eng(views)[0]
    # the official step, ttl.py's settings: every view (filter_ent 0), DeYO's weight with
    # margin_e0 0.4, AdamW(lr) over the A and B of q and v, a GradScaler(init_scale=1000)
    ns = _deyo_functions()
    tower = LoRATower(tiny_clip[0].visual, [-1], 4, 8.0, ["q", "v"], seed=0)
    clip = _Clip(tower, eng.text, eng.logit_scale)
    args = types.SimpleNamespace(filter_ent=0, filter_plpd=0, reweight_ent=1, reweight_plpd=0,
                                 selection_p=0.1)
    params = tower.parameters_to_tune()
    opt = torch.optim.AdamW([{"params": [p]} for p in params], lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=1000)
    for _ in range(2):
        ns["forward_and_adapt_sar"](views[0], None, clip, args, opt, scaler, 0.5, 0.4)
    with torch.no_grad():
        want = clip(views[0, :1]).softmax(-1)[0]
    zero_shot = _engine(tiny_clip, steps=1, lr=1e-12)(views)[0]
    assert (want - zero_shot).abs().max() > 1e-3           # the steps changed the prediction
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # AdamW's steps are ±lr·g/(|g| + 1e-8): where a gradient is near 1e-8 the rounding of the
    # scaler's x1000 moves the step by up to ~1e-4 of the lr 0.05
    for mine, theirs in zip(eng.tower.parameters_to_tune(), params):
        torch.testing.assert_close(mine[0], theirs[0], rtol=1e-4, atol=1e-4)
    assert float(params[1].detach().abs().max()) > 0.05          # B of q left zero


def _tta_vlm_lora_classes():
    src = official_source(TTA_VLM[0], "clip/custom_clip.py", TTA_VLM[1])
    tree = ast.parse(src)
    keep = [n for n in tree.body if isinstance(n, ast.ClassDef)
            and n.name in ("LoRALinear", "LoRAMultiheadAttention")]
    ns = {"torch": torch, "nn": nn, "F": F}
    exec(compile(ast.Module(keep, []), "clip/custom_clip.py", "exec"), ns)
    return ns


def test_lora_attention_matches_tta_vlm():
    ns = _tta_vlm_lora_classes()
    m = _mha(seed=4)
    theirs = ns["LoRAMultiheadAttention"](m, r=4, lora_alpha=32, original_weight=None).eval()
    mine = LoRAAttention(m, rank=4, alpha=32.0, targets=["q", "v"],
                         generator=torch.Generator().manual_seed(0))
    _randomise(mine)
    with torch.no_grad():        # theirs: x @ A [D, r] @ B [r, D] · alpha / r, as ours
        for t in ("q", "v"):
            getattr(theirs, f"{t}_proj").A.copy_(mine.a[t][0])
            getattr(theirs, f"{t}_proj").B.copy_(mine.b[t][0])
    x = torch.randn(2, 7, 16)
    want = theirs(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1))[0].transpose(0, 1)
    torch.testing.assert_close(mine(x)[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_one_image_matches_tta_vlm_ttl(tiny_clip, tmp_path):
    mod = official_module(TTA_VLM[0], "instance_method/ttl.py", TTA_VLM[1], tmp_path)
    eng = _engine(tiny_clip, steps=1, lr=0.05)
    views = _views(1, seed=3)
    got = eng(views)[0]
    tower = LoRATower(tiny_clip[0].visual, [-1], 4, 8.0, ["q", "v"], seed=0)

    class Model(_Clip):                  # TTA-VLM's ClipLoraTestTimeTuning_v2 interface
        def reset(self):               # in place: TTA-VLM builds its optimiser once
            for a in self.tower.adapters:
                for t in a.targets:
                    a.a[t].copy_(getattr(a, f"a0_{t}")[None])
                    a.b[t].zero_()

        def get_lora_params(self):
            return [{"params": [p]} for p in self.tower.parameters_to_tune()]

        def forward_features(self, images):
            return F.normalize(self.tower(images), dim=-1), self.text, self.scale

    model = Model(tower, eng.text, eng.logit_scale)
    ttl = mod.TTL(model, "cpu")
    ttl.prepare_model_and_optimization(types.SimpleNamespace(lr=0.05))
    ttl.pre_adaptation()
    out = ttl.adaptation_process(views[0, :1], views[0], types.SimpleNamespace(tta_steps=1))
    torch.testing.assert_close(got, out["output"].softmax(-1)[0], rtol=1e-4, atol=1e-5)


def test_a_batch_equals_its_images_alone(tiny_clip):
    eng = _engine(tiny_clip, steps=2, lr=0.05)
    views = _views(3, seed=1)
    together = eng(views)
    alone = torch.cat([eng(views[i:i + 1]) for i in range(3)])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
    assert (together[0] - together[1]).abs().max() > 1e-4    # not one answer for all


def test_an_image_without_a_kept_view_skips_its_step(tiny_clip, monkeypatch):
    eng = _engine(tiny_clip, steps=2, lr=0.05)
    views = _views(2, seed=2)
    tuned = eng(views[:1])[0]
    base = TTLObjective.kept
    monkeypatch.setattr(TTLObjective, "kept",   # image 1 keeps no view: the official code skips
                        lambda self, s: base(self, s) & torch.tensor([[True], [False]]))
    got = eng(views)
    eng.tower.reset(1)                           # the frozen tower (no step, no weight decay)
    with torch.no_grad():
        frozen = _Clip(eng.tower, eng.text, eng.logit_scale)(views[1, :1]).softmax(-1)[0]
    torch.testing.assert_close(got[1], frozen, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[0], tuned, rtol=1e-5, atol=1e-6)
    assert (tuned - _Clip(eng.tower, eng.text, eng.logit_scale)(views[0, :1]).softmax(-1)[0]
            ).abs().max() > 1e-3


# --------------------------------------------------------------------- the trainer's checks
def _trainer(tmp_path, **over):
    from argtca.trainers.methods import TTL
    from helpers_data import make_caltech
    data = make_caltech(tmp_path / "data", per_class=1)
    keys = {"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data), "TRAINER.NAME": "TTL",
            "TTA.N_VIEWS": 4, "TRAINER.TTL.LAYERS": [-1], "TRAINER.TTL.RANK": 4,
            "OUTPUT_ROOT": str(tmp_path / "out")}
    keys.update(over)
    cfg = tiny_cfg(**keys)
    cfg.freeze()
    return TTL(cfg)


def test_the_trainer_runs_on_its_own_engine_and_records_its_blocks(tmp_path):
    import json
    from pathlib import Path
    t = _trainer(tmp_path)
    assert t.cfg.TTA.ENGINE == "lora"
    s = t.test()
    assert s["family"] == "tpt-family" and s["lora_blocks"] == [0] and s["engine"] == "lora"
    assert json.loads((Path(t.output_dir()) / "summary.json").read_text())["n"] == s["n"] > 0


@pytest.mark.parametrize("over, message", [
    ({"TTA.ENGINE": "fast"}, r"TTA.ENGINE='fast': TTL runs on its own engine, lora; leave "
                             r"TTA.ENGINE auto"),
    ({"TRAINER.TTL.LAYERS": [-2, -1]}, r"TRAINER.TTL.LAYERS=\[-2, -1\]: block -2 is not "
                                       r"among the 1 blocks .* of argtca-tiny-test"),
    ({"TRAINER.TTL.TARGETS": ["q", "w"]}, r"TRAINER.TTL.TARGETS=\['q', 'w'\] \(allowed: "),
    ({"MODEL.BACKBONE.NAME": "argtca-tiny-rn-test"}, r"TTL adapts the attention of a ViT image "
                                                     r"tower; MODEL.BACKBONE.NAME=argtca-tiny-rn"),
])
def test_a_bad_setting_is_refused_at_load_time(tmp_path, over, message):
    with pytest.raises(ConfigError, match=message):
        _trainer(tmp_path, **over)


def test_the_default_blocks_on_a_shallower_tower_are_every_block_it_has(tmp_path):
    """The default, the last three blocks ([-3, -2, -1]: ViT-B/16's 9-11), on the 1-block test
    tower: its one block (a value the user gives is taken as given: the case above)."""
    from argtca.config import get_cfg_default
    assert list(get_cfg_default().TRAINER.TTL.LAYERS) == [-3, -2, -1]
    t = _trainer(tmp_path, **{"TRAINER.TTL.LAYERS": [-3, -2, -1]})
    assert t.lora_blocks == [0]


def test_the_lora_engine_runs_ttl_only():
    from argtca.config.settle import resolve_auto
    cfg = tiny_cfg(**{"TTA.ENGINE": "lora"})
    with pytest.raises(ConfigError, match=r"TTA.ENGINE='lora' runs only the method built for it; "
                                          r"TPT: use TTA.ENGINE auto"):
        resolve_auto(cfg, "cpu", 10, label="TPT")
    assert resolve_auto(tiny_cfg(), "cuda", 10, label="TTL",
                        runs_on="lora")[0].TTA.ENGINE == "lora"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 autocast needs CUDA")
def test_on_cuda_the_fp16_prefix_gives_the_autocast_prefixs_predictions(tiny_clip):
    """Under fp16 autocast the frozen prefix runs from the fp16 copy (TTA.FAST.HALF_IMAGE on):
    the same predictions as the autocast prefix (off), fp16 rounding apart."""
    model, tok = tiny_clip
    model = model.cuda()
    views = _views(4, n_views=8, seed=2)
    out = {}
    for half in (False, True):
        cfg = tiny_cfg(**{"TTA.STEPS": 1, "TTA.LR": 5e-3, "TTA.FAST.HALF_IMAGE": half})
        enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
        eng = LoRAEngine(model, enc, TTLObjective(cfg.TRAINER.TTL), cfg, "cuda", layers=[-1],
                         rank=4, alpha=8.0, targets=["q", "v"], seed=0)
        assert eng.half_prefix is half
        out[half] = eng(views).cpu()
    torch.testing.assert_close(out[True], out[False], rtol=2e-2, atol=2e-3)
    assert out[True].argmax(-1).tolist() == out[False].argmax(-1).tolist()
