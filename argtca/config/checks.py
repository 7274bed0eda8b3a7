"""The ranges of the configuration's values, checked before anything is loaded: one
:class:`ConfigError` line lists every bad key with its value and what is allowed."""
from __future__ import annotations

import math

from argtca.config.defaults import METHOD_TO_TRAINER
from argtca.registry import ENGINE_REGISTRY, TRAINER_REGISTRY


class ConfigError(ValueError):
    """A configuration value outside its range: the message names the key, the value and what
    is allowed."""


# keys with a closed set of spellings (exact, lower case: the code compares them as written)
CFG_CHOICES = {
    "DATASET.CHECK_IMAGES": ("header", "decode", "off"),
    "INPUT.INTERPOLATION": ("bicubic", "bilinear", "nearest"),
    "TTA.VIEWS_DEVICE": ("cpu", "cpu-fast", "gpu"),
    "TTA.PREC": ("amp", "fp32"),
    "TRAINER.ZERO.OUTPUT": ("vote", "onehot"),
    "TTA.COMPILE": ("auto", "on", "off"),
    "TTA.FAST.GRAD_MODE": ("auto", "vjp", "loop", "recompute", "jacobian"),
    "TTA.FAST.TEXT_ATTENTION": ("auto", "split", "efficient", "default", "math", "flash", "cudnn"),
    "TTA.FAST.COMPILE_IMAGE": ("auto", "on", "off"),
    "TTA.FAST.COMPILE_TEXT": ("auto", "on", "off"),
    "TTA.FAST.COMPILE_TEXT_GRAD": ("auto", "on", "off"),
    "TRAINER.TCA.ENTROPY_INPUT": ("prob", "logprob"),
    "TRAINER.TS.FIT": ("val", "fixed"),
    "TRAINER.TS.FIT_ON": ("method", "zeroshot"),
    "TRAINER.ARGTCA.ENTROPY_INPUT": ("prob", "logprob"),
    "TRAINER.ARGTCA.EMBEDDINGS": ("gat", "raw"),
    "TRAINER.ARGTCA.EDGES": ("full", "intra", "inter", "none"),
    "TRAINER.ARGTCA.GAT.LOSS_ON": ("h", "z"),
    "TRAINER.ARGTCA.NODE_ATTENTION": ("source", "incoming"),
    "TTA.STREAM.ORDER": ("shuffle", "index"),
    "TRAINER.TDA.VIEWS": ("auto", "original", "confident"),
    "TRAINER.BOOSTADAPTER.HISTORY_VIEWS": ("auto", "original", "confident"),
    "TRAINER.DPE.VIEWS": ("auto", "original", "confident"),
    "TRAINER.DPE.PREDICT_VIEWS": ("auto", "original", "confident"),
    "TTA.PROMPTS": ("class", "attributes"),
}
_AUGMIX = ("auto", "on", "off", "true", "false", "1", "0")


def _get(cfg, key: str):
    node = cfg
    for part in key.split("."):
        if not hasattr(node, "get") or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def _trainer_tunes(name):
    """The ``tunes`` of the registered trainer ``name`` (a trainer or method name); None when no
    trainer of that name is registered (yet)."""
    name = "" if name is _MISSING else str(name or "").strip()
    name = METHOD_TO_TRAINER.get(name.lower(), name)
    if not name or name not in TRAINER_REGISTRY:
        return None
    return bool(getattr(TRAINER_REGISTRY.get(name), "tunes", True))


