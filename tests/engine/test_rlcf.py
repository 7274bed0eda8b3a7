"""RLCF (argtca/engine/objectives.py ``rlcf_loss``, argtca/models/reward.py, the RLCF trainer):
the REINFORCE loss worked out by hand on a tiny example, the same loss and gradient as the
official code (mzhaoshuai/RLCF ``TPT/clip_reward.py`` and the loss lines of ``TPT/tpt_cls_rl.py``,
read from a fetched copy), the fast engine equal to the reference for it, the reward model's
resize, the official per-dataset steps, load-time errors, and the reward weights in the run's
identity."""
import ast
import hashlib
import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from argtca.config import get_cfg_default
from argtca.engine.fast import FastEngine
from argtca.engine.objectives import (SelectedViewInputs, clip_rewards, objective_loss,
                                      reward_baseline, rlcf_loss, select_confident)
from argtca.engine.reference import ReferenceEngine
from argtca.models.reward import RewardCLIP
from argtca.models.text import PromptTextEncoder
from argtca.registry import OBJECTIVE_REGISTRY
from argtca.run import main
from conftest import tiny_cfg
from helpers_data import make_caltech
from helpers_official import official_source

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]
OFFICIAL = ("mzhaoshuai/RLCF", "0996a5d5bdeea9108c36bd0c5a71bba652945cd4")

# 2 confident views, K = 4 classes; the reward model's unit features in 2-d
LOGITS = [[3.0, 1.0, 2.0, 0.0],        # top-2: classes 0, 2
          [0.0, 2.5, 0.5, 1.5]]        # top-2: classes 1, 3
CLASSES = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-0.8, 0.6]]
IMAGES = [[0.8, 0.6], [0.0, 1.0]]


def _softmax(row):
    e = [math.exp(x - max(row)) for x in row]
    return [x / sum(e) for x in e]


def _by_hand(weight=2.5, process=True, per_image=False, amplify=False):
    """The loss of LOGITS/IMAGES/CLASSES with k = 2, in plain Python."""
    samples = [[0, 2], [1, 3]]
    score = []
    for v, ks in enumerate(samples):
        cos = [sum(a * b for a, b in zip(IMAGES[v], CLASSES[c])) for c in ks]
        score.append([weight * max(c, 0.0) for c in cos])
    # view 0: cos 0.8, 0.96 -> 2.0, 2.4; view 1: cos 1.0, 0.6 -> 2.5, 1.5
    groups = [[(0, 0), (0, 1), (1, 0), (1, 1)]] if per_image else [[(0, 0), (0, 1)],
                                                                   [(1, 0), (1, 1)]]
    reward = [row[:] for row in score]
    if process:
        for g in groups:
            vals = [score[v][j] for v, j in g]
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((x - mean) ** 2 for x in vals) / (len(vals) - 1))
            for v, j in g:
                reward[v][j] = (score[v][j] - mean) / ((std + 1e-5) if amplify else 1.0)
    total = 0.0
    for v, ks in enumerate(samples):
        p = _softmax(LOGITS[v])
        total += sum(reward[v][j] * -math.log(p[c]) for j, c in enumerate(ks))
    return total / 4


@pytest.mark.parametrize("process, per_image, amplify",
                         [(True, False, False), (True, True, False), (True, False, True),
                          (False, False, False)])
def test_reinforce_loss_by_hand(process, per_image, amplify):
    got = rlcf_loss(torch.tensor([LOGITS]), torch.tensor([IMAGES]), torch.tensor(CLASSES),
                    sample_k=2, weight=2.5, process=process, per_image=per_image,
                    amplify=amplify)
    assert got.shape == (1,)
    assert got.item() == pytest.approx(_by_hand(2.5, process, per_image, amplify), abs=1e-6)


def test_rewards_clamp_at_zero_and_the_baseline_by_hand():
    # class 3 is at cos -0.48 from view 0: its CLIPScore is 0, not negative
    s = clip_rewards(torch.tensor([[[3, 0]]]), torch.tensor([[IMAGES[0]]]),
                     torch.tensor(CLASSES), weight=2.5)
    assert s.tolist() == [[[0.0, pytest.approx(2.0)]]]
    # the view's 2 samples: mean 1.0 subtracted
    assert reward_baseline(s).tolist() == [[[pytest.approx(-1.0), pytest.approx(1.0)]]]
    # one sample a group is left as it is (the official ``shape[-1] > 1``)
    assert reward_baseline(s[..., :1]).tolist() == [[[0.0]]]


