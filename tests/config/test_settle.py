"""Configuration settling lives with the configuration (issue 41, item 4): argtca/config/settle.py
resolves the "auto" values and reads what a method runs on from its trainer's declared trait
``engine_name`` — "" for a prompt-tuning method, "features" for every adapter method, an engine
of its own for TTL — instead of probing the trainer with getattr; engine/ holds engines only."""
import ast
from pathlib import Path

import pytest

from argtca.config import ConfigError, get_cfg_default
from argtca.config.settle import ADAPTER_ENGINE, resolve_auto, settle_prompts
from argtca.registry import TRAINER_REGISTRY, load_builtin_methods
from argtca.trainers.base import TestTimeTrainer as _Base

REPO = Path(__file__).resolve().parents[2]


def test_every_method_declares_the_engine_it_runs_on():
    load_builtin_methods()
    seen = {}
    for cls in TRAINER_REGISTRY.registered_objects():
        if not issubclass(cls, _Base):
            continue
        # an adapter method runs on the features engine; any other names no engine or its own
        want = ADAPTER_ENGINE if getattr(cls, "adapter_name", "") else cls.engine_name
        assert cls.engine_name == want, cls
        seen[cls.method] = cls.engine_name
    assert seen["tpt"] == "" and seen["tda"] == "features" and seen["ttl"] == "lora"


@pytest.mark.parametrize("runs_on, engine", [("", "reference"), ("features", "features"),
                                             ("lora", "lora")])
def test_the_trait_decides_the_engine_auto_settles_to(runs_on, engine):
    out, _ = resolve_auto(get_cfg_default(), "cpu", 10, runs_on=runs_on, label="M")
    assert out.TTA.ENGINE == engine


def test_attribute_prompts_need_the_features_trait():
    cfg = get_cfg_default()
    cfg.TTA.PROMPTS = "attributes"
    settle_prompts(cfg, "features", "TDA")
    for runs_on in ("", "lora"):
        with pytest.raises(ConfigError, match=r"TTA.PROMPTS='attributes' is for the "
                                              r"training-free and online methods; M builds"):
            settle_prompts(cfg, runs_on, "M")


def test_no_trait_is_probed_and_engine_holds_no_settling():
    src = (REPO / "argtca/trainers/base.py").read_text()
    probes = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)
              and getattr(n.func, "id", "") == "getattr" and len(n.args) >= 2
              and isinstance(n.args[1], ast.Constant)
              and n.args[1].value in ("adapter_name", "engine_name")]
    assert probes == []
    assert not (REPO / "argtca/engine/auto.py").exists()
    settle = ast.parse((REPO / "argtca/config/settle.py").read_text())
    imported = {n.module for n in ast.walk(settle) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.startswith(("argtca.engine", "argtca.trainers"))}
