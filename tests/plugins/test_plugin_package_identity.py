"""A plug-in package is identified by its whole module closure: a helper module it imports,
edited between a kill and the resume, refuses the resume (naming the file) instead of mixing two
versions' records in one run."""
import json
import os
import subprocess
import sys

from conftest import REPO

INIT = '''
from argtca.adapters import Adapter
from argtca.plugins import method

from mypkg.helpers import temperature


@method("pkg_zs", family="training-free")
class PkgZeroShot(Adapter):
    @classmethod
    def needs_views(cls, node, cfg):
        return False

    def __call__(self, img):
        return (self.clip_logits(img[:, 0]) / temperature()).softmax(-1)
'''


def _run(tmp_path, *extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(tmp_path / "src"), str(REPO))))
    return subprocess.run(
        [sys.executable, "-m", "argtca.run", "--plugin", "mypkg", "--trainer", "pkg_zs",
         "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
         "DATASET.NUM_IMAGES", "8", "USE_CUDA", "False", "DATALOADER.NUM_WORKERS", "0",
         "VERBOSE", "False", *extra], capture_output=True, text=True, env=env,
        cwd=str(tmp_path), timeout=600)


def test_an_edited_helper_module_refuses_the_resume(tmp_path):
    pkg = tmp_path / "src" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "helpers.py").write_text("def temperature():\n    return 1.0\n")
    out = tmp_path / "run"
    r = _run(tmp_path, "--output-dir", str(out))
    assert r.returncode == 0, r.stderr
    config = json.loads((out / "config.json").read_text())
    roles = sorted(k for k in config if k.startswith("FILE_SHA256.PLUGIN."))
    assert any(k.endswith("helpers") for k in roles) and len(roles) == 2, roles
    # killed after 4 of its 8 images, then the helper changes
    lines = (out / "records.jsonl").read_text().splitlines(True)
    (out / "records.jsonl").write_text("".join(lines[:4]))
    (out / "summary.json").unlink()
    (pkg / "helpers.py").write_text("def temperature():\n    return 2.0\n")
    r = _run(tmp_path, "--output-dir", str(out))
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(err) == 1 and "helpers.py" in err[0], r.stderr
    assert "changed since these records were made" in err[0]
    assert len((out / "records.jsonl").read_text().splitlines()) == 4   # nothing lost
    # in the default folders the edited package is another experiment: a folder of its own
    assert _run(tmp_path, "--output-root", "out").returncode == 0
    (pkg / "helpers.py").write_text("def temperature():\n    return 1.0\n")
    assert _run(tmp_path, "--output-root", "out").returncode == 0
    assert len(list((tmp_path / "out" / "pkg_zs" / "demo").iterdir())) == 2
