"""The report never pools runs that differ in anything that can change a number (their
fingerprint minus the seed), says what a table's runs share, keeps report folders of other runs,
and compares real results with the published numbers shipped as data."""
import json
from pathlib import Path

import pytest

from argtca.config import get_cfg_default
from argtca.run_folder import NON_RESULT_KEYS, flatten_cfg
from argtca.report import build_table, find_runs, group_runs, main, table_markdown
from argtca.report.identity import (FINGERPRINT_KEYS, FINGERPRINT_PREFIXES, RESULT_KEYS,
                                    is_result_key)
from argtca.report.reference import (clip_zeroshot, full_test_size, paper_table1,
                                     reference_for)
from run_records import write_summary
from test_report import md_rows

NAMES = {"caltech101": "Caltech101", "dtd": "DescribableTextures", "demo": "Demo"}
LABELS = {"zeroshot": "Zero-shot CLIP", "tpt": "TPT", "ctpt": "C-TPT"}


def make_run(root: Path, sub: str, method: str, acc: float, ece: float, seed: int = 1,
             dataset_key: str = "caltech101", n: int = 60, config=None, overrides=None):
    """A finished run folder as the engine writes it: summary.json and config.json (the
    fingerprint: its settings plus the test set), records giving ``acc`` and ``ece`` (to the
    nearest k/n) and the summary of their numbers."""
    d = root / sub
    d.mkdir(parents=True)
    cfg = {"SEED": seed, "DATASET.NAME": NAMES[dataset_key], "TEST_SET.N_IMAGES": n,
           "TEST_SET.ITEMS_SHA256": f"items-{dataset_key}-{n}", "RUN.DEVICE_TYPE": "cuda"}
    cfg.update(config or {})
    (d / "config.json").write_text(json.dumps(cfg))
    write_summary(d, {
        "method": method, "selector": None, "label": LABELS[method], "dataset": NAMES[dataset_key],
        "dataset_key": dataset_key, "seed": seed, "backbone": "ViT-B/16", "pretrained": "openai",
        "overrides": overrides or {}}, n, acc, ece)
    return d


# ----------------------------------------------------------------------------- classification
def test_every_config_key_is_classified():
    keys = flatten_cfg(get_cfg_default())
    unclassified = [k for k in keys if k not in NON_RESULT_KEYS and not is_result_key(k)]
    assert unclassified == [], "classify in run_folder.NON_RESULT_KEYS or report/identity.py"
    assert not RESULT_KEYS & set(NON_RESULT_KEYS)   # one place for each key
    assert all(k in keys for k in NON_RESULT_KEYS)   # no stale entry
    # a new key in a classified node of fixed keys is not classified by accident
    assert not is_result_key("TTA.NEW_KEY") and not is_result_key("DATASET.NEW_KEY")
    assert not is_result_key("NEW_NODE.X")
    # a method's node is its hyper-parameters, a plug-in method's too (no list to extend)
    assert is_result_key("TRAINER.NEWMETHOD.LAMBDA")
    # the fingerprint's own keys (test set, file hashes, device) are no config keys
    assert not any(k.startswith(FINGERPRINT_PREFIXES) or k in FINGERPRINT_KEYS for k in keys)


def test_dassl_keys_are_classified_when_dassl_is_installed():
    """Under Dassl the fingerprint holds Dassl's own keys too: every key both configs define is
    classified like argtca's, Dassl-only keys count as number-changing (kept apart)."""
    pytest.importorskip("dassl")
    from dassl.config import get_cfg_default as dassl_default
    ours = flatten_cfg(get_cfg_default())
    shared = [k for k in flatten_cfg(dassl_default()) if k in ours]
    assert shared and all(k in NON_RESULT_KEYS or is_result_key(k) for k in shared)


# ----------------------------------------------------------------------------- never pooled
def _cells(root):
    runs = find_runs([root])
    labels, datasets, cells = group_runs(runs)
    return labels, datasets, cells


@pytest.mark.parametrize("seed_val", [1, 2])
def test_test_and_val_split_are_two_cells(tmp_path, seed_val):
    """A C-TPT run on the test split and one written by the tuning on the val split: two cells
    (never "87.50 / 10.30, 2 seeds"), with equal seeds too (no duplicate error)."""
    make_run(tmp_path, "ctpt/caltech101/seed1", "ctpt", 75.00, 20.37)
    make_run(tmp_path, "tune/caltech101/val/ctpt/lambda50/seed1", "ctpt", 100.00, 0.23,
             seed=seed_val, config={"DATASET.SPLIT": "val"},
             overrides={"DATASET.SPLIT": "val"})
    labels, datasets, cells = _cells(tmp_path)
    assert labels == ["C-TPT", "C-TPT [split=val]"]
    assert cells[("C-TPT", "caltech101")].mean("accuracy") == 75.00
    assert cells[("C-TPT [split=val]", "caltech101")].mean("ece") == pytest.approx(0.23)
    t = build_table(labels, datasets, cells)
    # other split: never ranked against each other (each is best of its own kind)
    assert t.marks[("C-TPT", "accuracy", "caltech101")] == "best"
    assert t.marks[("C-TPT [split=val]", "accuracy", "caltech101")] == "best"
    md = table_markdown(t)
    assert "among rows of the same split/images/backbone/weights" in md
    assert "Differ between rows (named in the row labels): split." in md
    assert "split val (published numbers are on the test split)" in md


