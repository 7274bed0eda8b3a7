"""Engines are registry entries (TTA.ENGINE's choices, the trainer's lookup, the loader's batch size
from the class's ``batched``), a trainer's ``tunes`` decides the tuned-run checks, and the fast
engine's knobs are config keys (TTA.FAST.*): read from the config, never from the environment,
recorded in summary.json and (all but the bit-identical one) in the run fingerprint."""
import json
import re

import pytest
import torch

import argtca.trainers  # noqa: F401  (registers the trainers and the engines)
from argtca.config import CFG_CHOICES, ConfigError, check_cfg_values, get_cfg_default
from argtca.engine.fast import GRAD_MODES, TEXT_ATTENTION, FastEngine
from argtca.engine.reference import ReferenceEngine
from argtca.run_folder import NON_RESULT_KEYS, load_records
from argtca.models.text import PromptTextEncoder
from argtca.registry import ENGINE_REGISTRY, OBJECTIVE_REGISTRY, TRAINER_REGISTRY
from conftest import REPO, tiny_cfg

pytestmark = pytest.mark.usefixtures("one_thread")


def _register(monkeypatch, registry, name, obj):
    """``obj`` registered as ``name`` for this test only."""
    monkeypatch.setitem(registry._obj_map, name.lower(), obj)
    monkeypatch.setitem(registry._names, name.lower(), name)


class BatchedReference(ReferenceEngine):
    """A plug-in engine: the reference maths, fed TTA.BATCH_IMAGES images at a time."""
    batched = True


def _tiny_run_cfg(tmp_path, **over):
    from argtca.bench.data import make_synthetic_coop
    root = make_synthetic_coop(str(tmp_path / "data"), 3, 2, size=(40, 30))["root"]
    base = {"TRAINER.NAME": "TPT", "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root),
            "OUTPUT_DIR": str(tmp_path / "out"), "TTA.N_VIEWS": 4, "TTA.BATCH_IMAGES": 2}
    cfg = tiny_cfg(**dict(base, **over))
    cfg.freeze()
    return cfg


# ---------------------------------------------------------------------------- registry
def test_built_in_engines_are_registered_with_their_batching():
    assert {"fast", "reference"} <= set(ENGINE_REGISTRY.registered_names())
    assert ENGINE_REGISTRY.get("fast") is FastEngine and FastEngine.batched
    assert ENGINE_REGISTRY.get("reference") is ReferenceEngine and not ReferenceEngine.batched


def test_engine_choices_come_from_the_registry(monkeypatch):
    cfg = get_cfg_default()
    cfg.TTA.ENGINE = "turbo"
    allowed = r"TTA.ENGINE='turbo' \(allowed: auto, fast, features, lora, reference\)"
    with pytest.raises(ConfigError, match=allowed):
        check_cfg_values(cfg)
    _register(monkeypatch, ENGINE_REGISTRY, "turbo", BatchedReference)
    check_cfg_values(cfg)                                      # a registered plug-in is a choice


def test_trainer_builds_the_registered_engine_and_batches_by_its_trait(tmp_path, monkeypatch):
    _register(monkeypatch, ENGINE_REGISTRY, "batched-reference", BatchedReference)
    ref = TRAINER_REGISTRY.get("TPT")(_tiny_run_cfg(tmp_path / "a", **{
        "TTA.ENGINE": "reference"}))
    plug = TRAINER_REGISTRY.get("TPT")(_tiny_run_cfg(tmp_path / "b", **{
        "TTA.ENGINE": "batched-reference"}))
    assert (ref.batch_images, plug.batch_images) == (1, 2)
    a, b = ref.test(), plug.test()
    assert type(plug.engine) is BatchedReference and type(ref.engine) is ReferenceEngine
    assert a["n"] == b["n"] == 3
    ra = load_records(str(tmp_path / "a" / "out" / "records.jsonl"))
    rb = load_records(str(tmp_path / "b" / "out" / "records.jsonl"))
    for x, y in zip(ra, rb):                   # two images tuned together == each alone
        assert (x["index"], x["pred"]) == (y["index"], y["pred"])
        assert abs(x["conf"] - y["conf"]) < 1e-5


def test_tuned_run_checks_follow_the_trainer_class(monkeypatch):
    base = TRAINER_REGISTRY.get("TPT")
    _register(monkeypatch, TRAINER_REGISTRY, "MyZeroShot", type("MyZeroShot", (base,),
                                                                 {"tunes": False}))
    _register(monkeypatch, TRAINER_REGISTRY, "MyTuned", type("MyTuned", (base,), {"tunes": True}))
    cfg = get_cfg_default()
    cfg.TTA.STEPS, cfg.TTA.N_VIEWS = 0, 1
    cfg.TRAINER.NAME = "MyZeroShot"
    check_cfg_values(cfg)                                      # zero-shot: no step, one view
    cfg.TRAINER.NAME = "MyTuned"
    with pytest.raises(ConfigError, match="TTA.N_VIEWS=1 .*TTA.STEPS=0"):
        check_cfg_values(cfg)
    for name in ("zeroshot", "ZeroshotCLIP", "zeroshot_ts"):   # method or trainer names
        cfg.TRAINER.NAME = name
        check_cfg_values(cfg)


