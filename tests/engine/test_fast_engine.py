"""FastEngine == ReferenceEngine per image, for every objective, 1 and 2 steps, every gradient
mode; plus the pieces the fast engine relies on (θ0 VJP, cached regulariser, chunking, skips)."""
import os

import pytest
import torch

from argtca.config import get_cfg_default
from argtca.engine.fast import FastEngine
from argtca.engine.reference import NonFiniteLossError, ReferenceEngine
from argtca.models.text import PromptTextEncoder
from argtca.registry import OBJECTIVE_REGISTRY
from argtca.trainers.catalogue import catalogue, method_info
from conftest import tiny_cfg

CLASSES = ["dog", "cat", "fish", "bird", "red car"]
ATTRS = ["small", "furry animal"]
# the paper's prompt-tuning rows (TPT, C-TPT, O-TPT, A-TPT, TCA), from the catalogue
PAPER_PROMPT_TUNING = [m.method for m in catalogue() if m.family == "tpt-family" and m.paper
                       and m.rows]


pytestmark = pytest.mark.usefixtures("one_thread")


def _objective(name):
    """The objective ``name`` with its method's default node (the catalogue's); "none": none."""
    node = None if name == "none" else get_cfg_default().TRAINER[
        method_info(name).node.split(".", 1)[1]]
    return OBJECTIVE_REGISTRY.get(name)(node)


def _engines(tiny_clip, name, steps, grad_mode="vjp", **kw):
    model, tok = tiny_clip
    obj = _objective(name)
    if name == "tca":
        suffixes = [f"{a} {c}." for c in CLASSES for a in ATTRS]
    else:
        suffixes = [f"{c}." for c in CLASSES]
    enc = PromptTextEncoder(model, tok, suffixes)
    cfg = tiny_cfg(**{"TTA.STEPS": steps})
    return (ReferenceEngine(model, enc, obj, cfg, "cpu"),
            FastEngine(model, enc, obj, cfg, "cpu", grad_mode=grad_mode, **kw))


def _views(seed, B=4, V=20):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, V, 3, 32, 32, generator=g)


@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("name", PAPER_PROMPT_TUNING)
def test_fast_equals_reference_per_image(tiny_clip, name, steps):
    ref, fast = _engines(tiny_clip, name, steps)
    views = _views(10 + steps)
    alone = torch.cat([ref(views[i:i + 1]) for i in range(views.shape[0])])
    together = fast(views)
    assert together.shape == alone.shape == (4, len(CLASSES))
    assert torch.allclose(together, alone, atol=1e-5, rtol=1e-4), (together - alone).abs().max()
    # the tuned contexts themselves agree, and tuning moved them (the comparison is not vacuous)
    img = ref.image_features(views)
    c_ref = torch.cat([ref.tune(img[i:i + 1]) for i in range(4)])
    c_fast = fast.tune(img)
    assert torch.allclose(c_fast, c_ref, atol=1e-6)
    assert (c_fast - ref.initial_context(4)).abs().amax(dim=(1, 2)).min() > 1e-4
    # tuning changes the prediction compared with zero-shot at θ0
    zs = fast.predict(img[:, 0], None)
    assert not torch.allclose(zs, together, atol=1e-4)


@pytest.mark.parametrize("mode", ["loop", "recompute"])
def test_gradient_modes_agree(tiny_clip, mode):
    ref, fast = _engines(tiny_clip, "ctpt", 2, grad_mode=mode)
    views = _views(3, B=3)
    assert torch.allclose(fast(views), ref(views), atol=1e-5, rtol=1e-4)


