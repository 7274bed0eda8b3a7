"""TPT's natural-distribution-shift table (Shu et al., NeurIPS 2022, Table 1) as one command.

    python -m argtca.experiments shift [DATASET ...] [--methods ...] [--seeds 1,2,3] [--plan]
        [KEY VALUE ...]

ImageNet and its shift sets ImageNet-A, -V2, -R, -Sketch (TPT's I / A / V / R / K, in its column
order) by default; every method of table1 (the catalogue's default set), 3 seeds. -A and -R are
their 200-class subsets as TPT evaluates them: the readers (argtca/datasets/imagenet.py) expose
exactly those 200 classes, so every method's classifier has those prompts only (TPT's
``imagenet_a_mask`` / ``imagenet_r_mask``); the other three have ImageNet's 1000.

It is ``table1`` with these datasets (:func:`argtca.experiments.tables.table1`): the same
presence check (absent sets listed first), ``--plan`` (runs, images, GPU hours), preflight, run
folders (shared with table1's runs of the same settings), launcher, ``collect`` and report; the
report folder is ``<out-root>/report/shift-<hash>/`` and adds ``shift.md``/``shift.csv``: our
accuracy per method and set (mean ± std over seeds), the Average and the OOD Average (the four
shift sets) as TPT prints them, and TPT's published rows (zero-shot CLIP, TPT) beside ours,
cited per row (argtca/report/reference/paper_shift.csv).
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from ..report.reference import SHIFT_DATASETS, paper_shift
from .command import Command, split_list

__all__ = ["SHIFT_DATASETS", "shift", "shift_markdown", "write_shift_section"]

OOD = SHIFT_DATASETS[1:]    # TPT's "OOD Average": the four shift sets, without ImageNet
NAMES = {"imagenet": "ImageNet", "imagenet_a": "ImageNet-A", "imagenetv2": "ImageNet-V2",
         "imagenet_r": "ImageNet-R", "imagenet_sketch": "ImageNet-Sketch"}
PUBLISHED = ["CLIP-ViT-B/16", "TPT"]   # the rows of paper_shift.csv, in the paper's order


def check_distinct_sets(datasets: Sequence[str]) -> None:
    """A shift table compares different test sets: a set named twice (or two keys of one reader,
    whose data is then the same) would be a shift of nothing; one line naming it and the fix."""
    from .ood import ood_dataset_name
    from .plan import ExperimentError
    seen: Dict[str, str] = {}
    for ds in datasets:
        name = ood_dataset_name(ds)
        if name.lower() in seen:
            first = seen[name.lower()]
            same = "is named twice" if first == ds else f"reads the same set as {first} ({name})"
            raise ExperimentError(f"shift: {ds} {same}: a distribution shift compares different "
                                  f"test sets, and a set against itself shifts nothing; name "
                                  f"each set once")
        seen[name.lower()] = ds


def shift(datasets: Sequence[str] = (), methods: Sequence[str] = (), **kw) -> int:
    """``table1`` over the shift sets (or ``datasets``), with the shift section in the report."""
    from .tables import table1
    check_distinct_sets(datasets)
    return table1(datasets, methods=methods, tag="shift", defaults=SHIFT_DATASETS,
                  after=write_shift_section, **kw)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def shift_rows(paths: Sequence) -> Tuple[List[str], List[Tuple[str, str]],
                                         Dict[Tuple[str, str], Tuple[float, float, int]]]:
    """(our row labels, the datasets present as (key, the name table.md gives them), {(label,
    key): (mean, std, seeds)}) of the accuracy, from the run folders (the report's own grouping:
    one row per method and settings)."""
    from ..report.runs import find_runs
    from ..report.tables import group_runs
    labels, datasets, cells = group_runs(find_runs(list(paths), []))
    vals = {}
    for (lab, dk), c in cells.items():
        std = c.std("accuracy") if len(c.runs) > 1 else math.nan
        vals[(lab, dk)] = (c.mean("accuracy"), std, len(c.runs))
    return labels, list(datasets), vals


def _cell(mean: float, std: float = math.nan) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.2f} ± {std:.2f}" if not math.isnan(std) else f"{mean:.2f}"


def shift_markdown(paths: Sequence) -> Tuple[str, List[List[str]]]:
    """``shift.md`` (TPT's Table 1 layout: ours, then the published rows with their sources) and
    the rows of ``shift.csv`` (source, method, dataset, accuracy, std, seeds, citation).

    The sets are named as table.md names them. The Average column is there over several sets,
    the OOD Average where a shift set is; a published Average (over TPT's five sets) or OOD
    Average (its four shift sets) is shown only where our columns are those very sets, and a
    published row with no cell in our columns is left out: another set's table never carries
    a number of ImageNet's."""
    labels, datasets, vals = shift_rows(paths)
    keys = [k for k, _ in datasets]
    cols = [k for k in SHIFT_DATASETS if k in keys] + [k for k in keys if k not in SHIFT_DATASETS]
    names = dict(datasets)
    averages = [("Average", "average", len(cols) > 1),
                ("OOD Average", "ood_average", any(k in OOD for k in cols))]
    averages = [(title, key) for title, key, shown in averages if shown]
    head = (["Method", "Source"] + [names.get(k) or NAMES.get(k, k) for k in cols]
            + [title for title, _ in averages])
    what = {"average": "Average: over the sets of the row",
            "ood_average": "OOD Average: over the shift sets (-A, -V2, -R, -Sketch), as TPT "
                           "prints them"}
    said = "; ".join(what[k] for _, k in averages)
    md = ["# Natural distribution shifts (TPT's Table 1 layout)", "",
          "Top-1 accuracy (%), mean ± std over seeds." + (
              f" {said}; {'both' if len(averages) > 1 else 'only'} where the row has every "
              f"set." if averages else "")
, "",
          "| " + " | ".join(head) + " |",
          "|:---|:---|" + "|".join(["---:"] * (len(head) - 2)) + "|"]
    rows: List[List[str]] = []
    for lab in labels:
        means = {k: vals[(lab, k)][0] for k in cols if (lab, k) in vals}
        ours = {"average": _mean([means[k] for k in cols]) if len(means) == len(cols)
                else math.nan,
                "ood_average": (_mean([means[k] for k in OOD]) if all(k in means for k in OOD)
                                else math.nan)}
        cells = [_cell(*vals[(lab, k)][:2]) if (lab, k) in vals else "–" for k in cols]
        md.append(f"| {lab} | ours | " + " | ".join(cells + [_cell(ours[k]) for _, k in averages])
                  + " |")
        for k in cols:
            if (lab, k) in vals:
                m, s, n = vals[(lab, k)]
                rows.append(["ours", lab, k, f"{m:.4f}", "" if math.isnan(s) else f"{s:.4f}",
                             str(n), ""])
    ref = paper_shift()
    # a published average is over TPT's sets: shown only where our columns are those sets
    over = {"average": set(cols) == set(SHIFT_DATASETS), "ood_average": set(OOD) <= set(cols)}
    cites: List[str] = []
    notes: List[str] = []
    for name in PUBLISHED:
        got = {k: ref.get((name, "accuracy", k)) for k in cols}
        got.update({k: ref.get((name, "accuracy", k)) if over[k] else None
                    for _, k in averages})
        if not any(got[k] for k in cols):
            continue
        cit = next(v[1] for v in got.values() if v)
        if cit not in cites:
            cites.append(cit)
        for v in got.values():
            if v and v[2] and v[2] not in notes:
                notes.append(v[2])
        mark = f"[{cites.index(cit) + 1}]"
        shown = cols + [k for _, k in averages]
        cells = [f"{got[k][0]:.2f}" if got[k] else "–" for k in shown]
        md.append(f"| {name} | published {mark} | " + " | ".join(cells) + " |")
        rows += [["published", name, k, f"{got[k][0]:.4f}", "", "", got[k][1]]
                 for k in shown if got[k]]
    if cites:
        md[2] += (" Published rows: the TPT paper, CLIP ViT-B/16, on the full sets; ours are "
                  "comparable to them only with the same backbone and weights on the full sets "
                  "(see table.md's header).")
        md += ["", "Sources:"] + [f"[{i}] {c}" for i, c in enumerate(cites, 1)]
        md += [f"- note: {n}" for n in notes]
        md.append("- a published cell shown as – is not in the paper or could not be verified "
                  "(never filled in)")
    else:
        md += ["", "No published row: TPT's Table 1 has none of these sets."]
    return "\n".join(md) + "\n", rows


def write_shift_section(done: Sequence, out: Path) -> Dict[str, Path]:
    """``shift.md`` and ``shift.csv`` into the report folder ``out``."""
    text, rows = shift_markdown(done)
    (out / "shift.md").write_text(text)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["source", "method", "dataset", "accuracy", "std", "seeds", "citation"])
    w.writerows(rows)
    (out / "shift.csv").write_text(buf.getvalue())
    return {"shift.md": out / "shift.md", "shift.csv": out / "shift.csv"}


def _add_arguments(p) -> None:
    p.add_argument("--methods", default="", help="as for table1 (default all)")
    p.add_argument("--baseline-config", default=None, metavar="YAML",
                   help="as for table1: tuned.yaml of the tune command")
    p.add_argument("--plan", action="store_true", help="as for table1: the absent sets, then "
                   "the runs, test images and estimated time per set; run nothing")
    p.add_argument("--rates", default=None, metavar="JSON", help="as for table1")


def _run(args, datasets: List[str], common) -> int:
    return shift(datasets, methods=split_list(args.methods), baseline_config=args.baseline_config,
                 plan=args.plan, force=args.force, rates=args.rates, **common)


SHIFT_COMMAND = Command("shift", "TPT's distribution-shift table: every method on ImageNet and "
                        "-A, -V2, -R, -Sketch, over seeds, published numbers beside", "1,2,3",
                        _add_arguments, _run)