def test_the_gradient_follows_the_reward():
    # the better-rewarded sample of each view gains probability after a step on the logits
    logits = torch.tensor([LOGITS], requires_grad=True)
    rlcf_loss(logits, torch.tensor([IMAGES]), torch.tensor(CLASSES), 2).sum().backward()
    stepped = (logits - 0.1 * logits.grad).detach()[0].softmax(-1)
    before = torch.tensor(LOGITS).softmax(-1)
    assert stepped[0, 2] > before[0, 2] and stepped[0, 0] < before[0, 0]   # 2.4 > 2.0
    assert stepped[1, 1] > before[1, 1] and stepped[1, 3] < before[1, 3]   # 2.5 > 1.5


def test_objective_loss_passes_the_selected_views_inputs():
    node = get_cfg_default().TRAINER.RLCF
    obj = OBJECTIVE_REGISTRY.get("rlcf")(node, types.SimpleNamespace(
        class_features=torch.tensor(CLASSES)))
    node.defrost()
    node.SAMPLE_K = 2
    # 3 views; views 2 and 0 selected: their reward features must be the ones used
    inputs = torch.tensor([[IMAGES[1], [1.0, 0.0], IMAGES[0]]])
    sel_idx = torch.tensor([[2, 0]])
    got = objective_loss(obj, torch.tensor([[LOGITS[0], LOGITS[1]]]), torch.zeros(1, 4, 2),
                         inputs, sel_idx)
    want = rlcf_loss(torch.tensor([LOGITS]), torch.tensor([[IMAGES[0], IMAGES[1]]]),
                     torch.tensor(CLASSES), 2)
    assert torch.allclose(got, want)
    assert obj.entropy_term(torch.tensor([LOGITS])) is None   # named whole if non-finite


# ------------------------------------------------------------------ the official code
def _official_namespace():
    """``BaseRewards``/``CLIPRewards`` of TPT/clip_reward.py and ``select_confident_samples``/
    ``test_time_tuning`` of TPT/tpt_cls_rl.py, compiled from the official files (their module
    top levels need OpenAI's clip package and a download folder, which are not used here)."""
    ns = {"torch": torch, "nn": torch.nn, "F": F, "np": np}
    for path, names in (("TPT/clip_reward.py", {"BaseRewards", "CLIPRewards"}),
                        ("TPT/tpt_cls_rl.py", {"select_confident_samples",
                                               "test_time_tuning"})):
        tree = ast.parse(official_source(OFFICIAL[0], path, OFFICIAL[1]))
        body = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
                and n.name in names]
        assert {n.name for n in body} == names
        exec(compile(ast.Module(body, []), path, "exec"), ns)
    return ns


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.parametrize("sample_k, process_batch, amplify",
                         [(3, 0, 0), (2, 1, 0), (3, 0, 1)])
