"""A method whose defining mechanism cannot act under the given settings says so (issue 40,
item 2): once in its run's log, in its summary.json (``inactive``) and under the report's table
header; at every method's default settings (on every dataset's config) none says so, nor under
the docs' small-settings recipe.

Each declared condition is checked twice: the declaration fires at the settings, and the
adapter's behaviour there is what the declaration says (a cache that stays empty, a prediction
that is CLIP's zero-shot one, a uniform prediction), worked out here independently."""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import argtca.adapters  # noqa: F401  (registration)
from argtca.adapters.cache import entries
from argtca.config import get_cfg_default
from argtca.registry import ADAPTER_REGISTRY
from argtca.trainers.catalogue import catalogue, method_info
from argtca.registry import TRAINER_REGISTRY
from argtca.trainers.notes import declared_inactive

REPO = Path(__file__).resolve().parents[2]
DATASETS = sorted((REPO / "configs" / "datasets").glob("*.yaml"))


def cfg_for(method: str, dataset: str = "demo", opts=()):
    info = method_info(method)
    cfg = get_cfg_default()
    if info.config_file.is_file():
        cfg.merge_from_file(str(info.config_file))
    cfg.TRAINER.NAME = info.trainer
    cfg.merge_from_file(str(REPO / "configs" / "datasets" / f"{dataset}.yaml"))
    cfg.merge_from_list([str(x) for x in opts])
    return cfg


def why(method: str, opts=(), dataset: str = "demo", n_classes: int = 16) -> str:
    info = method_info(method)
    cfg = cfg_for(method, dataset, opts)
    node = cfg.TRAINER[info.node.split(".", 1)[1]]
    return declared_inactive(TRAINER_REGISTRY.get(info.trainer), node, cfg, n_classes)


# ------------------------------------------------------------------ defaults: nobody says so
@pytest.mark.parametrize("dataset", [p.stem for p in DATASETS])
def test_no_method_is_inactive_at_its_defaults(dataset):
    said = {m.method: why(m.method, dataset=dataset) for m in catalogue()}
    assert len(said) >= 22
    assert {m: w for m, w in said.items() if w} == {}


def _recipe_overrides():
    """The CI-sized overrides docs/workflows.md recommends, and those of its demo block."""
    text = (REPO / "docs" / "workflows.md").read_text()
    found = re.findall(r"CI-sized\s+`([^`]+)`", text)
    found += re.findall(r"^bash scripts/table1\.sh demo [^\n]*?((?:[A-Z_]+\.[A-Z_.]+ \S+ ?)+)$",
                        text, re.M)
    assert found, "the small-settings recipe moved: update this test"
    return [x.split() for x in found]


def test_the_docs_small_settings_recipe_keeps_every_method_itself():
    for opts in _recipe_overrides():
        said = {m.method: why(m.method, opts) for m in catalogue()}
        assert {m: w for m, w in said.items() if w} == {}, opts


