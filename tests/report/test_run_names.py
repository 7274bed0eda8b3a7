"""One experiment, one folder: names typed in another case (``argtca.sh demo DIV``) and the
stream order an online run draws from its seed never make a new experiment folder; a fixed
stream seed is a setting of its own."""
import json
from pathlib import Path

import pytest

from argtca.run_folder import experiment_hash, seed_axis_keys
from argtca.run import build_parser, build_trainer, setup_cfg

REPO = Path(__file__).resolve().parents[2]
TINY = ["DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "VERBOSE", "False"]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    # the demo's images are generated once into the cache
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path_factory.getbasetemp() / "argtca_cache"))
    monkeypatch.chdir(tmp_path_factory.getbasetemp())


def _trainer(method, *opts, seed=1):
    args = build_parser().parse_args(
        ["--seed", str(seed), "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
         "--config-file", str(REPO / f"configs/trainers/{method}.yaml")] + TINY + list(opts))
    return build_trainer(setup_cfg(args))


def test_a_selector_or_trainer_typed_in_another_case_finds_its_folder():
    div = _trainer("argtca", "TRAINER.ARGTCA.SELECTOR", "div")
    upper = _trainer("argtca", "TRAINER.ARGTCA.SELECTOR", "DIV")
    assert upper.cfg.TRAINER.ARGTCA.SELECTOR == "div"
    assert upper.output_dir() == div.output_dir()
    assert upper.fingerprint() == div.fingerprint()
    name = _trainer("argtca", "TRAINER.NAME", "ARGTCA", "TRAINER.ARGTCA.SELECTOR", "Div")
    assert name.cfg.TRAINER.NAME == "ArgTCA" and name.output_dir() == div.output_dir()
    # another selector is another experiment
    assert _trainer("argtca", "TRAINER.ARGTCA.SELECTOR", "disc").output_dir() != div.output_dir()


def test_the_seeds_of_an_online_method_share_one_experiment_folder():
    one, two = _trainer("tda", seed=1), _trainer("tda", seed=2)
    f1, f2 = one.fingerprint(), two.fingerprint()
    # each seed's config.json records its own order (a resume refuses another one) ...
    assert f1["STREAM.ORDER_SHA256"] != f2["STREAM.ORDER_SHA256"]
    assert one.stream.order != two.stream.order
    assert sorted(one.stream.order) == sorted(two.stream.order)
    # ... and the order drawn from the seed is the seed axis: one <hash8>/ for both
    d1, d2 = Path(one.output_dir()), Path(two.output_dir())
    assert (d1.name, d2.name) == ("seed1", "seed2") and d1.parent == d2.parent
    assert seed_axis_keys(f1) == ["SEED", "STREAM.ORDER_SHA256"]


def test_a_fixed_stream_seed_is_a_setting():
    s7 = [_trainer("tda", "TTA.STREAM.SEED", "7", seed=s) for s in (1, 2)]
    s8 = _trainer("tda", "TTA.STREAM.SEED", "8", seed=1)
    # the same order for every run seed: still one folder of seeds
    assert s7[0].stream.order == s7[1].stream.order
    assert Path(s7[0].output_dir()).parent == Path(s7[1].output_dir()).parent
    # another stream seed (another order) is another experiment, and so is the default
    assert Path(s8.output_dir()).parent != Path(s7[0].output_dir()).parent
    assert Path(_trainer("tda").output_dir()).parent != Path(s7[0].output_dir()).parent
    assert "STREAM.ORDER_SHA256" not in seed_axis_keys(s7[0].fingerprint())


def test_experiment_hash_drops_only_what_follows_the_seed():
    fp = {"SEED": 1, "TTA.STREAM.SEED": -1, "TTA.STREAM.ORDER": "shuffle",
          "STREAM.ORDER_SHA256": "a", "TRAINER.TDA.POS_ALPHA": 2.0}
    same = dict(fp, SEED=2, **{"STREAM.ORDER_SHA256": "b"})
    assert experiment_hash(fp) == experiment_hash(same)
    assert experiment_hash(fp) != experiment_hash(dict(same, **{"TRAINER.TDA.POS_ALPHA": 3.0}))
    fixed = dict(fp, **{"TTA.STREAM.SEED": 7})
    assert experiment_hash(fixed) != experiment_hash(dict(fixed, **{"STREAM.ORDER_SHA256": "b"}))
    # a method without a stream: the hash of the fingerprint without the seed, as before
    plain = {"SEED": 1, "TTA.STREAM.SEED": -1, "TRAINER.NAME": "TPT"}
    import hashlib
    want = hashlib.sha256(json.dumps({"TTA.STREAM.SEED": -1, "TRAINER.NAME": "TPT"},
                                     sort_keys=True).encode()).hexdigest()[:8]
    assert experiment_hash(plain) == want