# ---------------------------------------------------------------------------- TTA.FAST
def _fast(tiny_clip, cfg, **kw):
    model, tok = tiny_clip
    enc = PromptTextEncoder(model, tok, ["dog.", "cat.", "fish."])
    return FastEngine(model, enc, OBJECTIVE_REGISTRY.get("tpt")(None), cfg, "cpu", **kw)


def test_fast_engine_reads_its_knobs_from_the_config(tiny_clip):
    d = _fast(tiny_clip, tiny_cfg())
    assert (d.grad_mode, d.text_attention, d.prefix_share) == ("vjp", "efficient", True)
    assert (d.image_chunk, d.text_tokens, d.compile_mode) == (16 * 64, 65536, None)
    cfg = tiny_cfg(**{"TTA.FAST.GRAD_MODE": "loop", "TTA.FAST.TEXT_ATTENTION": "math",
                      "TTA.FAST.PREFIX_SHARE": False, "TTA.FAST.IMAGE_CHUNK": 7,
                      "TTA.FAST.TEXT_TOKENS": 1000, "TTA.FAST.COMPILE_MODE": "max-autotune"})
    e = _fast(tiny_clip, cfg)
    assert (e.grad_mode, e.text_attention, e.prefix_share) == ("loop", "math", False)
    assert (e.image_chunk, e.text_tokens, e.compile_mode) == (7, 1000, "max-autotune")
    assert not (e.compile_image or e.compile_text or e.half_image)      # CUDA only
    k = _fast(tiny_clip, cfg, grad_mode="recompute", image_chunk=5)    # a keyword wins
    assert (k.grad_mode, k.image_chunk, k.text_attention) == ("recompute", 5, "math")


def test_the_environment_no_longer_sets_engine_knobs(tiny_clip, monkeypatch):
    for name, value in (("ARGTCA_FAST_GRAD", "loop"), ("ARGTCA_TEXT_ATTENTION", "math"),
                        ("ARGTCA_IMAGE_CHUNK", "3"), ("ARGTCA_TEXT_PREFIX", "0")):
        monkeypatch.setenv(name, value)
    e = _fast(tiny_clip, tiny_cfg())
    assert (e.grad_mode, e.text_attention, e.image_chunk, e.prefix_share) == (
        "vjp", "efficient", 16 * 64, True)


def test_package_reads_only_true_environment_variables():
    """What is left in the environment describes the host, never a run's settings: caches,
    the network, debugging, and an import-time switch read before any configuration exists."""
    allowed = {"ARGTCA_CACHE", "ARGTCA_DOWNLOADS", "ARGTCA_OFFLINE", "ARGTCA_MIRROR",
               "ARGTCA_DOWNLOAD_DEADLINE", "ARGTCA_DOWNLOAD_MIN_RATE", "ARGTCA_DEBUG",
               "ARGTCA_OPEN_CLIP_TRANSFORMERS",
               # the launcher's task -> its run process (which task to outlive; the log's name)
               "ARGTCA_TASK_PID", "ARGTCA_TASK_RUN",
               # plug-in files for Dassl's train.py, which has no --plugin flag: they enter the
               # fingerprint of the runs they provide code to, as --plugin files do
               "ARGTCA_PLUGINS",
               # the rate file table1 --plan estimates from (this host's measured speed)
               "ARGTCA_RATES",
               # the command a script ran, for the one line Ctrl-C prints (display only)
               "ARGTCA_COMMAND"}
    found = {}
    for path in (REPO / "argtca").rglob("*.py"):
        # a fingerprint key such as CODE.ARGTCA_SHA256 is no environment variable
        for name in re.findall(r"(?<![.\w])ARGTCA_[A-Z0-9_]+", path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(REPO)))
    assert {k: v for k, v in found.items() if k not in allowed} == {}


def test_fast_choices_match_the_engine():
    assert set(CFG_CHOICES["TTA.FAST.GRAD_MODE"]) == {"auto", *GRAD_MODES}
    assert set(CFG_CHOICES["TTA.FAST.TEXT_ATTENTION"]) == {"auto", *TEXT_ATTENTION}
    assert set(get_cfg_default().TTA.FAST) >= {"GRAD_MODE", "TEXT_ATTENTION", "VIEWS_OVERLAP"}


