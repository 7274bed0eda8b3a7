"""The whole-table benchmark through its command (``python -m argtca.bench table1``), tiny on the
CPU, and the arithmetic that turns its rows into the hours of Table 1 and into ``table1 --plan``'s
estimate, checked against numbers worked out by hand."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Table 1's nine published test sizes (CoOp's split files): 63,846 images a method and seed
SIZES = {"caltech101": 2465, "oxford_pets": 3669, "stanford_cars": 8041, "oxford_flowers": 2463,
         "food101": 30300, "fgvc_aircraft": 3333, "dtd": 1692, "eurosat": 8100, "ucf101": 3783}
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4",
        "DATALOADER.NUM_WORKERS", "0", "TTA.BATCH_IMAGES", "2"]


def _cli(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m"] + args, cwd=cwd, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    return p.returncode, p.stdout


def test_tiny_whole_table_benchmark_and_its_extrapolation(tmp_path):
    out = tmp_path / "rates.json"
    rc, log = _cli(["argtca.bench", "table1", "--methods", "zeroshot,tpt", "--datasets",
                    "eurosat", "--images", "4", "--warmup", "0", "--cpu", "--commit", "abc1234",
                    "--out", str(out), "--data-dir", str(tmp_path / "data")] + TINY, tmp_path)
    assert rc == 0, log
    data = json.loads(out.read_text())
    assert data["machine"]["card"] == "cpu" and data["machine"]["device"] == "cpu"
    assert data["machine"]["cores"] >= 1 and data["commit"] == "abc1234"
    assert data["command"].startswith("python -m argtca.bench table1 --methods zeroshot,tpt")
    rows = {r["method"]: r for r in data["rows"]}
    assert list(rows) == ["zeroshot", "tpt"]
    for r in rows.values():
        # the EuroSAT stand-in: its 10 classes, its 64 x 64 images; the path table1 would take
        assert (r["dataset"], r["classes"], r["image_size"], r["n"]) == ("eurosat", 10, [64, 64], 4)
        assert (r["backbone"], r["views"], r["device"], r["commit"]) == \
            ("argtca-tiny-test", "cpu", "cpu", "abc1234")
        assert r["planned_images"] == SIZES["eurosat"]   # its runs planned for the full set
        assert r["bound"] in ("views workers", "main process", "engine (CPU)")
        assert sum(r["shares"].values()) == pytest.approx(1.0, abs=0.002)   # 3 roundings
        # the arithmetic of a row: seconds per image at the slower of its rates after the first
        # batch and over its later half (no workers: no workers' rate), the rest of the run's
        # seconds its fixed cost
        assert r["steady_img_per_s"] > 0 and r["late_img_per_s"] > 0
        assert r["workers_img_per_s"] is None
        assert r["s_per_image"] == pytest.approx(1 / min(r["steady_img_per_s"],
                                                         r["late_img_per_s"]))
        assert r["fixed_s"] == pytest.approx(max(0.0, r["run_s"] - 4 * r["s_per_image"]))
        assert r["loop_img_per_s"] == pytest.approx(4 / r["loop_s"], rel=1e-3)
    # the full table: 9 datasets at their published sizes x 3 seeds; the eight not measured take
    # EuroSAT's rate (the only one measured)
    # the rows' settings: the overrides that change a run's speed (not where files are, nor
    # the backbone and views, which key the row themselves)
    sets = ["INPUT.SIZE=(32,32)", "TTA.BATCH_IMAGES=2", "TTA.N_VIEWS=4"]
    assert all(r["settings"] == sets for r in rows.values())
    ex = data["extrapolation"]["argtca-tiny-test, TTA.VIEWS_DEVICE cpu, " + " ".join(sets)]
    assert ex["datasets"] == SIZES and ex["seeds"] == 3
    for m, r in rows.items():
        hours = 3 * (9 * r["fixed_s"] + 63846 * r["s_per_image"]) / 3600
        assert ex["hours_per_method"][m] == pytest.approx(hours, abs=1e-4)
    assert ex["hours_total"] == pytest.approx(sum(ex["hours_per_method"].values()), abs=1e-3)
    assert len(ex["borrowed"]) == 2 * 8
    # printed per method: images, loop img/s and pace, bound and hours; the total
    line = next(x for x in log.splitlines() if x.startswith("tpt "))
    r = rows["tpt"]
    assert line.split()[:5] == ["tpt", "1", "4", f"{4 / r['loop_s']:.2f}",
                                f"{1 / r['s_per_image']:.2f}"]
    assert line.split()[-1] == f"{ex['hours_per_method']['tpt']:.2f}"
    total = next(x for x in log.splitlines() if x.startswith("total "))
    assert total.split()[-1] == f"{ex['hours_total']:.2f}"

    # table1 --plan reads the file: TPT and zero-shot on EuroSAT (8,100 images), 2 seeds
    rc, plan = _cli(["argtca.experiments", "table1", "eurosat", "--plan", "--rates", str(out),
                     "--methods", "zeroshot,tpt", "--seeds", "1,2", "--out-root",
                     str(tmp_path / "o")] + TINY, tmp_path)
    assert rc == 0, plan
    s = 2 * sum(r["fixed_s"] + 8100 * r["s_per_image"] for r in rows.values())
    cells = next(x for x in plan.splitlines() if x.startswith("[table1] eurosat")).split()
    assert cells[2:6] == ["4", "8100", "32400", "10"]
    want = f"{s / 3600:.1f}" if s >= 3600 else f"{s / 60:.0f}" if s >= 60 else f"{s:.0f}"
    assert cells[6] == want
    assert f"[table1] rates: {out} (cpu, {data['machine']['cores']} cores, commit abc1234" in plan
    assert "settings" not in plan     # these runs' settings are the rows' own
    # a plan of other settings (64 views) is estimated from these rows, and says so
    rc, plan = _cli(["argtca.experiments", "table1", "eurosat", "--plan", "--rates", str(out),
                     "--methods", "zeroshot,tpt", "--seeds", "1,2", "--out-root",
                     str(tmp_path / "o")] + TINY[:2] + ["USE_CUDA", "False"], tmp_path)
    assert rc == 0 and next(x for x in plan.splitlines()
                            if x.startswith("[table1] eurosat")).split()[6] == want, plan
    assert "[table1] no rate measured with these runs' settings (the defaults) for every " \
           "method: the rates of INPUT.SIZE=(32,32) TTA.BATCH_IMAGES=2 TTA.N_VIEWS=4 used" in plan


def _row(method, dataset, classes, n, loop_s, run_s, steady, views="cpu"):
    from argtca.experiments.rates import derive
    return derive({"method": method, "dataset": dataset, "backbone": "ViT-B/16", "views": views,
                   "classes": classes, "n": n, "loop_s": loop_s, "run_s": run_s,
                   "steady_img_per_s": steady})


def test_a_rows_pace_is_the_slowest_of_its_rates():
    """A short run's steady rate can be the engine using up the views made ahead during the
    first batch: the pace a long run keeps is the slowest of the rates measured."""
    from argtca.experiments.rates import derive
    base = {"method": "tpt", "dataset": "caltech101", "backbone": "ViT-B/16", "views": "cpu",
            "classes": 100, "n": 200, "loop_s": 4.0, "run_s": 6.0}
    r = derive(dict(base, steady_img_per_s=100.0, late_img_per_s=80.0, workers_img_per_s=50.0))
    assert (r["s_per_image"], r["fixed_s"]) == (pytest.approx(0.02), pytest.approx(2.0))
    r = derive(dict(base, steady_img_per_s=100.0, late_img_per_s=None, workers_img_per_s=400.0))
    assert (r["s_per_image"], r["fixed_s"]) == (pytest.approx(0.01), pytest.approx(4.0))


def test_extrapolation_by_hand():
    from argtca.bench.table1 import extrapolation
    rows = [_row("tpt", "caltech101", 100, 64, 8.0, 10.0, 10.0),    # 0.1 s an image, fixed 3.6
            _row("tpt", "eurosat", 10, 64, 4.0, 5.0, 20.0),         # 0.05 s, fixed 1.8
            _row("zero", "eurosat", 10, 16, 4.0, 4.0, None)]        # one batch: 0.25 s, fixed 0
    assert (rows[0]["s_per_image"], rows[0]["fixed_s"]) == (pytest.approx(0.1),
                                                            pytest.approx(3.6))
    assert (rows[2]["s_per_image"], rows[2]["fixed_s"]) == (0.25, 0.0)
    ex = extrapolation(rows)["ViT-B/16, TTA.VIEWS_DEVICE cpu"]
    # TPT: caltech101 and eurosat measured; the nearest in classes elsewhere: oxford_pets (37),
    # dtd (47) -> eurosat (10); stanford_cars (196), oxford_flowers, food101, fgvc_aircraft,
    # ucf101 (100-102) -> caltech101 (100)
    near_c = SIZES["caltech101"] + SIZES["stanford_cars"] + SIZES["oxford_flowers"] + \
        SIZES["food101"] + SIZES["fgvc_aircraft"] + SIZES["ucf101"]         # 50,385 images
    near_e = SIZES["eurosat"] + SIZES["oxford_pets"] + SIZES["dtd"]      # 13,461 images
    tpt = 3 * (6 * 3.6 + 0.1 * near_c + 3 * 1.8 + 0.05 * near_e) / 3600
    assert ex["hours_per_method"]["tpt"] == pytest.approx(tpt, abs=1e-4)     # 4.7821 h
    assert ex["hours_per_method"]["tpt"] == pytest.approx(4.7821, abs=1e-4)
    zero = 3 * 0.25 * 63846 / 3600                                            # 13.3013 h
    assert ex["hours_per_method"]["zero"] == pytest.approx(zero, abs=1e-4)
    assert ex["hours_total"] == pytest.approx(tpt + zero, abs=1e-3)
    assert ["tpt", "dtd", "eurosat"] in ex["borrowed"]
    assert ["tpt", "food101", "caltech101"] in ex["borrowed"]
    assert ["zero", "food101", "eurosat"] in ex["borrowed"]
    # another views path is its own table
    gpu = extrapolation(rows + [_row("tpt", "food101", 101, 64, 2.0, 3.0, 40.0, "gpu")])
    assert gpu["ViT-B/16, TTA.VIEWS_DEVICE gpu"]["hours_per_method"] == {
        "tpt": pytest.approx(3 * 9 * (3.0 - 64 / 40) / 3600 + 3 * 63846 / 40 / 3600, abs=1e-4)}


def test_the_plan_estimates_from_a_rate_file(tmp_path):
    """table1 --plan on the CPU path with a hand-made rate file: per dataset its runs at the
    measured rates, a dataset not measured at the nearest one's, a method without a rate named
    and not counted."""
    from argtca.experiments.estimate import plan_lines
    rows = [_row("tpt", "caltech101", 100, 64, 8.0, 10.0, 10.0),
            _row("tpt", "eurosat", 10, 64, 4.0, 5.0, 20.0)]
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"machine": {"device": "cpu", "card": "cpu", "cores": 2,
                                         "date": "2026-12-06"}, "commit": "abc1234",
                             "rows": [dict(r, commit="abc1234") for r in rows]}))
    lines = plan_lines(["caltech101", "dtd"], ["tpt", "zero"], [1, 2, 3],
                       ["USE_CUDA", "False"], rates=str(f))
    cal = lines[1].split()
    # 2 methods x 3 seeds; TPT: 3 x (3.6 + 0.1 x 2465) = 750.3 s = 13 min; ZERO: no rate (+?)
    assert cal[:6] == ["caltech101", "6", "2465", "14790", "100", "13"] and cal[6] == "min+?"
    dtd = lines[2].split()    # DTD (47 classes) at EuroSAT's rate: 3 x (1.8 + 0.05 x 1692)
    assert dtd[:6] == ["dtd", "6", "1692", "10152", "47", "4"]
    assert lines[0].split()[-2:] == ["CPU", "time"]
    assert f"rates: {f} (cpu, 2 cores, commit abc1234, 2026-12-06; 64 images per method and " \
           f"dataset)" in lines
    assert "not measured on dtd (tpt): eurosat's rate used (the measured dataset nearest in " \
           "classes)" in lines
    assert any(x.startswith("no measured rate in r.json of zero with ViT-B/16, TTA.VIEWS_DEVICE "
                            "cpu (on caltech101, dtd): not counted (+?)") for x in lines)
    # a file that is not a rate file: one line naming it and the fix
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    from argtca.experiments.plan import ExperimentError
    with pytest.raises(ExperimentError, match="bad.json: no 'machine' and 'rows'"):
        plan_lines(["dtd"], ["tpt"], [1], ["USE_CUDA", "False"], rates=str(bad))


@pytest.mark.parametrize("dataset", sorted(SIZES))
def test_stand_in_runs_plan_for_the_published_test_size(dataset):
    """A stand-in's few hundred images would make the engine's size-dependent choices for a short
    run (TPT's step without the Jacobian below 2048 images): its runs plan for the published
    size, which the rates extrapolate to; the demo is its own test set."""
    from argtca.bench.table1 import _run_opts
    opts = _run_opts({"dataset": dataset, "attributes": "a.json"}, 64, ["SEED", "2"])
    pairs = dict(zip(opts[::2], opts[1::2]))
    assert pairs["TTA.FAST.AUTO_IMAGES"] == str(SIZES[dataset]) and pairs["SEED"] == "2"
    assert "TTA.FAST.AUTO_IMAGES" not in _run_opts({"dataset": "demo"}, 64, [])


def _plan_of(tmp_path, rows, methods):
    """``table1 --plan``'s lines for ``methods`` on Caltech101 from an H100 rate file of
    ``rows``."""
    from argtca.experiments.estimate import plan_lines
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"machine": {"device": "cuda", "card": "H100", "cores": 16,
                                         "date": "2026-12-07"}, "commit": "abc1234",
                             "rows": rows}))
    return plan_lines(["caltech101"], methods, [1], ["USE_CUDA", "False"], rates=str(f))


def _gpu_row(method, **kw):
    return dict(_row(method, "caltech101", 100, 48, 1.0, 5.0, 100.0), device="cuda", **kw)


def test_the_plan_names_gpu_rates_of_runs_that_planned_short(tmp_path):
    """A GPU row whose run planned for its own 48 images (the benchmark before
    TTA.FAST.AUTO_IMAGES: TPT's step 1 by a VJP where a full run takes the Jacobian) is named
    in the plan; a row planned for the published size, or measured on the CPU, is not."""
    from argtca.experiments.rates import planned_short
    old, new = _gpu_row("tpt"), _gpu_row("ctpt", planned_images=SIZES["caltech101"])
    cpu = dict(_row("otpt", "caltech101", 100, 48, 1.0, 5.0, 100.0), device="cpu")
    assert planned_short(old) and not planned_short(new) and not planned_short(cpu)
    assert planned_short(_gpu_row("atpt", planned_images=2000))     # short of 2465 too
    lines = _plan_of(tmp_path, [old, new, cpu], ["tpt", "ctpt", "otpt"])
    said = [x for x in lines if "planned for their own few images" in x]
    assert len(said) == 1 and said[0].startswith("the rates of tpt were measured on short GPU")
    lines = _plan_of(tmp_path, [old, new, cpu], ["ctpt"])
    assert not any("planned for their own" in x for x in lines)


def test_the_plan_names_gpu_rates_without_their_pace(tmp_path):
    """A GPU row of the steady rate alone (measured before the later half's and the workers'
    rates) is named in the plan; a row with them (even a run too short for a later half), or
    measured on the CPU, is not."""
    from argtca.experiments.rates import steady_only
    full = SIZES["caltech101"]
    old = _gpu_row("tpt", planned_images=full)
    new = _gpu_row("ctpt", planned_images=full, late_img_per_s=None, workers_img_per_s=80.0)
    cpu = dict(_row("otpt", "caltech101", 100, 48, 1.0, 5.0, 100.0), device="cpu")
    assert steady_only(old) and not steady_only(new) and not steady_only(cpu)
    lines = _plan_of(tmp_path, [old, new, cpu], ["tpt", "ctpt", "otpt"])
    said = [x for x in lines if "after the first batch alone" in x]
    assert len(said) == 1 and said[0].startswith("the rates of tpt are their runs' rates")
    lines = _plan_of(tmp_path, [old, new, cpu], ["ctpt"])
    assert not any("after the first batch alone" in x for x in lines)
