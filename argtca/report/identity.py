"""What makes two runs the same experiment: every configuration key that can change a number.

A run folder's ``config.json`` (its fingerprint, :func:`argtca.run_folder.run_fingerprint`)
holds every result-defining key plus the test set and the device type. The report groups runs by
that fingerprint minus the seed, so runs of another split, subset, attribute file, backbone or
weights never share a cell. Whether a key can change a number, whether it is a dataset's or the
protocol's, and its short name are declared once, beside its default (argtca/config/keys.py
``Key``); the tables here are read from those declarations.

Keys are compared in three ways:

* **dataset keys** (:func:`is_dataset_key`: the dataset's name, root, attribute and split files,
  the test-set hashes) differ between datasets by nature; they are compared between runs of one
  dataset only;
* **protocol keys** (:data:`PROTOCOL_KEYS`: split, subset size, backbone, weights) decide whether
  two rows may be ranked against each other at all;
* every other key is compared between runs of one method.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
from typing import Any, Dict, Optional, Tuple

from ..config.keys import KEYS
from ..config.methods import key_facts
from ..config.paths import configs_dir
from ..run_folder import (NON_RESULT_KEYS, STREAM_ORDER_KEY, experiment_settings,
                          flatten_cfg, trainer_node)
from ..run_folder.fingerprint import TUNING_KEYS

# Keys of argtca/config/defaults.py that change what a run computes: those declared with
# ``numbers=True`` (argtca/config/keys.py). SEED is one (it draws the views) but is the axis the
# report averages over, never part of a cell's identity.
RESULT_KEYS = frozenset(k for k, key in KEYS.items() if key.numbers)
# a method's node (TRAINER.<NODE>): its keys as its method declares them beside the method; a
# plug-in's plain default is a hyper-parameter (changes numbers)
RESULT_KEY_PREFIXES = ("TRAINER.",)
# keys only the fingerprint has (not config keys): the test set, the device type, the sha256
# of each input file (FILE_SHA256.<the key naming the file>, e.g. FILE_SHA256.MODEL.PRETRAINED)
# and the module that provides a selector or method when it is not argtca's own
# (PROVIDER.SELECTOR / PROVIDER.METHOD: "<module> (<file>)", a plug-in that may override a
# built-in name: another experiment)
FILE_HASH_PREFIX = "FILE_SHA256."
PROVIDER_PREFIX = "PROVIDER."
# the code that made a run (argtca/utils/code.py): no setting, but runs of two code versions are
# never pooled into one cell (the variant labels them) and the header names the code
CODE_PREFIX = "CODE."
FINGERPRINT_PREFIXES = ("TEST_SET.", FILE_HASH_PREFIX, PROVIDER_PREFIX, CODE_PREFIX)
FINGERPRINT_KEYS = ("RUN.DEVICE_TYPE", STREAM_ORDER_KEY)

# the input files (FILE_SHA256.<role>) that belong to a dataset: its split and class-name files,
# its attribute file and the vocabularies a GAT is trained on (chosen per target dataset); they
# differ between datasets by nature. Every other role (the weights, CoOp's context checkpoint,
# plug-in modules, and any role not listed here) is the same for every dataset of a row.
DATASET_FILE_ROLES = ("SPLIT_FILE",)
DATASET_FILE_ROLE_PREFIXES = ("DATASET.", "TRAINER.ARGTCA.GAT.TRAIN_ON.")
GLOBAL_FILE_ROLES = ("MODEL.PRETRAINED", "TTA.CTX_CHECKPOINT")
GLOBAL_FILE_ROLE_PREFIXES = ("PLUGIN.",)

# rows differing in one of these are different experiments: never ranked against each other
# (declared ``protocol=True``)
PROTOCOL_KEYS = tuple(k for k, key in KEYS.items() if key.protocol)
# keys that differ between datasets by nature (declared ``dataset=True``)
DATASET_KEYS = frozenset(k for k, key in KEYS.items() if key.dataset)
# keys the display label already names (method, selector)
LABEL_KEYS = frozenset({"TRAINER.NAME", "TRAINER.ARGTCA.SELECTOR", "PROVIDER.SELECTOR",
                        "PROVIDER.METHOD"})
# short names in row labels and table headers (others: the key's last part, lower case): a config
# key's as declared (``short``), and the fingerprint's own keys'
SHORT_NAMES = dict({k: key.short for k, key in KEYS.items() if key.short},
                   **{"TEST_SET.ITEMS_SHA256": "test images",
                      "TEST_SET.CLASSNAMES_SHA256": "class names",
                      "TEST_SET.N_IMAGES": "test size", "RUN.DEVICE_TYPE": "device",
                      "CODE.ARGTCA_SHA256": "code", "CODE.ARGTCA_VERSION": "argtca",
                      "CODE.RESUMED_UNDER": "resumed under"})


def is_result_key(key: str) -> bool:
    """A config key declared as changing numbers (explicitly, never by default: an undeclared
    key is none); of a method's node, every key its method does not declare otherwise."""
    facts = key_facts(key)
    if facts is not None:
        return bool(facts.numbers)
    return key.startswith(RESULT_KEY_PREFIXES) and bool(trainer_node(key))


