"""One graph for every dataset (TRAINER.ARGTCA.GAT.TRAIN_ON): trained once on other vocabularies,
stored, and applied frozen to a new dataset; training on A and selecting on A is per-dataset
training on A; the transferred model selects deterministically."""
import hashlib
import json
import os

import pytest
import torch

from conftest import REPO

A = {"cat": "furry whiskered small striped playful agile pointy quiet curious soft",
     "dog": "loyal furry barking wagging playful large friendly muddy fast curious",
     "car": "metal wheeled fast shiny loud red electric parked small large"}
B = {"boat": "floating wooden sailing white fast small large anchored quiet blue",
     "plane": "winged metal flying fast loud large white shiny silver jet",
     "bird": "feathered winged small singing flying colourful quiet curious agile tiny",
     "horse": "galloping large brown fast maned strong tall saddled loyal quiet"}


def text_fn(texts):
    """Deterministic features per text (seeded by its sha256): no CLIP needed."""
    out = []
    for t in texts:
        g = torch.Generator().manual_seed(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16))
        out.append(torch.randn(16, generator=g))
    return torch.stack(out)


def _node(**gat):
    from argtca.config import get_cfg_default
    n = get_cfg_default().TRAINER.ARGTCA.clone()
    n.NUM_CANDIDATES, n.NUM_ATTRIBUTES, n.SELECTOR = 6, 2, "div"
    n.GAT.HIDDEN, n.GAT.HEADS, n.GAT.EPOCHS = 16, 2, 15
    for k, v in gat.items():
        n.GAT[k] = v
    return n


def _lists(d):
    return {c: v.split() for c, v in d.items()}


def _phase1(node, attrs, files, store=None, log=None, identity=None):
    from argtca.graph.phase1 import run_phase1
    from argtca.graph.transfer import make_transfer_embed, resolve_sources
    classes = list(attrs)
    embed = None
    if files is not None:
        embed = make_transfer_embed(resolve_sources(files, files[0] if files else "", "x"),
                                    classes, attrs)
    return run_phase1(classes, attrs, text_fn, node, store_dir=store, log=log,
                      identity=identity or {"dataset": "A", "backbone": "t",
                                            "text_weights_sha256": "0"}, embed=embed)


def test_training_on_a_and_selecting_on_a_is_per_dataset_training(tmp_path):
    fa = tmp_path / "a.json"
    fa.write_text(json.dumps(A))
    attrs = _lists(A)
    per_dataset = _phase1(_node(), attrs, None)
    for files in ([str(fa)],):
        t = _phase1(_node(), attrs, files)
        assert t["selected"] == per_dataset["selected"]
        assert t["scores"] == per_dataset["scores"]
        assert t["loss_curve"] == per_dataset["loss_curve"]
    # the 'target' entry is the target's own file
    from argtca.graph.transfer import make_transfer_embed, resolve_sources
    from argtca.graph.phase1 import run_phase1
    embed = make_transfer_embed(resolve_sources(["target"], str(fa), "A"), list(attrs), attrs)
    t = run_phase1(list(attrs), attrs, text_fn, _node(), embed=embed)
    assert t["selected"] == per_dataset["selected"]


def test_transfer_from_other_vocabularies_is_deterministic_and_stored_once(tmp_path):
    fb = tmp_path / "b.json"
    fb.write_text(json.dumps(B))
    attrs = _lists(A)
    store = str(tmp_path / "store")
    lines = []
    first = _phase1(_node(), attrs, [str(fb)], store=store, log=lines.append)
    again = _phase1(_node(), attrs, [str(fb)])   # no store: trained afresh
    assert first["selected"] == again["selected"] and first["scores"] == again["scores"]
    assert any("trained the transferred GAT on 24 nodes of 4 classes" in l for l in lines)
    assert first["store_key"].startswith("A-transfer-")
    # a second dataset reuses the stored GAT: nothing is trained
    lines.clear()
    other = {"cat": A["cat"].split(), "boat": B["boat"].split()}
    _phase1(_node(), other, [str(fb)], store=store, log=lines.append,
            identity={"dataset": "C", "backbone": "t", "text_weights_sha256": "0"})
    assert any("reused the transferred GAT gat-b.json-" in l for l in lines)
    assert not any("trained the transferred GAT" in l for l in lines)
    gat_files = [f for f in os.listdir(store) if f.startswith("gat-") and f.endswith(".pt")]
    assert len(gat_files) == 1
    # the transferred embeddings differ from per-dataset training (another graph trained them)
    assert first["scores"] != _phase1(_node(), attrs, None)["scores"]


def test_a_union_holds_both_vocabularies_target_classes_first(tmp_path):
    from argtca.graph.transfer import union_vocabulary
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps(A))
    fb.write_text(json.dumps({"Cat": "tabby", **B}))
    classes, lists = union_vocabulary([("b", str(fb)), ("a", str(fa))], ["dog", "cat"], _lists(A))
    assert classes[:2] == ["dog", "cat"] and set(classes) == {"dog", "cat", "car", *B}
    assert lists["cat"][0] == "tabby" and lists["cat"][1:] == A["cat"].split()


def test_bad_entries_are_one_clear_error(tmp_path):
    from argtca.graph.nodes import GraphInputError
    from argtca.graph.transfer import resolve_sources
    with pytest.raises(GraphInputError, match=r"TRAIN_ON entry 'nowhere.json' is not a file, a "
                                              r"dataset with a TCA attribute file \(.*Caltech101"):
        resolve_sources(["nowhere.json"], "", "Demo")
    node = _node()
    node.EMBEDDINGS = "raw"
    fa = tmp_path / "a.json"
    fa.write_text(json.dumps(A))
    with pytest.raises(GraphInputError, match="TRAIN_ON needs TRAINER.ARGTCA.EMBEDDINGS gat"):
        from argtca.graph.transfer import make_transfer_embed
        make_transfer_embed([("a", str(fa))], list(A), _lists(A))(None, text_fn, node)


def test_argtca_run_with_train_on_target_selects_as_per_dataset(tmp_path, monkeypatch):
    from argtca.run import main
    from helpers_data import make_caltech, write_attributes
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)
    root = make_caltech(tmp_path / "data")
    attr = write_attributes(tmp_path / "attrs.json")
    base = lambda out: ["--root", str(root), "--output-dir", str(out),
                        "--dataset-config-file", "configs/datasets/caltech101.yaml",
            "--config-file", "configs/trainers/argtca.yaml", "MODEL.BACKBONE.NAME",
            "argtca-tiny-test", "MODEL.PRETRAINED", "random", "INPUT.SIZE", "(32, 32)",
            "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False", "VERBOSE",
            "False", "TRAINER.ARGTCA.GAT.EPOCHS", "3", "DATASET.ATTRIBUTE_FILE", str(attr),
            "DATASET.NUM_IMAGES", "2"]
    assert main(base(tmp_path / "per")) == 0
    assert main(base(tmp_path / "tr") + ["TRAINER.ARGTCA.GAT.TRAIN_ON", "['target']"]) == 0
    per = json.loads((tmp_path / "per" / "phase1.json").read_text())
    tr = json.loads((tmp_path / "tr" / "phase1.json").read_text())
    assert tr["selected"] == per["selected"] and tr["settings"]["TRAIN_ON"] == ["target"]
    assert tr["store_key"].startswith("Caltech101-transfer-")
