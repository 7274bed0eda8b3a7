"""Measured per-method rates of the whole-table benchmark (``python -m argtca.bench table1``) and
the arithmetic that turns them into the cost of a table: written by the benchmark, read by
``table1 --plan`` (and the launchers' ``--dry-run``).

A rate file (``benchmarks/rates/<machine>.json``; a wheel carries a copy as ``argtca/rates``)
holds one machine's measurements: the card (or ``cpu``), its cores, the commit measured, and one
row per (method, dataset, backbone, views path) with the run's clock (``summary.json["timing"]``)
and the whole in-process run's seconds. From a row:

* ``s_per_image``: seconds per image at the pace a long run keeps, the slowest of the rates
  the run measured (:func:`argtca.engine.pipeline.loop_timing`): after the first batch
  (``steady_img_per_s``), over its later half (``late_img_per_s``) and what its views workers
  can make (``workers_img_per_s``). A short run's steady rate alone can be the pace at which the
  engine used up the views the workers made ahead during the first batch, not a pace the
  workers keep; a run too short for any rate, one batch, uses its loop's ``loop_s / n``;
* ``fixed_s``: what a run costs besides its images at that rate (model built, per-dataset work,
  the first batch's latency, metrics): ``run_s - n * s_per_image``, at least 0;
* a run of ``N`` images then takes ``fixed_s + N * s_per_image`` (:func:`run_seconds`).
"""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from argtca.config.paths import PACKAGE

# Typical image size (width, height) of each Table 1 dataset, for its stand-in: the views' CPU
# work (JPEG decoding, TPT's RandomResizedCrop on the full image) grows with it. From the datasets'
# own descriptions: Caltech101 "roughly 300 x 200 pixels"; Food-101 "rescaled to have a maximum
# side length of 512"; FGVC-Aircraft "about 1-2 Mpixels" (the low end); DTD "between 300x300 and
# 640x640"; EuroSAT 64 x 64; UCF101's frames 320 x 240; Oxford Pets, Stanford Cars and Oxford
# Flowers (smaller side 500) at their common sizes. Classes and test sizes: the published splits
# (argtca/report/reference/test_splits.csv).
IMAGE_SIZES: Dict[str, Tuple[int, int]] = {
    "caltech101": (300, 200), "oxford_pets": (500, 375), "stanford_cars": (700, 480),
    "oxford_flowers": (667, 500), "food101": (512, 384), "fgvc_aircraft": (1200, 800),
    "dtd": (500, 500), "eurosat": (64, 64), "ucf101": (320, 240),
    "imagenet": (500, 375), "sun397": (600, 450)}
# the seeds of the paper's Table 1: the extrapolation's runs per (method, dataset)
TABLE_SEEDS = 3
# the key of a row: which run it measured
KEY = ("method", "dataset", "backbone", "views")


