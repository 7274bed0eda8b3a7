"""A method is declared once, by its trainer class: every list of methods is derived from the
registry (argtca/trainers/catalogue.py), no hand list of method names is left in the package or
the scripts, and each method's value checks sit beside it."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import argtca.trainers  # noqa: F401  (registration)
from argtca.config import ConfigError, check_cfg_values, get_cfg_default
from argtca.config.methods import FAMILIES, find_trainer
from argtca.trainers.catalogue import (catalogue, method_info, method_names, method_sets,
                                       trainer_name, zoo_methods)

REPO = Path(__file__).resolve().parents[2]


def _names():
    """Every method key, table1 row name and config node of the registered methods."""
    keys = {m.method for m in catalogue()} | {r for m in catalogue() for r in m.rows}
    nodes = {m.node + "." for m in catalogue()} | {f"TRAINER.{m.trainer.upper()}."
                                                   for m in catalogue()}
    return keys, nodes


def hand_lists(text: str, keys, nodes, python: bool):
    """The places in ``text`` that list >= 3 methods by hand: a Python container (list, tuple,
    set, dict keys) of >= 3 method keys or method config nodes, or, in any string or shell line,
    a run of >= 3 method keys separated only by spaces, commas, bars or slashes."""
    alt = "|".join(map(re.escape, sorted(keys, key=len, reverse=True)))
    run = re.compile(r"(?<![\w.-])(?:%s)(?:[\s,|/]+(?:%s)){2,}(?![\w-])" % (alt, alt))
    found = []
    if python:
        for node in ast.walk(ast.parse(text)):
            groups = ([node.keys, node.values] if isinstance(node, ast.Dict) else [node.elts]
                      if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else [])
            for elts in groups:
                strs = {e.value for e in elts if isinstance(e, ast.Constant)
                        and isinstance(e.value, str)}
                if len(strs & keys) >= 3 or len(strs & nodes) >= 3:
                    found.append((node.lineno, sorted(strs & (keys | nodes))))
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = run.search(node.value)
                if m:
                    found.append((node.lineno, m.group(0)))
    else:
        for i, line in enumerate(text.splitlines(), 1):
            m = run.search(line)
            if m:
                found.append((i, m.group(0)))
    return found


def test_the_scanner_finds_the_old_hand_lists():
    keys, nodes = _names()
    old_plan = ('ZOO = ["rtpt", "zero", "mta", "tps"]\nX = {"tda": 1, "dmn": 2, "dpe": 3}\n'
                'N = {"CTPT": "ctpt", "OTPT": "otpt", "TCA": "tca"}\n')
    assert len(hand_lists(old_plan, keys, nodes, True)) == 3
    assert hand_lists('P = ("INPUT.", "TRAINER.TPT.", "TRAINER.TCA.", "TRAINER.DMN.")',
                      keys, nodes, True)
    assert hand_lists('M="zeroshot tpt ctpt otpt"', keys, nodes, False)
    assert hand_lists('methods="zeroshot,tpt,ctpt"', keys, nodes, False)
    assert hand_lists("#   METHOD:  zeroshot | tpt | ctpt", keys, nodes, False)
    # prose and pairs are not lists
    assert not hand_lists('"""zero-shot CLIP, TPT and the tda cache"""\nA = ("tca", "argtca")',
                          keys, nodes, True)


def test_no_hand_list_of_method_names_remains():
    keys, nodes = _names()
    bad = []
    for path in sorted((REPO / "argtca").rglob("*.py")) + sorted((REPO / "scripts").iterdir()):
        if path.suffix not in (".py", ".sh"):
            continue
        for line, what in hand_lists(path.read_text(), keys, nodes, path.suffix == ".py"):
            bad.append(f"{path.relative_to(REPO)}:{line}: {what}")
    assert not bad, "hand lists of methods (derive them from argtca/trainers/catalogue.py):\n" \
        + "\n".join(bad)


def test_catalogue_is_the_declarations_in_table_order():
    by_key = {m.method: m for m in catalogue()}
    dmn = method_info("dmn")
    assert (dmn.trainer, dmn.label, dmn.family, dmn.node) == ("DMN", "DMN-ZS", "online",
                                                              "TRAINER.DMN")
    assert dmn.config_file.name == "dmn.yaml" and dmn.config_file.is_file()
    assert method_info("DMN") == dmn and trainer_name("dmn") == "DMN"
    assert trainer_name("argtcazeroshotclip") == "ZeroshotCLIP"      # its Dassl name
    # families in FAMILIES' order; a variant right after its base (TPT + TS after TPT)
    fams = [m.family for m in catalogue()]
    assert fams == sorted(fams, key=list(FAMILIES).index)
    names = method_names()
    assert names.index("tpt_ts") == names.index("tpt") + 1
    assert set(method_names("online")) == {m for m, i in by_key.items() if i.family == "online"}
    assert zoo_methods() == method_names("training-free") + method_names("online")
    sets = method_sets()
    assert sets["all"] == [r for r in sets["all"] if r in sets["paper"] + sets["zoo"]]
    assert sorted(sets["all"]) == sorted(sets["paper"] + sets["zoo"])
    assert "argtca-div" in sets["paper"] and "tpt_ts" not in sets["all"]
    for m in catalogue():                   # every declared family is one the report knows
        assert m.family in FAMILIES, m
        assert find_trainer(m.method).__name__ == m.trainer


def test_catalogue_command_prints_the_sets():
    out = subprocess.run([sys.executable, "-m", "argtca.trainers.catalogue", "--set", "zoo",
                          "--sep", ","], capture_output=True, text=True, check=True).stdout
    assert out.strip().split(",") == method_sets()["zoo"]


def test_each_method_checks_its_own_node():
    from argtca.adapters.tda import DEFAULTS
    from argtca.config.checks import method_tables
    from argtca.config.keys import node_checks
    tables = dict(method_tables())
    assert tables["TRAINER.TDA"] == node_checks(DEFAULTS)     # its keys' facts, beside TDA
    cfg = get_cfg_default()
    cfg.TRAINER.DPE.ALIGN = -3.0
    cfg.TRAINER.ARGTCA.GAT.HEADS = 8
    cfg.TRAINER.ARGTCA.GAT.HIDDEN = 510                             # not divisible by 8 heads
    with pytest.raises(ConfigError) as e:
        check_cfg_values(cfg)
    msg = str(e.value)
    assert "TRAINER.DPE.ALIGN=-3.0 (allowed: >= 0, or -1 for the official value of the dataset)" \
        in msg
    assert ("TRAINER.ARGTCA.GAT.HIDDEN=510 (allowed: >= 1 and divisible by "
            "TRAINER.ARGTCA.GAT.HEADS=8)") in msg


def test_check_cfg_values_stopped_growing():
    src = (REPO / "argtca/config/checks.py").read_text()
    fn = next(n for n in ast.walk(ast.parse(src))
              if isinstance(n, ast.FunctionDef) and n.name == "check_cfg_values")
    assert fn.end_lineno - fn.lineno + 1 <= 80
    body = ast.get_source_segment(src, fn)
    assert not [n for n in _names()[1] if n in body]          # no method's node in it


def test_the_features_engine_goes_with_adapter_methods_in_one_place():
    from argtca.config.settle import resolve_auto, settle_engine
    cfg = get_cfg_default()
    assert settle_engine(cfg, runs_on="features", label="TDA") == "features"    # auto picks it
    out, _ = resolve_auto(cfg, "cpu", 10, runs_on="features", label="TDA")
    assert out.TTA.ENGINE == "features"
    assert resolve_auto(cfg, "cpu", 10)[0].TTA.ENGINE == "reference"
    cfg.TTA.ENGINE = "fast"
    with pytest.raises(ConfigError, match=r"TTA.ENGINE='fast': TDA tunes no prompt and runs "
                       r"on the features engine; leave TTA.ENGINE auto"):
        settle_engine(cfg, runs_on="features", label="TDA")
    cfg.TTA.ENGINE = "features"
    with pytest.raises(ConfigError, match=r"TTA.ENGINE=features runs the training-free and "
                       r"online methods; TPT tunes prompts"):
        resolve_auto(cfg, "cpu", 10, runs_on="", label="TPT")


def test_official_values_are_resolved_in_one_helper():
    from argtca.adapters.boostadapter import BoostAdapter
    from argtca.adapters.dmn import DMNAdapter
    from argtca.adapters.dpe import DPE
    from argtca.adapters.tda import TDAAdapter
    cfg = get_cfg_default()
    cfg.DATASET.NAME = "Caltech101"
    # the official configs/caltech101.yaml of each method (values from the adapters' PRESETS
    # docstrings: TDA 5/5, BoostAdapter 5/5/2, DPE 15/5/6e-4/0.2, DMN's searched weight 0.3)
    assert TDAAdapter.preset_values(cfg.TRAINER.TDA, cfg) == {"POS_ALPHA": 5.0, "POS_BETA": 5.0}
    assert BoostAdapter.preset_values(cfg.TRAINER.BOOSTADAPTER, cfg) == {
        "ALPHA": 5.0, "BETA": 5.0, "DELTA": 2}
    assert DPE.preset_values(cfg.TRAINER.DPE, cfg) == {
        "ALPHA": 15.0, "BETA": 5.0, "LR_TEXT": 6e-4, "LR_IMAGE": 6e-4, "ALIGN": 0.2}
    assert DMNAdapter.resolved_presets(cfg.TRAINER.DMN, cfg) == {"MEMORY_WEIGHT": 0.3}
    # a given value wins and keeps its key's type; only the -1 keys are "resolved"
    cfg.TRAINER.BOOSTADAPTER.DELTA = 0
    cfg.TRAINER.BOOSTADAPTER.ALPHA = 1.5
    got = BoostAdapter.preset_values(cfg.TRAINER.BOOSTADAPTER, cfg)
    assert got == {"ALPHA": 1.5, "BETA": 5.0, "DELTA": 0} and isinstance(got["DELTA"], int)
    assert BoostAdapter.resolved_presets(cfg.TRAINER.BOOSTADAPTER, cfg) == {"BETA": 5.0}
    cfg.DATASET.NAME = "MyImageFolder"                   # no official config: ImageNet's row
    assert TDAAdapter.preset_values(cfg.TRAINER.TDA, cfg) == {"POS_ALPHA": 2.0, "POS_BETA": 5.0}


def test_a_run_records_its_family_and_the_official_values_it_used(tmp_path):
    import json

    DMN = find_trainer("dmn")   # declared on its adapter (argtca/adapters/dmn.py)
    from conftest import tiny_cfg
    from helpers_data import make_caltech
    data = make_caltech(tmp_path / "data", per_class=2)
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
                      "TTA.N_VIEWS": 2, "OUTPUT_ROOT": str(tmp_path / "out")})
    cfg.freeze()
    t = DMN(cfg)
    t.test()
    summary = json.loads((Path(t.output_dir()) / "summary.json").read_text())
    # DMN's weight searched for Caltech101 by the official script: 0.3 (adapters/dmn.py)
    assert summary["official_values"] == {"TRAINER.DMN.MEMORY_WEIGHT": 0.3}
    assert summary["family"] == "online" and summary["label"] == "DMN-ZS (online)"
