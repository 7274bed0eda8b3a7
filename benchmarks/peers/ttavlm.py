"""Run TTA-VLM (github.com/TomSheng21/tta-vlm, the NeurIPS 2025 benchmark harness) on the bench's
synthetic Caltech101 files with CLIP at random weights, offline, and time its test loop.

    python benchmarks/peers/ttavlm.py --src DIR --data ROOT --algorithm tpt [--n 64] [--workers 15]

``DIR``: a copy of the repository's files (never committed here); ``ROOT``: the folder
``argtca.bench.data.make_synthetic_coop`` wrote; ``--n``: the first N test images of its split.
``instance_tta.py`` (episodic: tpt, zero, mta, tps, rtpt, ...; 64 views, ``-b 64``) or
``online_tta.py`` (online: tda, dmn, ...; ``-b 1``) runs unchanged (``runpy``, as ``__main__``)
with the arguments of its README. The patches, all applied from outside its files (those of
``tpt_official.py``, whose helpers this reuses):

1. ``clip.load`` builds CLIP ViT-B/16 at random weights (fp16, logit scale 100), as for the
   official TPT script;
2. ``ftfy`` / ``pkg_resources.packaging`` as there; ``info_nce`` (imported at the top of
   ``online_tta.py`` for DPE, which is not run here) is a stub when the package is missing;
3. the data: its hard-coded split path (``data.fewshot_datasets.path_dict["caltech101"]``) points
   to a copy of the synthetic split cut to N test images, and ``--data`` to a folder whose
   ``few-shot-datasets/caltech-101`` links to the synthetic files;
4. the timestamping ``DataLoader`` (loop = from ``iter()``, the workers' start, to the last batch
   processed; steady = after the first batch); ``wall_s``: the whole script.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpt_official import TIMES, patch_imports, random_load, timed_loader_class  # noqa: E402

ONLINE = {"tda", "dmn", "dmn_weak", "boostadapter", "dpe", "ecalp", "onzeta", "dynaprompt"}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--algorithm", required=True)
    p.add_argument("--n", type=int, default=0, help="first N test images (0: all)")
    p.add_argument("--workers", type=int, default=15)
    p.add_argument("--out", default="")
    a = p.parse_args()
    src = os.path.abspath(a.src)
    data = os.path.abspath(a.data)
    split = json.load(open(os.path.join(data, "caltech-101", "split_zhou_Caltech101.json")))
    if a.n:
        split["test"] = split["test"][:a.n]
    n_images = len(split["test"])
    work = tempfile.mkdtemp(prefix="ttavlm_")
    split_file = os.path.join(work, "split_zhou_Caltech101.json")
    json.dump(split, open(split_file, "w"))
    os.makedirs(os.path.join(work, "few-shot-datasets"))
    os.symlink(os.path.join(data, "caltech-101"),
               os.path.join(work, "few-shot-datasets", "caltech-101"))

    os.chdir(src)
    sys.path.insert(0, src)
    patch_imports()
    try:
        import info_nce  # noqa: F401
    except ImportError:
        sys.modules["info_nce"] = types.SimpleNamespace(InfoNCE=None)
    import torch.utils.data
    torch.utils.data.DataLoader = timed_loader_class()
    import clip.clip
    import clip.custom_clip
    clip.clip.load = random_load
    clip.custom_clip.load = random_load
    import data.fewshot_datasets as fd
    fd.path_dict["caltech101"] = [fd.path_dict["caltech101"][0], split_file]

    online = a.algorithm in ONLINE
    script = "online_tta.py" if online else "instance_tta.py"
    sys.argv = [script, "--data", work, "--test_sets", "Caltech101", "-a", "ViT-B/16",
                "-b", "1" if online else "64", "--gpu", "0", "--ctx_init", "a_photo_of_a",
                "-p", "100000", "-j", str(a.workers), "--algorithm", a.algorithm,
                "--output_dir", os.path.join(work, "out")]
    t0 = time.perf_counter()
    runpy.run_path(os.path.join(src, script), run_name="__main__")
    wall = time.perf_counter() - t0
    row = {"run": f"TTA-VLM {a.algorithm}", "n": n_images, "workers": a.workers,
           "wall_s": round(wall, 2), "loop_img_s": round(n_images / TIMES["loop_s"], 2),
           "steady_img_s": round((n_images - 1) / TIMES["steady_s"], 2), **TIMES}
    print("TTAVLM " + json.dumps(row), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
