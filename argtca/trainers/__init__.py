"""Trainers register themselves in TRAINER_REGISTRY on import: the methods declared here (each
with ``argtca.plugins.method`` beside its class) and, through argtca/adapters (imported at the
end, argtca/registry.py ``builtin_package_loaded``), the methods declared beside their adapters,
then the installed packages' methods (entry-point group ``argtca.methods``). The catalogue lists
a family's methods in the order they register: the order of these imports. A declaration
makes its trainer through argtca/trainers/declare.py, installed first as the registry's factory
(a declaration made before it, by an adapter imported first, waits until the trainers' own
methods are in, so the registration order is the same whichever package comes first)."""
from argtca.registry import set_method_factory
from argtca.trainers.declare import declare

set_method_factory(declare)
from argtca.trainers import methods  # noqa: F401,E402
from argtca.trainers import ts  # noqa: F401,E402  (temperature-scaled reference rows)
from argtca.trainers import zoo  # noqa: F401,E402  (the trainers of the adapter methods)
from argtca.trainers.base import TestTimeTrainer  # noqa: F401,E402
from argtca.trainers import argtca as _argtca  # noqa: F401,E402  (ArgTCA, on argtca/graph)
from argtca.registry import builtin_package_loaded, flush_declared_methods  # noqa: E402

flush_declared_methods()   # the adapters' declarations made before the trainers loaded
builtin_package_loaded(__name__)