def is_dataset_file_role(role: str) -> bool:
    """An input file role (FILE_SHA256.<role>) that is a dataset's own file."""
    return role in DATASET_FILE_ROLES or role.startswith(DATASET_FILE_ROLE_PREFIXES)


def is_classified_file_role(role: str) -> bool:
    return is_dataset_file_role(role) or role in GLOBAL_FILE_ROLES or role.startswith(
        GLOBAL_FILE_ROLE_PREFIXES)


def is_dataset_key(key: str) -> bool:
    """A key whose value differs between datasets by nature (the dataset's name, files, test set
    and, for a fixed stream seed, the stream order over its test set): compared between runs of
    one dataset only, never splitting a row across datasets."""
    if key.startswith(FILE_HASH_PREFIX):   # the content of a dataset's file is the dataset's
        return is_dataset_file_role(key[len(FILE_HASH_PREFIX):])
    return key in DATASET_KEYS or key.startswith("TEST_SET.") or key == STREAM_ORDER_KEY


def is_hash_key(key: str) -> bool:
    return key.startswith(FILE_HASH_PREFIX) or key.endswith("_SHA256")


@functools.lru_cache(maxsize=1)
def default_settings() -> Dict[str, Any]:
    from ..config import get_cfg_default
    return flatten_cfg(get_cfg_default())


# each method's own defaults (its paper's protocol: views, selection, AugMix, ...), stated in
# configs/trainers/<method>.yaml over argtca/config/defaults.py
TRAINER_CONFIGS = configs_dir() / "trainers"
# keys whose "auto" the run resolves before it is fingerprinted (trainers/base.py resolve_auto)
AUTO_KEYS = ("TTA.ENGINE", "TTA.COMPILE")


DATASET_CONFIGS = TRAINER_CONFIGS.parent / "datasets"


def _alnum(s: str) -> str:
    return "".join(ch for ch in str(s).lower() if ch.isalnum())


@functools.lru_cache(maxsize=None)
def method_defaults(method: str, dataset: str = "") -> Dict[str, Any]:
    """The settings a method runs with on a dataset unless the user changes them, merged as the
    scripts merge them: argtca's defaults, ``configs/datasets/<dataset>.yaml`` (e.g. the demo's
    input size), then ``configs/trainers/<method>.yaml`` (those that exist)."""
    from ..config import get_cfg_default
    cfg = get_cfg_default()
    files = [p for p in sorted(DATASET_CONFIGS.glob("*.yaml"))
             if dataset and _alnum(p.stem) == _alnum(dataset)]
    own = TRAINER_CONFIGS / f"{method}.yaml"
    before = flatten_cfg(cfg)
    for path in files + [own]:
        if path == own:
            # a dataset file's setting of a method's own key (the demo's RLCF reward model) is a
            # setting of that dataset, not the method's default: the report shows it on the row
            after = flatten_cfg(cfg)
            for k, v in after.items():
                if trainer_node(k) and v != before.get(k):
                    *path_, last = k.split(".")
                    node = cfg
                    for part in path_:
                        node = node[part]
                    node[last] = before[k]
        if path.is_file():
            try:
                cfg.merge_from_file(str(path))
            except Exception:   # noqa: BLE001 (a damaged copy: the defaults are still right)
                pass
    return json.loads(json.dumps(flatten_cfg(cfg), default=str))


