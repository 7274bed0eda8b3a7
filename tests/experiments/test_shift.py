"""``python -m argtca.experiments shift``: TPT's distribution-shift table (ImageNet, -A, -V2, -R,
-Sketch) planned, run and reported on generated stand-ins, with the published rows beside ours."""
import csv
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from report.run_records import write_summary

from argtca.experiments.__main__ import main
from argtca.experiments.shift import shift_markdown
from argtca.report.reference import full_test_size, num_classes, paper_shift, reference_for

WNIDS = [f"n{1440764 + 7 * i:08d}" for i in range(1000)]   # sorted, ImageNet-like ids
SUBSET = WNIDS[3::5]                                         # the 200 of -A / -R, not a prefix
KEYS = ["imagenet", "imagenet_a", "imagenetv2", "imagenet_r", "imagenet_sketch"]
TINY = ["DATASET.NUM_IMAGES", "2", "TTA.N_VIEWS", "2", "DATALOADER.NUM_WORKERS", "0",
        "VERBOSE", "False", "USE_CUDA", "False", "MODEL.BACKBONE.NAME", "argtca-tiny-test",
        "MODEL.PRETRAINED", "random", "INPUT.SIZE", "(32, 32)"]


def _jpeg(k: int) -> bytes:
    arr = np.random.default_rng(k).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG")
    return buf.getvalue()


def _standins(root: Path, sketch: bool) -> None:
    """CoOp's layouts with one image per class: the readers need every class folder (1000, or
    the 200 of -A and -R), never a different task; CLIP names from <root>/imagenet."""
    (root / "imagenet").mkdir(parents=True)
    (root / "imagenet" / "classnames.txt").write_text(
        "".join(f"{w} thing {i}\n" for i, w in enumerate(WNIDS)))
    imgs = [_jpeg(k) for k in range(4)]
    trees = {"imagenet/images/val": WNIDS, "imagenet-adversarial/imagenet-a": SUBSET,
             "imagenetv2/imagenetv2-matched-frequency-format-val": [str(i) for i in range(1000)],
             "imagenet-rendition/imagenet-r": SUBSET}
    if sketch:
        trees["imagenet-sketch/images"] = WNIDS
    for sub, folders in trees.items():
        for k, f in enumerate(folders):
            (root / sub / f).mkdir(parents=True)
            (root / sub / f / "img_0.JPEG").write_bytes(imgs[k % 4])


def _cli(argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def _row(md: str, method: str, source: str):
    for ln in md.splitlines():
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) > 2 and cells[0] == method and cells[1].startswith(source):
            return cells[2:]
    raise AssertionError(f"no row {method} / {source} in:\n{md}")


def test_plan_lists_the_absent_set_first_then_runs_and_gpu_time(tmp_path, monkeypatch):
    _standins(tmp_path / "data", sketch=False)
    monkeypatch.chdir(tmp_path)
    rc, out = _cli(["shift", "--root", "data", "--out-root", "out", "--methods",
                    "zeroshot,tpt", "--plan"] + TINY)
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("[shift]")]
    assert lines[0].startswith("[shift] absent here: 1 of 5 dataset(s) (imagenet_sketch)")
    rows = {ln.split()[1]: ln.split()[2:] for ln in lines if ln.split()[1] in KEYS + ["total"]}
    assert list(rows)[:5] == KEYS                                # TPT's order, I / A / V / R / K
    for k in KEYS:      # 2 methods x 3 seeds (the default), 2 images, the sets' classes
        runs, per_run, images, classes = rows[k][:4]
        assert (runs, per_run, images) == ("6", "2", "12")
        assert classes == ("200" if k in ("imagenet_a", "imagenet_r") else "1000")
    assert rows["total"][:2] == ["30", "60"] and "rates: " in out
    assert not (tmp_path / "out").exists()                      # --plan runs nothing