def test_two_subset_sizes_are_two_cells(tmp_path):
    for k, (n, acc) in enumerate([(8, 50.0), (16, 25.0)]):
        for seed in (1, 2):
            make_run(tmp_path, f"n{n}/seed{seed}", "tpt", acc + 12.5 * seed, 5.0, seed=seed, n=n,
                     config={"DATASET.NUM_IMAGES": n})
    labels, _, cells = _cells(tmp_path)
    assert labels == ["TPT [images=8]", "TPT [images=16]"]
    assert cells[("TPT [images=8]", "caltech101")].mean("accuracy") == pytest.approx(68.75)
    assert cells[("TPT [images=16]", "caltech101")].mean("accuracy") == pytest.approx(43.75)
    assert cells[("TPT [images=16]", "caltech101")].seeds == [1, 2]


def test_two_attribute_files_are_two_cells(tmp_path):
    """Other file, or the same path with other content (its sha256 in the fingerprint): separate
    cells; the other dataset's run keeps the plain label."""
    a = {"DATASET.ATTRIBUTE_FILE": "/attrs/a.json", "FILE_SHA256.DATASET.ATTRIBUTE_FILE": "1" * 64}
    b = {"DATASET.ATTRIBUTE_FILE": "/attrs/b.json", "FILE_SHA256.DATASET.ATTRIBUTE_FILE": "2" * 64}
    b2 = dict(a, **{"FILE_SHA256.DATASET.ATTRIBUTE_FILE": "3" * 64})
    make_run(tmp_path, "a", "zeroshot", 90.0, 3.0, config=a)
    make_run(tmp_path, "b", "zeroshot", 80.0, 4.0, config=b)
    make_run(tmp_path, "dtd", "zeroshot", 40.0, 6.0, dataset_key="dtd",
             config={"DATASET.ATTRIBUTE_FILE": "/attrs/dtd.json"})
    labels, _, cells = _cells(tmp_path)
    assert ("Zero-shot CLIP", "dtd") in cells
    ours = sorted(lab for lab, dk in cells if dk == "caltech101")
    assert len(ours) == 2 and all("attributes=a.json" in x or "attributes=b.json" in x
                                  for x in ours)
    assert sorted(cells[(lab, "caltech101")].mean("accuracy") for lab in ours) == [80.0, 90.0]
    # same path, other content (seed 2: would be averaged as a second seed before)
    make_run(tmp_path, "a_edited", "zeroshot", 70.0, 9.0, seed=2, config=b2)
    labels, _, cells = _cells(tmp_path)
    cal = {lab: c for (lab, dk), c in cells.items() if dk == "caltech101"}
    assert len(cal) == 3 and all(len(c.runs) == 1 for c in cal.values())
    assert any("attributes sha256=11111111" in lab for lab in cal)
    assert any("attributes sha256=33333333" in lab for lab in cal)


def test_old_run_folder_without_config_json_is_read(tmp_path):
    d = make_run(tmp_path, "old", "tpt", 60.0, 5.0, overrides={"TTA.N_VIEWS": 8})
    (d / "config.json").unlink()
    labels, _, cells = _cells(tmp_path)
    assert labels == ["TPT"] and cells[("TPT", "caltech101")].mean("accuracy") == 60.0
    assert find_runs([tmp_path])[0].settings["TTA.N_VIEWS"] == 8


def test_header_says_what_runs_share_and_that_a_ci_table_is_no_result(tmp_path, capsys):
    ci = {"MODEL.PRETRAINED": "random", "DATASET.NUM_IMAGES": 3, "TTA.N_VIEWS": 2}
    make_run(tmp_path / "runs", "a", "zeroshot", 33.33, 10.0, n=3, config=ci)
    make_run(tmp_path / "runs", "b", "tpt", 66.67, 8.0, n=3,
             config=dict(ci, **{"TTA.LR": 0.01}))
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    for text in (out, (tmp_path / "rep" / "table.md").read_text()):
        assert ("Every run: split test · views 2 (not the methods' defaults; Zero-shot: 1, the "
                "test image alone) · backbone "
                "ViT-B/16 · weights random · device cuda · test images: Caltech101 3.") in text
        assert "Set for every run (not the methods' defaults): DATASET.NUM_IMAGES=3." in text
        assert ("Set for some rows only (not their method's default): TPT: TTA.LR=0.01."
                in text)
        assert "**Not comparable with published numbers**: weights random" in text
        assert "DATASET.NUM_IMAGES 3 (a subset of the test split)" in text
        assert "Cells: the mean over seeds of each run's metric" in text
        assert "Against published numbers" not in text


