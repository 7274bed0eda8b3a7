"""The whole-table benchmark: ``python -m argtca.bench table1 [--images 256] [KEY VALUE ...]``.

It runs the real ``table1`` plan — every method of the catalogue (``--methods``, table1's names:
``all``, ``paper``, ``zoo`` or a list), each with its defaults and the views path the command
would use (``TTA.VIEWS_DEVICE`` as its KEY VALUE overrides set it), one seed — through table1's own
runner (the preflight, then ``argtca.run`` in this process, one run after the other), on generated
stand-ins of Table 1's datasets: CoOp's Caltech101 layout with each dataset's real class count,
its typical image size (:data:`argtca.experiments.rates.IMAGE_SIZES`) and ``--images`` test images;
``demo`` is the embedded demo itself. CLIP at random weights (``MODEL.PRETRAINED random``; RLCF's
reward model too): the real model's FLOPs, meaningless accuracy.

Per (method, dataset) it keeps the run's clock (``summary.json["timing"]``: the loop, the rates
after the first batch and over the later half, what its views workers can make, where the host
thread waited) and the whole in-process run's seconds, and prints per method the loop img/s, the
pace (the slowest of those rates: :func:`argtca.experiments.rates.derive`), what
bounds the loop (the views workers, the main process or the GPU:
:func:`argtca.engine.pipeline.loop_bound`) and the hours of the full table (the published test
sizes x 3 seeds; :mod:`argtca.experiments.rates`), per method and in total. The
rows go into the machine's rate file (``--out``; default ``benchmarks/rates/<card>.json`` or
``cpu-<cores>cores.json``), merged with the rows of other methods, datasets or views paths already
there; ``table1 --plan`` reads it.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence

from argtca.experiments import rates as R

TAG = "bench table1"


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m argtca.bench table1", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="all",
                   help="table1's names, comma-separated: all (default), paper, zoo or methods")
    p.add_argument("--datasets", nargs="+", default=None, metavar="DATASET",
                   help="stand-ins to run, in this order (default: Table 1's nine); demo: the "
                        "embedded demo")
    p.add_argument("--images", type=int, default=256, help="test images per (method, dataset)")
    p.add_argument("--warmup", type=int, default=32,
                   help="images of an unrecorded first run (the process's one-off start: CUDA, "
                        "kernels); 0: none")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cpu", action="store_true", help="run on the CPU (USE_CUDA False)")
    p.add_argument("--out", default="",
                   help="the rate file (default: benchmarks/rates/<card or cpu-Ncores>.json)")
    p.add_argument("--replace", action="store_true",
                   help="write only this run's rows (default: merged into the file's rows)")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="seconds after which no further run starts (0: none); every finished "
                        "run is already in the file")
    p.add_argument("--data-dir", default="", help="where to build the stand-ins (default: temp)")
    p.add_argument("--commit", default="",
                   help="the commit measured (default: the checkout's, git rev-parse)")
    p.add_argument("opts", nargs=argparse.REMAINDER,
                   help="KEY VALUE overrides for every run, as table1 takes them")
    return p.parse_args(argv)


def _methods(text: str) -> List[str]:
    from argtca.experiments.plan import METHOD_SETS
    out: List[str] = []
    for name in [x.strip() for x in text.split(",") if x.strip()]:
        out += METHOD_SETS.get(name.lower(), [name])
    return list(dict.fromkeys(out))


def standin(ds: str, n: int, root: Path) -> Dict[str, object]:
    """The stand-in of ``ds``: its data root, attribute file, classes and image size (the demo:
    itself)."""
    from argtca.bench.data import make_synthetic_coop
    from argtca.report.reference import num_classes
    if ds == "demo":
        return {"dataset": "demo", "root": "", "attributes": None, "classes": 16,
                "image_size": [64, 64]}
    if ds not in R.IMAGE_SIZES or num_classes(ds) is None:
        raise SystemExit(f"[{TAG}] error: no stand-in for dataset {ds!r}; choose from "
                         f"{', '.join(sorted(R.IMAGE_SIZES))} or demo")
    k, size = int(num_classes(ds)), R.IMAGE_SIZES[ds]
    data = make_synthetic_coop(str(root / f"{ds}-{n}"), n, k, seed=k, pool=min(64, n), size=size)
    return {"dataset": ds, "root": data["root"], "attributes": data["attributes"], "classes": k,
            "image_size": list(size)}


def _run_opts(sd: Dict[str, object], n: int, opts: Sequence[str]) -> List[str]:
    quiet = ["VERBOSE", "False"]   # no progress bars; the bench prints a line per run
    if sd["dataset"] == "demo":   # its own CLIP and weights; a prefix of its test set
        return quiet + ["DATASET.NUM_IMAGES", str(n)] + list(opts)
    # the engine's size-dependent choices (the Jacobian of TPT's step, compilation) as in the
    # full run of the published test set, which the rates extrapolate to
    from argtca.report.reference import full_test_size
    full = full_test_size(str(sd["dataset"]))
    plan = ["TTA.FAST.AUTO_IMAGES", str(full)] if full else []
    return quiet + ["DATASET.ATTRIBUTE_FILE", str(sd["attributes"]), "MODEL.PRETRAINED",
                    "random", "TRAINER.RLCF.REWARD_PRETRAINED", "random"] + plan + list(opts)


def _specs(methods, sd, n, seed, out_root: Path, opts):
    from argtca.experiments.plan import RunSpec, split_method
    specs = []
    for name in methods:
        method, sel = split_method(name)
        s = RunSpec(method, "demo" if sd["dataset"] == "demo" else "caltech101", seed, None, sel,
                    _run_opts(sd, n, opts), label=f"{name} on the {sd['dataset']} stand-in",
                    out_root=out_root)
        specs.append((name, s))
    return specs


class OutOfTime(Exception):
    pass


def run_dataset(methods, sd, n, args, out_root: Path, on_row, deadline_at: float) -> None:
    """Every method on one stand-in through table1's runner; ``on_row(row)`` after each run."""
    from argtca.experiments.runner import execute
    from argtca.run import main as run_main
    named = _specs(methods, sd, n, args.seed, out_root, args.opts)
    by_argv = {tuple(s.argv(str(sd["root"]))): (name, s) for name, s in named}

    def runner(argv):
        if deadline_at and time.time() > deadline_at:
            raise OutOfTime()
        name, spec = by_argv[tuple(argv)]
        t0 = time.perf_counter()
        rc = run_main(argv)
        run_s = time.perf_counter() - t0
        if rc == 0 and spec.out is not None:
            on_row(row_of(name, sd, spec.out, run_s, args.opts))
        return rc

    execute([s for _, s in named], str(sd["root"]), tag=TAG, quiet=True, runner=runner)


