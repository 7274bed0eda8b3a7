"""Plug-ins registered by a test stay in that test: the registries, the plug-in modules and the
caches derived from them are put back as they were (else a later test's catalogue, Table-1 plan
or config defaults would hold another test's toy method)."""
import contextlib
import sys


@contextlib.contextmanager
def registries_restored():
    # argtca's own entries are registered first (on import), so the snapshot holds them
    import argtca.datasets  # noqa: F401
    import argtca.selectors  # noqa: F401
    import argtca.trainers  # noqa: F401
    from argtca.registry import (ADAPTER_REGISTRY, DATASET_REGISTRY, ENGINE_REGISTRY,
                                 OBJECTIVE_REGISTRY, SELECTOR_REGISTRY, TRAINER_REGISTRY)
    regs = (ADAPTER_REGISTRY, DATASET_REGISTRY, ENGINE_REGISTRY, OBJECTIVE_REGISTRY,
            SELECTOR_REGISTRY, TRAINER_REGISTRY)
    saved = [(r, dict(r._obj_map), dict(r._names), dict(r._traits)) for r in regs]
    mods = set(sys.modules)
    try:
        yield
    finally:
        for r, objs, names, traits in saved:
            r._obj_map, r._names, r._traits = objs, names, traits
        for m in set(sys.modules) - mods:
            if m.startswith("_argtca_plugins."):
                del sys.modules[m]
        from argtca.report import identity
        for f in vars(identity).values():
            if hasattr(f, "cache_clear"):
                f.cache_clear()
