"""The table header states, for each row, only settings its method reads, with the value the run
used: a run's settings are the keys every run shares plus the method nodes its fingerprint holds
(built here by each registered method's real trainer on the demo, as ``table1 demo`` builds it)."""
import json
from pathlib import Path

import pytest

from argtca.report import find_runs, group_runs
from argtca.report.header import table_header
from argtca.run import parse_args, setup_cfg, build_trainer
from argtca.run_folder import trainer_node
from argtca.trainers.catalogue import catalogue
from conftest import REPO
from run_records import write_summary

TINY = ["DATASET.NUM_IMAGES", "4", "TTA.N_VIEWS", "4", "USE_CUDA", "False", "VERBOSE", "False",
        "DATALOADER.NUM_WORKERS", "0"]


def _fake_run(root: Path, method: str, acc: float):
    """The run folder ``table1 demo`` makes for ``method``: its real fingerprint and summary
    overrides, with hand-made records."""
    args = parse_args(["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
                       "--config-file", str(REPO / f"configs/trainers/{method}.yaml"),
                       "--output-root", str(root)] + TINY)
    trainer = build_trainer(setup_cfg(args))
    out = Path(trainer.output_dir())
    out.mkdir(parents=True)
    fp = trainer.fingerprint()
    (out / "config.json").write_text(json.dumps(fp))
    summary = {"method": trainer.method, "label": trainer.display_label, "family": trainer.family,
               "trainer": type(trainer).__name__, "dataset": "Demo", "dataset_key": "demo",
               "seed": 1, "selector": trainer.selector, "overrides": trainer.overrides()}
    write_summary(out, summary, 4, acc, 10.0)
    return {trainer_node(k) for k in fp if trainer_node(k)}


@pytest.mark.usefixtures("one_thread")
def test_header_names_only_keys_a_row_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    methods = [m.method for m in catalogue() if (REPO / f"configs/trainers/{m.method}.yaml")
               .is_file()]
    assert {"rlcf", "tda", "zeroshot", "argtca"} <= set(methods)
    nodes = {m: _fake_run(tmp_path, m, 50.0) for m in methods}
    runs = find_runs([tmp_path])
    group_runs(runs)
    labels = list(dict.fromkeys(r.label for r in runs))
    lines = table_header(runs, labels, [("demo", "Demo")])
    per_row = next((ln for ln in lines if ln.startswith("Set for some rows only")), "")
    every = next((ln for ln in lines if ln.startswith("Set for every run")), "")
    # no key of a method node is set for every run: no node is read by every method
    assert "TRAINER." not in every, every
    by_label = {r.label: r.method for r in runs}
    body = per_row[len("Set for some rows only (not their method's default): "):]
    for part in body.rstrip(".").split("; ") if body else []:
        label, _, keys = part.partition(": ")
        method = by_label[label]
        for kv in keys.split(", "):
            node = trainer_node(kv.split("=")[0])
            assert not node or node in nodes[method], (label, kv, nodes[method])
    # the demo makes the policy CLIP RLCF's reward model: not RLCF's default, so it is stated
    rlcf = next(p for p in body.split("; ") if p.startswith("RLCF: "))
    assert 'TRAINER.RLCF.REWARD_BACKBONE=""' in rlcf and 'REWARD_PRETRAINED=""' in rlcf
    assert sum("REWARD_BACKBONE" in p for p in body.split("; ")) == 1
