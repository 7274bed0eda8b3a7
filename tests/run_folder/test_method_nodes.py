"""A run's fingerprint holds only the method nodes (``TRAINER.<NODE>``) its trainer reads
(``config_nodes``): adding a method, a new node of defaults, moves no other method's run folder,
while a run's own node (and, for a temperature-scaled method, its base method's and TS's) still
names its experiment. Fingerprints written while every node was in them are still accepted."""
import json
from pathlib import Path

import pytest
from yacs.config import CfgNode as CN

from argtca.config import defaults as config_defaults_module, get_cfg_default
from argtca.run import build_parser, build_trainer, setup_cfg
from argtca.run_folder import (ConfigMismatchError, check_or_write_fingerprint,
                               config_defaults, result_fingerprint)

REPO = Path(__file__).resolve().parents[2]
TINY = ["DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "VERBOSE", "False"]
# a method of each kind: prompt tuning, training-free, TCA and ArgTCA (attribute prompts,
# Phase 1), temperature scaling over a base method
METHODS = ["tpt", "zero", "tca", "argtca", "tpt_ts"]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    # the demo's images are generated once into the cache; run folders are relative to cwd
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path_factory.getbasetemp() / "argtca_cache"))
    monkeypatch.chdir(tmp_path_factory.getbasetemp())


def _trainer(method, *opts):
    args = build_parser().parse_args(
        ["--seed", "1", "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
         "--config-file", str(REPO / f"configs/trainers/{method}.yaml")] + TINY + list(opts))
    return build_trainer(setup_cfg(args))


def _identity(method, *opts):
    t = _trainer(method, *opts)
    return t.fingerprint(), t.output_dir()


@pytest.fixture
def new_builtin_node(monkeypatch):
    """As if a new built-in method's node were among the defaults (declared beside its class
    with argtca.plugins.method, every built-in node is in every run's configuration)."""
    node = CN({"WEIGHT": 0.5, "SUB": CN({"N": 3})})
    monkeypatch.setitem(config_defaults_module._C.TRAINER, "NEWMETHOD", node)
    config_defaults.cache_clear()
    yield
    config_defaults.cache_clear()


@pytest.mark.parametrize("method", METHODS)
def test_a_new_methods_node_moves_no_other_runs_folder(method, request):
    fp, out = _identity(method)
    request.getfixturevalue("new_builtin_node")
    t = _trainer(method)
    assert t.cfg.TRAINER.NEWMETHOD.SUB.N == 3         # the run's config has the node ...
    assert not any(k.startswith("TRAINER.NEWMETHOD.") for k in t.fingerprint())
    assert t.fingerprint() == fp and t.output_dir() == out   # ... its identity does not
    # nor does another method's value in it
    assert _identity(method, "TRAINER.NEWMETHOD.WEIGHT", "0.25") == (fp, out)


@pytest.mark.parametrize("method, own, value", [
    ("tpt", "TRAINER.TPT.ENABLED", "False"),
    ("zero", "TRAINER.ZERO.TEMPERATURE", "0.01"),
    ("tca", "TRAINER.TCA.BETA", "20.0"),
    ("argtca", "TRAINER.ARGTCA.BETA", "20.0"),
    ("argtca", "TRAINER.ARGTCA.NUM_CANDIDATES", "4"),
    ("tpt_ts", "TRAINER.TS.T", "1.5"),                  # the TS node
    ("tpt_ts", "TRAINER.TPT.ENABLED", "False"),         # the base method's node
    ("zeroshot_ts", "TRAINER.ZEROSHOTCLIP.TEMPLATE", "a photo of a {}, a thing."),
])
def test_a_change_of_a_node_the_run_reads_is_another_experiment(method, own, value):
    fp, out = _identity(method)
    fp2, out2 = _identity(method, own, value)
    assert fp2[own] != fp[own] and Path(out2).parent != Path(out).parent


@pytest.mark.parametrize("method, other, value", [
    ("tpt", "TRAINER.TCA.BETA", "20.0"), ("zero", "TRAINER.ARGTCA.NUM_CANDIDATES", "4"),
    ("tca", "TRAINER.ARGTCA.BETA", "20.0"), ("argtca", "TRAINER.TCA.BETA", "20.0"),
    ("tpt_ts", "TRAINER.ZEROSHOTCLIP.TEMPLATE", "a photo of a {}, a thing."),
    ("tpt_ts", "TRAINER.CTPT.LAMBDA", "25.0")])
def test_another_methods_node_is_not_in_the_fingerprint(method, other, value):
    fp, out = _identity(method)
    assert other not in fp
    assert _identity(method, other, value) == (fp, out)


def test_attribute_prompts_read_argtcas_node_class_prompts_do_not():
    """A training-free method runs Phase 1 (TRAINER.ARGTCA) only with TTA.PROMPTS attributes."""
    key = "TRAINER.ARGTCA.NUM_CANDIDATES"
    fp, out = _identity("zero", "TTA.PROMPTS", "attributes")
    fp2, out2 = _identity("zero", "TTA.PROMPTS", "attributes", key, "4")
    assert (fp[key], fp2[key]) == (get_cfg_default().TRAINER.ARGTCA.NUM_CANDIDATES, 4)
    assert Path(out2).parent != Path(out).parent
    assert key not in _identity("zero")[0]