def test_vjp_of_cached_theta0_equals_batched_backward(tiny_clip):
    """J(θ0)ᵀ·G_b through the one kept graph == the gradient of Σ_b <G_b, T(ctx_b)> (brute
    force)."""
    _, fast = _engines(tiny_clip, "tpt", 1)
    enc = fast.text_encoder
    g = torch.Generator().manual_seed(5)
    cot = torch.randn(3, enc.num_prompts, fast.theta0()[1].shape[-1], generator=g)
    got = fast._vjp_theta0(cot)
    ctx = enc.ctx_init.detach().repeat(3, 1, 1).requires_grad_(True)
    (enc(ctx) * cot).sum().backward()
    assert torch.allclose(got, ctx.grad, atol=1e-5, rtol=1e-5)
    # called twice on the same graph: identical (the graph is retained, not consumed)
    assert torch.equal(fast._vjp_theta0(cot), got)


def test_cached_regularizer_is_the_per_image_one(tiny_clip):
    _, fast = _engines(tiny_clip, "tca", 1)
    reg0, reg_grad = fast.regularizer0()
    t = fast.theta0()[1].detach().repeat(2, 1, 1).requires_grad_(True)
    r = fast.objective.regularizer(t)
    r.sum().backward()
    assert torch.allclose(reg0.expand(2), r.detach())
    assert torch.allclose(reg_grad.expand(2, -1, -1), t.grad)  # loss scale is 1 on CPU
    assert reg_grad.abs().max() > 0


def test_chunking_does_not_change_results(tiny_clip):
    ref, fast = _engines(tiny_clip, "otpt", 2, image_chunk=7, text_tokens=1)
    views = _views(7, B=3, V=10)
    assert fast._images_per_text_call() == 1
    assert torch.allclose(fast(views), ref(views), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["recompute", "vjp"])
def test_padded_text_calls_are_exact(tiny_clip, mode):
    """The compiled text paths pad the last chunk by repeating row 0 and drop the extra outputs;
    emulated here without compiling: results (and gradients) equal the reference's."""
    ref, fast = _engines(tiny_clip, "tca", 2, grad_mode=mode)
    fast.text_tokens = 3 * fast.num_prompts * fast.text_encoder.seq_len
    fast.compile_text = fast.compile_text_grad = True
    fast._encode_text = fast._encode_text_grad = fast.text_encoder
    views = _views(6, B=4, V=10)
    want = ref(views)
    calls = []
    orig = fast.text_encoder.forward
    fast.text_encoder.forward = lambda ctx: (calls.append(ctx.shape[0]), orig(ctx))[1]
    try:
        assert fast._images_per_text_call() == 3      # chunks of 3 images: 3 + (1 padded to 3)
        got = fast(views)
    finally:
        del fast.text_encoder.forward
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    # 1 = the θ0 pass; without gradient the budget is 8x: one call padded to BATCH_IMAGES
    nograd = fast._images_per_text_call(grad=False)
    assert nograd == min(fast.batch_images, 24)
    assert set(calls) <= {1, 3, nograd} and 3 in calls


def test_zero_steps_is_zero_shot_from_cached_text(tiny_clip):
    model, tok = tiny_clip
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
    cfg = tiny_cfg(**{"TTA.STEPS": 0})
    ref = ReferenceEngine(model, enc, _objective("none"), cfg, "cpu")
    fast = FastEngine(model, enc, _objective("none"), cfg, "cpu")
    views = _views(4, B=3, V=1)
    # independent zero-shot: softmax(s · f(view0) · T(θ0)ᵀ)
    f = torch.nn.functional.normalize(model.encode_image(views[:, 0]), dim=-1)
    want = (model.logit_scale.exp() * f @ enc(enc.ctx_init).T).softmax(-1)
    assert torch.allclose(fast(views), want, atol=1e-5)
    assert torch.allclose(ref(views), want, atol=1e-5)