def row_of(name: str, sd: Dict[str, object], out: Path, run_s: float,
           opts: Sequence[str] = ()) -> Dict[str, object]:
    """One rate row from a finished run folder; ``opts``: the bench's overrides of the run (its
    ``settings``: those that can change its speed)."""
    from argtca.config import get_cfg_default
    from argtca.engine.pipeline import loop_bound
    summary = json.loads((Path(out) / "summary.json").read_text())
    timing = summary.get("timing") or {}
    over = summary.get("overrides", {})
    views = str(over.get("TTA.VIEWS_DEVICE", get_cfg_default().TTA.VIEWS_DEVICE))
    device = "cuda" if str(summary.get("device", "cpu")).startswith("cuda") else "cpu"
    b = loop_bound(timing, device)
    row = {"method": name, "dataset": sd["dataset"], "backbone": summary.get("backbone"),
           "views": views, "device": device, "classes": sd["classes"],
           "image_size": sd["image_size"], "n": int(summary["n"]),
           "loop_s": float(timing.get("loop_s", 0.0)), "run_s": round(run_s, 3),
           **{k: timing.get(k) for k in R.PACE_KEYS},
           "first_batch_s": timing.get("first_batch_s"), "prepare_s": timing.get("prepare_s"),
           # the test images its size-dependent choices planned for (TTA.FAST.AUTO_IMAGES)
           "planned_images": int(over.get("TTA.FAST.AUTO_IMAGES", 0) or 0) or int(summary["n"]),
           "settings": R.settings(opts), "bound": b.get("bound"), "shares": b.get("shares"),
           "timing": {k: v for k, v in timing.items() if k.endswith("_s")}}
    return R.derive(row)


def table_sizes(datasets: Sequence[str]) -> Dict[str, int]:
    from argtca.report.reference import full_test_size
    return {d: (320 if d == "demo" else full_test_size(d)) for d in datasets
            if d == "demo" or full_test_size(d)}