def test_every_trainers_nodes_are_config_nodes():
    """A node a trainer declares it reads exists (a misspelt name would leave its keys out)."""
    import argtca.trainers  # noqa: F401  (registration)
    from argtca.registry import TRAINER_REGISTRY
    cfg = get_cfg_default()
    attributes = cfg.clone()
    attributes.TTA.PROMPTS = "attributes"
    for cls in TRAINER_REGISTRY.registered_objects():
        for c in (cfg, attributes):
            nodes = cls.config_nodes(c)
            assert nodes and all(isinstance(cfg.TRAINER.get(n), CN) for n in nodes), \
                (cls.__name__, nodes)


def test_result_fingerprint_keeps_trainer_name_and_the_given_nodes():
    cfg = get_cfg_default()
    cfg.TRAINER.NAME = "TPT"
    every = result_fingerprint(cfg)
    assert "TRAINER.TDA.POS_ALPHA" in every           # no nodes given: every node
    fp = result_fingerprint(cfg, ["TPT", "ts"])
    nodes = {k.split(".")[1] for k in fp if k.startswith("TRAINER.") and k.count(".") > 1}
    assert nodes == {"TPT", "TS"} and fp["TRAINER.NAME"] == "TPT"
    assert {k for k in fp if not k.startswith("TRAINER.")} == \
        {k for k in every if not k.startswith("TRAINER.")}


# ------------------------------------------------ folders written while every node was in
def _old_and_new():
    cfg = get_cfg_default()
    cfg.TRAINER.NAME = "TPT"
    return result_fingerprint(cfg), result_fingerprint(cfg, ["TPT"])


def test_an_older_fingerprint_with_every_node_is_accepted_and_upgraded(tmp_path):
    old, new = _old_and_new()
    old["TRAINER.TDA.POS_ALPHA"] = 99.0   # another method's value: never read by this run
    (tmp_path / "config.json").write_text(json.dumps(old))
    (tmp_path / "records.jsonl").write_text('{"index": 0}\n')
    check_or_write_fingerprint(str(tmp_path), new)
    assert json.loads((tmp_path / "config.json").read_text()) == json.loads(json.dumps(new))


def test_an_older_fingerprint_of_other_own_values_is_still_refused(tmp_path):
    old, new = _old_and_new()
    old["TRAINER.TPT.ENABLED"] = False
    (tmp_path / "config.json").write_text(json.dumps(old))
    (tmp_path / "records.jsonl").write_text('{"index": 0}\n')
    with pytest.raises(ConfigMismatchError, match="TRAINER.TPT.ENABLED"):
        check_or_write_fingerprint(str(tmp_path), new)


def test_a_stream_state_saved_with_every_node_differs_in_none():
    from argtca.run_folder import fingerprint_differences as _differing
    cfg = get_cfg_default()
    cfg.TRAINER.NAME = "TDA"
    old, new = result_fingerprint(cfg), result_fingerprint(cfg, ["TDA"])
    old["TRAINER.DMN.BETA"] = 99.0
    assert _differing(old, new) == []
    old["TRAINER.TDA.POS_ALPHA"] = 99.0
    assert [d.split(":")[0] for d in _differing(old, new)] == ["TRAINER.TDA.POS_ALPHA"]


def test_settings_json_names_only_the_nodes_the_run_reads():
    from argtca.trainers.identity import readable_settings
    t = _trainer("tpt", "TRAINER.TCA.BETA", "20.0", "TTA.LR", "0.01")
    over = readable_settings(t.cfg, t.fingerprint(), {})["overrides"]
    assert over.get("TTA.LR") == 0.01 and "TRAINER.TCA.BETA" not in over


def test_the_report_ignores_an_override_of_a_node_the_run_does_not_read():
    """Seeds of one experiment folder, one started with another method's override (in its
    summary's overrides, not in its fingerprint), are one cell of the report."""
    from argtca.report.identity import settings_of
    cfg = get_cfg_default()
    cfg.TRAINER.NAME = "TPT"
    config = result_fingerprint(cfg, ["TPT"])
    plain = settings_of(config, {"VERBOSE": False})
    assert settings_of(config, {"VERBOSE": False, "TRAINER.TCA.BETA": 20.0}) == plain
    # a node the run does not read is no setting of it, not even at its default
    assert "TRAINER.TCA.BETA" not in plain and plain["TRAINER.TPT.ENABLED"] is True
    # a folder without config.json (older) keeps every override
    assert settings_of({}, {"TRAINER.TCA.BETA": 20.0})["TRAINER.TCA.BETA"] == 20.0


def test_a_tuning_steps_keys_are_no_setting_of_a_method_without_one():
    """TTA.LR and the other keys only a tuning step reads (declared tuning=True) leave the
    fingerprint of a method that takes none: TDA with another TTA.LR is the same experiment;
    TPT's keeps them."""
    from argtca.run_folder.fingerprint import TUNING_KEYS
    assert {"TTA.LR", "TTA.STEPS", "TTA.WEIGHT_DECAY"} <= TUNING_KEYS
    tda, tda_lr = _trainer("tda"), _trainer("tda", "TTA.LR", "0.01")
    assert "TTA.LR" not in tda.fingerprint()
    assert tda.output_dir() == tda_lr.output_dir()
    tpt, tpt_lr = _trainer("tpt"), _trainer("tpt", "TTA.LR", "0.01")
    assert tpt.fingerprint()["TTA.LR"] == 5e-3 and tpt.output_dir() != tpt_lr.output_dir()
