"""argtca's configuration inside Dassl: its keys join Dassl's defaults, and a Dassl default left in
place where argtca's value differs is refused at build time.

Keys: ``install_defaults()`` adds every argtca key that Dassl's default config lacks (``TTA.*``,
``TRAINER.<METHOD>.*``, ``MODEL.PRETRAINED``, ``DATASET.NUM_IMAGES``, ...) to Dassl's default node,
so the ``get_cfg_default()`` in CoOp's ``train.py`` already has them and no ``extend_cfg`` line is
needed. It never changes a value Dassl defines, so CoOp's own trainers see Dassl's defaults as
before.

Keys both define: Dassl's defaults are not argtca's for ``SEED`` (-1), ``INPUT.INTERPOLATION``
(bilinear), ``INPUT.PIXEL_MEAN/STD`` (ImageNet's) and ``MODEL.BACKBONE.NAME`` (empty). A run under
Dassl with one of these still at Dassl's default would silently differ from
``python -m argtca.run``, so :func:`check_dassl_cfg` refuses it, naming the key and argtca's value;
argtca's ``configs/trainers/*.yaml`` state the input keys, as CoOp's trainer configs do, and the
backbone comes from ``--backbone`` or the dataset config (the demo's). ``INPUT.SIZE`` must be the
backbone's image size.
"""
from __future__ import annotations

import math
import os
from typing import Dict, Tuple

from argtca.config import get_cfg_default
from argtca.run_folder import NON_RESULT_KEYS, flatten_cfg

# TPT turns AugMix on for the fine-grained sets and off for the ImageNet family; argtca's own
# dataset classes say it with ``fine_grained``; for CoOp datasets without an argtca reader:
FINE_GRAINED = {"SUN397": True, "ImageNet": False, "ImageNetA": False, "ImageNetR": False,
                "ImageNetSketch": False, "ImageNetV2": False}


class DasslSetupError(ValueError):
    """A configuration that cannot give argtca's numbers under Dassl; the message names the key,
    the value and the fix."""


# modules or .py files (os.pathsep- or comma-separated) imported when argtca registers into Dassl:
# the --plugin of CoOp's train.py (docs/own-method.md)
PLUGINS_ENV = "ARGTCA_PLUGINS"


def plugin_names():
    """The ``$ARGTCA_PLUGINS`` entries, in order."""
    raw = os.environ.get(PLUGINS_ENV, "")
    return [p.strip() for part in raw.split(os.pathsep) for p in part.split(",") if p.strip()]


def extend_cfg(cfg) -> None:
    """Add argtca's nodes and keys that ``cfg`` lacks (values from argtca/config/defaults.py);
    keys ``cfg`` already has keep their values."""
    def merge(dst, src):
        for k, v in src.items():
            if k not in dst:
                dst[k] = v.clone() if hasattr(v, "clone") else v
            elif hasattr(v, "items") and hasattr(dst[k], "items"):
                merge(dst[k], v)
    was_frozen = cfg.is_frozen()
    cfg.defrost()
    merge(cfg, get_cfg_default())
    if was_frozen:
        cfg.freeze()


_DASSL_DEFAULTS: Dict[str, object] = {}


def install_defaults() -> None:
    """Add argtca's keys to Dassl's default config (once); remember Dassl's own defaults first."""
    from dassl.config import defaults
    if not _DASSL_DEFAULTS:
        _DASSL_DEFAULTS.update(flatten_cfg(defaults._C))
    extend_cfg(defaults._C)


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return a == b


def shared_keys_with_other_defaults() -> Dict[str, Tuple[object, object]]:
    """``key -> (Dassl's default, argtca's default)`` for result-changing keys both define with
    different defaults (SEED is checked on its own)."""
    ours = flatten_cfg(get_cfg_default())
    out = {}
    for k, dv in _DASSL_DEFAULTS.items():
        if k in ours and k not in NON_RESULT_KEYS and k != "SEED" and not _same(dv, ours[k]):
            out[k] = (dv, ours[k])
    return out


