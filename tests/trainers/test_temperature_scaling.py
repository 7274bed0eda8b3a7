"""Temperature scaling (zeroshot_ts, tpt_ts): T by NLL on the validation split (hand-computed
optimum on a tiny problem), applied to the final prediction only, cached in the run folder, fixed-T
option, a validation split that shares test images refused."""
import json
import math

import pytest
import torch

from conftest import tiny_cfg
from helpers_data import make_caltech, make_caltech_with_val


def test_fitted_temperature_is_the_hand_computed_optimum():
    """Two classes, every logit pair (2, 0), 3 of 4 labels 0. NLL(b) = 3 log(1+e^{-2b}) +
    log(1+e^{2b}); d/db = 0  <=>  sigma(2b) = 3/4  <=>  b = ln(3)/2, so T = 2/ln 3 = 1.8205."""
    from argtca.trainers.ts import fit_temperature, nll
    logits = torch.tensor([[2.0, 0.0]] * 4)
    labels = torch.tensor([0, 0, 0, 1])
    T = fit_temperature(logits, labels)
    assert abs(T - 2 / math.log(3)) < 1e-9
    assert nll(logits, labels, T) < min(nll(logits, labels, T * 1.01),
                                        nll(logits, labels, T / 1.01))
    # a shift of one image's logits changes nothing (softmax is shift-invariant)
    shifted = logits + torch.tensor([[5.0], [0.0], [0.0], [0.0]])
    assert abs(fit_temperature(shifted, labels) - T) < 1e-9
    # all correct with a margin: no finite optimum; the search's smallest T
    assert fit_temperature(logits, torch.zeros(4, dtype=torch.long)) == pytest.approx(1e-3)


def test_the_scaled_objective_changes_only_the_prediction():
    from argtca.config import get_cfg_default
    from argtca.engine.objectives import Objective, TCAObjective, TPTObjective
    from argtca.trainers.ts import scaled_objective
    logits = torch.randn(2, 3, 6) * 5
    o = scaled_objective(TPTObjective(None))
    o.temperature = 2.5
    assert torch.allclose(o.probs(logits), (logits / 2.5).softmax(-1), atol=1e-6)
    assert torch.equal(o.scores(logits), logits) and type(o).loss is Objective.loss
    node = get_cfg_default().TRAINER.TCA.clone()   # M'=2: 3 classes x 2 prompts
    base = TCAObjective(node)
    t = scaled_objective(base)
    t.temperature = 0.5
    assert torch.allclose(t.probs(logits), (base.log_probs(logits) / 0.5).softmax(-1), atol=1e-6)
    assert torch.equal(t.scores(logits), base.scores(logits))


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_caltech_with_val(tmp_path_factory.mktemp("ts"))


def _cfg(root, out, name, **over):
    over = {"DATASET.ROOT": str(root), "DATASET.NAME": "Caltech101", "OUTPUT_DIR": str(out),
            "TRAINER.NAME": name, "TTA.N_VIEWS": 4, **over}
    return tiny_cfg(**over)


def _trainer(cfg):
    import argtca.trainers  # noqa: F401
    from argtca.registry import TRAINER_REGISTRY
    return TRAINER_REGISTRY.get(cfg.TRAINER.NAME)(cfg)


def test_zeroshot_ts_fits_on_val_and_scales_the_test_predictions(tree, tmp_path):
    from argtca.trainers.ts import fit_temperature
    tr = _trainer(_cfg(tree, tmp_path / "zs", "ZeroshotTS", **{"TRAINER.TS.FIT_ON": "zeroshot"}))
    s = tr.test()
    info = s["temperature"]
    assert info["fit"] == "val" and info["n_val"] == 6 and info["fit_on"] == "zeroshot"
    # by hand: the val and test logits of the same model at T = 1, the fit, the scaled softmax
    val_logp, val_y = tr.val_logits(tr.val_dataset())
    assert val_y.tolist() == [0, 0, 1, 1, 2, 2]
    assert info["T"] == pytest.approx(fit_temperature(val_logp, val_y), rel=1e-9)
    assert info["nll_val"] <= info["nll_val_T1"] + 1e-12
    test_logp, test_y = tr.val_logits(tr.dataset)
    p = (test_logp / info["T"]).softmax(-1)
    recs = [json.loads(l) for l in (tmp_path / "zs" / "records.jsonl").read_text().splitlines()]
    for r in recs:
        assert r["conf"] == pytest.approx(float(p[r["index"]].max()), abs=1e-6)
        assert r["p_label"] == pytest.approx(float(p[r["index"], r["label"]]), abs=1e-6)
    # cached: a second trainer on the folder reuses the fit (and the finished records)
    cached = json.loads((tmp_path / "zs" / "temperature.json").read_text())
    assert cached["T"] == info["T"]
    s2 = _trainer(_cfg(tree, tmp_path / "zs", "ZeroshotTS",
                       **{"TRAINER.TS.FIT_ON": "zeroshot"})).test()
    assert s2["temperature"]["T"] == info["T"] and s2["accuracy"] == s["accuracy"]


def test_tpt_ts_fits_on_its_own_outputs_and_fixed_t(tree, tmp_path):
    s = _trainer(_cfg(tree, tmp_path / "tpt", "TPTTS")).test()
    assert s["temperature"]["fit_on"] == "method" and s["temperature"]["T"] > 0
    assert s["method"] == "tpt_ts" and s["trainer_cfg"]["TRAINER.TS.FIT"] == "val"
    plain = _trainer(_cfg(tree, tmp_path / "plain", "TPT")).test()
    assert plain["accuracy"] == s["accuracy"]   # the tuning and the argmax never see T
    f = _trainer(_cfg(tree, tmp_path / "fixed", "TPTTS",
                      **{"TRAINER.TS.FIT": "fixed", "TRAINER.TS.T": 1.16})).test()
    assert f["temperature"] == {"fit": "fixed", "T": 1.16} and f["label"] == "TPT + TS (T=1.16)"
    assert f["accuracy"] == plain["accuracy"]
    assert not (tmp_path / "fixed" / "temperature.json").exists()


def test_a_val_split_sharing_test_images_is_refused(tmp_path):
    from argtca.trainers.ts import TemperatureError
    root = make_caltech(tmp_path / "d")   # its val is test[:1]
    tr = _trainer(_cfg(root, tmp_path / "o", "ZeroshotTS"))
    with pytest.raises(TemperatureError, match=r"'val' split shares 1 images with the evaluated "
                                               r"split .*TRAINER.TS.FIT fixed"):
        tr.test()