def test_loss_and_gradient_equal_the_official(sample_k, process_batch, amplify):
    ns = _official_namespace()
    g = torch.Generator().manual_seed(3)
    V, K, E, Er = 20, 6, 8, 5
    views = F.normalize(torch.randn(V, E, generator=g), dim=-1)      # the policy's features
    reward_img = torch.randn(V, Er, generator=g)                     # the reward's (raw)
    reward_txt = F.normalize(torch.randn(K, Er, generator=g), dim=-1)
    w0 = torch.randn(K, E, generator=g)

    # the official step: its reward model with encode_image = the given raw features
    rm = ns["CLIPRewards"].__new__(ns["CLIPRewards"])
    torch.nn.Module.__init__(rm)
    seen = {}

    def official_encode(x):   # the official reward tower: records which views it encodes
        seen["views"] = x[:, 0].long().tolist()
        return reward_img[x[:, 0].long()]

    rm.clip_model = types.SimpleNamespace(encode_image=official_encode)
    rm.resolutions = rm.default_resolutions = 224
    rm.clipscore_weight, rm.sample_k = 2.5, sample_k
    rm.reward_process, rm.process_batch, rm.amplify_rewards = 1, process_batch, amplify
    rm.class_features = reward_txt
    w_off = w0.clone().requires_grad_(True)
    caught = {}

    def model(inputs):   # the policy: logits of the views ``inputs`` (their indices)
        return 10.0 * views[inputs[:, 0].long()] @ w_off.t()

    class Scaler:
        def scale(self, loss):
            caught["loss"] = loss.detach()
            return loss

        def step(self, opt):
            pass

        def update(self):
            pass

    opt = types.SimpleNamespace(zero_grad=lambda: None)
    args = types.SimpleNamespace(tta_steps=1, selection_p=0.3, min_entropy_reg=0)
    inputs = torch.arange(V, dtype=torch.float32)[:, None]           # view v is "image" v
    ns["test_time_tuning"](model, inputs, opt, Scaler(), args, reward_model=rm)

    # argtca: the same selection, features and loss
    w = w0.clone().requires_grad_(True)
    logits = (10.0 * views @ w.t()).unsqueeze(0)                     # [1, V, K]
    sel_idx = select_confident(logits.detach(), 0.3)
    sel = torch.gather(logits, 1, sel_idx.unsqueeze(-1).expand(-1, -1, K))
    node = get_cfg_default().TRAINER.RLCF
    node.defrost()
    node.SAMPLE_K, node.PROCESS_BATCH, node.REWARD_AMPLIFY = sample_k, bool(process_batch), \
        bool(amplify)
    obj = OBJECTIVE_REGISTRY.get("rlcf")(node, types.SimpleNamespace(class_features=reward_txt))
    encoded = []

    def encode(v):   # argtca's reward tower: the views' ids in, their unit features out
        encoded.append(v[..., 0].long().flatten().tolist())
        return F.normalize(reward_img[v[..., 0].long()], dim=-1)

    inputs_lazy = SelectedViewInputs(inputs.unsqueeze(0), encode)
    loss = objective_loss(obj, sel, torch.zeros(1, K, E), inputs_lazy, sel_idx)
    loss.sum().backward()
    assert loss.item() == pytest.approx(caught["loss"].item(), rel=1e-5, abs=1e-6)
    assert torch.allclose(w.grad, w_off.grad, atol=1e-6)
    assert w.grad.abs().sum() > 0
    # the reward tower saw the confident views alone, as the official set_image_features
    assert encoded == [seen["views"]] and len(seen["views"]) == int(V * 0.3)
    # a second step reads the same features without encoding again
    objective_loss(obj, sel.detach(), torch.zeros(1, K, E), inputs_lazy, sel_idx)
    assert len(encoded) == 1


# ------------------------------------------------------------------ engines and the reward CLIP
def _reward(seed=2):   # a tiny reward CLIP whose cosines to the classes have both signs
    from argtca.models.clip import load_clip
    torch.manual_seed(seed)
    return load_clip(tiny_cfg())


def test_fast_engine_equals_reference_for_rlcf(tiny_clip):
    model, tok = tiny_clip
    rmodel, rtok = _reward()
    classes = ["dog", "cat", "fish", "bird", "red car"]
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in classes])
    reward = RewardCLIP(rmodel, rtok, [f"a photo of a {c}." for c in classes], "cpu", "amp")
    node = get_cfg_default().TRAINER.RLCF
    obj = OBJECTIVE_REGISTRY.get("rlcf")(node, reward)
    g = torch.Generator().manual_seed(7)
    views = torch.randn(3, 20, 3, 32, 32, generator=g)
    for steps in (1, 3):
        cfg = tiny_cfg(**{"TTA.STEPS": steps, "TTA.LR": 7e-3, "TTA.WEIGHT_DECAY": 5e-4})
        ref = ReferenceEngine(model, enc, obj, cfg, "cpu")
        alone = torch.cat([ref(views[i:i + 1]) for i in range(3)])
        for mode in ("vjp", "recompute", "jacobian"):
            fast = FastEngine(model, enc, obj, cfg, "cpu", grad_mode=mode)
            together = fast(views)
            assert torch.allclose(together, alone, atol=1e-5), (mode, steps)
        # not vacuous: the prompt moved, and TPT's loss moves it elsewhere
        img = ref.image_features(views)
        ctx = fast.tune(img, None, obj.view_inputs(views))
        assert (ctx - ref.initial_context(3)).abs().max() > 1e-3
        tpt = ReferenceEngine(model, enc, OBJECTIVE_REGISTRY.get("tpt")(None), cfg, "cpu")
        assert (tpt.tune(img) - ctx).abs().max() > 1e-3


