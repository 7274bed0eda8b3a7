"""What a table shows is what the records say, and only runs of one experiment share a cell: an
edited summary.json is named and left out; a selector or method a plug-in provides (also one
overriding a built-in name) is kept apart from the built-in's runs and says so; the seeds of an
online method (and the stream orders they draw) are one row."""
import json
from pathlib import Path

from run_records import write_summary

from argtca.report import build_table, find_runs, group_runs, make_report, table_markdown
from argtca.report.identity import is_dataset_key


def _run(root: Path, sub: str, method="argtca", label="ArgTCA (div)", seed=1, n=32, acc=59.375,
         ece=3.0, config=None, selector="div", extra=None, dataset="caltech101"):
    d = root / sub
    d.mkdir(parents=True)
    cfg = {"SEED": seed, "DATASET.NAME": dataset, "TEST_SET.N_IMAGES": n,
           "TEST_SET.ITEMS_SHA256": f"items-{dataset}", "RUN.DEVICE_TYPE": "cuda"}
    cfg.update(config or {})
    (d / "config.json").write_text(json.dumps(cfg))
    s = {"method": method, "selector": selector, "label": label, "dataset": dataset,
         "dataset_key": dataset, "seed": seed}
    s.update(extra or {})
    write_summary(d, s, n, acc, ece)
    return d


def _table(root):
    labels, datasets, cells = group_runs(find_runs([root]))
    return labels, cells, build_table(labels, datasets, cells, show_std=True)


def test_an_edited_summary_is_named_and_never_shown(tmp_path):
    good = _run(tmp_path / "runs", "good", seed=1)
    edited = _run(tmp_path / "runs", "edited", seed=2)
    s = json.loads((edited / "summary.json").read_text())
    assert s["accuracy"] == 59.375   # 19 of 32 right
    (edited / "summary.json").write_text(json.dumps(dict(s, accuracy=99.0)))
    written = make_report([tmp_path / "runs"], tmp_path / "rep")
    md = written["table.md"].read_text()
    assert "99.00" not in md and "| ArgTCA (div) | Acc | **59.38** |" in md
    assert "Every cell is one run (seed 1)." in md
    skipped = written["skipped.md"].read_text()
    assert str(edited) in skipped and str(good) not in skipped
    assert "accuracy 99 where records.jsonl gives 59.375" in skipped
    # every metric is checked, not only the accuracy
    for key in ("ece", "adaece", "mce", "nll", "brier"):
        (edited / "summary.json").write_text(json.dumps(dict(s, **{key: s[key] + 0.5})))
        runs, = [find_runs([tmp_path / "runs"])]
        assert [r.path for r in runs] == [good.resolve()], key


def test_the_numbers_are_the_records_not_the_summary(tmp_path):
    d = _run(tmp_path, "a", acc=75.0, ece=5.0, n=8)
    run, = find_runs([tmp_path])
    assert run.metric("accuracy") == 75.0 and abs(run.metric("ece") - 5.0) < 1e-9
    # records without p_label / brier (older runs): those metrics are unknown, not the summary's
    lines = [json.loads(x) for x in (d / "records.jsonl").read_text().splitlines()]
    (d / "records.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k not in ("p_label", "brier")}) + "\n"
        for r in lines))
    s = json.loads((d / "summary.json").read_text())
    (d / "summary.json").write_text(json.dumps({k: v for k, v in s.items()
                                                if k not in ("nll", "brier")}))
    run, = find_runs([tmp_path])
    assert run.metric("nll") != run.metric("nll")   # NaN


PLUGIN = "mypkg.sel (/home/u/mypkg/sel.py)"


def test_a_plugin_override_is_never_pooled_with_the_builtin(tmp_path):
    for seed in (1, 2):
        _run(tmp_path, f"builtin/seed{seed}", seed=seed, acc=50.0)
        _run(tmp_path, f"plugin/seed{seed}", seed=seed, acc=75.0,
             config={"PROVIDER.SELECTOR": PLUGIN, "FILE_SHA256.PLUGIN.sel": "9" * 64})
    labels, cells, t = _table(tmp_path)
    assert labels == ["ArgTCA (div)", "ArgTCA (div, plug-in mypkg.sel)"]
    assert cells[("ArgTCA (div)", "caltech101")].mean("accuracy") == 50.0
    assert cells[("ArgTCA (div, plug-in mypkg.sel)", "caltech101")].seeds == [1, 2]
    assert cells[("ArgTCA (div, plug-in mypkg.sel)", "caltech101")].mean("accuracy") == 75.0
    md = table_markdown(t)
    assert "PROVIDER" not in md   # the label says it, no "non-default setting" line


def test_a_plugin_named_only_by_an_older_summary_is_kept_apart(tmp_path):
    _run(tmp_path, "builtin", acc=50.0)
    _run(tmp_path, "plugin", acc=75.0, extra={"selector_provider": {
        "name": "div", "builtin": False, "module": "mypkg.sel", "file": "/x/sel.py"}})
    _run(tmp_path, "builtin_recorded", seed=2, acc=25.0, extra={"selector_provider": {
        "name": "div", "builtin": True, "module": "argtca.selectors.div", "file": "/a/div.py"}})
    labels, cells, _ = _table(tmp_path)
    assert labels == ["ArgTCA (div)", "ArgTCA (div, plug-in mypkg.sel)"]
    assert cells[("ArgTCA (div)", "caltech101")].seeds == [1, 2]