def test_runs_on_standins_and_reports_the_published_rows(tmp_path, monkeypatch):
    _standins(tmp_path / "data", sketch=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    rc, out = _cli(["shift", "--root", "data", "--out-root", "out", "--methods",
                    "zeroshot,tpt", "--seeds", "1", "--quiet"] + TINY)
    assert rc == 0, out
    rep = next((tmp_path / "out" / "report").glob("shift-*"))
    md = (rep / "shift.md").read_text()
    assert (rep / "table.md").is_file() and md in out             # table1's report, and ours
    # the published rows, as TPT's Table 1 prints them, each with its source
    assert _row(md, "CLIP-ViT-B/16", "published") == \
        ["66.73", "47.87", "60.86", "73.98", "46.09", "59.11", "57.20"]
    assert _row(md, "TPT", "published") == \
        ["68.98", "54.77", "63.45", "77.06", "47.94", "–", "60.81"]
    assert md.count("Shu et al., Test-Time Prompt Tuning") == 2
    # ours: one cell per set, each the accuracy of its run's records
    got = {(r["method"], r["dataset"]): float(r["accuracy"])
           for r in csv.DictReader(open(rep / "shift.csv")) if r["source"] == "ours"}
    assert len(got) == 10
    runs = 0
    for summ in (tmp_path / "out").glob("*/*/*/seed1/summary.json"):
        s = json.loads(summ.read_text())
        lines = (summ.parent / "records.jsonl").read_text().splitlines()
        recs = [json.loads(x) for x in lines if x.strip()]
        assert len(recs) == 2
        if s["dataset_key"] in ("imagenet_a", "imagenet_r"):   # the 200-class subsets
            assert all(0 <= r["pred"] < 200 for r in recs)
        acc = 100 * np.mean([r["pred"] == r["label"] for r in recs])
        label = "Zero-shot CLIP" if s["method"] == "zeroshot" else "TPT"
        assert got[(label, s["dataset_key"])] == pytest.approx(acc, abs=1e-3)
        runs += 1
    assert runs == 10
    for method in ("Zero-shot CLIP", "TPT"):
        assert len(_row(md, method, "ours")) == 7


def _run(root: Path, sub: str, method: str, label: str, dk: str, seed: int, acc: float):
    d = root / sub
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({
        "SEED": seed, "DATASET.NAME": dk, "TEST_SET.N_IMAGES": 20,
        "TEST_SET.ITEMS_SHA256": f"items-{dk}", "RUN.DEVICE_TYPE": "cuda"}))
    write_summary(d, {"method": method, "selector": None, "label": label, "dataset": dk,
                      "dataset_key": dk, "seed": seed}, 20, acc, 5.0)


def test_section_means_over_seeds_average_and_ood_average(tmp_path):
    """Hand-written runs of known accuracy (20 images each): mean ± std over the two seeds per
    set, the Average over the five sets and the OOD Average over the four shift sets."""
    accs = {"imagenet": (70, 60), "imagenet_a": (50, 40), "imagenetv2": (60, 60),
            "imagenet_r": (80, 70), "imagenet_sketch": (45, 35)}
    for dk, pair in accs.items():
        for seed, a in zip((1, 2), pair):
            _run(tmp_path, f"zs-{dk}-{seed}", "zeroshot", "Zero-shot CLIP", dk, seed, a)
    _run(tmp_path, "tpt-a", "tpt", "TPT", "imagenet_a", 1, 55)   # one set only
    md, rows = shift_markdown([tmp_path])
    zs = _row(md, "Zero-shot CLIP", "ours")
    assert zs[:5] == ["65.00 ± 7.07", "45.00 ± 7.07", "60.00 ± 0.00", "75.00 ± 7.07",
                      "40.00 ± 7.07"]
    assert zs[5:] == ["57.00", "55.00"]    # (65+45+60+75+40)/5, (45+60+75+40)/4
    assert _row(md, "TPT", "ours") == ["–", "55.00", "–", "–", "–", "–", "–"]
    assert md.count("- note:") == 2        # each published row's note once
    assert ["ours", "TPT", "imagenet_a", "55.0000", "", "1", ""] in rows


def test_published_shift_numbers_are_read_and_consistent():
    """The TPT paper's rows through the report's lookup; the printed averages agree with the
    printed cells (a check on the transcription); an unverified cell is absent, not guessed."""
    ref = paper_shift()
    assert reference_for("zeroshot", None, "accuracy", "ImageNetA")[0] == 47.87
    assert reference_for("zeroshot", None, "accuracy", "imagenet")[0] == 66.73
    assert reference_for("tpt", None, "accuracy", "imagenet_sketch")[0] == 47.94
    assert reference_for("tpt", None, "ece", "imagenet_r") is None   # TPT prints no ECE
    assert ("TPT", "accuracy", "average") not in ref
    for name in ("CLIP-ViT-B/16", "TPT"):   # printed to 2 decimals: off by 0.005 at most
        vals = [ref[(name, "accuracy", k)][0] for k in KEYS]
        assert ref[(name, "accuracy", "ood_average")][0] == pytest.approx(
            sum(vals[1:]) / 4, abs=0.0051)
    clip = [ref[("CLIP-ViT-B/16", "accuracy", k)][0] for k in KEYS]
    assert ref[("CLIP-ViT-B/16", "accuracy", "average")][0] == pytest.approx(sum(clip) / 5,
                                                                          abs=0.0051)
    assert [full_test_size(k) for k in KEYS] == [50000, 7500, 10000, 30000, 50889]
    assert [num_classes(k) for k in KEYS] == [1000, 200, 1000, 200, 1000]
