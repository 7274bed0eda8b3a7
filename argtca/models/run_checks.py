"""The checks of a run that need the backbone, made before any data is read: ``INPUT.SIZE``
against the backbone, ``RUN.REQUIRE_CUDA``, and the loud warning (with an estimated time) when
real weights would run on the CPU; and whether a run's weights can be had at all
(:func:`weights_problems`: what a single run and table1's preflight check before anything
starts)."""
from __future__ import annotations

import sys
import time
from contextvars import ContextVar
from typing import List, Optional

import torch

from .backbones import check_input_size, open_clip_name
from .lean import open_clip


def _real_weights(cfg) -> bool:
    p = str(cfg.MODEL.PRETRAINED).strip().lower()
    return bool(p) and p != "random" and not p.startswith("builtin:")


def _vit_gflop_per_view(backbone: str) -> Optional[float]:
    """Forward GFLOP of a ViT image tower per view (2 x multiply-adds of the attention blocks);
    None for other towers."""
    mc = open_clip.get_model_config(open_clip_name(backbone)) or {}
    v = mc.get("vision_cfg") or {}
    size, patch, width, layers = (v.get(k) for k in ("image_size", "patch_size", "width",
                                                      "layers"))
    if not all(isinstance(x, int) for x in (size, patch, width, layers)):
        return None
    tokens = (size // patch) ** 2 + 1
    macs = layers * (12 * tokens * width ** 2 + 2 * tokens ** 2 * width)
    return 2 * macs / 1e9


def _cpu_gflops() -> float:
    """This machine's fp32 matrix-multiply rate in GFLOP/s (a ~0.1 s measurement)."""
    a = torch.randn(768, 768)
    torch.mm(a, a)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.1:
        torch.mm(a, a)
        n += 1
    return 2 * 768 ** 3 * n / (time.perf_counter() - t0) / 1e9


def _duration(seconds: float) -> str:
    m = int(seconds // 60)
    return f"{m // 60} h {m % 60} min" if m >= 60 else f"{max(m, 1)} min"


def cpu_run_warning(cfg, n_images: int, n_views: int, gflops: Optional[float] = None) -> str:
    """The warning for real weights on the CPU: what runs, the estimated time, the fixes."""
    backbone = str(cfg.MODEL.BACKBONE.NAME)
    per_view = _vit_gflop_per_view(backbone)
    if per_view is not None:
        rate = gflops if gflops is not None else _cpu_gflops()
        est = (f"estimated time: at least {_duration(n_images * n_views * per_view / rate)} for "
               f"{n_images} images x {n_views} views (the image tower alone, at the {rate:.0f} "
               f"GFLOP/s measured here)")
    else:
        est = f"{n_images} images x {n_views} views: expect hours"
    bar = "=" * 78
    why = ("PyTorch was built without CUDA" if torch.version.cuda is None
           else "no usable CUDA device")
    return "\n".join(f"argtca: WARNING {line}" for line in (
        bar, f"CUDA is not available ({why}): {backbone} with weights "
        f"{cfg.MODEL.PRETRAINED!r} runs on the CPU;", est + ".",
        "Run on a machine with a GPU, set RUN.REQUIRE_CUDA True to make this an error, or "
        "USE_CUDA False to run on the CPU on purpose.", bar))


# None: every run warns; a list (set by argtca.experiments' runner around its runs): the first
# run that would compute on the CPU with real weights warns, the others do not repeat the box
CPU_WARNING_SHOWN: ContextVar[Optional[list]] = ContextVar("argtca_cpu_warning_shown",
                                                          default=None)


def check_before_run(cfg, device, n_images: int) -> None:
    """The checks of a run that need the backbone, before any data is read or trained on:
    ``INPUT.SIZE`` against the backbone; on a machine without CUDA an error under
    ``RUN.REQUIRE_CUDA``, else a loud warning with the estimated time when real weights would
    run on the CPU. ``cfg``: the configuration the engine sees (zero-shot: one view)."""
    from argtca.config import ConfigError
    check_input_size(cfg)
    if torch.device(device).type == "cuda":
        return
    run = cfg.get("RUN")
    if run is not None and bool(run.get("REQUIRE_CUDA", False)):
        what = ("USE_CUDA is False" if not cfg.USE_CUDA else
                "CUDA is not available (torch.cuda.is_available() is False; torch "
                f"{torch.__version__}, CUDA build {torch.version.cuda})")
        raise ConfigError(f"RUN.REQUIRE_CUDA is True but {what}: run on a machine with a GPU "
                          f"(and USE_CUDA True), or set RUN.REQUIRE_CUDA False")
    if cfg.USE_CUDA and _real_weights(cfg):
        shown = CPU_WARNING_SHOWN.get()   # a batch of runs (argtca.experiments) shows it once
        if shown is None or not shown:
            print(cpu_run_warning(cfg, n_images, int(cfg.TTA.N_VIEWS)), file=sys.stderr,
                  flush=True)
        if shown is not None:
            shown.append(True)


def weights_problem(backbone: str, pretrained: str) -> Optional[str]:
    """Why ``MODEL.PRETRAINED`` cannot be had for ``backbone`` (None when it can): the lookup
    ``load_clip`` makes (a file that exists; a tag whose weights are cached or, online,
    downloaded now into the cache the runs read), without building the model."""
    from ..utils.paths import resolve_builtin
    from .pretrained import weights_file
    from .weights import ModelError
    p = resolve_builtin(str(pretrained).strip())
    if p == "":
        return ("MODEL.PRETRAINED is empty: give a tag (openai), a checkpoint path, "
                "hf-hub:org/name, or 'random' for random weights")
    if p.lower() == "random":
        return None
    try:
        weights_file(p, open_clip_name(backbone), backbone)
    except ModelError as e:
        return str(e).replace("\n", " ")
    return None


def more_weights_problem(prefix: str, backbone: str, pretrained: str) -> Optional[str]:
    """:func:`weights_problem` of a method's other weights (``trainer.more_weights()``, e.g.
    RLCF's reward model), naming its own keys ``<prefix>_BACKBONE`` / ``<prefix>_PRETRAINED``."""
    msg = weights_problem(backbone, pretrained)
    return msg and (msg.replace("MODEL.BACKBONE.NAME", f"{prefix}_BACKBONE")
                    .replace("MODEL.PRETRAINED", f"{prefix}_PRETRAINED"))


def weights_problems(trainer) -> List[str]:
    """Every weights file the run of ``trainer`` loads that cannot be had, one message each."""
    cfg = trainer.cfg
    out = [weights_problem(str(cfg.MODEL.BACKBONE.NAME), str(cfg.MODEL.PRETRAINED))]
    out += [more_weights_problem(*w) for w in getattr(trainer, "more_weights", list)()]
    return [m for m in out if m]