def _fmt(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v) if str(v) else '""'


def backbone_image_size(backbone: str):
    """The image size the backbone's open_clip config declares (None when it declares none)."""
    from argtca.models.backbones import backbone_image_size as size_of
    return size_of(backbone)


def check_dassl_cfg(cfg, trainer: str) -> None:
    """Refuse, before any data or model is loaded, a Dassl config that would not give the numbers
    ``python -m argtca.run`` gives with the same keys. One DasslSetupError listing every problem."""
    errors = []
    seed = int(cfg.SEED)
    if seed < 0:
        errors.append(f"SEED={seed} (Dassl's default: no fixed seed); argtca draws every image's "
                      f"views from SEED: pass --seed N with N >= 1 (CoOp's train.py ignores "
                      f"--seed 0; 'SEED 0' after the flags works)")
    flat = flatten_cfg(cfg)
    left = [(k, d, a) for k, (d, a) in sorted(shared_keys_with_other_defaults().items())
            if k in flat and _same(flat[k], d)]
    if any(k == "MODEL.BACKBONE.NAME" for k, _, _ in left):
        errors.append(f"MODEL.BACKBONE.NAME is empty (Dassl's default): pass --backbone "
                      f"{get_cfg_default().MODEL.BACKBONE.NAME} (argtca.run's default) or set it "
                      f"in a config file")
    left = [x for x in left if x[0] != "MODEL.BACKBONE.NAME"]
    if left:
        errors.append(", ".join(f"{k}={_fmt(d)}" for k, d, _ in left)
                      + f" {'is' if len(left) == 1 else 'are'} Dassl's default, not argtca's: "
                      f"state {'it' if len(left) == 1 else 'them'} in the --config-file (argtca's "
                      f"configs/trainers/*.yaml do) or add '"
                      + " ".join(f"{k} {_fmt(a)}" for k, _, a in left) + "' to the command line")
    backbone = str(cfg.MODEL.BACKBONE.NAME)
    if backbone:
        need = backbone_image_size(backbone)
        have = tuple(int(s) for s in cfg.INPUT.SIZE) if isinstance(cfg.INPUT.SIZE, (list, tuple)) \
            else (int(cfg.INPUT.SIZE),) * 2
        if need and have != need:
            errors.append(f"INPUT.SIZE={have} but MODEL.BACKBONE.NAME={backbone!r} takes "
                          f"{need[0]}x{need[1]} images: set INPUT.SIZE ({need[0]}, {need[1]})")
    split = str(cfg.TEST.SPLIT)
    if split not in ("test", "val"):
        errors.append(f"TEST.SPLIT={split!r}: argtca's trainers evaluate 'test' or 'val'")
    elif str(cfg.DATASET.SPLIT) not in ("test", split):
        errors.append(f"DATASET.SPLIT={cfg.DATASET.SPLIT!r} is argtca.run's key; under Dassl the "
                      f"evaluated split is TEST.SPLIT (now {split!r}): set TEST.SPLIT instead")
    name = str(cfg.DATASET.NAME)
    if str(cfg.TTA.AUGMIX).strip().lower() == "auto" and fine_grained(name) is None:
        errors.append(f"TTA.AUGMIX=auto cannot tell whether DATASET.NAME={name!r} is fine-grained "
                      f"(TPT: AugMix views on fine-grained sets, plain crops on ImageNet): set "
                      f"TTA.AUGMIX on or off")
    if errors:
        raise DasslSetupError(f"{trainer} under Dassl: " + "; ".join(errors))


def fine_grained(dataset_name: str):
    """Whether TPT uses AugMix views on this dataset; None when argtca does not know it."""
    from argtca.registry import DATASET_REGISTRY
    import argtca.datasets  # noqa: F401  (registration)
    if dataset_name in DATASET_REGISTRY:
        return bool(getattr(DATASET_REGISTRY.get(dataset_name), "fine_grained", False))
    return FINE_GRAINED.get(dataset_name)