def test_the_reward_tower_encodes_the_confident_views_once(tiny_clip):
    """Every engine hands the reward tower the int(V·p) confident views of an image once (not
    all V, nor once per step), and its predictions equal those of the reward features of all
    views gathered at the selection (the arithmetic before the change) to float rounding."""
    model, tok = tiny_clip
    rmodel, rtok = _reward()
    classes = ["dog", "cat", "fish", "bird", "red car"]
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in classes])
    reward = RewardCLIP(rmodel, rtok, [f"a photo of a {c}." for c in classes], "cpu", "fp32")
    rows = []
    encode = reward.image_features
    reward.image_features = lambda v: (rows.append(v.shape[0] * v.shape[1]), encode(v))[1]
    obj = OBJECTIVE_REGISTRY.get("rlcf")(get_cfg_default().TRAINER.RLCF, reward)

    class AllViews(type(obj)):   # the reward features of every view, gathered at the selection
        def view_inputs(self, views):
            return encode(views)

    every = AllViews(obj.node, reward)
    views = torch.randn(3, 20, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    cfg = tiny_cfg(**{"TTA.STEPS": 3, "TTA.LR": 7e-3, "TTA.WEIGHT_DECAY": 5e-4})
    S = int(20 * float(cfg.TTA.SELECTION_P))
    engines = [lambda o: ReferenceEngine(model, enc, o, cfg, "cpu")] + [
        (lambda o, m=m: FastEngine(model, enc, o, cfg, "cpu", grad_mode=m))
        for m in ("vjp", "recompute", "jacobian")]
    compared = []
    equal = torch.equal

    def spy_equal(a, b):   # SelectedViewInputs' fallback, which syncs with the device
        if sys._getframe(1).f_code.co_name == "select":
            compared.append(1)
        return equal(a, b)

    for make in engines:
        rows.clear()
        eng = make(obj)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch, "equal", spy_equal)
            got = (torch.cat([eng(views[i:i + 1]) for i in range(3)]) if not eng.batched
                   else eng(views))
        assert sum(rows) == 3 * S, (eng, rows)
        assert not compared, eng
        want = (torch.cat([make(every)(views[i:i + 1]) for i in range(3)])
                if not eng.batched else make(every)(views))
        assert torch.allclose(got, want, atol=1e-6), eng


def test_the_reward_model_resizes_views_to_its_size():
    rmodel, rtok = _reward()
    reward = RewardCLIP(rmodel, rtok, ["a photo of a dog.", "a photo of a cat."], "cpu", "fp32")
    views = torch.randn(2, 3, 3, 48, 48, generator=torch.Generator().manual_seed(1))
    got = reward.image_features(views)
    x = F.interpolate(views.flatten(0, 1), size=(32, 32), mode="bicubic", align_corners=True)
    with torch.no_grad():
        want = F.normalize(rmodel.encode_image(x), dim=-1).reshape(2, 3, -1)
        text = F.normalize(rmodel.encode_text(rtok(["a photo of a dog.", "a photo of a cat."])),
                           dim=-1)
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.allclose(reward.class_features, text, atol=1e-6)


# ------------------------------------------------------------------ the trainer
def _steps(name, fine, steps=1, auto=True):
    from argtca.trainers.methods import RLCF
    cfg = get_cfg_default()
    cfg.TTA.STEPS, cfg.TRAINER.RLCF.AUTO_STEPS = steps, auto
    me = types.SimpleNamespace(dataset=types.SimpleNamespace(name=name, fine_grained=fine))
    values, lines = RLCF.auto_values(me, cfg)
    return values.get(("TTA", "STEPS"), steps), lines


def test_official_steps_per_dataset():
    assert _steps("Caltech101", True)[0] == 5            # rlcf-prompt-fine.sh
    assert _steps("ImageNetA", False)[0] == 3            # rlcf-prompt.sh
    assert "TTA.STEPS=5" in _steps("Caltech101", True)[1][0]
    assert _steps("Caltech101", True, steps=2)[0] == 2    # a TTA.STEPS given wins
    assert _steps("Caltech101", True, auto=False)[0] == 1


RLCF_ARGS = ["--config-file", str(REPO / "configs/trainers/rlcf.yaml"),
             "--dataset-config-file", str(REPO / "configs/datasets/caltech101.yaml"),
             "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
             "INPUT.SIZE", "32", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
             "VERBOSE", "False", "TTA.N_VIEWS", "4", "TRAINER.RLCF.REWARD_BACKBONE",
             "argtca-tiny-test"]


