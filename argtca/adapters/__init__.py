"""The training-free and online test-time methods, one file each, registered on import: every
module of this package is imported here (pkgutil), so a new method is one new file
(argtca/adapters/base.py says what an adapter is; argtca/plugins.py ``method`` declares one)."""
import importlib
import pkgutil

from argtca.adapters.base import Adapter, OnlineAdapter  # noqa: F401

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")
