"""Every configuration key declares its facts once, beside its default, and the tables the code
uses (choices, ranges, the fingerprint's keys, the report's classification and names) are read
from those declarations."""
import pytest

from argtca.config import CFG_CHOICES, get_cfg_default
from argtca.config.checks import SHARED_RANGES
from argtca.config.keys import KEYS, Key, declare
from argtca.config.methods import key_facts
from argtca.report.identity import DATASET_KEYS, PROTOCOL_KEYS, SHORT_NAMES, is_result_key
from argtca.run_folder import NON_RESULT_KEYS, flatten_cfg


def test_every_key_of_the_defaults_is_declared_with_its_facts():
    import argtca.trainers  # noqa: F401  (the methods' nodes)
    keys = flatten_cfg(get_cfg_default())
    undeclared = [k for k in keys if key_facts(k) is None]
    assert undeclared == [], "declare each key with its facts (argtca/config/keys.py Key)"
    bad = {k: key_facts(k).problems() for k in keys if key_facts(k).problems()}
    assert bad == {}, bad
    # the yacs tree holds exactly the declared defaults
    for k, key in KEYS.items():
        default = list(key.default) if isinstance(key.default, tuple) else key.default
        assert keys[k] == default, k


def test_a_key_without_a_doc_is_refused():
    assert Key(1, "").problems() == ["no doc"]
    assert Key("x", "a doc", choices=("a", "b")).problems() == ["default 'x' not among its "
                                                                 "choices"]
    from yacs.config import CfgNode as CN
    root = CN()
    declare(root, "A.B", Key(3, "three"))
    assert root.A.B == 3
    with pytest.raises(KeyError, match="A.B is declared twice"):
        declare(root, "A.B", Key(4, "four"))
    KEYS.pop("A.B")


def test_the_tables_are_read_from_the_declarations():
    # one place each: a key is in the fingerprint or not, as declared
    assert NON_RESULT_KEYS == {k for k, key in KEYS.items() if not key.numbers}
    assert {"DATALOADER.NUM_WORKERS", "TTA.VIEWS_OPS", "DATASET.ROOT"} <= NON_RESULT_KEYS
    assert all(is_result_key(k) != (k in NON_RESULT_KEYS) for k in KEYS)
    assert CFG_CHOICES["TTA.VIEWS_OPS"] == ("auto", "workers", "engine")
    assert set(CFG_CHOICES) == {k for k, key in KEYS.items() if key.choices}
    assert set(SHARED_RANGES) == {k for k, key in KEYS.items() if key.check is not None}
    assert PROTOCOL_KEYS == ("DATASET.SPLIT", "DATASET.NUM_IMAGES", "MODEL.BACKBONE.NAME",
                             "MODEL.PRETRAINED")
    assert "DATASET.ATTRIBUTE_FILE" in DATASET_KEYS and "TTA.N_VIEWS" not in DATASET_KEYS
    assert SHORT_NAMES["TTA.N_VIEWS"] == "views" and SHORT_NAMES["MODEL.PRETRAINED"] == "weights"