# ----------------------------------------------------------------------------- report folders
def test_report_folder_of_other_runs_is_refused_unless_force(tmp_path, capsys, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    make_run(a, "r", "tpt", 60.0, 5.0)
    make_run(b, "r", "ctpt", 61.0, 4.0)
    rep = tmp_path / "rep"
    assert main([str(a), "--out", str(rep)]) == 0
    assert main([str(a), "--out", str(rep)]) == 0            # the same runs: updated
    before = (rep / "table.md").read_text()
    assert main([str(b), "--out", str(rep)]) == 2
    err = capsys.readouterr().err
    assert f"{rep} holds a table report of other runs" in err and "--force" in err
    assert (rep / "table.md").read_text() == before
    # more runs of the same experiment (a second seed finished): updated
    make_run(a, "r2", "tpt", 62.0, 5.0, seed=2)
    assert main([str(a), "--out", str(rep)]) == 0
    assert main([str(b), "--out", str(rep), "--force"]) == 0
    assert "C-TPT" in (rep / "table.md").read_text()
    # a folder of an older report (no report.json) is not overwritten either
    old = tmp_path / "old"
    old.mkdir()
    (old / "table.md").write_text("old table\n")
    assert main([str(a), "--out", str(old)]) == 2
    # no --out: a folder named by the runs, another for other runs
    monkeypatch.chdir(tmp_path)
    assert main([str(a)]) == 0 and main([str(b)]) == 0 and main([str(a)]) == 0
    folders = sorted(p.name for p in (tmp_path / "output/report").iterdir())
    assert len(folders) == 2 and all(len(f) == 8 for f in folders)


# ----------------------------------------------------------------------------- references
def test_reference_data_as_published():
    t = paper_table1()
    assert t[("TPT", "accuracy", "caltech101")][0] == 93.83
    assert t[("ArgTCA-Div", "ece", "average")][0] == 4.45
    assert t[("ArgTCA-Disc", "accuracy", "average")][0] == 64.68
    assert t[("C-TPT", "accuracy", "eurosat")][0] == 27.8
    assert t[("TCA", "accuracy", "food101")][0] == 69.18
    assert "transcription error" in t[("TCA", "accuracy", "food101")][2]
    assert all("Table 1" in cit for _, cit, _ in t.values())
    assert len(t) == 7 * 2 * 10
    z = clip_zeroshot()
    assert z["dtd"][0] == 44.27 and z["imagenet"][0] == 66.73 and len(z) == 11
    assert all("TPT" in cit for _, cit in z.values())
    # nine datasets: the ~64k test images per method and seed of Table 1
    assert sum(full_test_size(d) for d in ("caltech101", "oxford_pets", "stanford_cars",
                                            "oxford_flowers", "food101", "fgvc_aircraft", "dtd",
                                            "eurosat", "ucf101")) == 63846
    assert reference_for("argtca", "disc", "ece", "DescribableTextures")[0] == 6.36
    assert reference_for("zeroshot", None, "ece", "dtd") is None


def test_real_results_show_the_reference_and_warn_on_zeroshot(tmp_path, capsys):
    real = {"MODEL.PRETRAINED": "openai"}
    make_run(tmp_path / "runs", "zs", "zeroshot", 90.10, 3.0, n=2465, config=real)
    make_run(tmp_path / "runs", "tpt", "tpt", 94.00, 4.00, n=2465, config=real)
    make_run(tmp_path / "runs", "zs_dtd", "zeroshot", 44.50, 5.0, n=1692, dataset_key="dtd",
             config=real)
    make_run(tmp_path / "runs", "ctpt_small", "ctpt", 90.0, 4.0, n=100, config=real)
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    cap = capsys.readouterr()
    md = (tmp_path / "rep" / "table.md").read_text()
    assert "## Against published numbers" in md
    rows = md_rows(md.split("## Against published numbers")[1])
    assert rows[0] == "| Method | Metric | Caltech101 | DescribableTextures |"
    # ours / published (difference), worked out by hand: 90.10 − 93.35, 44.50 − 44.27
    assert "| Zero-shot CLIP | Acc | 90.10 / 93.35 (-3.25) | 44.50 / 44.27 (+0.23) |" in rows
    assert "| TPT | Acc | 94.00 / 93.83 (+0.17) | – |" in rows
    assert "|  | ECE | 4.00 / 4.59 (-0.59) | – |" in rows
    assert not any(r.startswith("| C-TPT") for r in rows)      # 100 of 2465 images: no
    warn = [x for x in cap.err.splitlines() if "zero-shot CLIP on Caltech101" in x]
    assert len(warn) == 1 and "-3.25 points" in warn[0] and "weights" in warn[0] \
        and "interpolation" in warn[0] and "split" in warn[0]
    assert "DescribableTextures" not in " ".join(warn)
    assert "Caltech101 100 of 2465" in md     # the subset run makes the table not comparable
