"""``TTA.PROMPTS attributes``: a training-free or online method's class feature is the mean of the
class's M' attribute prompts chosen by ArgTCA's Phase 1 (TRAINER.ARGTCA settings)."""
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argtca.config import ConfigError
from argtca.trainers.methods import TPT
from argtca.config.methods import find_trainer
from conftest import tiny_cfg
from helpers_data import ATTRS, CLASSES

TPS = find_trainer("tps")   # declared on its adapter (argtca/adapters/tps.py)


def _cfg(data, out, **over):
    root, attrs = data
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root),
                      "DATASET.ATTRIBUTE_FILE": str(attrs), "TTA.N_VIEWS": 4,
                      "OUTPUT_ROOT": str(out), "TTA.PROMPTS": "attributes",
                      "TRAINER.ARGTCA.SELECTOR": "tca", **over})
    cfg.freeze()
    return cfg


def test_class_feature_is_the_mean_of_the_chosen_attribute_prompts(data, tmp_path):
    t = TPS(_cfg(data, tmp_path))
    summary = t.test()
    # selector "tca": the first M'=2 attributes of each class, in the file's order
    chosen = {c: ATTRS[c].split()[:2] for c in CLASSES}
    assert t.text_encoder.prompts == [f"a photo of a {a} {c}." for c in CLASSES for a in chosen[c]]
    with torch.no_grad():
        feats = t.text_encoder(t.text_encoder.ctx_init)          # [K·M', E], unit rows
    want = F.normalize(torch.stack([feats[2 * k] + feats[2 * k + 1] for k in range(3)]), dim=-1)
    assert torch.allclose(t.engine.adapter.text, want, atol=1e-6)
    out = Path(t.output_dir())
    assert json.loads((out / "phase1.json").read_text())["selected"] == chosen
    assert summary["label"] == "TPS + attributes (tca)" and summary["selector"] == "tca"
    assert "FILE_SHA256.DATASET.ATTRIBUTE_FILE" in json.loads((out / "config.json").read_text())


def test_class_prompts_read_no_attribute_file_and_differ_in_folder(data, tmp_path):
    a = TPS(_cfg(data, tmp_path, **{"TTA.PROMPTS": "class"}))
    assert a.attribute_file is None and a.selector is None and a.display_label == "TPS"
    assert "FILE_SHA256.DATASET.ATTRIBUTE_FILE" not in a.fingerprint()
    b = TPS(_cfg(data, tmp_path))
    assert Path(a.output_dir()).parent != Path(b.output_dir()).parent


def test_prompt_tuning_methods_refuse_attribute_prompts(data, tmp_path):
    with pytest.raises(ConfigError, match="TTA.PROMPTS='attributes' is for the training-free"):
        TPT(_cfg(data, tmp_path))


def test_a_missing_attribute_file_fails_at_load_time(data, tmp_path):
    with pytest.raises(Exception, match="nowhere.json"):
        TPS(_cfg(data, tmp_path, **{"DATASET.ATTRIBUTE_FILE": str(tmp_path / "nowhere.json")}))
