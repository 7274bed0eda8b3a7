import subprocess
import sys

import pytest

from conftest import REPO


def test_import_subprocess_from_repo_root_is_not_shadowed():
    # a top-level `selectors` or `datasets` package would shadow the stdlib / HuggingFace
    r = subprocess.run([sys.executable, "-c", "import subprocess, selectors; print(selectors.__file__)"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert str(REPO) not in r.stdout
    assert not (REPO / "selectors").exists() and not (REPO / "datasets").exists()


def test_extend_cfg_adds_our_keys_to_a_foreign_config():
    from yacs.config import CfgNode as CN
    from argtca.dassl_compat import extend_cfg
    cfg = CN()
    cfg.TRAINER = CN()
    cfg.TRAINER.NAME = "ArgTCA"
    cfg.TRAINER.COOP = CN()
    cfg.TRAINER.COOP.N_CTX = 16
    extend_cfg(cfg)
    assert cfg.TRAINER.COOP.N_CTX == 16 and cfg.TRAINER.NAME == "ArgTCA"
    assert cfg.TRAINER.ARGTCA.SELECTOR == "div" and cfg.TTA.N_VIEWS == 64


def test_registers_into_dassl_when_importable():
    pytest.importorskip("dassl")
    import argtca.dassl_compat as dc
    from dassl.engine import TRAINER_REGISTRY
    from dassl.evaluation import EVALUATOR_REGISTRY
    assert dc.HAVE_DASSL
    assert "ArgTCA" in TRAINER_REGISTRY.registered_names()
    assert "ClassificationCalib" in EVALUATOR_REGISTRY.registered_names()