def auto_value(key: str, settings: Dict[str, Any], features: bool) -> Any:
    """What ``auto`` resolves ``key`` (:data:`AUTO_KEYS`) to for a run of these settings
    (argtca/config/settle.py); ``features``: a training-free or online method (features engine)."""
    from ..config.settle import compile_pays
    cuda = str(settings.get("RUN.DEVICE_TYPE")) == "cuda"
    if key == "TTA.ENGINE":
        return "features" if features else ("fast" if cuda else "reference")
    if key == "TTA.COMPILE":
        if str(settings.get("TTA.ENGINE")) not in ("fast", "features") or not cuda:
            return "off"
        n = settings.get("TEST_SET.N_IMAGES")
        return "on" if isinstance(n, int) and compile_pays(n, str(
            settings.get("TTA.VIEWS_DEVICE"))) else "off"
    return None


def config_default(key: str) -> Any:
    """argtca/config/defaults.py's default of a flat key (None for keys it does not have)."""
    return default_settings().get(key)


def stream_seed(settings: Dict[str, Any]) -> Optional[int]:
    """How an online run's stream was ordered (``TTA.STREAM``, its defaults where ``settings``
    lacks a key): None for the split file's order (``ORDER index``), -1 for an order drawn from
    each run's seed, else the fixed stream seed every run shares."""
    order = str(settings.get("TTA.STREAM.ORDER", config_default("TTA.STREAM.ORDER")))
    seed = settings.get("TTA.STREAM.SEED", config_default("TTA.STREAM.SEED"))
    if order == "index":
        return None
    return -1 if seed is None or int(seed) < 0 else int(seed)


def settings_of(config: Dict[str, Any], overrides: Dict[str, Any],
                trainer: str = "") -> Dict[str, Any]:
    """A run's identity: argtca's defaults, then the summary's overrides, then its fingerprint
    (``config.json``; older run folders may lack it or some of its keys), without the seed (and
    the stream order it draws: run_folder.seed_axis_keys) and the keys that cannot change a
    number. Of the method nodes (``TRAINER.<NODE>``) only those the run reads are settings of
    it: the nodes its fingerprint holds, or (a folder without one) its trainer's own node."""
    read = {trainer_node(k) for k in config if trainer_node(k)}
    if not read:   # an older folder without config.json: its trainer's node, and what it set
        read = {str(trainer).upper()} if trainer else {
            trainer_node(k) for k in overrides if trainer_node(k)}
    # a key only a tuning step reads is no setting of a run whose fingerprint left it out
    unread = {k for k in TUNING_KEYS if k not in config} if read and config else set()
    out = {k: v for k, v in default_settings().items()
           if (not trainer_node(k) or trainer_node(k) in read) and k not in unread}
    out.update({k: v for k, v in overrides.items()
                if (not trainer_node(k) or trainer_node(k) in read) and k not in unread})
    out.update(config)
    # the seed, and the stream order drawn from it, are the axis a cell averages over
    return {k: _plain(v) for k, v in sorted(experiment_settings(out).items())
            if k not in NON_RESULT_KEYS}


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def same_value(a: Any, b: Any) -> bool:
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def canonical(settings: Dict[str, Any]) -> str:
    """Settings as text in which equal values are equal (1 and 1.0 alike)."""
    def norm(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return v
        return float(v)
    return json.dumps({k: norm(v) if not isinstance(v, list) else [norm(x) for x in v]
                       for k, v in settings.items()}, sort_keys=True, default=str)


def short_hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def short_name(key: str) -> str:
    if key.startswith(FILE_HASH_PREFIX):
        return short_name(key[len(FILE_HASH_PREFIX):]) + " sha256"
    return SHORT_NAMES.get(key, key.split(".")[-1].lower())


def fmt_value(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)):
        return f"{v:g}"
    if isinstance(v, list):
        return "x".join(fmt_value(x) for x in v) if all(
            isinstance(x, (int, float)) for x in v) else str(v)
    s = str(v)
    return s if s else '""'


def real_weights(pretrained: Any) -> bool:
    """CLIP's published weights: the open_clip tag ``openai`` or a weights file (not ``random``,
    not the demo's built-in CLIP)."""
    p = str(pretrained or "")
    return p == "openai" or (p not in ("", "random") and not p.startswith("builtin:"))


def protocol_of(settings: Dict[str, Any]) -> Tuple[Tuple[str, str], ...]:
    return tuple((k, fmt_value(settings.get(k))) for k in PROTOCOL_KEYS)