def test_a_plugin_method_says_so(tmp_path):
    _run(tmp_path, "tda", method="tda", label="TDA (online)", selector=None, acc=50.0,
         extra={"family": "online"})
    _run(tmp_path, "tda_plugin", method="tda", label="TDA (online)", selector=None, acc=75.0,
         extra={"family": "online"}, config={"PROVIDER.METHOD": "lab.tda (/l/tda.py)"})
    labels, _, _ = _table(tmp_path)
    assert labels == ["TDA (online)", "TDA (online, plug-in lab.tda)"]


def test_the_seeds_of_an_online_method_are_one_row(tmp_path):
    """Seeds 1-3 of TDA with the default TTA.STREAM.SEED: three stream orders, one row of
    mean ± std; a fixed stream seed is a row of its own."""
    accs = {1: 50.0, 2: 62.5, 3: 75.0}
    for seed, acc in accs.items():
        _run(tmp_path, f"tda/seed{seed}", method="tda", label="TDA (online)", selector=None,
             seed=seed, acc=acc, extra={"family": "online"},
             config={"STREAM.ORDER_SHA256": f"order{seed}"})
    _run(tmp_path, "tda7/seed1", method="tda", label="TDA (online)", selector=None, acc=25.0,
         extra={"family": "online"},
         config={"STREAM.ORDER_SHA256": "order7", "TTA.STREAM.SEED": 7})
    labels, cells, t = _table(tmp_path)
    assert labels == ["TDA (online)", "TDA (online) [seed=7]"]
    assert cells[("TDA (online)", "caltech101")].seeds == [1, 2, 3]
    assert t.values[("TDA (online)", "accuracy", "caltech101")] == 62.5
    md = table_markdown(t)
    assert "| TDA (online) | Acc | **62.50 ± 12.50** |" in md
    assert "stream order: shuffled by each seed; shuffled by stream seed 7" in md


def test_per_dataset_keys_never_split_a_row():
    for k in ("FILE_SHA256.SPLIT_FILE", "FILE_SHA256.DATASET.ATTRIBUTE_FILE",
              "FILE_SHA256.DATASET.IMAGEFOLDER.SPLIT_FILE", "TEST_SET.ITEMS_SHA256",
              "TEST_SET.ROOT", "FILE_SHA256.TRAINER.ARGTCA.GAT.TRAIN_ON.target",
              "STREAM.ORDER_SHA256"):
        assert is_dataset_key(k), k
    for k in ("FILE_SHA256.MODEL.PRETRAINED", "FILE_SHA256.TTA.CTX_CHECKPOINT",
              "FILE_SHA256.PLUGIN.sel", "PROVIDER.SELECTOR", "FILE_SHA256.NEW_ROLE"):
        assert not is_dataset_key(k), k


def test_the_header_lists_what_the_user_set_and_auto_apart(tmp_path):
    """TTA.ENGINE/TTA.COMPILE as "auto" resolved them and a method's own views (DMN-ZS: 32, its
    configs/trainers file) are no user settings; a row with other views says so; the caption
    names only the metrics shown and the aggregation sentence follows --std."""
    cpu = {"RUN.DEVICE_TYPE": "cpu", "TTA.COMPILE": "off"}
    _run(tmp_path, "tpt", method="tpt", label="TPT", selector=None,
         config=dict(cpu, **{"TTA.ENGINE": "reference", "TTA.N_VIEWS": 64}))
    _run(tmp_path, "dmn", method="dmn", label="DMN-ZS (online)", selector=None,
         extra={"family": "online"},
         config=dict(cpu, **{"TTA.ENGINE": "features", "TTA.N_VIEWS": 32}))
    _run(tmp_path, "zero", method="zero", label="ZERO", selector=None,
         extra={"family": "training-free"},
         config=dict(cpu, **{"TTA.ENGINE": "features", "TTA.N_VIEWS": 16,
                             "TTA.SELECTION_P": 0.3, "TTA.AUGMIX": "off"}))
    # the user chose the fast engine on the CPU for this one: a setting
    _run(tmp_path, "ctpt", method="ctpt", label="C-TPT", selector=None,
         config=dict(cpu, **{"TTA.ENGINE": "fast", "TTA.N_VIEWS": 64}))
    labels, datasets, cells = group_runs(find_runs([tmp_path]))
    md = table_markdown(build_table(labels, datasets, cells, metrics=("accuracy", "nll")))
    head = md.split("| Method")[0]
    assert "TTA.COMPILE=" not in head and "TTA.ENGINE=features" not in head
    assert "TTA.ENGINE=reference" not in head and "TTA.AUGMIX" not in head
    assert "Set for some rows only (not their method's default): C-TPT: TTA.ENGINE=fast; " \
           "ZERO: TTA.N_VIEWS=16." in head
    assert ("Resolved from auto: TTA.ENGINE features (ZERO, DMN-ZS (online)), reference "
            "(TPT); TTA.COMPILE off.") in head
    assert "views" not in head.split("Every run:")[1].split("\n")[0]   # no single number
    assert "Acc in %; NLL per image (mean)." in md and "ECE" not in md.split("| Method")[1]
    assert "python -m argtca.report --std adds" in head
    md_std = table_markdown(build_table(labels, datasets, cells, show_std=True))
    assert "Cells: mean ± sample standard deviation" in md_std and "--std adds" not in md_std
