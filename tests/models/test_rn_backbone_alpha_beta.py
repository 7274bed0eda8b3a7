"""ResNet CLIP (RN50 = open_clip's RN50-quickgelu; a tiny ModifiedResNet config for the runs) with
every method, and TCA/ArgTCA's alpha/beta following M' as TCA's official script sets them."""
import json
import os

import pytest
import torch

from argtca.run import main
from conftest import REPO, tiny_cfg
from helpers_data import make_caltech, write_attributes

TINY_RN = ["MODEL.BACKBONE.NAME", "argtca-tiny-rn-test", "MODEL.PRETRAINED", "random",
           "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0",
           "USE_CUDA", "False", "VERBOSE", "False", "TRAINER.ARGTCA.GAT.EPOCHS", "2"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    make_caltech(root)
    return root, write_attributes(root / "attrs.json")


def _run(data, out, method, *extra):
    root, attr = data
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        rc = main(["--root", str(root), "--output-dir", str(out), "--dataset-config-file",
                   "configs/datasets/caltech101.yaml", "--config-file",
                   f"configs/trainers/{method}.yaml", "DATASET.ATTRIBUTE_FILE", str(attr)]
                  + TINY_RN + list(extra))
    finally:
        os.chdir(cwd)
    assert rc == 0
    return json.loads((out / "summary.json").read_text())


def test_rn50_is_openais_quickgelu_resnet():
    import open_clip
    from argtca.models.backbones import open_clip_name
    from argtca.models.clip import load_clip
    from argtca.models.text import PromptTextEncoder
    assert open_clip_name("RN50") == "RN50-quickgelu"
    c = open_clip.get_model_config("RN50-quickgelu")
    assert c["quick_gelu"] is True and c["vision_cfg"]["layers"] == [3, 4, 6, 3]
    model, tok = load_clip(tiny_cfg(**{"MODEL.BACKBONE.NAME": "RN50"}))
    assert type(model.visual).__name__ == "ModifiedResNet"
    assert isinstance(model.transformer.resblocks[0].mlp.gelu, open_clip.transformer.QuickGELU)
    enc = PromptTextEncoder(model, tok, ["dog.", "cat."])
    with torch.no_grad():
        assert enc(enc.ctx_init).shape == (2, 1024)
        assert model.encode_image(torch.zeros(1, 3, 224, 224)).shape == (1, 1024)


@pytest.mark.parametrize("method", ["zeroshot", "tpt", "ctpt", "otpt", "atpt", "tca", "argtca"])
def test_every_method_runs_on_a_resnet_clip(data, tmp_path, method):
    s = _run(data, tmp_path / method, method)
    assert s["n"] == 6 and s["backbone"] == "argtca-tiny-rn-test" and 0 <= s["accuracy"] <= 100
    recs = [json.loads(l) for l in (tmp_path / method / "records.jsonl").read_text().splitlines()]
    assert all(0 < r["conf"] <= 1 for r in recs)


@pytest.mark.parametrize("m, alpha, beta", [(1, 1.0, 10.0), (2, 10.0, 35.0), (3, 10.0, 35.0)])
def test_alpha_beta_follow_m_prime_and_are_recorded(data, tmp_path, m, alpha, beta):
    # TCA's script: M'=1 -> 1/10, M'=2 -> 10/35 (both backbones); argtca keeps M'=2's for M'>2
    s = _run(data, tmp_path / "tca", "tca", "TRAINER.TCA.NUM_ATTRIBUTES", str(m))
    assert s["trainer_cfg"]["TRAINER.TCA.ALPHA"] == alpha
    assert s["trainer_cfg"]["TRAINER.TCA.BETA"] == beta
    # the fingerprint (config.json) holds the resolved numbers, so a later explicit run with the
    # same values resumes this folder and other values are refused
    fp = json.dumps(json.loads((tmp_path / "tca" / "config.json").read_text()))
    assert f'"TRAINER.TCA.ALPHA": {alpha}' in fp and f'"TRAINER.TCA.BETA": {beta}' in fp


def test_explicit_values_win_and_auto_can_be_switched_off(data, tmp_path):
    s = _run(data, tmp_path / "a", "argtca", "TRAINER.ARGTCA.NUM_ATTRIBUTES", "1",
             "TRAINER.ARGTCA.ALPHA", "5.0")
    assert s["trainer_cfg"]["TRAINER.ARGTCA.ALPHA"] == 5.0     # given: wins
    assert s["trainer_cfg"]["TRAINER.ARGTCA.BETA"] == 10.0     # left at the default: by M'
    assert s["overrides"]["TRAINER.ARGTCA.BETA"] == 10.0
    s = _run(data, tmp_path / "b", "tca", "TRAINER.TCA.NUM_ATTRIBUTES", "1",
             "TRAINER.TCA.AUTO_ALPHA_BETA", "False")
    tc = s["trainer_cfg"]
    assert (tc["TRAINER.TCA.ALPHA"], tc["TRAINER.TCA.BETA"]) == (10.0, 35.0)


def test_the_objective_uses_the_resolved_weights():
    """L_reg = -alpha * L_inter + beta * L_intra with M'=1's (1, 10) worked out by hand on 2
    classes x 1 attribute: L_intra = 0 (one prompt per class), L_inter = mean_k |mu_k - mu|."""
    from argtca.engine.objectives import TCAObjective
    from argtca.trainers.methods import auto_alpha_beta
    cfg = tiny_cfg(**{"TRAINER.TCA.NUM_ATTRIBUTES": 1})
    values, lines = auto_alpha_beta(cfg, "TCA")
    assert lines == ["TRAINER.TCA.ALPHA=1, BETA=10 by NUM_ATTRIBUTES=1 (auto)"]
    assert values == {("TRAINER", "TCA", "ALPHA"): 1.0, ("TRAINER", "TCA", "BETA"): 10.0}
    cfg.TRAINER.TCA.ALPHA, cfg.TRAINER.TCA.BETA = 1.0, 10.0
    text = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    # mu = (0.5, 0.5); |t_k - mu| = sqrt(0.5) for both
    assert torch.allclose(TCAObjective(cfg.TRAINER.TCA).regularizer(text),
                          torch.tensor([-(0.5 ** 0.5)]))
    cfg.defrost()
    cfg.TRAINER.TCA.ALPHA = 3.0
    assert torch.allclose(TCAObjective(cfg.TRAINER.TCA).regularizer(text),
                          torch.tensor([-3 * 0.5 ** 0.5]))