def check_cfg_values(cfg, tunes=None) -> None:
    """Refuse out-of-range values before anything is loaded; one :class:`ConfigError` line listing
    every bad key with its value and the allowed range.

    ``tunes``: whether the run tunes prompts (every method but zero-shot CLIP); ``None`` reads it
    from the ``tunes`` of the trainer ``TRAINER.NAME`` names. Tuned runs need ``TTA.STEPS >= 1``
    and ``TTA.N_VIEWS >= 2`` (the confident-view selection needs views to choose from); zero-shot
    ignores both. ``TTA.ENGINE`` is "auto" or a registered engine. Names are looked up in the
    registries as they stand: before the trainers and engines are imported (``argtca.trainers``
    imports both), only the checks that hold for every trainer and engine run; the trainer runs
    this again, with its own ``tunes``, before it loads anything. Keys a configuration lacks
    (e.g. a Dassl config without argtca's nodes) are skipped.
    """
    if tunes is None:
        tunes = _trainer_tunes(_get(cfg, "TRAINER.NAME"))
    errors = []

    def num(key, ok, allowed, integer=False):
        v = _get(cfg, key)
        if v is _MISSING:
            return
        bad_type = isinstance(v, bool) or not isinstance(v, (int, float)) or (
            integer and not isinstance(v, int))
        if bad_type or not math.isfinite(v) or not ok(v):
            errors.append(f"{key}={v!r} (allowed: {allowed})")

    for key, choices in CFG_CHOICES.items():
        v = _get(cfg, key)
        if v is not _MISSING and v not in choices:
            errors.append(f"{key}={v!r} (allowed: {', '.join(choices)})")
    engine = _get(cfg, "TTA.ENGINE")
    engines = ("auto",) + tuple(n.lower() for n in ENGINE_REGISTRY.registered_names())
    if engine is not _MISSING and len(engines) > 1 and engine not in engines:
        errors.append(f"TTA.ENGINE={engine!r} (allowed: {', '.join(engines)})")
    aug = _get(cfg, "TTA.AUGMIX")
    if (aug is not _MISSING and not isinstance(aug, bool)
            and str(aug).strip().lower() not in _AUGMIX):
        errors.append(f"TTA.AUGMIX={aug!r} (allowed: auto, on, off)")

    num("DATASET.NUM_IMAGES", lambda v: v == -1 or v >= 1, "-1 for all, or N >= 1", True)
    for key in ("INPUT.PIXEL_MEAN", "INPUT.PIXEL_STD"):
        v = _get(cfg, key)
        if v is _MISSING:
            continue
        vals = list(v) if isinstance(v, (list, tuple)) else [v]
        ok = len(vals) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                    and math.isfinite(x) for x in vals)
        if ok and key.endswith("STD"):
            ok = min(vals) > 0
        if not ok:
            each = ", each > 0" if key.endswith("STD") else ""
            errors.append(f"{key}={v!r} (allowed: 3 finite numbers{each})")

    num("TTA.N_VIEWS", (lambda v: v >= 2) if tunes else (lambda v: v >= 1),
        ">= 2 for tuned methods (view 0 plus augmented views to select from)" if tunes else ">= 1",
        True)
    num("TTA.SELECTION_P", lambda v: 0 < v <= 1, "(0, 1], the fraction of views kept; TPT: 0.1")
    if tunes:
        num("TTA.STEPS", lambda v: v >= 1, ">= 1 for tuned methods (0 steps is zero-shot: use "
            "the zeroshot trainer)", True)
        num("TTA.LR", lambda v: v > 0, "> 0")
    else:
        num("TTA.STEPS", lambda v: v >= 0, ">= 0", True)
    if (aug is _MISSING or isinstance(aug, bool)
            or str(aug).strip().lower() not in ("off", "false", "0")):
        num("TTA.AUGMIX_SEVERITY", lambda v: v > 0.1, "> 0.1 (AugMix levels are drawn from "
            "U(0.1, severity)); TPT: 1")
    num("TTA.WEIGHT_DECAY", lambda v: v >= 0, ">= 0")
    num("TTA.N_CTX", lambda v: v >= 1, ">= 1", True)
    num("TTA.CTX_CHECKPOINT_EPOCH", lambda v: v >= 0, ">= 0 (0: model-best, else the last saved)",
        True)
    num("TTA.LOSS_SCALE", lambda v: v > 0, "> 0")
    num("TTA.BATCH_IMAGES", lambda v: v >= 1, ">= 1", True)
    num("TTA.FAST.IMAGE_CHUNK", lambda v: v == -1 or v >= 1, ">= 1 views, or -1 for BATCH_IMAGES "
        "x N_VIEWS (at most 2048)", True)
    num("TTA.FAST.TEXT_TOKENS", lambda v: v >= 1, ">= 1", True)
    num("DATALOADER.NUM_WORKERS", lambda v: v >= -1, ">= 0 (0 loads in the main process), or -1 "
        "for what the machine has", True)
    num("DATALOADER.PREFETCH", lambda v: v >= 1, ">= 1", True)
    num("DATALOADER.MAIN_THREADS", lambda v: v >= -1, ">= 1 threads, 0 for torch's default, or "
        "-1 for 1 on CUDA with loader workers", True)

    for m in ("CTPT", "OTPT", "ATPT"):
        num(f"TRAINER.{m}.LAMBDA", lambda v: v >= 0, ">= 0 (the sign is part of the objective)")
    num("TRAINER.ATPT.TAU", lambda v: 0 < v <= 1, "(0, 1], the cosine clamp of A-TPT")
    for m in ("TCA", "ARGTCA"):
        num(f"TRAINER.{m}.NUM_ATTRIBUTES", lambda v: v >= 1, ">= 1", True)
        num(f"TRAINER.{m}.ALPHA", lambda v: v >= 0, ">= 0")
        num(f"TRAINER.{m}.BETA", lambda v: v >= 0, ">= 0")
    num("TTA.STREAM.SEED", lambda v: v >= -1, ">= 0, or -1 for the run's SEED", True)
    num("TTA.STREAM.CHECKPOINT_IMAGES", lambda v: v >= 1, ">= 1", True)
    num("TRAINER.RTPT.TOP_K", lambda v: v >= 1, ">= 1 (R-TPT: 20)", True)
    num("TRAINER.RTPT.TEMPERATURE", lambda v: v > 0, "> 0 (R-TPT: 0.01)")
    num("TRAINER.TPS.LR", lambda v: v > 0, "> 0 (TPS: 5e-3)")
    num("TRAINER.TPS.STEPS", lambda v: v >= 0, ">= 0 (0: zero-shot; TPS: 1)", True)
    num("TRAINER.TPS.WEIGHT_DECAY", lambda v: v >= 0, ">= 0")
    for key in ("ALPHA", "BETA"):
        num(f"TRAINER.BOOSTADAPTER.{key}", lambda v: v == -1 or v >= 0,
            ">= 0, or -1 for the official value of the dataset")
        num(f"TRAINER.DPE.{key}", lambda v: v == -1 or v >= 0,
            ">= 0, or -1 for the official value of the dataset")
    num("TRAINER.BOOSTADAPTER.DELTA", lambda v: v >= -1,
        ">= 0, or -1 for the official value of the dataset", True)
    for key in ("SHOT_CAPACITY", "NEG_SHOT_CAPACITY"):
        num(f"TRAINER.BOOSTADAPTER.{key}", lambda v: v >= 1, ">= 1", True)
    for key in ("NEG_ALPHA", "NEG_BETA"):
        num(f"TRAINER.BOOSTADAPTER.{key}", lambda v: v >= 0, ">= 0")
    for key in ("NEG_ENTROPY_LOWER", "NEG_ENTROPY_UPPER", "NEG_MASK_LOWER", "NEG_MASK_UPPER"):
        num(f"TRAINER.BOOSTADAPTER.{key}", lambda v: 0 <= v <= 1, "[0, 1]")
    num("TRAINER.DPE.SHOT_CAPACITY", lambda v: v >= 1, ">= 1", True)
    for key in ("LR_TEXT", "LR_IMAGE", "ALIGN"):
        num(f"TRAINER.DPE.{key}", lambda v: v == -1 or v >= 0,
            ">= 0, or -1 for the official value of the dataset")
    num("TRAINER.DPE.STEPS", lambda v: v >= 0, ">= 0 (official: 1)", True)
    num("TRAINER.DPE.ADAM_EPS", lambda v: v > 0, "> 0")
    num("TRAINER.DPE.WEIGHT_DECAY", lambda v: v >= 0, ">= 0")
    num("TRAINER.DPE.INFONCE_T", lambda v: v > 0, "> 0")
    num("TRAINER.DPE.EVOLVE_ENTROPY", lambda v: v >= 0, ">= 0 (0: the text never evolves)")
    num("TRAINER.ZERO.TEMPERATURE", lambda v: v >= 0, ">= 0 (0: one-hot votes, ZERO's paper)")
    num("TRAINER.MTA.LAMBDA_Y", lambda v: v > 0, "> 0 (MTA: 0.2)")
    num("TRAINER.MTA.LAMBDA_Q", lambda v: v >= 0, ">= 0 (MTA: 4)")
    num("TRAINER.MTA.MAX_ITER", lambda v: v >= 1, ">= 1 (MTA: 5)", True)
    num("TRAINER.MTA.TOL", lambda v: v >= 0, ">= 0 (MTA: 1e-6)")
    num("TRAINER.MTA.BANDWIDTH_P", lambda v: 0 < v <= 1, "(0, 1] (MTA: 0.3)")
    for k in ("POS", "NEG"):
        num(f"TRAINER.TDA.{k}_SHOT_CAPACITY", lambda v: v >= 1, ">= 1", True)
        num(f"TRAINER.TDA.{k}_ALPHA", lambda v: v >= 0 or (k == "POS" and v == -1),
            ">= 0" + (", or -1 for the official per-dataset value" if k == "POS" else ""))
        num(f"TRAINER.TDA.{k}_BETA", lambda v: v >= 0 or (k == "POS" and v == -1),
            ">= 0" + (", or -1 for the official per-dataset value" if k == "POS" else ""))
    for k in ("ENTROPY", "MASK"):
        lo = _get(cfg, f"TRAINER.TDA.NEG_{k}_LOWER")
        num(f"TRAINER.TDA.NEG_{k}_LOWER", lambda v: v >= 0, ">= 0")
        num(f"TRAINER.TDA.NEG_{k}_UPPER", lambda v, lo=lo: not isinstance(lo, (int, float))
            or v > lo, f"> TRAINER.TDA.NEG_{k}_LOWER={lo!r}")
    num("TRAINER.DMN.MEMORY_SIZE", lambda v: v >= 1, ">= 1 (DMN: 50)", True)
    num("TRAINER.DMN.BETA", lambda v: v >= 0, ">= 0 (DMN: 5.5)")
    num("TRAINER.DMN.MEMORY_WEIGHT", lambda v: v >= 0 or v == -1,
        ">= 0, or -1 for the official per-dataset value")
    num("TRAINER.TS.T", lambda v: v > 0, "> 0 (C-TPT: 1.16 ViT, 1.15 RN)")
    num("TRAINER.TS.VAL_IMAGES", lambda v: v == -1 or v >= 1, "-1 for all, or N >= 1", True)
    num("TRAINER.ARGTCA.NUM_CANDIDATES", lambda v: v >= 1, ">= 1", True)
    num("TRAINER.ARGTCA.SELECTOR_SEED", lambda v: v >= 0, ">= 0", True)
    num("TRAINER.ARGTCA.JOINT_WEIGHT", lambda v: 0 <= v <= 1, "[0, 1]")
    heads = _get(cfg, "TRAINER.ARGTCA.GAT.HEADS")
    num("TRAINER.ARGTCA.GAT.HEADS", lambda v: v >= 1, ">= 1", True)
    if isinstance(heads, int) and heads >= 1:
        num("TRAINER.ARGTCA.GAT.HIDDEN", lambda v: v >= 1 and v % heads == 0,
            f">= 1 and divisible by TRAINER.ARGTCA.GAT.HEADS={heads}", True)
    num("TRAINER.ARGTCA.GAT.DROPOUT", lambda v: 0 <= v < 1, "[0, 1)")
    num("TRAINER.ARGTCA.GAT.EPOCHS", lambda v: v >= 0, ">= 0", True)
    num("TRAINER.ARGTCA.GAT.LR", lambda v: v > 0, "> 0")
    num("TRAINER.ARGTCA.GAT.TAU", lambda v: v > 0, "> 0")
    if errors:
        raise ConfigError("configuration value out of range: " + "; ".join(errors)
                          + " (every key and its default is in argtca/config/defaults.py)")
