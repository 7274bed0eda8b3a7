"""Under torchrun, an error is said once (issue 39, item 4): a missing weights file, met by every
rank, is one ``error:`` line (rank 0's), the other rank quiet; a failure of every rank while the
job builds its model, likewise; an error of one rank alone is still said (once). Before, each
rank printed the same line. torchrun's own report (its "ChildFailedError" block) follows as it
always does: it is the launcher's, printed by the torchrun process itself."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = ["--trainer", "zeroshot", "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
        "--seed", "1", "DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "2",
        "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False", "VERBOSE", "False"]

# a plug-in whose method build fails on the ranks named in $FAIL_RANKS (while the job builds
# its model, after the ranks formed their process group)
BUILD_FAILS = '''import os
from argtca.trainers.base import TestTimeTrainer
_build = TestTimeTrainer.build_model


def build_model(self):
    if os.environ.get("RANK") in os.environ.get("FAIL_RANKS", "").split(","):
        raise RuntimeError("the model cannot be built here")
    return _build(self)
TestTimeTrainer.build_model = build_model
'''
# a plug-in that does not import on rank 1 alone (before the ranks meet)
RANK1_IMPORT_FAILS = '''import os
if os.environ.get("RANK") == "1":
    raise ImportError("rank 1 lacks a module")
'''


def _torchrun(tmp_path, argv, **env):
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "-m", "argtca.run", "--output-root", str(tmp_path / "out"), *argv, *TINY],
        cwd=tmp_path, capture_output=True, text=True, timeout=400,
        env=dict(os.environ, OMP_NUM_THREADS="1", ARGTCA_CACHE=str(tmp_path / "cache"),
                 PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                 **env))
    ours = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("error:")]
    # the ranks' own tracebacks would name argtca's files; torchrun's names its own only
    assert str(REPO / "argtca") not in p.stderr, p.stderr
    return p.returncode, ours, p.stderr


def test_an_error_every_rank_meets_is_one_line(tmp_path):
    missing = tmp_path / "nowhere" / "weights.pt"
    rc, ours, err = _torchrun(tmp_path, ["MODEL.PRETRAINED", str(missing)])
    assert rc != 0 and len(ours) == 1, err
    assert "MODEL.PRETRAINED" in ours[0] and str(missing) in ours[0], err
    assert not (tmp_path / "out").exists()   # nothing left behind, as a one-process run
    plugin = tmp_path / "build_fails.py"
    plugin.write_text(BUILD_FAILS)
    for fail in ("0,1", "1"):   # every rank, then rank 1 alone (rank 0 names it)
        rc, ours, err = _torchrun(tmp_path, ["--plugin", str(plugin)], FAIL_RANKS=fail)
        assert rc != 0 and len(ours) == 1, (fail, err)
        assert "the model cannot be built here" in ours[0], err
        assert ("rank 1 of the torchrun job failed" in ours[0]) == (fail == "1"), ours


def test_an_error_of_one_rank_before_the_job_forms_is_said_once(tmp_path):
    plugin = tmp_path / "rank1_import_fails.py"
    plugin.write_text(RANK1_IMPORT_FAILS)
    rc, ours, err = _torchrun(tmp_path, ["--plugin", str(plugin)])
    assert rc != 0 and len(ours) == 1, err
    assert ours[0].startswith(f"error: --plugin {plugin}: cannot import it (ImportError: rank 1 "
                              f"lacks a module)"), err
