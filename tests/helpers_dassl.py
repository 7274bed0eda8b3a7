"""Subprocess driver for the Dassl/CoOp tests: runs CoOp's real ``train.py`` (with ``runpy``, as
``python train.py`` would) several times in one process, with ``import argtca.dassl_compat`` done
before or after CoOp's own modules, and writes what happened to a JSON file.

    python tests/helpers_dassl.py SPEC.json RESULT.json

SPEC: {"order": "before"|"after", "train_py": path, "runs": [{"name", "argv"}], "probe_demo": bool,
"collide_after": bool}. CoOp's folder and Dassl must be on PYTHONPATH (CoOp's first).
"""
import importlib.util
import json
import os
import re
import runpy
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENDOR = REPO.parent / "shared" / "vendor"
COOP = VENDOR / "CoOp"
DASSL_SRC = VENDOR / "Dassl.pytorch"
DASSL_RUNTIME = ("wilds", "tensorboard", "gdown", "tabulate", "sklearn")


def coop_env(runtime=True):
    """The environment of a subprocess that runs CoOp's sources with Dassl (installed, or from
    ../shared/vendor) and this checkout: CoOp's folder first on PYTHONPATH, one thread, no
    ARGTCA_DEBUG. Skips the test where CoOp, Dassl or (``runtime``) Dassl's runtime dependencies
    are absent."""
    import pytest
    if not (COOP / "train.py").is_file():
        pytest.skip(f"CoOp's sources are absent ({COOP}); see ../shared/vendor/README.md")
    paths = [str(COOP)]
    if importlib.util.find_spec("dassl") is None:
        if not (DASSL_SRC / "dassl").is_dir():
            pytest.skip("Dassl.pytorch is neither installed nor vendored in ../shared/vendor")
        paths.append(str(DASSL_SRC))
    missing = [m for m in DASSL_RUNTIME if runtime and importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"Dassl's runtime dependencies are missing ({', '.join(missing)}): "
                    f"pip install -e '.[dassl]'")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(REPO)] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["OMP_NUM_THREADS"] = "1"
    env.pop("ARGTCA_DEBUG", None)
    return env


def snapshot():
    from dassl.data.datasets import DATASET_REGISTRY
    from dassl.engine import TRAINER_REGISTRY
    from dassl.evaluation import EVALUATOR_REGISTRY
    return {reg._name: {n: f"{o.__module__}.{o.__qualname__}" for n, o in reg._obj_map.items()}
            for reg in (TRAINER_REGISTRY, DATASET_REGISTRY, EVALUATOR_REGISTRY)}


def import_coop_modules(train_py):
    """CoOp's own registrations, exactly the modules its train.py imports."""
    import importlib
    with open(train_py) as f:
        mods = re.findall(r"^import ((?:datasets|trainers)\.\w+)\s*$", f.read(), flags=re.M)
    assert mods, f"no CoOp modules found in {train_py}"
    for m in mods:
        importlib.import_module(m)
    return mods


_LOGGERS = []   # Dassl's Logger closes the real stdout when collected: keep them alive


def run_train(train_py, argv):
    """One ``python train.py ARGV``; stdout restored afterwards (Dassl's logger replaces it)."""
    saved_argv, saved_out = sys.argv, sys.stdout
    sys.argv = [train_py] + list(argv)
    try:
        runpy.run_path(train_py, run_name="__main__")
        return {"ok": True}
    except BaseException as e:  # noqa: BLE001 - reported to the test
        return {"ok": False, "type": f"{type(e).__module__}.{type(e).__name__}",
                "message": e.args[0] if isinstance(e, KeyError) and e.args else str(e),
                "traceback": traceback.format_exc()[-3000:]}
    finally:
        if sys.stdout is not saved_out:
            try:
                sys.stdout.flush()
                if getattr(sys.stdout, "file", None) is not None:
                    sys.stdout.file.close()
                    sys.stdout.file = None
                _LOGGERS.append(sys.stdout)
            finally:
                sys.stdout = saved_out
        sys.argv = saved_argv


def probe_demo():
    """Dassl's view of argtca's demo dataset under several NUM_SHOTS / SUBSAMPLE_CLASSES."""
    from dassl.config import get_cfg_default
    from dassl.data.datasets import build_dataset
    from dassl.utils import set_random_seed
    out = {}
    for shots, sub in ((-1, "all"), (2, "all"), (-1, "base"), (-1, "new")):
        cfg = get_cfg_default()
        cfg.DATASET.NAME = "Demo"
        cfg.DATASET.NUM_SHOTS = shots
        cfg.DATASET.SUBSAMPLE_CLASSES = sub   # CoOp's extend_cfg key
        set_random_seed(1)
        ds = build_dataset(cfg)
        out[f"{shots}_{sub}"] = {
            part: [[os.path.basename(d.impath), d.label, d.classname] for d in getattr(ds, part)]
            for part in ("train_x", "val", "test")}
    return out


def collide_after():
    """A class registered under a name argtca already holds."""
    from dassl.engine import TRAINER_REGISTRY

    class ArgTCA:  # noqa: D401 - a stranger's trainer with argtca's name
        pass
    ArgTCA.__module__, ArgTCA.__qualname__ = "someone_elses_plugin", "ArgTCA"
    try:
        TRAINER_REGISTRY.register(ArgTCA)
    except KeyError as e:
        return {"type": type(e).__name__, "message": e.args[0]}
    return {"type": None}


def main(spec_path, result_path):
    import torch
    torch.set_num_threads(1)
    spec = json.load(open(spec_path))
    train_py = spec["train_py"]
    res = {"snapshots": {}}
    import dassl.engine  # noqa: F401
    res["snapshots"]["dassl"] = snapshot()
    if spec["order"] == "before":
        import argtca.dassl_compat  # noqa: F401
        res["snapshots"]["argtca"] = snapshot()
        import_coop_modules(train_py)
        res["snapshots"]["coop"] = snapshot()
    else:
        import_coop_modules(train_py)
        res["snapshots"]["coop"] = snapshot()
        import argtca.dassl_compat  # noqa: F401
        res["snapshots"]["argtca"] = snapshot()
    res["runs"] = {}
    for run in spec["runs"]:
        res["runs"][run["name"]] = run_train(train_py, run["argv"])
    if spec.get("probe_demo"):
        res["demo"] = probe_demo()
    if spec.get("collide_after"):
        res["collide_after"] = collide_after()
    with open(result_path, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
