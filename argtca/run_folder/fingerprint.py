"""What identifies a run: the fingerprint (``config.json``) and the names derived from it.

The fingerprint is every configuration key that can change a number (all but
:data:`NON_RESULT_KEYS`; of the method nodes ``TRAINER.<NODE>``, only those the run's trainer
reads: its ``config_nodes``), the test set (:func:`data_fingerprint`), the device type and the
sha256 of every input file. :func:`experiment_hash` names an experiment: the fingerprint without the
keys that follow the seed (:func:`seed_axis_keys`)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Dict, Iterable, List, Optional, Set

from argtca.config import get_cfg_default
from argtca.config.keys import KEYS
from argtca.config.methods import key_facts

# Keys that change how fast a run goes, never what it computes: those declared with
# ``numbers=False`` beside their default (argtca/config/defaults.py, argtca/config/keys.py). E.g.
# ``USE_CUDA`` is replaced in the fingerprint by the device type the run actually uses
# (``RUN.DEVICE_TYPE``: a CUDA run, fp16 autocast, is never resumed on the CPU, fp32, or back), and
# ``DATASET.ROOT`` by the test set's content (TEST_SET.*: root-relative paths and labels, class
# names, split files by sha256; an own ImageFolder keeps its location, see data_fingerprint)
NON_RESULT_KEYS = frozenset(k for k, key in KEYS.items() if not key.numbers)
# datasets whose file names are the user's own, not a published split's: two folders may hold
# other images under the same names, so the folder's location stays part of the test set
LOCATED_DATASETS = ("ImageFolder",)

# fingerprint keys holding the sha256 of an input file: FILE_SHA256.<role> (e.g. MODEL.PRETRAINED)
INPUT_HASH_PREFIX = "FILE_SHA256."
TEST_SET_KEYS = ("TEST_SET.N_IMAGES", "TEST_SET.ITEMS_SHA256", "TEST_SET.CLASSNAMES_SHA256")
ROOT_KEY = "TEST_SET.ROOT"   # an own ImageFolder's absolute location (LOCATED_DATASETS)
# the online stream's order, by its sha256 (argtca/trainers/stream.py)
STREAM_ORDER_KEY = "STREAM.ORDER_SHA256"


def json_sha256(obj, digits: int = 16) -> str:
    """The first ``digits`` hex digits of the sha256 of ``obj`` as sorted-key JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[
        :digits]


def flatten_cfg(cfg, prefix: str = "") -> Dict[str, object]:
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if hasattr(v, "items"):
            out.update(flatten_cfg(v, key + "."))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


@functools.lru_cache(maxsize=1)
def config_defaults() -> Dict[str, object]:
    """Every default config key, flattened and JSON-normalised as in a fingerprint."""
    return json.loads(json.dumps(flatten_cfg(get_cfg_default()), default=str))


def trainer_node(key: str) -> str:
    """The method node a flat key lies in (``TRAINER.TDA.ALPHA`` -> ``TDA``); "" for a key
    outside the method nodes (``TRAINER.NAME`` too)."""
    parts = key.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "TRAINER" else ""


def result_fingerprint(cfg, nodes: Optional[Iterable[str]] = None,
                       tunes: Optional[bool] = None) -> Dict[str, object]:
    """The result-defining keys of ``cfg``. ``nodes``: the method nodes (``TRAINER.<NODE>``) the
    run reads (its trainer's ``config_nodes``); the other methods' nodes are left out, so that
    adding a method (a new node of defaults) moves no other method's run folder. None keeps
    every node (a configuration without a trainer). ``tunes`` False: the run takes no tuning
    step, so the keys only such a step reads (declared ``tuning``: TTA.LR, ...) are left out."""
    keep = None if nodes is None else {str(n).upper() for n in nodes}
    return {k: v for k, v in sorted(flatten_cfg(cfg).items()) if k not in NON_RESULT_KEYS
            and (keep is None or not trainer_node(k) or trainer_node(k) in keep)
            and (not trainer_node(k) or changes_numbers(k))
            and not (tunes is False and k in TUNING_KEYS)}


# keys only a tuning step reads (declared ``tuning=True``)
TUNING_KEYS = frozenset(k for k, key in KEYS.items() if key.tuning)


