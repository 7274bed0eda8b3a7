"""Settling a run's configuration: its "auto" values resolved and its names spelled one way, once,
before anything is fingerprinted or built (``TestTimeTrainer.resolve_auto`` calls it). What a
method runs on is read from its trainer's declared trait ``engine_name`` (the features engine
for an adapter method, TTL's "lora", "" for a prompt-tuning method), never probed.

``TTA.ENGINE auto``         fast engine on CUDA, reference engine on the CPU. The fast engine equals
                            the reference on the CPU to 1e-5 and on CUDA up to fp16 near-ties;
                            ``TTA.ENGINE reference`` keeps the reference. A method that tunes no
                            prompt (an adapter's rule on frozen features) runs on the features
                            engine and only there (:func:`settle_engine`).
``TTA.COMPILE auto``        ``torch.compile`` of the fast engine's towers only when the run is long
                            enough to pay the compilation back: images x estimated saving per
                            image > estimated compile time (constants below). With CPU views the
                            loader, not the engine, bounds the speed, so compiling saves nothing
                            there.
``DATALOADER.NUM_WORKERS -1``  usable cores - 1 (one is left to the main process), at most 16.
``DATALOADER.MAIN_THREADS -1``  1 on CUDA with loader workers, else 0 (torch's default): the main
                            process then only plans and queues device work; with torch's default
                            (one OpenMP thread per core) its small CPU ops spun their threads
                            against the busy workers and the loop ran at half speed. Applied
                            around the test loop only (argtca/utils/host.py :func:`host_threads`).

The resolution is a pure function of the configuration, the device type and the number of test
images (never of a timing), so a resumed run resolves to the same values and the run folder's
fingerprint (which records the *resolved* ``TTA.ENGINE``/``TTA.COMPILE``) stays valid.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from argtca.config.checks import ConfigError
from argtca.utils.host import auto_workers, main_threads, usable_cpus

__all__ = ["ADAPTER_ENGINE", "engine_compiles", "COMPILE_SECONDS", "SAVED_SECONDS_PER_IMAGE",
           "compile_pays", "canonical_names", "settle_prompts", "settle_engine", "resolve_auto"]

# the one place an engine's name decides anything: the engine of the adapter methods (whether an
# engine's towers can be compiled is its class's trait ``compiles``: engine_compiles)
ADAPTER_ENGINE = "features"

# Compiling the towers pays only past COMPILE_SECONDS / SAVED_SECONDS_PER_IMAGE test images (about
# 57,000): the seconds torch.compile adds to a run, and the seconds it saves per image, for
# ViT-B/16 with GPU views on one GPU. How they are measured, and their current values:
# benchmarks/README.md#compile. Re-measure them when the towers change.
COMPILE_SECONDS = 63.0
SAVED_SECONDS_PER_IMAGE = 1.1e-3


def engine_compiles(engine: str) -> bool:
    """Whether the registered engine ``engine`` compiles its towers under ``TTA.COMPILE`` (its
    class declares ``compiles = True``)."""
    from argtca.registry import ENGINE_REGISTRY
    return engine in ENGINE_REGISTRY and bool(getattr(ENGINE_REGISTRY.get(engine), "compiles",
                                                      False))


def compile_pays(n_images: int, views_device: str) -> bool:
    if str(views_device).lower() != "gpu":
        return False
    return n_images * SAVED_SECONDS_PER_IMAGE > COMPILE_SECONDS


def canonical_names(cfg) -> dict:
    """Names the registries look up case-insensitively, spelled one way before the run is
    fingerprinted, so ``DIV`` and ``div`` are one experiment (one folder): the trainer as
    registered (its class name), the selector in lower case (as the run's label and Phase 1
    name it). -> {key path: canonical value} for the names spelled otherwise."""
    from argtca.registry import TRAINER_REGISTRY
    out = {}
    name = str(cfg.TRAINER.get("NAME", "") or "")
    registered = {n.lower(): n for n in TRAINER_REGISTRY.registered_names()}
    if name and registered.get(name.lower(), name) != name:
        out[("TRAINER", "NAME")] = registered[name.lower()]
    node = cfg.TRAINER.get("ARGTCA", None)
    sel = node.get("SELECTOR", None) if node is not None else None
    if isinstance(sel, str) and sel != sel.strip().lower():
        out[("TRAINER", "ARGTCA", "SELECTOR")] = sel.strip().lower()
    return out


def settle_prompts(cfg, runs_on: str, label: str) -> None:
    """``TTA.PROMPTS`` other than "class" is for the training-free and online methods (those that
    run on the features engine, ``runs_on``); a :class:`ConfigError` naming ``label`` else."""
    if str(cfg.TTA.get("PROMPTS", "class")) != "class" and runs_on != ADAPTER_ENGINE:
        raise ConfigError(f"TTA.PROMPTS={cfg.TTA.PROMPTS!r} is for the training-free and "
                          f"online methods; {label} builds its own prompts (TCA and "
                          f"ArgTCA use attribute prompts by design): leave TTA.PROMPTS class")


def settle_engine(cfg, runs_on: str, label: str) -> str:
    """``TTA.ENGINE`` for a method that declares it runs on ``runs_on`` (its trainer's
    ``engine_name``): an adapter method on the features engine, which "auto" picks for it; a
    method with an engine of its own (TTL's "lora") on that one; a prompt-tuning method ("") on
    any other but those (an engine class with ``method_only``). A mismatch is a
    :class:`ConfigError` naming the method ``label``. Returns the engine ("auto": the device
    decides)."""
    engine = str(cfg.TTA.ENGINE).lower()
    own = str(runs_on or "").lower()
    adapter = own == ADAPTER_ENGINE
    if own and not adapter:
        if engine not in ("auto", own):
            raise ConfigError(f"TTA.ENGINE={cfg.TTA.ENGINE!r}: {label} runs on its own engine, "
                              f"{own}; leave TTA.ENGINE auto")
        return own
    from argtca.registry import ENGINE_REGISTRY
    if engine in ENGINE_REGISTRY and getattr(ENGINE_REGISTRY.get(engine), "method_only", False):
        raise ConfigError(f"TTA.ENGINE={cfg.TTA.ENGINE!r} runs only the method built for it; "
                          f"{label}: use TTA.ENGINE auto")
    if adapter and engine not in ("auto", ADAPTER_ENGINE):
        raise ConfigError(f"TTA.ENGINE={cfg.TTA.ENGINE!r}: {label} tunes no prompt and runs on "
                          f"the features engine; leave TTA.ENGINE auto")
    if not adapter and engine == ADAPTER_ENGINE:
        raise ConfigError(f"TTA.ENGINE=features runs the training-free and online methods; "
                          f"{label} tunes prompts: use TTA.ENGINE auto, fast or reference")
    return ADAPTER_ENGINE if adapter else engine


def resolve_auto(cfg, device_type: str, n_images: int, runs_on: str = "",
                 label: str = "this method",
                 also: Optional[Dict[tuple, object]] = None) -> Tuple[object, List[str]]:
    """``cfg`` with its "auto" values replaced (a frozen clone when anything changed) and one log
    line per choice made. ``runs_on``: the engine the method declares it runs on (its trainer's
    ``engine_name``, :func:`settle_engine`). ``also``: the method's own resolved values
    ({key path: value}), set in the same clone."""
    lines = []
    changes = {}
    cuda = str(device_type) == "cuda"
    engine = settle_engine(cfg, runs_on, label)
    if engine != str(cfg.TTA.ENGINE).lower():
        changes[("TTA", "ENGINE")] = engine
    if engine == "auto":
        engine = "fast" if cuda else "reference"
        changes[("TTA", "ENGINE")] = engine
        lines.append(f"TTA.ENGINE auto -> {engine} ({'CUDA' if cuda else 'no CUDA device'}; "
                     f"TTA.ENGINE reference/fast to choose)")
    comp = cfg.TTA.get("COMPILE", "off")
    comp = ("on" if comp else "off") if isinstance(comp, bool) else str(comp).lower()
    if comp == "auto":
        if not engine_compiles(engine):
            comp, why = "off", f"the {engine} engine compiles nothing"
        elif not cuda:
            comp, why = "off", f"the {engine} engine compiles on CUDA only"
        else:
            views = str(cfg.TTA.VIEWS_DEVICE).lower()
            comp = "on" if compile_pays(n_images, views) else "off"
            if views != "gpu":
                why = f"views made on the CPU ({views}) bound the speed, compiling saves nothing"
            else:
                why = (f"{n_images} images x ~{SAVED_SECONDS_PER_IMAGE * 1e3:.1f} ms saved "
                       f"{'>' if comp == 'on' else '<='} ~{COMPILE_SECONDS:.0f} s of compilation")
        changes[("TTA", "COMPILE")] = comp
        lines.append(f"TTA.COMPILE auto -> {comp} ({why})")
    elif isinstance(cfg.TTA.get("COMPILE"), bool):
        changes[("TTA", "COMPILE")] = comp
    workers = cfg.DATALOADER.get("NUM_WORKERS", 0)
    if isinstance(workers, int) and workers == -1:
        w = auto_workers()
        changes[("DATALOADER", "NUM_WORKERS")] = w
        lines.append(f"DATALOADER.NUM_WORKERS -1 -> {w} ({usable_cpus()} usable cores)")
        workers = w
    if cfg.DATALOADER.get("MAIN_THREADS", 0) == -1:
        t = main_threads(device_type, workers)
        changes[("DATALOADER", "MAIN_THREADS")] = t
        if t:
            lines.append(f"DATALOADER.MAIN_THREADS -1 -> {t} (CUDA with {workers} loader workers: "
                         f"the main process only drives the device)")
    changes.update(canonical_names(cfg))
    changes.update(also or {})
    if not changes:
        return cfg, lines
    out = cfg.clone()
    out.defrost()
    for path, v in changes.items():
        node = out
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = v
    if cfg.is_frozen():
        out.freeze()
    return out, lines