def test_non_finite_step_is_skipped_per_image(tiny_clip):
    """An image whose gradient is not finite keeps θ0 (the reference's rule); others still move."""
    _, fast = _engines(tiny_clip, "tpt", 1)
    img = fast.image_features(_views(8, B=3))
    real = fast._vjp_theta0

    def poisoned(cot):
        g = real(cot)
        g[1, 0, 0] = float("inf")
        return g
    fast._vjp_theta0 = poisoned
    ctx = fast.tune(img)
    init = fast.text_encoder.ctx_init
    assert torch.equal(ctx[1], init)
    assert not torch.allclose(ctx[0], init) and not torch.allclose(ctx[2], init)


def test_non_finite_loss_names_the_image(tiny_clip):
    model, tok = tiny_clip
    obj = _objective("ctpt")
    obj.node = type("N", (), {"LAMBDA": float("nan")})()
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
    fast = FastEngine(model, enc, obj, tiny_cfg(), "cpu")
    with pytest.raises(NonFiniteLossError, match="first.jpg"):
        fast(_views(1, B=2), ["first.jpg", "second.jpg"])


def test_bad_grad_mode_is_an_error(tiny_clip):
    with pytest.raises(ValueError, match="grad_mode"):
        _engines(tiny_clip, "tpt", 1, grad_mode="magic")


# ------------------------------------------------------------------------------ multi-process
def test_shard_and_merge():
    from argtca.engine.distributed import shard_indices
    from argtca.run_folder import merge_records
    todo = [0, 2, 3, 5, 8, 9, 11]
    shards = [shard_indices(todo, r, 3) for r in range(3)]
    assert sorted(sum(shards, [])) == todo
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    with pytest.raises(ValueError):
        shard_indices(todo, 3, 3)
    recs = [[{"index": i, "pred": i % 2, "label": 0, "conf": 0.5} for i in s] for s in shards]
    merged = merge_records(recs[::-1])
    assert [r["index"] for r in merged] == todo
    # a re-done image with the same result is fine, a different result is an error
    assert len(merge_records(recs + [recs[0][:1]])) == len(todo)
    bad = [dict(recs[0][0], pred=7)]
    with pytest.raises(RuntimeError, match="recorded twice"):
        merge_records(recs + [bad])


def test_fold_rank_files_resumes(tmp_path):
    from argtca.run_folder import fold_rank_files
    from argtca.run_folder import load_records, write_records
    write_records(str(tmp_path / "records.jsonl"),
                  [{"index": 4, "pred": 1, "label": 1, "conf": .9}])
    write_records(str(tmp_path / "records.rank0.jsonl"),
                  [{"index": 0, "pred": 0, "label": 1, "conf": .6}])
    with open(tmp_path / "records.rank1.jsonl", "w") as f:   # a torn last line (killed mid-write)
        f.write('{"index": 1, "pred": 2, "label": 2, "conf": 0.7}\n{"index": 3, "pr')
    merged = fold_rank_files(str(tmp_path))
    assert [r["index"] for r in merged] == [0, 1, 4]
    assert [r["index"] for r in load_records(str(tmp_path / "records.jsonl"))] == [0, 1, 4]
    assert not list(tmp_path.glob("records.rank*"))


_WORKER = r'''
import os, sys, json
sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
import torch
torch.set_num_threads(1)
from conftest import tiny_cfg
import argtca.trainers
from argtca.registry import TRAINER_REGISTRY
from argtca.trainers.distributed import distributed_test
cfg = tiny_cfg(**json.loads(sys.argv[1]))
cfg.freeze()
tr = TRAINER_REGISTRY.get("TPT")(cfg)
summary = distributed_test(tr)
print("RANK", os.environ["RANK"], "N", summary["n"], "ACC", summary["accuracy"])
print("ROWS", os.environ["RANK"], list(getattr(tr.engine, "jacobian_rows", None) or []))
'''


def _tiny_dataset_cfg(root, out, engine):
    return {"TRAINER.NAME": "TPT", "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root),
            "OUTPUT_DIR": str(out), "TTA.N_VIEWS": 4, "TTA.ENGINE": engine,
            "TTA.BATCH_IMAGES": 2, "SEED": 3}