def extrapolation(rows: Sequence[Dict[str, object]], seeds: int = R.TABLE_SEEDS
                  ) -> Dict[str, object]:
    """Per path (backbone, views) of ``rows``: the hours of the full table — Table 1's nine
    datasets at their published test sizes when any of them was measured, else the datasets
    measured (the demo: its 320 images) — per method and in total, ``seeds`` runs each; a
    dataset a method was not measured on takes that method's rate on the measured dataset of
    the nearest class count (listed under ``borrowed``)."""
    from argtca.experiments.plan import TABLE1_DATASETS
    from argtca.report.reference import num_classes
    out: Dict[str, object] = {}
    for path in sorted({_path(r) for r in rows}):
        backbone, views, sets = path
        mine = [r for r in rows if _path(r) == path]   # rows of other settings never mix
        opts = [x for kv in sets for x in kv.split("=", 1)]
        measured = list(dict.fromkeys(str(r["dataset"]) for r in mine))
        target = TABLE1_DATASETS if set(measured) & set(TABLE1_DATASETS) else measured
        sizes = table_sizes(target)
        table = R.RateTable("-", {"machine": {}, "rows": mine})
        per: Dict[str, float] = {}
        borrowed = []
        for m in dict.fromkeys(str(r["method"]) for r in mine):
            for d, n in sizes.items():
                k = 16 if d == "demo" else num_classes(d)
                e = table.estimate(m, d, backbone, views, n, k, opts)
                per[m] = per.get(m, 0.0) + seeds * float(e.seconds) / 3600
                if e.source:
                    borrowed.append([m, d, e.source])
        out[path_name(backbone, views, sets)] = {
            "datasets": {d: sizes[d] for d in sizes}, "seeds": seeds,
            "hours_per_method": {m: round(h, 4) for m, h in per.items()},
            "hours_total": round(sum(per.values()), 4), "borrowed": borrowed}
    return out


def _path(r: Dict[str, object]) -> tuple:
    return (str(r["backbone"]), str(r["views"]), tuple(r.get("settings", [])))


def per_method(rows: Sequence[Dict[str, object]]) -> List[Dict[str, object]]:
    """Per (method, path): images, loop img/s (all its images over all its loops), pace img/s
    (all its images over their seconds at the runs' paces, ``s_per_image``) and the bound most
    of its time had."""
    out: Dict[tuple, Dict[str, object]] = {}
    for r in rows:
        key = (r["method"],) + _path(r)
        a = out.setdefault(key, {"method": r["method"], "backbone": r["backbone"],
                                 "views": r["views"], "settings": list(r.get("settings", [])),
                                 "n": 0, "loop_s": 0.0, "pace_s": 0.0,
                                 "bounds": {}, "datasets": 0})
        a["n"] += int(r["n"])
        a["loop_s"] += float(r["loop_s"])
        a["pace_s"] += int(r["n"]) * float(r["s_per_image"])
        a["datasets"] += 1
        if r.get("bound"):
            a["bounds"][r["bound"]] = a["bounds"].get(r["bound"], 0.0) + float(r["loop_s"])
    res = []
    for a in out.values():
        a["loop_img_per_s"] = round(a["n"] / a["loop_s"], 2) if a["loop_s"] > 0 else None
        a["pace_img_per_s"] = round(a["n"] / a["pace_s"], 2) if a["pace_s"] > 0 else None
        a["bound"] = max(a["bounds"], key=a["bounds"].get) if a["bounds"] else "?"
        res.append(a)
    return res


def report_lines(data: Dict[str, object]) -> List[str]:
    m = data["machine"]
    load = (f", load average {m['load_avg'][0]} at the start, {m['load_avg_end'][0]} at the end"
            if m.get("load_avg") and m.get("load_avg_end") else "")
    lines = [f"machine: {m['card']}, {m['cores']} cores{load}, torch {m['torch']}, {m['date']}; "
             f"commit {data['commit']}"]
    for path, ex in data["extrapolation"].items():
        rows = [a for a in per_method(data["rows"])
                if path_name(a["backbone"], a["views"], a["settings"]) == path]
        ds = ex["datasets"]
        lines.append(f"{path}: hours of the full table = {len(ds)} dataset(s) "
                     f"({sum(ds.values())} test images) x {ex['seeds']} seeds")
        lines.append(f"{'method':<14}{'datasets':>9}{'images':>8}{'loop img/s':>12}"
                     f"{'pace img/s':>14}  {'bound':<15}{'hours':>8}")
        for a in rows:
            h = ex["hours_per_method"].get(a["method"], 0.0)
            lines.append(f"{a['method']:<14}{a['datasets']:>9}{a['n']:>8}"
                         f"{_num(a['loop_img_per_s']):>12}{_num(a['pace_img_per_s']):>14}  "
                         f"{a['bound']:<15}{h:>8.2f}")
        lines.append(f"{'total':<14}{'':>9}{'':>8}{'':>12}{'':>14}  {'':<15}"
                     f"{ex['hours_total']:>8.2f}")
        lines += R.borrowed_note(ex["borrowed"], len(rows))
    return lines


