import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))
# the threads a run in a child process (a script, a SLURM job) takes too, also under
# pytest-xdist: tests compare such runs' records with in-process ones bit for bit, and a float
# sum split over another number of threads differs in its last bits
torch.set_num_threads(min(2, torch.get_num_threads()))


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): tests one xdist worker runs in order")


def pytest_collection_modifyitems(config, items):
    # the SLURM tests share one node (its stand-in GPUs, its queue): one worker runs them in order
    # (``--dist loadgroup``)
    for item in items:
        if item.path.name.startswith("test_slurm_"):
            item.add_marker(pytest.mark.xdist_group("slurm"))


def tiny_cfg(**over):
    from argtca.config import get_cfg_default
    cfg = get_cfg_default()
    cfg.MODEL.BACKBONE.NAME = "argtca-tiny-test"
    cfg.MODEL.PRETRAINED = "random"
    cfg.USE_CUDA = False
    cfg.VERBOSE = False
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.INPUT.SIZE = (32, 32)
    return set_keys(cfg, over)


def set_keys(node, over):
    """``node`` with each dotted key of ``over`` set below it (``{"GAT.EPOCHS": 2}``)."""
    for key, value in over.items():
        *parents, last = key.split(".")
        target = node
        for p in parents:
            target = target[p]
        target[last] = value
    return node


# Tests import this file's helpers (``from conftest import REPO, tiny_cfg``). pytest imports every
# folder's conftest.py under the same module name, ``conftest``: once a folder's is imported, the
# name means this file again.
_THIS = sys.modules[__name__]


def pytest_plugin_registered(plugin, manager):
    if getattr(plugin, "__name__", None) == "conftest" and plugin is not _THIS:
        sys.modules["conftest"] = _THIS


@pytest.fixture(scope="session", autouse=True)
def _no_network_no_user_cache(tmp_path_factory):
    """No test touches the network or the user's download cache (argtca/fetch.py); fetch tests
    opt back in with monkeypatch and a local HTTP server."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ARGTCA_OFFLINE", "1")
    mp.setenv("ARGTCA_DOWNLOADS", str(tmp_path_factory.mktemp("downloads")))
    mp.delenv("ARGTCA_MIRROR", raising=False)
    # the demo images, the Phase-1 store and the LLM answer cache of the tests live in a folder of
    # this session, never in the user's ~/.cache/argtca (ARGTCA_TEST_CACHE keeps one across runs)
    mp.setenv("ARGTCA_CACHE", os.environ.get("ARGTCA_TEST_CACHE")
              or str(tmp_path_factory.mktemp("argtca-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models are launch-bound: one thread avoids thrashing on small shared machines."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny_clip():
    from argtca.models.clip import load_clip
    torch.manual_seed(0)
    return load_clip(tiny_cfg())


@pytest.fixture
def shared_data():
    if not SHARED.is_dir():
        pytest.skip("../shared/data is absent")
    return SHARED


@pytest.fixture(scope="module", autouse=True)
def _plugins_stay_in_their_module(request):
    """The toy methods of tests/plugins leave the registries with their test module (else a
    later module's catalogue, Table-1 plan or defaults would list them)."""
    if "plugins" not in Path(str(request.fspath)).parts:
        yield
        return
    from helpers_registry import registries_restored
    with registries_restored():
        yield