@pytest.mark.parametrize("key, value, says", [
    ("TRAINER.RLCF.REWARD_BACKBONE", "ViT-Q/99", "TRAINER.RLCF.REWARD_BACKBONE='ViT-Q/99'"),
    ("TRAINER.RLCF.SAMPLE_K", "4", "TRAINER.RLCF.SAMPLE_K=4 (allowed: at most the 3 classes"),
    ("TRAINER.RLCF.REWARD_PRETRAINED", "/no/such/reward.pt",
     "TRAINER.RLCF.REWARD_PRETRAINED checkpoint not found: /no/such/reward.pt"),
])
def test_bad_reward_settings_are_one_line_at_load_time(key, value, says, tmp_path, capsys):
    data = make_caltech(tmp_path / "data")
    rc = main(["--root", str(data), "--output-dir", str(tmp_path / "out")] + RLCF_ARGS
              + [key, value])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "out" / "records.jsonl").exists()


def _weights(path, seed):
    model, _ = _reward(seed)
    torch.save(model.state_dict(), path)
    return path


def test_the_reward_weights_are_part_of_the_run_identity(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = make_caltech(tmp_path / "data")
    a, b = _weights(tmp_path / "a.pt", 1), _weights(tmp_path / "b.pt", 2)
    runs = []
    for w in (a, a, b):
        assert main(["--root", str(data)] + RLCF_ARGS
                    + ["TRAINER.RLCF.REWARD_PRETRAINED", str(w)]) == 0
        summaries = sorted((tmp_path / "output" / "rlcf" / "caltech101").glob("*/seed1/"
                                                                               "summary.json"))
        runs.append(summaries)
    assert len(runs[0]) == len(runs[1]) == 1          # the same reward: the same folder, resumed
    assert len(runs[2]) == 2                          # another reward model: another experiment
    for s in runs[2]:
        summary = json.loads(s.read_text())
        got = summary["inputs"]["TRAINER.RLCF.REWARD_PRETRAINED"]
        want = a if Path(got["path"]) == a else b
        assert got["sha256"] == hashlib.sha256(Path(want).read_bytes()).hexdigest()
        assert summary["n"] == 6 and summary["trainer"] == "RLCF"


def test_a_non_finite_rlcf_loss_names_the_image_in_both_engines(tiny_clip):
    from argtca.engine.reference import NonFiniteLossError
    model, tok = tiny_clip
    rmodel, rtok = _reward()
    reward = RewardCLIP(rmodel, rtok, ["a photo of a a.", "a photo of a b.", "a photo of a c."],
                        "cpu", "fp32")
    reward.class_features = torch.full_like(reward.class_features, float("nan"))
    obj = OBJECTIVE_REGISTRY.get("rlcf")(get_cfg_default().TRAINER.RLCF, reward)
    enc = PromptTextEncoder(model, tok, ["a.", "b.", "c."])
    cfg = tiny_cfg(**{"TTA.N_VIEWS": 4, "TTA.SELECTION_P": 0.5})
    views = torch.randn(2, 4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    for eng in (ReferenceEngine(model, enc, obj, cfg, "cpu"),
                FastEngine(model, enc, obj, cfg, "cpu", grad_mode="recompute")):
        with pytest.raises(NonFiniteLossError) as e:
            eng(views[:1] if not eng.batched else views, ["x.jpg", "y.jpg"])
        msg = str(e.value)
        assert "x.jpg" in msg and "loss nan" in msg and "entropy term" not in msg


def test_empty_reward_keys_reuse_the_policy_clip(tiny_clip):
    from argtca.models.reward import load_reward, reward_spec
    cfg = tiny_cfg(**{"TRAINER.RLCF.REWARD_BACKBONE": "", "TRAINER.RLCF.REWARD_PRETRAINED": ""})
    assert reward_spec(cfg) == ("argtca-tiny-test", "random")
    model, tok = tiny_clip
    reward = load_reward(cfg, "cpu", (model, tok), ["a photo of a dog.", "a photo of a cat."])
    assert reward.model is model            # TTA-VLM's choice: the policy rewards itself
    cfg.TRAINER.RLCF.REWARD_PRETRAINED = "builtin:demo/assets/demo_clip.pt"
    assert reward_spec(cfg) == ("argtca-tiny-test", "builtin:demo/assets/demo_clip.pt")