def path_name(backbone: str, views: str, sets: Sequence[str] = ()) -> str:
    return f"{backbone}, TTA.VIEWS_DEVICE {views}" + (f", {' '.join(sets)}" if sets else "")


def _num(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv=None) -> int:
    import torch
    args = parse_args(argv)
    opts = list(args.opts)
    if opts and opts[0] == "--":
        opts = opts[1:]
    from argtca.experiments.plan import TABLE1_DATASETS, ExperimentError, check_opts
    try:
        opts = check_opts(opts)
    except ExperimentError as e:
        print(f"[{TAG}] error: {e}", file=sys.stderr)
        return 2
    if args.cpu:
        opts += ["USE_CUDA", "False"]
    args.opts = opts
    on_cpu = args.cpu or not torch.cuda.is_available() or any(
        k == "USE_CUDA" and str(v).lower() == "false" for k, v in zip(opts[::2], opts[1::2]))
    machine = R.machine_info("cpu" if on_cpu else "cuda")
    methods = _methods(args.methods)
    datasets = args.datasets or list(TABLE1_DATASETS)
    out = Path(args.out) if args.out else R.rates_dir() / str(machine["file"])
    commit = args.commit or R.commit_of(R.PACKAGE.parent)
    command = "python -m argtca.bench table1 " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    old = None
    if out.is_file() and not args.replace:
        try:
            old = R.load(out)
        except ValueError as e:
            print(f"[{TAG}] error: {e}; or pass --replace", file=sys.stderr)
            return 2
        if old["machine"].get("card") != machine["card"]:
            print(f"[{TAG}] error: {out} holds rates of {old['machine'].get('card')}, this is "
                  f"{machine['card']}: name another --out, or --replace", file=sys.stderr)
            return 2
    t_start = time.time()
    deadline_at = t_start + args.deadline if args.deadline > 0 else 0.0
    tmp = Path(args.data_dir or tempfile.mkdtemp(prefix="argtca_bench_table1_"))
    new_rows: List[Dict[str, object]] = []
    data: Dict[str, object] = {}

    def save():
        nonlocal data
        if hasattr(os, "getloadavg"):
            machine["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
        fresh = {"machine": {k: v for k, v in machine.items() if k != "file"},
                 "commit": commit, "command": command,
                 "settings": {"images": args.images, "seed": args.seed, "opts": opts},
                 "rows": new_rows}
        data = R.merge(old, fresh)
        data["extrapolation"] = extrapolation(data["rows"])
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_name(out.name + ".tmp")
        tmp_out.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp_out, out)

    def on_row(row):
        row["commit"] = commit
        new_rows.append(row)
        save()
        print(f"[{TAG}] {row['method']} on {row['dataset']}: {row['n']} images, loop "
              f"{_num(row['loop_img_per_s'])} img/s, steady {_num(row['steady_img_per_s'])}, "
              f"later half {_num(row.get('late_img_per_s'))}, workers "
              f"{_num(row.get('workers_img_per_s'))}: pace {_num(1 / row['s_per_image'])}, "
              f"bound: {row['bound']}, run {row['run_s']:.1f} s",
              file=sys.stderr, flush=True)   # stderr: table1's runner hides a run's stdout

    print(f"[{TAG}] {len(methods)} method(s) x {len(datasets)} stand-in(s), {args.images} "
          f"images each, seed {args.seed}, on {machine['card']} ({machine['cores']} cores); "
          f"rates -> {out}", flush=True)
    try:
        if args.warmup > 0:
            sd = standin(datasets[0], args.warmup, tmp / "warmup")
            run_dataset(methods[:1], sd, args.warmup, args, tmp / "warmup_out",
                        lambda row: None, 0.0)
        for ds in datasets:
            sd = standin(ds, args.images, tmp)
            run_dataset(methods, sd, args.images, args, tmp / "out" / ds, on_row, deadline_at)
    except OutOfTime:
        print(f"[{TAG}] deadline of {args.deadline:.0f} s reached: no further run started",
              flush=True)
    except ExperimentError as e:
        print(f"[{TAG}] error: {e}", file=sys.stderr)
        return 2
    if not new_rows:
        print(f"[{TAG}] error: no run finished; nothing written", file=sys.stderr)
        return 1
    save()
    for line in report_lines(data):
        print(line)
    print(f"[{TAG}] wrote {out} ({len(new_rows)} new row(s), {len(data['rows'])} in all; "
          f"{time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