def rates_dir() -> Path:
    """Where the rate files are (:func:`argtca.config.paths.rates_dir`)."""
    from argtca.config import paths
    return paths.rates_dir()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def machine_info(device: str) -> Dict[str, object]:
    """The machine a benchmark runs on: ``device`` ("cuda" / "cpu"), the card, the cores that
    this process may use, torch's version, the date, the host's load average (1, 5, 15 min) when
    it starts and the file name it is stored under."""
    import torch
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info: Dict[str, object] = {"device": device, "cores": int(cores or 1),
                               "torch": torch.__version__,
                               "date": datetime.date.today().isoformat()}
    if hasattr(os, "getloadavg"):   # other work on the host slows what is measured: kept with it
        info["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    if device == "cuda":
        info["card"] = torch.cuda.get_device_name()
        info["file"] = f"{slug(info['card'])}.json"
    else:
        info["card"] = "cpu"
        info["file"] = f"cpu-{info['cores']}cores.json"
    return info


def commit_of(repo: Path) -> str:
    """The checkout's commit (short hash, ``+dirty`` when files differ from it), or ``unknown``."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        from argtca.config.paths import configs_dir
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--",
                                str(PACKAGE), str(configs_dir())],
                               capture_output=True, text=True, timeout=30)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ----------------------------------------------------------------------------- the arithmetic
# the rates of a run's timing a long run's pace is the slowest of (derive)
PACE_KEYS = ("steady_img_per_s", "late_img_per_s", "workers_img_per_s")


def derive(row: Dict[str, object]) -> Dict[str, object]:
    """``row`` (``n``, ``loop_s``, ``run_s`` and any of ``steady_img_per_s``,
    ``late_img_per_s``, ``workers_img_per_s``) with its ``loop_img_per_s``, ``s_per_image`` and
    ``fixed_s`` (see the module's docstring)."""
    n, loop = int(row["n"]), float(row["loop_s"])
    rates = [float(row[k]) for k in PACE_KEYS if row.get(k)]
    per = 1.0 / min(rates) if rates else loop / n
    out = dict(row)
    out["loop_img_per_s"] = round(n / loop, 3) if loop > 0 else None
    out["s_per_image"] = per
    out["fixed_s"] = max(0.0, float(row["run_s"]) - n * per)
    return out


def run_seconds(row: Dict[str, object], n_images: int) -> float:
    """Seconds of one run of ``n_images`` images at ``row``'s measured rate."""
    return float(row["fixed_s"]) + int(n_images) * float(row["s_per_image"])


# ----------------------------------------------------------------------------- the files
def load(path) -> Dict[str, object]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise ValueError(f"rate file {p}: cannot be read ({e.strerror}); write it with "
                         f"python -m argtca.bench table1, or name another with --rates") from None
    except ValueError as e:
        raise ValueError(f"rate file {p}: not JSON ({e}); write it again with python -m "
                         f"argtca.bench table1") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) \
            or not isinstance(data.get("machine"), dict):
        raise ValueError(f"rate file {p}: no 'machine' and 'rows' (not a file of python -m "
                         f"argtca.bench table1); write it again with that command")
    for r in data["rows"]:
        missing = [k for k in KEY + ("n", "s_per_image", "fixed_s") if k not in r]
        if missing:
            raise ValueError(f"rate file {p}: a row lacks {', '.join(missing)} ({r}); write it "
                             f"again with python -m argtca.bench table1")
    return data


def merge(old: Optional[Dict[str, object]], new: Dict[str, object]) -> Dict[str, object]:
    """``new``'s rows over ``old``'s (a row of the same method, dataset, backbone, views and
    settings is replaced; the others kept, each with the commit that measured it)."""
    if not old:
        return new
    def key(r):
        return tuple(r[k] for k in KEY) + tuple(r.get("settings", []))
    ours = {key(r) for r in new["rows"]}
    kept = [r for r in old.get("rows", []) if key(r) not in ours]
    out = dict(new)
    out["rows"] = kept + list(new["rows"])
    return out


def methods_named(ms: Sequence[str], n_methods: int) -> str:
    """``ms`` (duplicates dropped) as a plan's note names them: "every method" when they are all
    ``n_methods`` of the plan."""
    ms = list(dict.fromkeys(ms))
    return "every method" if len(ms) == n_methods else ", ".join(ms)


def borrowed_note(borrowed: Sequence[Sequence[str]], n_methods: int) -> List[str]:
    """The (method, dataset, source) estimated from another dataset's rate
    (:meth:`RateTable.estimate`), one line per source and set of datasets."""
    by: Dict[tuple, List[str]] = {}
    for m, d, src in borrowed:
        by.setdefault((d, src), []).append(m)
    groups: Dict[tuple, List[str]] = {}
    for (d, src), ms in by.items():
        who = methods_named(ms, n_methods)
        groups.setdefault((src, who), []).append(d)
    return [f"not measured on {', '.join(ds)} ({who}): {src}'s rate used (the measured dataset "
            f"nearest in classes)" for (src, who), ds in groups.items()]


# overrides that are not settings of the measured runs' speed: the row's key has the views path
# and backbone, a plan caps its images itself, and the rest only say where things are
NOT_SETTINGS = ("TTA.VIEWS_DEVICE", "MODEL.BACKBONE.NAME", "USE_CUDA", "DATASET.NUM_IMAGES",
                "VERBOSE", "DATASET.ROOT", "DATASET.ATTRIBUTE_FILE", "OUTPUT_ROOT", "OUTPUT_DIR",
                "MODEL.PRETRAINED", "TRAINER.RLCF.REWARD_PRETRAINED", "DATALOADER.NUM_WORKERS",
                "TTA.FAST.AUTO_IMAGES")


def settings(opts: Sequence[str]) -> List[str]:
    """The ``KEY VALUE`` overrides among ``opts`` that can change a run's speed (the last value of
    a key wins), as sorted ``KEY=VALUE`` words: what a row was measured with (``settings``) and
    what a plan's runs use, so rates of other settings are told apart."""
    last: Dict[str, str] = {}
    for k, v in zip(list(opts)[::2], list(opts)[1::2]):
        if k not in NOT_SETTINGS:
            last[str(k)] = str(v).replace(" ", "")
    return sorted(f"{k}={v}" for k, v in last.items())


@dataclass
class Estimate:
    seconds: Optional[float]   # None: no rate of this method on this path
    source: str = ""           # "" measured on this dataset, else the dataset whose rate is used
    other_settings: Optional[List[str]] = None   # the row's settings, where they are not these
    short_planned: bool = False   # a GPU row whose run planned for its own few images (below)
    steady_only: bool = False     # a GPU row without its pace's other rates (steady_only)


def planned_short(row: Dict[str, object]) -> bool:
    """Whether ``row`` was measured on the GPU by a run whose size-dependent choices planned
    for its own few images, not its dataset's published test size (rows of the benchmark before
    ``TTA.FAST.AUTO_IMAGES``; a full run of >= 2048 images takes TPT's step 1 by the Jacobian
    at θ0, such a short run by a VJP)."""
    if row.get("device") != "cuda":
        return False   # the CPU's choices do not depend on the run's size
    from argtca.report.reference import full_test_size
    full = full_test_size(str(row.get("dataset", "")))
    planned = int(row.get("planned_images") or row.get("n") or 0)
    return bool(full) and planned < full


def steady_only(row: Dict[str, object]) -> bool:
    """Whether ``row`` was measured on the GPU before the pace (:func:`derive`) took the later
    half's and the views workers' rates: its steady rate alone, which a short run can measure
    while the engine uses up the views the workers made ahead during the first batch."""
    return row.get("device") == "cuda" and not any(k in row for k in PACE_KEYS[1:])


class RateTable:
    """One rate file, for estimating planned runs."""

    def __init__(self, path, data: Optional[Dict[str, object]] = None):
        self.path = Path(path)
        self.data = data if data is not None else load(self.path)
        self.machine: Dict[str, object] = dict(self.data["machine"])
        self.rows: List[Dict[str, object]] = list(self.data["rows"])

    def estimate(self, method: str, dataset: str, backbone: str, views: str, images: int,
                 classes: Optional[int] = None, opts: Sequence[str] = ()) -> Estimate:
        """Seconds of one run of ``method`` on ``dataset`` (``images`` test images) on this
        path under the overrides ``opts``; where the dataset was not measured, the same
        method's rate on the measured dataset of the nearest class count (``source`` names it).
        Rows measured with the same :func:`settings` are preferred; where there are none, rows
        of other settings serve and ``other_settings`` says which."""
        same = [r for r in self.rows if r["method"] == method and r["backbone"] == backbone
                and r["views"] == views]
        if not same:
            return Estimate(None)
        want = settings(opts)
        mine = [r for r in same if list(r.get("settings", [])) == want]
        other = None
        if not mine:
            mine, other = same, list(same[-1].get("settings", []))
        exact = [r for r in mine if r["dataset"] == dataset]
        if exact:
            return Estimate(run_seconds(exact[-1], images), "", other, planned_short(exact[-1]),
                            steady_only(exact[-1]))
        k = classes or 0
        near = min(mine, key=lambda r: (abs(int(r.get("classes") or 0) - k),
                                        -int(r.get("classes") or 0)))
        return Estimate(run_seconds(near, images), str(near["dataset"]), other,
                        planned_short(near), steady_only(near))

    def describe(self) -> str:
        m = self.machine
        ns = sorted({int(r["n"]) for r in self.rows})
        n = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}" if ns else "?"
        commits = sorted({str(r.get("commit", self.data.get("commit", "?"))) for r in self.rows})
        return (f"{display_path(self.path)} ({m.get('card')}, {m.get('cores')} cores, commit "
                f"{', '.join(commits) or '?'}, {m.get('date')}; {n} images per method and "
                f"dataset)")


