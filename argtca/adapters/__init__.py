"""The training-free and online test-time methods, one file each, each declared beside its
adapter with ``argtca.plugins.method`` (argtca/adapters/base.py says what an adapter is).

The imports below are in the order the tables list the methods (a family's rows follow their
registration); every other module of this package is then imported in name order (pkgutil), so
a new method is one new file."""
import importlib
import pkgutil

from argtca.adapters.base import Adapter, OnlineAdapter  # noqa: F401
from argtca.adapters import zero, mta, tps  # noqa: F401  (training-free)
from argtca.adapters import tda, dmn, boostadapter, dpe  # noqa: F401  (online: the paper's)
from argtca.adapters import dmn_weak, ecalp, onzeta, dynaprompt  # noqa: F401  (online: more)
from argtca.registry import builtin_package_loaded

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")

builtin_package_loaded(__name__)
