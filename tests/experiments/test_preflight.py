"""The real path offline (issue 29 §4): what every run of a table shares (weights, dataset,
attribute files, CUDA) is checked once before the first run, and one message names every problem;
the CPU-time box shows once; the end of a table names what it left out once; --dry-run and --plan
check names, say which runs are finished, and --plan says first what is absent and which views
its estimate assumes."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments_cli import call as _call

from helpers_data import make_caltech

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "INPUT.SIZE", "(32, 32)",
        "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False"]


@pytest.fixture
def caltech(tmp_path, monkeypatch):
    """caltech101 present (3 classes, 2 images each); no attribute file cached; no CLIP weights
    in an empty Hugging Face cache; offline (tests/conftest.py)."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("ARGTCA_DOWNLOADS", str(tmp_path / "downloads"))
    return make_caltech(tmp_path / "data")


def test_table1_script_without_weights_fails_once_and_writes_nothing(tmp_path, caltech):
    """`table1.sh caltech101` with OpenAI's weights not to be had: one message, no run, no
    folder (it printed the weights error 13 times after 13 CPU boxes, and left 13 folders)."""
    env = dict(os.environ, DATA=str(caltech), PYTHON=sys.executable, ARGTCA_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf"), ARGTCA_DOWNLOADS=str(tmp_path / "downloads"),
               ARGTCA_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    env.pop("HF_HUB_CACHE", None)
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(REPO / "scripts/table1.sh"), "caltech101", "--seeds", "1,2",
                        "--out-root", str(out)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    err = p.stderr
    assert err.count("MODEL.PRETRAINED openai: offline") == 1, err
    assert "WARNING" not in err and "argtca: run folder" not in p.stdout
    lines = err.strip().splitlines()
    # every method of the catalogue that needs no attribute file (all but tca, argtca-div,
    # argtca-disc) x 2 seeds
    from argtca.trainers.catalogue import method_sets
    n = 2 * (len(method_sets()["all"]) - 3)
    assert lines[0] == ("[table1] error: no run started: 2 problem(s) found before the first of "
                        f"{n} run(s); each with its fix:")
    assert lines[1].startswith("  - MODEL.PRETRAINED openai: offline") and \
        "pass MODEL.PRETRAINED ~/weights/open_clip_model.safetensors" in lines[1] and \
        lines[1].endswith(f"(every run ({n}))")
    # RLCF's reward model (ViT-L/14, OpenAI's weights) is checked before the first run too, in
    # its own keys' names, for its two runs
    assert lines[2].startswith("  - TRAINER.RLCF.REWARD_PRETRAINED openai: offline") and \
        "ViT-L-14" in lines[2] and "pass TRAINER.RLCF.REWARD_PRETRAINED ~/weights/" in lines[2] \
        and lines[2].endswith("(rlcf on caltech101, seed 1; rlcf on caltech101, seed 2)"), lines[2]
    # what is left out anyway, each method once
    assert lines[3] == ("  - not run: tca, argtca-div, argtca-disc on caltech101: no attribute "
                        "file (the first lines say where to get it; or set "
                        "DATASET.ATTRIBUTE_FILE)")
    assert len(lines) == 5 and lines[4].startswith("[table1] nothing was run or written")
    assert not out.exists()


def test_every_shared_problem_in_one_message(tmp_path, caltech):
    """Weights that are not there, RUN.REQUIRE_CUDA without CUDA: both named at once, each once,
    with the runs they stop; nothing runs and no folder is made."""
    out = tmp_path / "out"
    rc, so, se = _call(["table1", "caltech101", "--root", str(caltech), "--seeds", "1,2",
                        "--methods", "zeroshot,tpt", "--out-root", str(out),
                        "MODEL.PRETRAINED", str(tmp_path / "nope.pt"), "RUN.REQUIRE_CUDA",
                        "True", "USE_CUDA", "False"] + TINY)
    assert rc == 2, se
    lines = se.strip().splitlines()
    assert lines[0].startswith("[table1] error: no run started: 2 problem(s) found before the "
                               "first of 4 run(s)")
    assert lines[1] == ("  - RUN.REQUIRE_CUDA is True but USE_CUDA is False: run on a machine "
                        "with a GPU (and USE_CUDA True), or set RUN.REQUIRE_CUDA False "
                        "(every run (4))")
    assert lines[2].startswith(f"  - MODEL.PRETRAINED checkpoint not found: {tmp_path}/nope.pt")
    assert len(lines) == 4 and not out.exists() and "zeroshot on caltech101" not in so


def test_cpu_box_once_and_left_out_methods_named_once(tmp_path, caltech, monkeypatch):
    """Real weights (a file) on a machine without CUDA: the 5-line box before the first run
    only. TCA and ArgTCA lack their attribute file: the end of the table names each once."""
    import open_clip
    import torch

    import argtca.models.run_checks as C
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(C, "_cpu_gflops", lambda: 100.0)
    weights = tmp_path / "tiny.pt"
    torch.manual_seed(0)
    torch.save(open_clip.create_model("argtca-tiny-test").state_dict(), weights)
    out = tmp_path / "out"
    argv = ["table1", "caltech101", "--root", str(caltech), "--seeds", "1,2", "--methods",
            "zeroshot,tca,argtca-div", "--out-root", str(out), "--quiet",
            "MODEL.PRETRAINED", str(weights)] + TINY
    rc, so, se = _call(argv)
    assert rc == 0, se
    box = [ln for ln in se.splitlines() if ln.startswith("argtca: WARNING")]
    assert len(box) == 5 and "CUDA is not available" in box[1], se
    end = "[table1] not run: tca, argtca-div on caltech101: no attribute file"
    assert se.count(end) == 1 and se.count("not run:") == 1
    assert se.strip().splitlines()[-1].startswith(end)
    # the same command as a dry run: both runs finished, the left-out methods named once
    rc, so, se = _call(argv + ["--dry-run"])
    assert rc == 0, se
    assert so.count("[table1] finished (re-read): zeroshot on caltech101, seed") == 2
    assert "[table1] 2 of 2 run(s) finished (re-read, not run again), 0 to run" in so
    assert so.count(end) == 1
    # --plan: the finished runs under the out-root
    rc, so, se = _call(["table1", "caltech101", "--plan", "--root", str(caltech), "--seeds",
                        "1,2", "--methods", "zeroshot", "--out-root", str(out),
                        "MODEL.PRETRAINED", str(weights)] + TINY)
    assert rc == 0, se
    assert f"[table1] finished under {out}: 2 of the 2 run(s) of the present datasets" in so


@pytest.mark.parametrize("argv, needle", [
    (["table1", "demo", "--methods", "tpt,argtca-nope"],
     "--methods argtca-SELECTOR: unknown selector(s) 'nope'; registered: disc, div, joint, "
     "random, tca"),
    (["table2", "demo", "--selectors", "div,nope"],
     "--selectors: unknown selector(s) 'nope'; registered: disc, div, joint, random, tca"),
    (["sweep", "demo", "--selectors", "nope"], "--selectors: unknown selector(s) 'nope'"),
    (["table1", "--plan", "--methods", "argtca-nope"], "unknown selector(s) 'nope'"),
    (["table1", "demo", "--methods", "nope"], "unknown method 'nope'; choose from"),
])
def test_dry_run_and_plan_check_names(argv, needle, tmp_path):
    rc, so, se = _call(argv + ["--dry-run", "--out-root", str(tmp_path)]
                       if "--plan" not in argv else argv + ["--out-root", str(tmp_path)])
    assert rc == 2 and needle in se and len(se.strip().splitlines()) == 1, se
    assert "would run" not in so


def test_plan_says_first_what_is_absent_and_which_views(tmp_path):
    empty = tmp_path / "data"
    empty.mkdir()
    rc, so, se = _call(["table1", "caltech101", "dtd", "--plan", "--root", str(empty),
                        "--methods", "zeroshot,tpt,tda", "--out-root", str(tmp_path / "o"),
                        "TTA.VIEWS_DEVICE", "cpu", "USE_CUDA", "False"])
    assert rc == 0, se
    lines = so.splitlines()
    assert lines[0].startswith(f"[table1] absent here: 2 of 2 dataset(s) (caltech101, dtd): not "
                               f"under {empty}: python -m argtca.data check caltech101 dtd")
    assert lines[1] == ("[table1] views per method family: Zero-shot: 1 view; TPT family: 64 "
                        "views, TTA.VIEWS_DEVICE cpu; Online: up to 64 views, TTA.VIEWS_DEVICE "
                        "cpu")
    # the estimate is for the path these runs take on this machine (no CUDA: the CPU)
    assert lines[2] == ("[table1] time below: CPU exact views (TPT's PIL pipeline) on the CPU (no "
                        "CUDA here), as these runs make them, at the rates measured on that path "
                        "(the rates line below)")
    rc, so, se = _call(["table1", "caltech101", "--plan", "--root", str(empty), "--methods",
                        "tpt", "--out-root", str(tmp_path / "o"), "TTA.VIEWS_DEVICE", "gpu",
                        "USE_CUDA", "False"])
    assert rc == 0 and "time below: GPU views on the CPU (no CUDA here), as these runs" in so


def test_tune_dry_run_marks_finished_grid_points(tmp_path, monkeypatch):
    """tune --dry-run marks the grid points that already ran to the end as table1's dry run
    does (finished, re-read; the count of both), and a folder holding another configuration
    is not taken for finished."""
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA", raising=False)
    tiny = ["DATASET.NUM_IMAGES", "2", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
            "VERBOSE", "False", "USE_CUDA", "False"]
    base = ["tune", "demo", "--seeds", "1", "--methods", "ctpt", "--out-root",
            str(tmp_path / "out"), "--quiet"]
    rc, so, se = _call(base + ["--grid", "TRAINER.CTPT.LAMBDA=25"] + tiny)
    assert rc == 0, se
    grid = ["--grid", "TRAINER.CTPT.LAMBDA=25,50", "--dry-run"]
    rc, so, se = _call(base + grid + tiny)
    assert rc == 0, se
    assert "[tune] finished (re-read): ctpt lambda25 on demo val, seed 1 -> " in so, so
    assert "[tune] would run: ctpt lambda50 on demo val, seed 1 -> " in so
    assert "[tune] 1 of 2 run(s) finished (re-read, not run again), 1 to run" in so
    # other settings (3 images): the lambda25 folder holds another run, not this one's
    other = tiny[:1] + ["3"] + tiny[2:]
    rc, so, se = _call(base + grid + other)
    assert rc == 0 and "[tune] 0 of 2 run(s) finished" in so, se
    assert not (tmp_path / "out" / "tune" / "demo" / "val" / "ctpt" / "lambda50").exists()