def display_path(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(PACKAGE.parent))
    except ValueError:
        return str(p)


def choose(device: str, given: Optional[str] = None, card: str = "",
           cores: Optional[int] = None) -> Tuple[Optional[RateTable], str]:
    """The rate file for a machine of ``device`` ("cuda" / "cpu"; the card's name, the
    cores): ``given``, else the stored file measured on this card (on the CPU: with these
    cores), else another of the same device (the note says so), else none (the note says how
    to make one). Returns (table or None, note)."""
    if given:
        return RateTable(given), ""
    folder = rates_dir()
    found = []
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            t = RateTable(f)
        except ValueError:
            continue
        if t.machine.get("device") == device:
            found.append(t)
    if not found:
        what = "this card" if device == "cuda" else "a CPU"
        return None, (f"no measured rates for {what} in {display_path(folder)}: measure them "
                      f"with python -m argtca.bench table1 (or name a file with --rates)")
    if device == "cuda":
        mine = [t for t in found if t.machine.get("card") == card]
        if mine:
            return mine[0], ""
        t = found[0]
        return t, f"rates measured on {t.machine.get('card')}, not on this machine's {card}"
    mine = [t for t in found if t.machine.get("cores") == cores]
    if mine:
        return mine[0], ""
    t = min(found, key=lambda t: abs(int(t.machine.get("cores") or 0) - int(cores or 0)))
    return t, f"rates measured on {t.machine.get('cores')} CPU cores, this machine has {cores}"
