"""Table 1 over two datasets, run by the engine at CI size: the embedded demo and an own
ImageFolder generated here (its split file, its attribute file). Every one of the default
methods (every registered method: 19 today) is one row with both cells and an Average: keys that
differ between datasets by nature (split, attribute and test-set files) never split a row; the
online methods' seeds (each its own stream order) share one experiment folder and one cell."""
import json
from pathlib import Path

import pytest

from argtca.experiments.plan import METHODS, RunSpec
from argtca.report import AVERAGE, build_table, find_runs, group_runs
from argtca.report.identity import is_classified_file_role
from argtca.run import main as run_main
from argtca.trainers.catalogue import method_names
from helpers_data import make_tree

TINY = ["DATASET.NUM_IMAGES", "3", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "TRAINER.ARGTCA.GAT.EPOCHS", "2", "VERBOSE", "False", "USE_CUDA", "False"]
ONLINE = method_names("online")


def _own_imagefolder(root: Path):
    """Three classes of two images, a CoOp split file and an attribute file of 10 per class."""
    make_tree(root / "data", counts={"golden_retriever": 2, "tabby_cat": 2, "red_fox": 2})
    items = sorted(p.relative_to(root / "data").as_posix() for p in (root / "data").rglob("*.*"))
    folders = sorted({i.split("/")[0] for i in items})
    test = [[i, folders.index(i.split("/")[0]), i.split("/")[0].replace("_", " ")]
            for i in items]
    split = root / "split.json"
    split.write_text(json.dumps({"train": [], "val": [], "test": test}))
    words = "furry small brown striped fluffy pointed tail whiskers paws ears".split()
    attrs = root / "attributes.json"
    attrs.write_text(json.dumps({c.replace("_", " "): " ".join(words) for c in folders}))
    return root / "data", [
        "DATASET.IMAGEFOLDER.SPLIT_FILE", str(split), "DATASET.ATTRIBUTE_FILE", str(attrs),
        # the demo's tiny CLIP for both datasets: the same weights in every cell of a row
        "MODEL.BACKBONE.NAME", "argtca-demo-clip",
        "MODEL.PRETRAINED", "builtin:demo/assets/demo_clip.pt", "INPUT.SIZE", "(64, 64)",
        # RLCF's reward model: the policy's own CLIP, as on the demo (ViT-L/14 is not here)
        "TRAINER.RLCF.REWARD_BACKBONE", "", "TRAINER.RLCF.REWARD_PRETRAINED", ""]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("two_datasets")
    mp = pytest.MonkeyPatch()
    mp.setenv("ARGTCA_CACHE", str(base / "cache"))   # the demo's images and Phase-1 store
    mp.chdir(base)
    out = base / "out"
    data, own = _own_imagefolder(base)
    try:
        for name in METHODS:
            method, _, sel = name.partition("-")
            specs = [RunSpec(method, "demo", 1, selector=sel or None, overrides=TINY,
                             out_root=out),
                     RunSpec(method, "imagefolder", 1, selector=sel or None,
                             overrides=TINY + own, out_root=out)]
            if method in ONLINE:   # a second seed: another stream order, the same experiment
                specs.append(RunSpec(method, "demo", 2, overrides=TINY, out_root=out))
            for s in specs:
                assert run_main(s.argv(str(data))) == 0, s.name
    finally:
        mp.undo()
    return out


def test_every_method_is_one_row_with_both_cells_and_an_average(runs):
    found = find_runs([runs])
    labels, datasets, cells = group_runs(found)
    assert len(labels) == len(METHODS) >= 19
    assert not any("[" in lab for lab in labels), labels   # no "[split_file sha256=...]"
    assert [k for k, _ in datasets] == ["demo", "imagefolder"]
    t = build_table(labels, datasets, cells)
    for lab in labels:
        for col in ("demo", "imagefolder", AVERAGE):
            v = t.values[(lab, "accuracy", col)]
            assert v == v, (lab, col)   # not NaN: both cells and the Average
        want = (t.values[(lab, "accuracy", "demo")] + t.values[(lab, "accuracy",
                                                                 "imagefolder")]) / 2
        assert t.values[(lab, "accuracy", AVERAGE)] == pytest.approx(want)
    # the online rows: seeds 1 and 2 on the demo in one cell, from one experiment folder
    for lab in ("TDA (online)", "DMN-ZS (online)", "BoostAdapter (online)", "DPE (online)"):
        c = cells[(lab, "demo")]
        assert c.seeds == [1, 2]
        assert c.runs[0].path.parent == c.runs[1].path.parent
        orders = {json.loads((r.path / "config.json").read_text())["STREAM.ORDER_SHA256"]
                  for r in c.runs}
        assert len(orders) == 2
    # the rows differ between datasets in their files, which the report knows as per-dataset
    cfgs = [json.loads((r.path / "config.json").read_text()) for r in found]
    roles = {k[len("FILE_SHA256."):] for c in cfgs for k in c if k.startswith("FILE_SHA256.")}
    assert "DATASET.IMAGEFOLDER.SPLIT_FILE" in roles and "DATASET.ATTRIBUTE_FILE" in roles
    assert all(is_classified_file_role(r) for r in roles), roles