def changes_numbers(key: str) -> bool:
    """Whether a key is declared as one that can change a number (an undeclared method key, a
    plug-in's plain default, does)."""
    facts = key_facts(key)
    return True if facts is None else bool(facts.numbers)


def unread_node_keys(old: Dict[str, object], want: Dict[str, object]) -> Set[str]:
    """The keys of ``old`` (a stored fingerprint) in method nodes ``want`` holds no key of:
    written when a fingerprint held every method's node, they are settings of methods this
    run does not read, so they cannot have changed its numbers."""
    read = {trainer_node(k) for k in want}
    return {k for k in old if trainer_node(k) and trainer_node(k) not in read}


def rel_item_path(impath: str, root: str) -> str:
    """An image path relative to the data root when it lies under it (absolute otherwise), so
    the test-set hash does not depend on where the data folder is mounted."""
    if root:
        rel = os.path.relpath(impath, root)
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return impath.replace(os.sep, "/")


def data_fingerprint(dataset) -> Dict[str, object]:
    """What defines the test set: its size, the (path relative to the data root, label) list in
    index order and the class names in label order."""
    root = getattr(dataset, "root", "") or ""
    items = [[rel_item_path(d.impath, root), int(d.label)] for d in dataset.test]
    out = {"TEST_SET.N_IMAGES": len(items), "TEST_SET.ITEMS_SHA256": json_sha256(items),
           "TEST_SET.CLASSNAMES_SHA256": json_sha256(list(dataset.classnames))}
    if type(dataset).__name__ in LOCATED_DATASETS:
        out[ROOT_KEY] = os.path.abspath(root) if root else ""
    return out


def run_fingerprint(cfg, dataset, device_type: Optional[str] = None,
                    inputs: Optional[Dict[str, str]] = None,
                    nodes: Optional[Iterable[str]] = None,
                    tunes: Optional[bool] = None) -> Dict[str, object]:
    """The fingerprint stored in ``config.json``: result-defining config keys (of the method
    nodes, ``nodes``: :func:`result_fingerprint`) plus the test set, (when given) the device type
    the run computes on (cuda: fp16 autocast; cpu: fp32) and the sha256 of every input file
    (``inputs``: role -> sha256, stored as ``FILE_SHA256.<role>``)."""
    fp = result_fingerprint(cfg, nodes, tunes)
    fp.update(data_fingerprint(dataset))
    if device_type is not None:
        fp["RUN.DEVICE_TYPE"] = str(device_type)
    for role, digest in (inputs or {}).items():
        fp[INPUT_HASH_PREFIX + role] = str(digest)
    return dict(sorted(fp.items()))


def config_hash(fp: Dict[str, object]) -> str:
    """The hash of a run's settings; the code that ran them (``CODE.*``) is not one of them."""
    from argtca.utils.code import without_code
    return json_sha256(without_code(fp))


def seed_axis_keys(fp: Dict[str, object]) -> List[str]:
    """The fingerprint keys that follow the seed: ``SEED`` itself and, when the online stream is
    shuffled by the run's seed (``TTA.STREAM.SEED`` < 0, the default), the order's hash. Seeds
    of one experiment differ in these keys only; a fixed stream seed or the split file's order
    is a setting like any other."""
    keys = ["SEED"]
    try:
        own_seed = int(fp.get("TTA.STREAM.SEED", -1)) >= 0
    except (TypeError, ValueError):
        own_seed = True
    if not own_seed and str(fp.get("TTA.STREAM.ORDER", "shuffle")) != "index":
        keys.append(STREAM_ORDER_KEY)
    return keys


def experiment_settings(fp: Dict[str, object]) -> Dict[str, object]:
    """The fingerprint without the keys that follow the seed (:func:`seed_axis_keys`)."""
    axis = set(seed_axis_keys(fp))
    return {k: v for k, v in fp.items() if k not in axis}


def experiment_hash(fp: Dict[str, object]) -> str:
    """Eight hex digits naming an experiment: the run fingerprint without the seed and what
    follows it (:func:`seed_axis_keys`: the seeds of one experiment, and the stream orders they
    draw, share a folder ``<hash>/seed<N>``; any other difference gives another). The code
    (``CODE.*``) is no part of it: an upgrade finds and re-reads its finished runs."""
    from argtca.utils.code import without_code
    return json_sha256(without_code(experiment_settings(fp)), 8)
