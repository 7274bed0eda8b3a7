"""The training-free and online test-time methods, one file each, registered in
``ADAPTER_REGISTRY`` on import (argtca/adapters/base.py says what an adapter is)."""
from argtca.adapters.base import Adapter, OnlineAdapter  # noqa: F401
from argtca.adapters import tps  # noqa: F401
from argtca.adapters import boostadapter  # noqa: F401
from argtca.adapters import dpe  # noqa: F401
from argtca.adapters import zero  # noqa: F401
from argtca.adapters import mta  # noqa: F401
from argtca.adapters import tda  # noqa: F401
from argtca.adapters import dmn  # noqa: F401
from argtca.adapters import dmn_weak  # noqa: F401
from argtca.adapters import ecalp  # noqa: F401
from argtca.adapters import onzeta  # noqa: F401
