"""The report among damaged, unfinished and duplicated run folders (issue 8): a broken folder is
listed and skipped, interrupted runs are listed as such, two folders claiming the same run are an
error naming both."""
import json
from pathlib import Path

import pytest

from argtca.report import ReportError, find_runs, main
from argtca.report.runs import scan_runs
from test_report import md_rows, write_run


def _skipped(out):
    rows = md_rows((out / "skipped.md").read_text())[1:]
    return {Path(r.split(" | ")[1]).name: r for r in rows}


def test_broken_folders_are_listed_and_skipped(tmp_path, capsys):
    root = tmp_path / "runs"
    write_run(root, "zeroshot", "imagenet", 1, 50.0, 2.0)
    write_run(root, "tpt", "imagenet", 1, 52.0, 9.0)
    bad_json = write_run(root, "ctpt", "imagenet", 1, 51.0, 3.0, sub="bad_json")
    (bad_json / "summary.json").write_text('{"method": "ctpt", "accura')
    latin = write_run(root, "atpt", "imagenet", 1, 51.0, 3.0, sub="latin1")
    (latin / "summary.json").write_bytes(
        (latin / "summary.json").read_text().replace("ImageNet", "Imag\xe9Net").encode("latin-1"))
    garbage = write_run(root, "tca", "imagenet", 1, 51.0, 3.0, sub="garbage")
    lines = (garbage / "records.jsonl").read_text().splitlines()
    (garbage / "records.jsonl").write_text("\n".join(lines[:3] + ["%%%"] + lines[3:]) + "\n")
    out = tmp_path / "rep"
    assert main([str(root), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    table = (out / "table.md").read_text()
    assert "| CLIP |" in table and "| TPT |" in table
    assert "C-TPT" not in table and "A-TPT" not in table and "TCA" not in table
    sk = _skipped(out)
    assert set(sk) == {"bad_json", "latin1", "garbage"}
    assert all(r.startswith("| broken |") for r in sk.values())
    assert "invalid JSON" in sk["bad_json"]
    assert "not UTF-8 text (byte" in sk["latin1"] and "0xe9" in sk["latin1"]
    assert "records.jsonl:4: bad record" in sk["garbage"]
    # one stderr line per skipped folder, and the summary line on stdout
    warn = [x for x in captured.err.splitlines() if "skipped broken" in x]
    assert len(warn) == 3 and any(str(latin) in x and "UTF-8" in x for x in warn)
    assert "left out: 3 run folder(s)" in captured.out
    # a later report without the broken folders removes the stale list
    for d in (bad_json, latin, garbage):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    assert main([str(root), "--out", str(out)]) == 0
    assert not (out / "skipped.md").exists()


def test_only_broken_folders_is_one_error_with_the_reasons(tmp_path):
    d = tmp_path / "x"
    d.mkdir()
    (d / "summary.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(ReportError, match=r"no summary.json of a finished run .*not UTF-8"):
        find_runs([tmp_path])
    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2


def _config(d, n):
    (d / "config.json").write_text(json.dumps({"SEED": 1, "TEST_SET.N_IMAGES": n}))


def test_interrupted_and_incomplete_runs_are_listed(tmp_path):
    root = tmp_path / "runs"
    good = write_run(root, "tpt", "imagenet", 1, 52.0, 9.0, n_records=50)
    _config(good, 50)
    # killed after 20 of 60 images: records, no summary
    killed = write_run(root, "ctpt", "imagenet", 1, 1.0, 1.0, n_records=20, sub="killed")
    (killed / "summary.json").unlink()
    _config(killed, 60)
    with open(killed / "records.jsonl", "a") as f:
        f.write('{"index": 20, "pa')                       # torn last line: still counted 20
    # an interrupted torchrun job: rank files, nothing merged yet
    ranks = tmp_path / "runs" / "ranks"
    ranks.mkdir()
    _config(ranks, 60)
    for r in range(2):
        (ranks / f"records.rank{r}.jsonl").write_text("{}\n" * (5 + r))
    # killed before the first image: only config.json
    fresh = tmp_path / "runs" / "fresh"
    fresh.mkdir()
    _config(fresh, 60)
    # a summary of fewer images than the test set
    short = write_run(root, "zeroshot", "imagenet", 1, 1.0, 1.0, n_records=20, sub="short")
    _config(short, 60)
    # two writers (before run.lock): 80 lines for 40 images, summary of 80
    twice = write_run(root, "atpt", "imagenet", 1, 1.0, 1.0, n_records=40, sub="twice")
    lines = (twice / "records.jsonl").read_text()
    (twice / "records.jsonl").write_text(lines + lines)
    s = json.loads((twice / "summary.json").read_text())
    (twice / "summary.json").write_text(json.dumps(dict(s, n=80)))
    # a summary older than its records
    stale = write_run(root, "tca", "imagenet", 1, 1.0, 1.0, n_records=30, sub="stale")
    with open(stale / "records.jsonl", "a") as f:
        f.write(json.dumps({"index": 30, "label": 0, "pred": 0, "conf": 0.9}) + "\n")
    runs, problems = scan_runs([root])
    assert [r.path for r in runs] == [good.resolve()]
    by = {p.path.name: p for p in problems}
    assert set(by) == {"killed", "ranks", "fresh", "short", "twice", "stale"}
    assert by["ranks"].reason.startswith("11 of 60 images recorded")
    assert by["killed"].status == "interrupted"
    assert by["killed"].reason.startswith("20 of 60 images recorded, no summary.json")
    assert by["fresh"].reason.startswith("0 of 60 images recorded")
    assert by["short"].status == "incomplete" and "covers 20 of 60 images" in by["short"].reason
    assert "40 repeated image indices" in by["twice"].reason
    assert "covers 30 images but records.jsonl holds 31" in by["stale"].reason
    out = tmp_path / "rep"
    assert main([str(root), "--out", str(out)]) == 0
    assert set(_skipped(out)) == {"killed", "ranks", "fresh", "short", "twice", "stale"}
    assert md_rows((out / "table.md").read_text())[1].startswith("| TPT | Acc | **52.00**")


def test_two_folders_claiming_the_same_run_is_an_error(tmp_path, capsys):
    a = write_run(tmp_path / "machineA", "tpt", "imagenet", 1, 52.0, 9.0)
    b = write_run(tmp_path / "machineB", "tpt", "imagenet", 1, 53.0, 8.0)
    # other seeds or other settings are not duplicates
    write_run(tmp_path / "machineB", "tpt", "imagenet", 2, 53.0, 8.0)
    write_run(tmp_path / "machineB", "tpt", "imagenet", 1, 50.0, 8.0, sub="lr",
              overrides={"TTA.LR": 0.01})
    out = tmp_path / "rep"
    assert main([str(tmp_path / "machineA"), str(tmp_path / "machineB"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "TPT / ImageNet / seed 1: two run folders claim the same method, dataset, seed and " \
           "settings" in err
    assert str(a) in err and str(b) in err
    # the same tree passed twice is one set of runs, not duplicates
    assert main([str(tmp_path / "machineA"), str(tmp_path / "machineA"), "--out", str(out)]) == 0


def test_duplicate_in_ablation_and_sweep_modes(tmp_path, capsys):
    for tree in ("a", "b"):
        write_run(tmp_path / tree, "argtca", "caltech101", 1, 60.0, 3.0, selector="div",
                  overrides={"TRAINER.ARGTCA.EDGES": "none"}, sub="edges_none_div/seed1")
    assert main([str(tmp_path), "--out", str(tmp_path / "o"), "--ablation"]) == 2
    err = capsys.readouterr().err
    assert "ablation Caltech101 / zero edges / div / seed 1: two run folders" in err
    assert main([str(tmp_path), "--out", str(tmp_path / "o"), "--sweep"]) == 2
    assert "two run folders claim the same" in capsys.readouterr().err


def test_real_run_folders_interrupted_and_finished(tmp_path, monkeypatch, one_thread):
    """Run folders written by the engine: a finished one in the table, one whose summary is gone
    (killed before finishing) listed as interrupted with its count."""
    from argtca.run import main as run_main
    from helpers_data import make_caltech
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    data = make_caltech(tmp_path / "data")
    common = ["--root", str(data), "--seed", "1",
              "--dataset-config-file", "configs/datasets/caltech101.yaml"]
    tiny = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
              "INPUT.SIZE", "32", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0",
              "USE_CUDA", "False", "VERBOSE", "False"]
    runs = tmp_path / "output"
    for m in ("zeroshot", "tpt"):
        assert run_main(common + ["--config-file", f"configs/trainers/{m}.yaml", "--output-dir",
                                  str(runs / m / "caltech101" / "seed1")] + tiny) == 0
    part = runs / "tpt" / "caltech101" / "seed1"
    (part / "summary.json").unlink()
    lines = (part / "records.jsonl").read_text().splitlines()
    (part / "records.jsonl").write_text("\n".join(lines[:4]) + "\n")
    out = tmp_path / "rep"
    assert main([str(runs), "--out", str(out)]) == 0
    sk = _skipped(out)
    assert list(sk) == ["seed1"] and "| interrupted |" in sk["seed1"]
    assert "4 of 6 images recorded, no summary.json" in sk["seed1"]
    assert "| Zero-shot CLIP | Acc |" in (out / "table.md").read_text()
