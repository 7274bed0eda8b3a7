"""The code that made a run is part of its identity: two versions of argtca (here: a copy of the
package with one changed line) never resume into one another and never pool into one cell, while
a finished run is re-read after an upgrade (its folder does not move)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from argtca.utils.code import (SOURCE_KEY, _package_files, files_sha256, package_dir,
                               package_sha256)
from conftest import REPO

TINY = ["DATASET.NUM_IMAGES", "8", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
        "VERBOSE", "False"]


def _copy(tmp_path_factory, name):
    root = tmp_path_factory.mktemp(name)
    shutil.copytree(package_dir(), root / "argtca",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def this_version(tmp_path_factory):
    """A copy of the installed package (a snapshot: the runs and the test see one version)."""
    return _copy(tmp_path_factory, "argtca-this")


@pytest.fixture(scope="module")
def other_version(this_version, tmp_path_factory):
    """The same package with one changed line: zero-shot CLIP's prompts say "a photo of a
    {class} thing." (other numbers, the same settings)."""
    root = _copy(tmp_path_factory, "argtca-other")
    shutil.rmtree(root / "argtca")
    shutil.copytree(this_version / "argtca", root / "argtca")
    p = root / "argtca" / "trainers" / "methods.py"
    line = "[template[len(ctx) + 1:].format(c) for c in classnames]"
    text = p.read_text()
    assert text.count(line) == 1
    p.write_text(text.replace(line, line.replace("format(c)", 'format(c + " thing")')))
    return root


def _sha(version):
    return files_sha256(_package_files(str(version / "argtca")), str(version / "argtca"))


def _run(out_root, seed, *extra, pythonpath=""):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(pythonpath), str(REPO)) if p))
    return subprocess.run(
        [sys.executable, "-m", "argtca.run", "--dataset-config-file",
         str(REPO / "configs/datasets/demo.yaml"), "--trainer", "zeroshot", "--seed", str(seed),
         "--output-root", str(out_root), *TINY, *extra],
        capture_output=True, text=True, env=env, cwd=str(out_root), timeout=600)


def _folder(out_root, seed):
    return next(Path(out_root).glob(f"zeroshot/demo/*/seed{seed}"))


def test_package_hash_is_its_files_content(tmp_path):
    """The package hash is the sha256 of (relative path, content sha256) of every file; the
    same computed by hand for a two-file tree."""
    import hashlib
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_text("{}")
    want = hashlib.sha256(
        ("a.py\0" + hashlib.sha256(b"x = 1\n").hexdigest() + "\n"
         + "sub/b.json\0" + hashlib.sha256(b"{}").hexdigest() + "\n").encode()).hexdigest()
    assert files_sha256([tmp_path / "sub" / "b.json", tmp_path / "a.py"], tmp_path) == want
    assert len(package_sha256()) == 64


def test_two_code_versions_never_resume_into_one_another(tmp_path, this_version, other_version):
    out = tmp_path / "out"
    out.mkdir()
    r = _run(out, 1, pythonpath=this_version)
    assert r.returncode == 0, r.stderr
    run = _folder(out, 1)
    config = json.loads((run / "config.json").read_text())
    assert config[SOURCE_KEY] == _sha(this_version) != _sha(other_version)
    # killed after 4 of its 8 images, as a kill leaves it
    lines = (run / "records.jsonl").read_text().splitlines(True)
    (run / "records.jsonl").write_text("".join(lines[:4]))
    (run / "summary.json").unlink()
    r = _run(out, 1, pythonpath=other_version)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert "4 of 8 records made by argtca" in err[0] and "RUN.CODE_CHANGE allow" in err[0]
    assert len((run / "records.jsonl").read_text().splitlines()) == 4   # nothing lost
    # allowed on purpose: resumed in the same folder, the switch recorded
    r = _run(out, 1, "RUN.CODE_CHANGE", "allow", pythonpath=other_version)
    assert r.returncode == 0, r.stderr
    assert _folder(out, 1) == run
    config = json.loads((run / "config.json").read_text())
    assert config[SOURCE_KEY] == _sha(this_version)   # the code that began the records
    (switch,) = config["CODE.RESUMED_UNDER"]
    assert switch["AT_RECORD"] == 4 and switch[SOURCE_KEY] == _sha(other_version)


def test_a_finished_run_is_reread_after_an_upgrade_and_never_pooled(tmp_path, this_version,
                                                                    other_version):
    out = tmp_path / "out"
    out.mkdir()
    assert _run(out, 1, pythonpath=this_version).returncode == 0
    before = json.loads((_folder(out, 1) / "summary.json").read_text())
    r = _run(out, 1, pythonpath=other_version)      # the upgrade re-reads the finished run
    assert r.returncode == 0, r.stderr
    after = json.loads((_folder(out, 1) / "summary.json").read_text())
    assert after["accuracy"] == before["accuracy"] and after["images_this_session"] == 0
    assert _run(out, 2, pythonpath=other_version).returncode == 0   # seed 2 by the other code
    assert _folder(out, 1).parent == _folder(out, 2).parent          # one experiment folder
    from argtca.report import find_runs, group_runs
    from argtca.report.header import table_header
    runs = find_runs([out])
    labels, datasets, cells = group_runs(runs)
    # two rows of one seed each, labelled by their code: never one cell of "2 seeds"
    assert len(labels) == 2 and all("code=" in lab for lab in labels), labels
    assert sorted(len(c.runs) for c in cells.values()) == [1, 1]
    header = table_header(runs, labels, datasets)
    code = next(ln for ln in header if ln.startswith("Code:"))
    assert "2 versions" in code and _sha(this_version)[:8] in code
    assert _sha(other_version)[:8] in code