@pytest.mark.parametrize("grad", ["", "jacobian"])
def test_two_gloo_processes_equal_one_process(tmp_path, grad):
    """torchrun-style: 2 CPU ranks (gloo) shard 7 images; merged records == one-process records.
    With the Jacobian at θ0, each rank computes half of its n·W rows and they all-gather."""
    engine = "fast"
    import json
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from argtca.bench.data import make_synthetic_coop
    from argtca.run_folder import load_records
    from argtca.registry import TRAINER_REGISTRY
    import argtca.trainers  # noqa: F401

    make_synthetic_coop(str(tmp_path / "data"), n_images=7, n_classes=3, pool=7, size=(48, 36))
    over = _tiny_dataset_cfg(tmp_path / "data", tmp_path / "one", engine)
    over["TTA.FAST.GRAD_MODE"] = grad or "auto"
    cfg = tiny_cfg(**over)
    cfg.freeze()
    tr = TRAINER_REGISTRY.get("TPT")(cfg)
    one = tr.test()
    D = tr.engine.text_encoder.ctx_init.numel()
    if grad:
        assert tr.engine.grad_mode == "jacobian" and tr.engine.jacobian_rows == (0, D)

    tests = Path(__file__).resolve().parents[1]
    script = tmp_path / "worker.py"
    script.write_text(_WORKER.format(repo=str(tests.parent), tests=str(tests)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    over["OUTPUT_DIR"] = str(tmp_path / "two")
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script), json.dumps(over)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert "RANK 1 N 7" in outs[1]                     # every rank gets rank 0's summary
    half = -(-D // 2)
    rows = [f"ROWS {r} {[r * half, min(D, (r + 1) * half)] if grad else []}" for r in range(2)]
    assert rows[0] in outs[0] and rows[1] in outs[1], (rows, outs)
    a = load_records(str(tmp_path / "one" / "records.jsonl"))
    b = load_records(str(tmp_path / "two" / "records.jsonl"))
    assert [r["index"] for r in b] == list(range(7))
    for x, y in zip(sorted(a, key=lambda r: r["index"]), b):
        assert (x["index"], x["pred"], x["label"]) == (y["index"], y["pred"], y["label"])
        assert abs(x["conf"] - y["conf"]) < 1e-5
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert two["n"] == one["n"] == 7
    assert abs(two["accuracy"] - one["accuracy"]) < 1e-9 and abs(two["ece"] - one["ece"]) < 1e-4
    assert not list((tmp_path / "two").glob("records.rank*"))
    # the timeline: one process's, and each rank's own (4 + 3 images, batches of 2)
    assert one["timing"]["loop_s"] == one["seconds_this_session"]
    t = one["timing"]
    assert 0 <= t["prepare_s"] <= t["first_batch_s"] <= t["loop_s"]
    ranks = two["timing"]["ranks"]
    assert [(r["rank"], r["images"]) for r in ranks] == [(0, 4), (1, 3)]
    assert all(r["loop_s"] <= two["timing"]["loop_s"] and r["first_batch_s"] <= r["loop_s"]
               and r["steady_img_per_s"] > 0 for r in ranks)


def test_text_calls_are_balanced(tiny_clip):
    """15 images fit a no-grad call, 16 are a batch: 2 calls of 8 (not 15 + 1 padded to 15)."""
    _, fast = _engines(tiny_clip, "tpt", 1)
    fast.batch_images = 16
    per = fast.num_prompts * fast.text_encoder.seq_len
    fast.text_tokens = -(-15 * per // 8)          # 8x this budget holds 15 images, not 16
    assert fast._images_per_text_call(grad=False) == 8
    assert fast._images_per_text_call(grad=True) == 1
    fast.text_tokens = 5 * per                    # grad: 5 a call -> 4 calls of 4
    assert fast._images_per_text_call(grad=True) == 4
