"""CoOp's learned context as the initial context: checkpoints written by CoOp's and Dassl's own
code (tests/helpers_coop_ckpt.py, a tiny OpenAI-format CLIP), read without running code from the
file, checked (n_ctx, width, CSC), and giving exactly CoOp's text features before any tuning
step — standalone (TTA.CTX_CHECKPOINT) and through CoOp's train.py (--eval-only --model-dir
--load-epoch)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import REPO
from helpers_dassl import COOP, coop_env
from helpers_data import CLASSES, make_caltech

@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    env = coop_env(runtime=False)
    out = tmp_path_factory.mktemp("coop_ckpt")
    names = out / "names.json"
    names.write_text(json.dumps(list(CLASSES)))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "helpers_coop_ckpt.py"), str(out),
                        str(names)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    data = make_caltech(tmp_path_factory.mktemp("caltech"))
    return {"out": out, "data": data, "env": env, "ref": torch.load(out / "coop_text.pt")}


def _cfg(ckpt, **over):
    from argtca.config import get_cfg_default
    cfg = get_cfg_default()
    cfg.merge_from_file(str(REPO / "configs" / "datasets" / "caltech101.yaml"))
    cfg.merge_from_list(["DATASET.ROOT", str(ckpt["data"]),
                         "MODEL.BACKBONE.NAME", "argtca-tiny-test",
                         "MODEL.PRETRAINED", str(ckpt["out"] / "tiny_openai.pt"),
                         "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4", "USE_CUDA", "False",
                         "VERBOSE", "False", "DATALOADER.NUM_WORKERS", "0"])
    for k, v in over.items():
        cfg.merge_from_list([k, v])
    return cfg


def _trainer(cfg, name="TPT"):
    import argtca.trainers  # noqa: F401
    from argtca.registry import TRAINER_REGISTRY
    return TRAINER_REGISTRY.get(name)(cfg)


def test_coop_files_need_the_restricted_reader_and_it_runs_no_code(ckpt):
    from argtca.models.coop_ckpt import OpaqueObject, load_coop_context, restricted_load
    f = ckpt["out"] / "coop" / "prompt_learner" / "model.pth.tar-2"
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(f, weights_only=True)   # Dassl pickled its scheduler objects
    obj = restricted_load(str(f))
    assert set(obj["state_dict"]) == {"ctx", "token_prefix", "token_suffix"}
    assert isinstance(obj["scheduler"]["successor"], OpaqueObject)   # not CosineAnnealingLR
    c = load_coop_context(str(ckpt["out"] / "coop"))   # folder, no epoch: Dassl's last record
    assert c["file"] == str(f) and c["epoch"] == 2
    assert torch.equal(c["ctx"], ckpt["ref"]["ctx"])


def test_a_file_that_would_run_code_is_not_run(tmp_path):
    from argtca.models.coop_ckpt import OpaqueObject, restricted_load

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))
    torch.save({"state_dict": {"ctx": torch.ones(4, 32)}, "evil": Boom()}, tmp_path / "m.pth.tar")
    obj = restricted_load(str(tmp_path / "m.pth.tar"))
    assert isinstance(obj["evil"], OpaqueObject) and not (tmp_path / "ran").exists()
    assert torch.equal(obj["state_dict"]["ctx"], torch.ones(4, 32))


def test_initial_text_features_are_coops_own(ckpt):
    """CoOp's TextEncoder(PromptLearner()) on CoOp's tiny CLIP = argtca's encoder at its initial
    context, once TTA.CTX_CHECKPOINT names the run; without it they differ."""
    tr = _trainer(_cfg(ckpt, **{"TTA.CTX_CHECKPOINT": str(ckpt["out"] / "coop"),
                                "TTA.CTX_CHECKPOINT_EPOCH": "2"}))
    tr.build_model()
    enc = tr.text_encoder
    assert torch.equal(enc.ctx_init, ckpt["ref"]["ctx"])
    assert torch.equal(tr.engine.initial_context(2)[1], ckpt["ref"]["ctx"])
    with torch.no_grad():
        text = enc(enc.ctx_init)
    torch.testing.assert_close(text, ckpt["ref"]["text"], atol=2e-6, rtol=0)
    plain = _trainer(_cfg(ckpt))
    plain.build_model()
    with torch.no_grad():
        text0 = plain.text_encoder(plain.text_encoder.ctx_init)
    assert (text0 - ckpt["ref"]["text"]).abs().max() > 1e-2


def test_context_length_width_and_csc_are_checked_at_load(ckpt, tmp_path):
    from argtca.models.coop_ckpt import CoopCheckpointError
    with pytest.raises(CoopCheckpointError, match=r"16 context vectors but TTA.N_CTX=4; set "
                                                  r"TTA.N_CTX 16"):
        _trainer(_cfg(ckpt, **{"TTA.CTX_CHECKPOINT": str(ckpt["out"] / "coop16")}))
    with pytest.raises(CoopCheckpointError, match=r"class-specific contexts .*shape \(3, 4, 32\)"):
        _trainer(_cfg(ckpt, **{"TTA.CTX_CHECKPOINT": str(ckpt["out"] / "coop_csc")}), "CTPT")
    with pytest.raises(CoopCheckpointError, match=r"model.pth.tar-7 \(epoch 7\); the folder has "
                                                  r"\['model.pth.tar-2'\]"):
        _trainer(_cfg(ckpt, **{"TTA.CTX_CHECKPOINT": str(ckpt["out"] / "coop"),
                               "TTA.CTX_CHECKPOINT_EPOCH": "7"}))
    wide = tmp_path / "prompt_learner"
    wide.mkdir()
    torch.save({"state_dict": {"ctx": torch.randn(4, 48)}, "epoch": 1}, wide / "model-best.pth.tar")
    tr = _trainer(_cfg(ckpt, **{"TTA.CTX_CHECKPOINT": str(tmp_path)}))
    with pytest.raises(CoopCheckpointError,
                       match=r"context width 48 does not match "
                             r"MODEL.BACKBONE.NAME=argtca-tiny-test \(text width 32\)"):
        tr.build_model()


def test_every_tuned_method_starts_from_the_checkpoint(ckpt, tmp_path):
    from argtca.run import main
    coop = str(ckpt["out"] / "coop")
    for method in ("tpt", "tca"):
        args = ["--root", str(ckpt["data"]), "--output-dir", str(tmp_path / method),
                "--dataset-config-file", "configs/datasets/caltech101.yaml",
                "--config-file", f"configs/trainers/{method}.yaml",
                "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED",
                str(ckpt["out"] / "tiny_openai.pt"), "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4",
                "USE_CUDA", "False", "VERBOSE", "False", "DATALOADER.NUM_WORKERS", "0",
                "TTA.CTX_CHECKPOINT", coop]
        if method == "tca":
            from helpers_data import write_attributes
            args += ["DATASET.ATTRIBUTE_FILE", str(write_attributes(tmp_path / "a.json"))]
        cwd = os.getcwd()
        os.chdir(REPO)
        try:
            assert main(args) == 0
        finally:
            os.chdir(cwd)
        s = json.loads((tmp_path / method / "summary.json").read_text())
        assert s["overrides"]["TTA.CTX_CHECKPOINT"] == coop and s["n"] == 6


def test_model_dir_and_load_epoch_through_coops_train_py(ckpt, tmp_path):
    """CoOp's train.py (+ the README's one import line) with --eval-only --model-dir --load-epoch
    gives the records of argtca.run with TTA.CTX_CHECKPOINT; without --eval-only it is refused."""
    # the README's one import line added to CoOp's train.py (as tests/dassl_plugin/test_dassl.py
    # does)
    SED_ONE_LINE = r"/^import trainers.zsclip$/a import argtca.dassl_compat"
    env = coop_env()                        # skips without Dassl's runtime dependencies
    train = tmp_path / "train.py"
    shutil.copy(COOP / "train.py", train)
    subprocess.run(["sed", "-i", SED_ONE_LINE, str(train)], check=True)
    coop = str(ckpt["out"] / "coop")
    common = ["--root", str(ckpt["data"]), "--seed", "1", "--trainer", "TPT",
              "--dataset-config-file", str(REPO / "configs" / "datasets" / "caltech101.yaml"),
              "--config-file", str(REPO / "configs" / "trainers" / "tpt.yaml"),
              "--backbone", "argtca-tiny-test"]
    opts = ["INPUT.SIZE", "(32, 32)", "MODEL.PRETRAINED", str(ckpt["out"] / "tiny_openai.pt"),
            "TTA.N_VIEWS", "4", "USE_CUDA", "False", "DATALOADER.NUM_WORKERS", "0",
            "VERBOSE", "False"]
    # CoOp's Caltech101 reader wants every class in train/val: the tiny tree's split has one
    split_path = ckpt["data"] / "caltech-101" / "split_zhou_Caltech101.json"
    split = json.loads(split_path.read_text())
    split["train"] = split["val"] = [e for e in split["test"] if e[0].endswith("0000.jpg")]
    split_path.write_text(json.dumps(split))
    p = subprocess.run([sys.executable, str(train)] + common + [
        "--output-dir", str(tmp_path / "dassl"), "--eval-only", "--model-dir", coop,
        "--load-epoch", "2"] + opts, env=env, capture_output=True, text=True, timeout=300,
        cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    s = json.loads((tmp_path / "dassl" / "summary.json").read_text())
    assert s["overrides"]["TTA.CTX_CHECKPOINT"] == coop
    assert s["overrides"]["TTA.CTX_CHECKPOINT_EPOCH"] == 2
    from argtca.run import main
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        assert main(["--root", str(ckpt["data"]), "--seed", "1", "--output-dir",
                     str(tmp_path / "plain"), "--dataset-config-file",
                     "configs/datasets/caltech101.yaml",
                     "--config-file", "configs/trainers/tpt.yaml",
                     "MODEL.BACKBONE.NAME", "argtca-tiny-test", "TTA.CTX_CHECKPOINT", coop,
                     "TTA.CTX_CHECKPOINT_EPOCH", "2"] + opts) == 0
    finally:
        os.chdir(cwd)

    def recs(d):
        return [(r["index"], r["pred"], round(r["conf"], 5))
                for r in map(json.loads, (d / "records.jsonl").read_text().splitlines())]
    assert recs(tmp_path / "dassl") == recs(tmp_path / "plain")
    p = subprocess.run([sys.executable, str(train)] + common + [
        "--output-dir", str(tmp_path / "ignored"), "--model-dir", coop] + opts,
        env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        f"error: --model-dir {coop}: CoOp's train.py reads it only with --eval-only; add "
        f"--eval-only (or set TTA.CTX_CHECKPOINT {coop})")