# ------------------------------------------------------------------ each declared condition
CONDITIONS = [
    ("boostadapter", ["TTA.N_VIEWS", "8"], "keeps int(0.8) = 0 boosting views"),
    ("boostadapter", ["TRAINER.BOOSTADAPTER.ALPHA", "0.0"], "ALPHA 0"),
    ("boostadapter", ["TRAINER.BOOSTADAPTER.NEG_ENTROPY_LOWER", "0.7",
                      "TRAINER.BOOSTADAPTER.NEG_ENTROPY_UPPER", "0.9"], "never fills"),
    ("tda", ["TRAINER.TDA.NEG_ENTROPY_LOWER", "0.7", "TRAINER.TDA.NEG_ENTROPY_UPPER", "0.9"],
     "negative cache never fills"),
    ("tda", ["TRAINER.TDA.NEG_MASK_LOWER", "1.0", "TRAINER.TDA.NEG_MASK_UPPER", "1.5"],
     "mask is empty"),
    ("tda", ["TRAINER.TDA.POS_ENABLED", "False", "TRAINER.TDA.NEG_ALPHA", "0.0"],
     "neither cache acts"),
    ("dmn", ["TRAINER.DMN.MEMORY_WEIGHT", "0.0"], "MEMORY_WEIGHT 0"),
    ("dmn_weak", ["TRAINER.DMNWEAK.MEMORY_WEIGHT", "0.0"], "MEMORY_WEIGHT 0"),
    ("dpe", ["TRAINER.DPE.EVOLVE_ENTROPY", "0.0"], "textual prototypes never evolve"),
    ("dpe", ["TRAINER.DPE.ALPHA", "0.0"], "visual prototypes add nothing"),
    ("dynaprompt", ["TRAINER.DYNAPROMPT.NUM_PROMPTS", "1"], "no prompt to select among"),
    ("dynaprompt", ["TTA.LR", "0.0"], "TTA.LR 0"),
    ("ecalp", ["TRAINER.ECALP.ALPHA", "0.0"], "uniform"),
    ("onzeta", ["TRAINER.ONZETA.CR", "0.0", "TRAINER.ONZETA.CW", "0.0"], "zero-shot"),
    ("mta", ["TTA.N_VIEWS", "1"], "zero-shot"),
    ("zero", ["TTA.N_VIEWS", "1"], "zero-shot"),
    ("tps", ["TRAINER.TPS.STEPS", "0"], "STEPS 0"),
    ("tpt", ["TTA.STEPS", "0"], "TTA.STEPS 0"),
    ("rlcf", ["TTA.LR", "0.0"], "TTA.LR 0"),
    ("ttl", ["TTA.STEPS", "0"], "TTA.STEPS 0"),
    ("ctpt", ["TRAINER.CTPT.LAMBDA", "0.0"], "LAMBDA 0"),
    ("otpt", ["TRAINER.OTPT.LAMBDA", "0.0"], "LAMBDA 0"),
    ("atpt", ["TRAINER.ATPT.LAMBDA", "0.0"], "LAMBDA 0"),
    ("tca", ["TRAINER.TCA.ALPHA", "0.0", "TRAINER.TCA.BETA", "0.0"], "ALPHA 0 and BETA 0"),
    ("argtca", ["TRAINER.ARGTCA.ALPHA", "0.0", "TRAINER.ARGTCA.BETA", "0.0"], "ALPHA 0 and BETA 0"),
]


@pytest.mark.parametrize("method,opts,words", CONDITIONS,
                         ids=[f"{m}-{o[0].split('.')[-1]}" for m, o, _ in CONDITIONS])
def test_each_condition_is_declared(method, opts, words):
    assert words in why(method, opts)


@pytest.mark.parametrize("method,opts", [
    ("boostadapter", ["TTA.N_VIEWS", "10"]),          # int(10 x 0.1) = 1 boosting view
    ("tda", ["TRAINER.TDA.NEG_ENTROPY_LOWER", "0.69", "TRAINER.TDA.NEG_ENTROPY_UPPER", "0.9"]),
    ("tda", ["TRAINER.TDA.POS_ENABLED", "False"]),  # the negative cache still acts
    ("tpt", ["TTA.N_VIEWS", "8"]),                   # one confident view kept: still tuned
    ("zero", ["TTA.N_VIEWS", "2"]), ("mta", ["TTA.N_VIEWS", "2"]),
    ("onzeta", ["TRAINER.ONZETA.CR", "0.0"]),          # the proxies still learn
    ("ctpt", ["TRAINER.CTPT.LAMBDA", "0.1"]),
])
def test_just_inside_each_boundary_nothing_is_said(method, opts):
    assert why(method, opts) == ""


# ------------------------------------------------------------------ the declarations are true
K, E = 16, 32


def _adapter(method, opts=(), **kw):
    info = method_info(method)
    cfg = cfg_for(method, opts=opts)
    cls = ADAPTER_REGISTRY.get(TRAINER_REGISTRY.get(info.trainer).adapter_name)
    torch.manual_seed(0)
    text = F.normalize(torch.randn(K, E), dim=-1)
    return cls(cfg.TRAINER[info.node.split(".", 1)[1]], cfg, text, 100.0, **kw), text


def _images(n, v):
    g = torch.Generator().manual_seed(1)
    return [F.normalize(torch.randn(v, E, generator=g), dim=-1) for _ in range(n)]


def test_boostadapter_without_boosting_views_boosts_nothing():
    """At 8 views the per-image boosted cache is the historical cache itself (the stated
    reason); at 10 views one boosting view joins it."""
    for v, joins in ((8, False), (10, True)):
        ad, _ = _adapter("boostadapter", ["TTA.N_VIEWS", str(v)])
        grew = False
        for img in _images(12, v):
            logits = ad.clip_logits(img)
            keys, classes = ad.boosted_entries(logits, img)
            hist_keys, hist_classes = entries(ad.state["pos"])
            grew |= keys.shape[0] > hist_keys.shape[0]
            ad.step(img)
        assert grew == joins, v


