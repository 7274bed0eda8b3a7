"""Trainers register themselves in TRAINER_REGISTRY on import."""
from argtca.trainers import methods  # noqa: F401
from argtca.trainers import ts  # noqa: F401  (temperature-scaled reference rows)
from argtca.trainers import zoo  # noqa: F401  (training-free and online methods)
from argtca.trainers.base import TestTimeTrainer  # noqa: F401

try:  # ArgTCA needs the graph code
    from argtca.trainers import argtca as _argtca  # noqa: F401
except ImportError as e:  # pragma: no cover - only while the package is incomplete
    if "argtca.trainers.argtca" not in str(e) and "argtca.graph" not in str(e):
        raise

# the adapters' files, where a method may be declared beside its adapter (argtca.plugins.method)
import argtca.adapters  # noqa: E402,F401

# installed packages' methods (entry-point group argtca.methods), once argtca's own are registered
from argtca.registry import METHODS_GROUP, load_entry_points  # noqa: E402

load_entry_points(METHODS_GROUP, kind="method")
