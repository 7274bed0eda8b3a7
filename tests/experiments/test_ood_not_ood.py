"""OOD sets that are not out of distribution (issue 39, item 2), through the public command
``python -m argtca.experiments ood``:

* an OOD set equal to the ID set (``ood demo --ood demo``, the same dataset on another split, the
  same ImageFolder, an ImageFolder holding ID test images) is refused in one line naming the
  value and the fix, before any run starts (today: AUROC 50 published);
* an OOD set whose class names are ID class names is refused the same way by default; with
  ``--allow-shared-classes`` it runs, and the log, the OOD runs' summary.json and ood.md name
  the shared classes;
* ``python -m argtca.run`` with such a DATASET.OOD node refuses an equal set too (one line).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_data import make_tree

REPO = Path(__file__).resolve().parents[2]
TINY = ["DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False"]


def _cli(args, cwd, env):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=900)


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, ARGTCA_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    e.pop("DATA", None)
    return e


def _one_error_line(p) -> str:
    assert p.returncode == 2, (p.stdout, p.stderr)
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    return err[0]


@pytest.mark.parametrize("extra", [[], ["--ood-split", "val"]], ids=["same-split", "val-split"])
def test_ood_set_equal_to_the_id_set_is_refused(tmp_path, env, extra):
    p = _cli(["argtca.experiments", "ood", "demo", "--ood", "demo", "--methods", "zeroshot",
              "--seeds", "1", "--out-root", "out"] + extra + TINY, tmp_path, env)
    line = _one_error_line(p)
    assert "--ood demo" in line and "in-distribution dataset itself" in line
    assert "AUROC" in line and "give an OOD set of other classes" in line
    assert not (tmp_path / "out").exists()          # nothing ran, nothing was written


def test_the_same_imagefolder_or_its_images_are_refused(tmp_path, env):
    """An own folder as its own OOD set (ID imagefolder at DIR, --ood imagefolder at DIR), and an
    OOD folder of other class names whose images include ID test images (its class folder
    ``mine`` is the ID folder, read recursively)."""
    mine = make_tree(tmp_path / "data" / "mine", counts={"red_fox": 2, "tabby_cat": 2})
    p = _cli(["argtca.experiments", "ood", "imagefolder", "--root", str(mine),
              "--ood", "imagefolder", "--ood-root", str(mine), "--methods",
              "zeroshot", "--seeds", "1", "--out-root", "out"] + TINY, tmp_path, env)
    line = _one_error_line(p)
    assert "in-distribution folder itself" in line and str(mine) in line
    make_tree(tmp_path / "data", counts={"static_noise": 2})
    p = _cli(["argtca.experiments", "ood", "imagefolder", "--root", str(mine),
              "--ood", "imagefolder", "--ood-root", str(tmp_path / "data"), "--methods",
              "zeroshot", "--seeds", "1", "--out-root", "out"] + TINY, tmp_path, env)
    line = _one_error_line(p)
    # 4 OOD images, class-balanced: mine/red_fox/img_00, static_noise/img_00, mine/red_fox/
    # img_01, static_noise/img_01; both of mine's are among the 4 ID test images
    assert "is 2 of its 4 images in-distribution test images" in line
    assert str(mine / "red_fox" / "img_00.jpg") in line
    assert not (tmp_path / "out").exists()


def _shared_tree(root: Path) -> Path:
    # two of the demo's class names (spelled as folders), one other class
    return make_tree(root, counts={"Tennis_Ball": 2, "stop-sign": 2, "blank_wall": 2})


def test_shared_class_names_refused_by_default(tmp_path, env):
    _shared_tree(tmp_path / "oodimgs")
    p = _cli(["argtca.experiments", "ood", "demo", "--ood", "imagefolder", "--ood-root",
              str(tmp_path / "oodimgs"), "--methods", "zeroshot", "--seeds", "1", "--out-root",
              "out"] + TINY, tmp_path, env)
    line = _one_error_line(p)
    assert "2 of the 3 class names of the OOD set ImageFolder are class names of Demo" in line
    assert "(tennis ball, stop sign)" in line and "--allow-shared-classes" in line
    assert not (tmp_path / "out").exists()


def test_shared_class_names_accepted_are_named_everywhere(tmp_path, env):
    _shared_tree(tmp_path / "oodimgs")
    p = _cli(["argtca.experiments", "ood", "demo", "--ood", "imagefolder", "--ood-root",
              str(tmp_path / "oodimgs"), "--methods", "zeroshot", "--seeds", "1", "--out-root",
              "out", "--report-dir", "rep", "--allow-shared-classes"] + TINY, tmp_path, env)
    assert p.returncode == 0, p.stderr[-3000:]
    # the command's log: before the runs and once more at the end
    log = p.stdout + p.stderr
    assert log.count("[ood] note: --ood imagefolder (for demo): 2 of the 3 class names") == 2
    # the OOD run: its summary and its own log name the shared classes
    ood_runs = [d for d in (tmp_path / "out").rglob("summary.json") if "ood" in str(d)]
    assert len(ood_runs) == 1
    summary = json.loads(ood_runs[0].read_text())
    assert summary["ood_shared_classes"] == ["tennis ball", "stop sign"]
    assert "tennis ball" in (ood_runs[0].parent / "log.txt").read_text()
    id_summary = [json.loads(d.read_text()) for d in (tmp_path / "out").rglob("summary.json")
                  if d not in ood_runs]
    assert len(id_summary) == 1 and "ood_shared_classes" not in id_summary[0]
    md = (tmp_path / "rep" / "ood.md").read_text()
    assert ("**Not out of distribution**: Demo vs ImageFolder: 2 class name(s) of the OOD set "
            "are in-distribution class names (tennis ball, stop sign)") in md


def test_run_refuses_an_equal_ood_set_in_one_line(tmp_path, env):
    """The run itself (any entry point: argtca.run, a launcher task) refuses it too."""
    p = _cli(["argtca.run", "--config-file", str(REPO / "configs/trainers/zeroshot.yaml"),
              "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
              "--output-dir", str(tmp_path / "run"), "DATASET.OOD.NAME", "demo"] + TINY,
             tmp_path, env)
    assert p.returncode != 0
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "in-distribution dataset itself" in err[0], p.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("sets", [["demo", "demo"], ["imagefolder", "demo", "imagefolder"]])
def test_shift_refuses_a_set_against_itself(tmp_path, env, sets):
    """``shift``'s pairing: a set named twice is a shift of nothing (today it runs the same
    runs twice and reports one column)."""
    make_tree(tmp_path / "mine", counts={"red_fox": 2, "tabby_cat": 2})
    p = _cli(["argtca.experiments", "shift", *sets, "--root", str(tmp_path / "mine"),
              "--methods", "zeroshot", "--seeds", "1", "--out-root", "out"] + TINY,
             tmp_path, env)
    line = _one_error_line(p)
    assert f"shift: {sets[-1]} is named twice" in line and "name each set once" in line
    assert not (tmp_path / "out").exists()