def test_fast_switches_read_yaml_booleans_and_bad_values_are_refused(tmp_path):
    y = tmp_path / "fast.yaml"
    y.write_text("TTA:\n  FAST:\n    COMPILE_IMAGE: on\n    COMPILE_TEXT: off\n")
    cfg = get_cfg_default()
    cfg.merge_from_file(str(y))
    assert (cfg.TTA.FAST.COMPILE_IMAGE, cfg.TTA.FAST.COMPILE_TEXT) == ("on", "off")
    cfg.merge_from_list(["TTA.FAST.COMPILE_TEXT_GRAD", "True"])
    assert cfg.TTA.FAST.COMPILE_TEXT_GRAD == "on"
    cfg.merge_from_list(["TTA.FAST.GRAD_MODE", "magic", "TTA.FAST.IMAGE_CHUNK", 0])
    with pytest.raises(ConfigError) as e:
        check_cfg_values(cfg)
    assert "TTA.FAST.GRAD_MODE='magic'" in str(e.value) and "TTA.FAST.IMAGE_CHUNK=0" in str(e.value)


def test_compile_switches_follow_tta_compile_unless_set():
    from argtca.engine.fast import _switch
    assert (_switch("auto", True), _switch("auto", False)) == (True, False)
    assert (_switch("on", False), _switch("off", True), _switch(True, False)) == (True, False, True)


def test_knobs_are_in_the_summary_and_the_fingerprint(tmp_path):
    over = {"TTA.ENGINE": "fast", "TTA.FAST.GRAD_MODE": "loop", "TTA.FAST.IMAGE_CHUNK": 8,
            "TTA.FAST.VIEWS_OVERLAP": True}
    tr = TRAINER_REGISTRY.get("TPT")(_tiny_run_cfg(tmp_path, **over))
    summary = tr.test()
    assert (tr.engine.grad_mode, tr.engine.image_chunk) == ("loop", 8)
    assert {k: summary["overrides"].get(k) for k in over} == over
    fp = json.loads((tmp_path / "out" / "config.json").read_text())
    assert fp["TTA.FAST.GRAD_MODE"] == "loop" and fp["TTA.FAST.IMAGE_CHUNK"] == 8
    assert fp["TTA.FAST.HALF_IMAGE"] is True and "TTA.FAST.VIEWS_OVERLAP" not in fp
    assert "TTA.FAST.VIEWS_OVERLAP" in NON_RESULT_KEYS


def test_views_overlap_is_read_from_the_config(tmp_path):
    from PIL import Image

    from argtca.datasets.base import Datum
    from argtca.views.loader import build_views_loader
    Image.new("RGB", (40, 30), (90, 120, 200)).save(tmp_path / "0.jpg")
    ds = type("D", (), {"test": [Datum(impath=str(tmp_path / "0.jpg"), label=0, classname="a")],
                        "fine_grained": False})()

    def loader(**over):
        cfg = tiny_cfg(**{"TTA.N_VIEWS": 4, **over})
        return build_views_loader(cfg, ds, 1, [0], 1, torch.device("cpu"), 0)
    assert loader(**{"TTA.VIEWS_DEVICE": "gpu", "TTA.FAST.VIEWS_OVERLAP": True}).overlap
    assert not loader(**{"TTA.VIEWS_DEVICE": "gpu"}).overlap
    assert not loader(**{"TTA.FAST.VIEWS_OVERLAP": True}).overlap      # CPU views: nothing to move


def test_whether_an_engine_compiles_is_its_class_trait(monkeypatch):
    """TTA.COMPILE auto turns compilation on only for an engine whose class declares
    ``compiles`` (argtca/config/settle.py reads the trait, no list of engine names): a
    plug-in engine that compiles gets it, one that does not stays off."""
    from argtca.config.settle import engine_compiles, resolve_auto
    assert engine_compiles("fast") and engine_compiles("features")
    assert not engine_compiles("reference") and not engine_compiles("lora")
    assert not engine_compiles("no-such-engine")
    _register(monkeypatch, ENGINE_REGISTRY, "turbo", type("Turbo", (BatchedReference,),
                                                          {"compiles": True}))
    _register(monkeypatch, ENGINE_REGISTRY, "plain", BatchedReference)
    for engine, want in (("turbo", "on"), ("plain", "off")):
        cfg = get_cfg_default()
        cfg.TTA.ENGINE, cfg.TTA.COMPILE, cfg.TTA.VIEWS_DEVICE = engine, "auto", "gpu"
        out, lines = resolve_auto(cfg, "cuda", 10 ** 6, label="M")
        assert out.TTA.COMPILE == want, lines