def test_tda_gate_above_ln2_never_fills_the_negative_cache():
    # the largest normalised entropy, uniform probabilities: ln K nats / log2 K = ln 2
    assert math.log(K) / math.log2(K) == pytest.approx(math.log(2))
    ad, _ = _adapter("tda", ["TRAINER.TDA.NEG_ENTROPY_LOWER", "0.7",
                             "TRAINER.TDA.NEG_ENTROPY_UPPER", "0.9"])
    ad.logit_scale = 1e-3       # near-uniform predictions: entropies at the very top
    for img in _images(30, 1):
        ad.step(img)
    assert int(ad.state["neg"]["count"].sum()) == 0 and int(ad.state["pos"]["count"].sum()) > 0


@pytest.mark.parametrize("method,opts,views", [
    ("dmn", ["TRAINER.DMN.MEMORY_WEIGHT", "0.0"], 4),
    ("dmn_weak", ["TRAINER.DMNWEAK.MEMORY_WEIGHT", "0.0"], 1),
    ("onzeta", ["TRAINER.ONZETA.CR", "0.0", "TRAINER.ONZETA.CW", "0.0"], 1),
    ("mta", ["TTA.N_VIEWS", "1"], 1),
    ("zero", ["TTA.N_VIEWS", "1"], 1),
])
def test_stated_zero_shot_is_zero_shot(method, opts, views):
    """Their predictions are CLIP's zero-shot ones (view 0's argmax) on every image."""
    ad, text = _adapter(method, opts)
    if method == "onzeta":
        ad.stream_length = 20
    imgs = _images(20, views)
    if getattr(ad, "online", False):
        got = [ad.step(img).argmax() for img in imgs]
    else:
        got = list(ad(torch.stack(imgs)).argmax(-1))
    want = [(img[0] @ text.t()).argmax() for img in imgs]
    assert [int(x) for x in got] == [int(x) for x in want]


def test_ecalp_without_propagation_is_uniform():
    ad, _ = _adapter("ecalp", ["TRAINER.ECALP.ALPHA", "0.0"])
    for img in _images(10, 1):
        p = ad.step(img)
        assert torch.allclose(p, torch.full((K,), 1.0 / K))


# ------------------------------------------------------------------ the run, its log, the report
def _run(tmp_path, name, views, env):
    out = tmp_path / "out" / name
    p = subprocess.run(
        [sys.executable, "-m", "argtca.run", "--config-file",
         str(REPO / "configs/trainers/boostadapter.yaml"), "--dataset-config-file",
         str(REPO / "configs/datasets/demo.yaml"), "--output-dir", str(out),
         "DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", str(views), "DATALOADER.NUM_WORKERS", "0",
         "USE_CUDA", "False"], cwd=tmp_path, env=env, text=True, capture_output=True,
        timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return out, p.stdout + p.stderr


def test_run_says_so_once_and_the_table_header_names_the_row(tmp_path):
    env = dict(os.environ, ARGTCA_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    said = ("BoostAdapter (online) is not itself under these settings: TTA.N_VIEWS 8 x "
            "TTA.SELECTION_P 0.1 keeps int(0.8) = 0 boosting views")
    out8, log8 = _run(tmp_path, "v8", 8, env)
    assert log8.count(said) == 1                                   # the console, once
    assert (out8 / "log.txt").read_text().count(said) == 1          # the run's log, once
    summary = json.loads((out8 / "summary.json").read_text())
    assert summary["inactive"].startswith("TTA.N_VIEWS 8 x TTA.SELECTION_P 0.1 keeps int(0.8)")
    out10, log10 = _run(tmp_path, "v10", 10, env)                  # one boosting view: itself
    assert "not itself" not in log10 + (out10 / "log.txt").read_text()
    assert "inactive" not in json.loads((out10 / "summary.json").read_text())
    p = subprocess.run([sys.executable, "-m", "argtca.report", str(tmp_path / "out"), "--out",
                        str(tmp_path / "rep")], cwd=tmp_path, env=env, text=True,
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    table = (tmp_path / "rep" / "table.md").read_text()
    header = table[:table.index("| Method |")]
    lines = [ln for ln in header.splitlines() if ln.startswith("**Not itself")]
    assert len(lines) == 1
    # the 8-view row is named with the run's reason; the 10-view row is not named
    rows = [ln.split(" | ")[0].strip("| ") for ln in table.splitlines()
            if ln.startswith("| BoostAdapter")]
    assert len(rows) == 2
    row8 = next(r for r in rows if re.search(r"views=8\b", r))
    row10 = next(r for r in rows if r != row8)
    assert f"{row8}: TTA.N_VIEWS 8 x TTA.SELECTION_P 0.1 keeps int(0.8) = 0" in lines[0]
    assert f"{row10}:" not in lines[0]
