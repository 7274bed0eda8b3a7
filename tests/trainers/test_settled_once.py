"""The selector is looked up once and its name recorded from that object, the attribute
machinery exists only where ``TTA.PROMPTS attributes`` asks for it, and a trainer's config is
settled in one step (TCA's auto alpha/beta with the engine's "auto" values)."""

from argtca.graph.nodes import make_nodes
from argtca.graph.phase1 import run_phase1
from argtca.selectors import resolve_selector
from argtca.trainers.attributes import AttributePrompts, ClassPrompts, GraphAttributes
from argtca.trainers.methods import TCA
from argtca.config.methods import find_trainer
from argtca.trainers.zoo import FeatureTrainer
from conftest import tiny_cfg

TPS = find_trainer("tps")   # declared on its adapter (argtca/adapters/tps.py)


def _cfg(data, out, **over):
    root, attrs = data
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root),
                      "DATASET.ATTRIBUTE_FILE": str(attrs), "TTA.N_VIEWS": 4,
                      "OUTPUT_ROOT": str(out), **over})
    cfg.freeze()
    return cfg


def test_phase1_records_the_selector_that_ran_not_the_config_spelling():
    node = tiny_cfg().TRAINER.ARGTCA.clone()
    node.SELECTOR = "div"                    # the config says div ...
    names = ["cat", "dog"]
    attrs = {"cat": ["a", "b", "c"], "dog": ["d", "e", "f"]}
    make_nodes(names, attrs, int(node.NUM_CANDIDATES), min_per_class=2)
    # ... the caller resolved tca (no graph: the text function is never called)
    res = run_phase1(names, attrs, None, node, selector=resolve_selector("tca"))
    assert res["settings"]["SELECTOR"] == "tca" and res["selector"]["name"] == "tca"
    assert res["selected"] == {"cat": ["a", "b"], "dog": ["d", "e"]}


def test_class_prompts_make_no_attribute_machinery(data, tmp_path, monkeypatch):
    assert GraphAttributes not in FeatureTrainer.__mro__

    def no_lookup(name):
        raise AssertionError(f"selector {name!r} looked up for class prompts")
    monkeypatch.setattr("argtca.selectors.resolve_selector", no_lookup)
    t = TPS(_cfg(data, tmp_path, **{"TTA.PROMPTS": "class"}))
    assert isinstance(t.prompts, ClassPrompts)
    assert t.selector is None and t.selector_impl is None and t.attribute_file is None
    assert t.prompt_suffixes(["red apple", "cat"]) == ["red apple.", "cat."]


def test_attribute_prompts_look_the_selector_up_once(data, tmp_path, monkeypatch):
    import argtca.selectors as S
    calls = []
    real = S.resolve_selector
    monkeypatch.setattr(S, "resolve_selector", lambda name: calls.append(name) or real(name))
    t = TPS(_cfg(data, tmp_path, **{"TTA.PROMPTS": "attributes",
                                    "TRAINER.ARGTCA.SELECTOR": "TCA"}))
    assert isinstance(t.prompts, AttributePrompts) and calls == ["TCA"]
    assert t.selector == "tca" and t.display_label == "TPS + attributes (tca)"
    t.test()
    assert calls == ["TCA"]                 # Phase 1 got the object, not the name
    assert t.phase1["settings"]["SELECTOR"] == "tca"


def test_tca_config_is_settled_in_one_step(data, tmp_path, capsys):
    seen = []

    def spy(self, key, value):
        if key == "cfg":
            seen.append(value)
        object.__setattr__(self, key, value)
    # TCA itself (its config node is named after the class), with its config assignments seen
    Spy = type("TCA", (TCA,), {"__setattr__": spy})
    cfg = _cfg(data, tmp_path, **{"TRAINER.TCA.NUM_ATTRIBUTES": 1, "VERBOSE": True,
                                  "TTA.ENGINE": "auto"})
    t = Spy(cfg)
    # the given config, then the settled one: TCA's (1, 10) for M'=1 beside the engine's "auto"
    assert len(seen) == 2 and seen[0] is cfg and seen[1] is t.cfg
    assert (t.cfg.TRAINER.TCA.ALPHA, t.cfg.TRAINER.TCA.BETA) == (1.0, 10.0)
    assert t.cfg.TTA.ENGINE == "reference" and t.cfg.is_frozen()
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["argtca: TRAINER.TCA.ALPHA=1, BETA=10 by NUM_ATTRIBUTES=1 (auto)",
                       "argtca: TTA.ENGINE auto -> reference (no CUDA device; TTA.ENGINE "
                       "reference/fast to choose)"]
    assert (cfg.TRAINER.TCA.ALPHA, cfg.TRAINER.TCA.BETA) == (10.0, 35.0)   # the caller's kept


def test_the_engine_plans_for_auto_images_or_the_test_set(data, tmp_path, monkeypatch):
    """TTA.FAST.AUTO_IMAGES is the test-set size the engine's auto grad mode plans for (the
    whole-table benchmark's short runs take the full run's Jacobian); 0, the run's own."""
    from argtca.engine.fast import FastEngine
    seen = []
    monkeypatch.setattr(FastEngine, "_auto_grad_mode",
                        lambda self, n: (seen.append(n), ("vjp", ""))[1])
    plain = TCA(_cfg(data, tmp_path / "a", **{"TTA.ENGINE": "fast"}))
    planned = TCA(_cfg(data, tmp_path / "b", **{"TTA.ENGINE": "fast",
                                                "TTA.FAST.AUTO_IMAGES": 5000}))
    for t in (plain, planned):
        t._build_model()   # the model, the prompts' encoder, then the engine
    n = len(plain.dataset.test)
    assert 0 < n < 5000
    assert seen == [n, 5000]
    assert plain.planned_images() == n and planned.planned_images() == 5000
