"""A method declares what it reads, once, beside its class (``argtca.plugins.method``): its node's
keys with their facts. Checked for every method of the catalogue: the method keys of its demo
run's fingerprint are exactly the keys its declaration names (its node, the nodes it reads), every
built-in key has its facts (a doc; a check or choices that hold for its default), the node's value
checks are its keys', and the configuration holds every built-in node whatever was imported
first."""
import json
import subprocess
import sys

import pytest

from argtca.config import ConfigError, check_cfg_values, get_cfg_default
from argtca.config.keys import Key, node_checks, node_keys
from argtca.config.methods import declared_nodes, find_trainer, node_of
from argtca.run import build_parser, build_trainer, setup_cfg
from argtca.trainers.catalogue import catalogue, method_config_args
from conftest import REPO

BUILTIN = [m for m in catalogue() if m.module.startswith("argtca.")]


def _declared(node):
    """flat key -> Key of the node ``node`` as its methods declare it."""
    found = [own for name, own, _ in declared_nodes() if name == node]
    assert found, f"no method declares TRAINER.{node}"
    return node_keys(f"TRAINER.{node}", found[0])


def _demo_trainer(method, *opts):
    argv = ["--root", "", "--seed", "1", "--dataset-config-file",
            str(REPO / "configs/datasets/demo.yaml"), *method_config_args(method),
            "USE_CUDA", "False", "VERBOSE", "False", "DATALOADER.NUM_WORKERS", "0", *opts]
    return build_trainer(setup_cfg(build_parser().parse_args(argv)))


@pytest.mark.parametrize("method", [m.method for m in catalogue()])
def test_a_runs_method_keys_are_its_declared_ones(method):
    t = _demo_trainer(method)
    cls = type(t)
    # the nodes it reads: its own (as declared), its base method's, the ones it names
    nodes = {node_of(cls), str(getattr(cls, "base_node", "") or node_of(cls)),
             *getattr(cls, "reads_nodes", ())}
    want = set().union(*(_declared(n) for n in nodes))
    got = {k for k in t.fingerprint() if k.startswith("TRAINER.") and k != "TRAINER.NAME"}
    assert got == want, (sorted(got - want), sorted(want - got))
    # the node its prompts and objective read is one of them, with the run's values
    node = str(getattr(cls, "base_node", "") or node_of(cls))
    assert t.node is t.cfg.TRAINER[node]


@pytest.mark.parametrize("method", [m.method for m in catalogue()
                                    if m.family in ("training-free", "online")][:2])
def test_attribute_prompts_add_the_graph_node_and_nothing_else(method):
    t = _demo_trainer(method, "TTA.PROMPTS", "attributes")
    got = {k for k in t.fingerprint() if k.startswith("TRAINER.") and k != "TRAINER.NAME"}
    assert got == set(_declared(node_of(type(t)))) | set(_declared("ARGTCA"))


@pytest.mark.parametrize("info", BUILTIN, ids=[m.method for m in BUILTIN])
def test_every_builtin_key_is_declared_with_its_facts(info):
    cls = find_trainer(info.method)
    own = cls.__dict__.get("defaults")
    assert isinstance(own, dict) and own, f"{info.method} declares no node"

    def plain(table, prefix):
        for k, v in table.items():
            if isinstance(v, dict):
                yield from plain(v, f"{prefix}{k}.")
            elif not isinstance(v, Key):
                yield prefix + k

    assert not list(plain(own, "")), "built-in keys are Key(default, doc, ...), not bare values"
    keys = node_keys(f"TRAINER.{node_of(cls)}", own)
    bad = {path: key.problems() for path, key in keys.items() if key.problems()}
    assert not bad, bad
    for path, key in keys.items():   # the default passes its own check
        if key.check is not None and not key.check.uses_node:
            assert key.check.ok(key.default), path


def test_a_key_without_its_facts_is_found():
    keys = node_keys("TRAINER.X", {"A": 1.0, "B": Key(2, " "), "C": Key("x", "doc", ("y",)),
                                   "D": Key(0.5, "doc")})
    assert keys["TRAINER.X.A"].problems() == ["no doc"]          # a plug-in's shorthand
    assert keys["TRAINER.X.B"].problems() == ["no doc"]
    assert keys["TRAINER.X.C"].problems() == ["default 'x' not among its choices"]
    assert keys["TRAINER.X.D"].problems() == []


def test_a_methods_checks_are_its_keys_facts():
    from argtca.adapters.tda import DEFAULTS
    from argtca.config.checks import method_tables
    tables = dict(method_tables())
    assert tables["TRAINER.TDA"] == node_checks(DEFAULTS)
    assert tables["TRAINER.TDA"]["VIEWS"] == ("auto", "original", "confident")
    assert tables["TRAINER.TS"]["FIT"] == ("val", "fixed")       # the node TS variants share
    cfg = get_cfg_default()
    cfg.TRAINER.TDA.POS_SHOT_CAPACITY = 0
    cfg.TRAINER.TDA.NEG_MASK_UPPER = 0.01                        # a check reading the node
    cfg.TRAINER.TS.FIT = "both"
    with pytest.raises(ConfigError) as e:
        check_cfg_values(cfg)
    msg = str(e.value)
    assert "TRAINER.TDA.POS_SHOT_CAPACITY=0 (allowed: >= 1)" in msg
    assert "TRAINER.TDA.NEG_MASK_UPPER=0.01 (allowed: > TRAINER.TDA.NEG_MASK_LOWER=0.03)" in msg
    assert "TRAINER.TS.FIT='both' (allowed: val, fixed)" in msg


PROBE = """
import json, sys
{first}
from argtca.config import get_cfg_default
from argtca.registry import TRAINER_REGISTRY
cfg = get_cfg_default()
print(json.dumps([sorted(cfg.TRAINER), [c.__name__ for c in TRAINER_REGISTRY.registered_objects()],
                  cfg.TRAINER.TDA.POS_SHOT_CAPACITY]))
"""


def test_every_builtin_node_whatever_is_imported_first():
    """The configuration asks the registry for argtca's own methods by name (no import of the
    trainers from argtca/config); an adapter's module imported first registers the same methods
    in the same order (the table's) as the trainers imported first."""
    got = {}
    for first in ("", "import argtca.trainers", "import argtca.adapters.tda",
                  "import argtca.config; import argtca.trainers",
                  "import argtca.trainers.methods; import argtca.config"):
        p = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        got[first] = json.loads(p.stdout.strip().splitlines()[-1])
    nodes = sorted({"NAME"} | {m.node.split(".")[1] for m in catalogue()}
                   | {node_of(find_trainer(m.method)) for m in catalogue()})
    assert all(v[0] == nodes for v in got.values()), got
    assert len({json.dumps(v) for v in got.values()}) == 1, got
    assert got[""][2] == 3
