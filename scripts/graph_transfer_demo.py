"""How close does one transferred graph get to per-dataset training? (TRAINER.ARGTCA.GAT.TRAIN_ON)

    python scripts/graph_transfer_demo.py [--out output/transfer_demo] [--tca-dir DIR] [--seed 1]
                                          [KEY VALUE ...]

Runs ArgTCA (div) on the embedded demo three ways and compares them:

* ``per-dataset``: the paper's Phase 1 (GAT trained on the demo's own graph);
* ``held-out``: GAT trained on the demo vocabulary of the first half of its classes only (a file
  written to the output folder), then applied frozen to all 16 classes — the 8 others are classes
  the GAT never saw;
* ``tca-files`` (with ``--tca-dir``, e.g. ../shared/data/tca_attributes): GAT trained on the TCA
  authors' files of real datasets (ImageNet and SUN397 left out to keep it CPU-sized), applied to
  the demo. The demo CLIP was trained on demo captions only, so real-world words mostly reach it as
  untrained token rows: this variant measures transfer across vocabularies through a text encoder
  that does not know them, not what ViT-B/16 would do.

Prints per-class Jaccard overlap of the selected attributes against per-dataset (mean over all,
seen and unseen classes) and each run's accuracy / ECE, and writes ``transfer.json``. Extra KEY
VALUE pairs go to every run (e.g. ``TTA.ENGINE fast``).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)   # argtca from this checkout, installed or not
SKIP_TCA = ("ImageNet_2_V.json", "SUN397_2_V.json")


def jaccard(a, b) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def run(name, out, seed, train_on, opts):
    from argtca.run import main
    folder = os.path.join(out, name)
    args = ["--seed", str(seed), "--output-dir", folder,
            "--dataset-config-file", os.path.join(REPO, "configs/datasets/demo.yaml"),
            "--config-file", os.path.join(REPO, "configs/trainers/argtca.yaml"),
            "TRAINER.ARGTCA.SELECTOR", "div"] + list(opts)
    if train_on:
        args += ["TRAINER.ARGTCA.GAT.TRAIN_ON", repr(list(train_on))]
    rc = main(args)
    if rc != 0:
        sys.exit(f"error: the {name} run failed (exit {rc}); see {folder}")
    with open(os.path.join(folder, "phase1.json")) as f:
        p1 = json.load(f)
    with open(os.path.join(folder, "summary.json")) as f:
        s = json.load(f)
    return {"selected": p1["selected"], "accuracy": s["accuracy"], "ece": s["ece"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="output/transfer_demo")
    ap.add_argument("--tca-dir", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("opts", nargs="*")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(REPO, "argtca/demo/assets/demo_attributes.json")) as f:
        vocab = json.load(f)
    classes = list(vocab)
    seen = classes[: len(classes) // 2]
    half = os.path.abspath(os.path.join(a.out, "demo_first_half.json"))
    with open(half, "w") as f:
        json.dump({c: vocab[c] for c in seen}, f, indent=1)
    runs = {"per-dataset": run("per-dataset", a.out, a.seed, [], a.opts),
            "held-out": run("held-out", a.out, a.seed, [half], a.opts)}
    if a.tca_dir:
        files = sorted(p for p in glob.glob(os.path.join(a.tca_dir, "*.json"))
                       if os.path.basename(p) not in SKIP_TCA)
        if not files:
            sys.exit(f"error: --tca-dir {a.tca_dir}: no TCA attribute files (*.json) there")
        runs["tca-files"] = run("tca-files", a.out, a.seed, [os.path.abspath(p) for p in files],
                                a.opts)
    ref = runs["per-dataset"]["selected"]
    rows = []
    for name, r in runs.items():
        j = {c: jaccard(r["selected"][c], ref[c]) for c in classes}
        mean = lambda cs: sum(j[c] for c in cs) / len(cs)  # noqa: E731
        rows.append({"run": name, "jaccard_all": mean(classes), "jaccard_seen": mean(seen),
                     "jaccard_unseen": mean([c for c in classes if c not in seen]),
                     "accuracy": r["accuracy"], "ece": r["ece"], "per_class": j})
    with open(os.path.join(a.out, "transfer.json"), "w") as f:
        json.dump({"seen_classes": seen, "rows": rows,
                   "selected": {n: r["selected"] for n, r in runs.items()}}, f, indent=1)
    print(f"{'run':12} {'Jaccard all':>11} {'seen':>6} {'unseen':>7} {'Acc':>7} {'ECE':>7}")
    for r in rows:
        print(f"{r['run']:12} {r['jaccard_all']:11.3f} {r['jaccard_seen']:6.3f} "
              f"{r['jaccard_unseen']:7.3f} {r['accuracy']:7.2f} {r['ece']:7.2f}")
    print(f"(seen = the {len(seen)} classes of {half}; Jaccard against per-dataset's picks)")


if __name__ == "__main__":
    main()
