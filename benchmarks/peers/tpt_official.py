"""Run the official TPT script (github.com/azshue/TPT ``tpt_classification.py``) on the bench's
synthetic Caltech101 files with CLIP at random weights, offline, and time its test loop.

    python benchmarks/peers/tpt_official.py --tpt-src DIR --data ROOT [--workers 15] -- [TPT args]

``DIR``: a copy of the official repository's files (never committed here); ``ROOT``: the folder
``argtca.bench.data.make_synthetic_coop`` wrote. The script itself runs unchanged
(``runpy``, as ``__main__``); the patches, all applied from outside its files:

1. ``clip.load`` builds CLIP ViT-B/16 from a randomly initialised ``clip.model.CLIP`` through the
   official ``build_model`` (fp16 weights, as a downloaded checkpoint gets), logit scale 100
   (a trained CLIP's value, as argtca's bench), instead of downloading the checkpoint;
2. ``ftfy`` (tokenizer text clean-up; the class names are ASCII) is an identity stub when the
   package is missing, and ``pkg_resources.packaging`` the ``packaging`` package when setuptools
   no longer ships it;
3. the data: ``DIR/Caltech101`` links to the synthetic images and ``DIR/data/data_splits/
   split_zhou_Caltech101.json`` is the synthetic split (the script reads that relative path);
4. ``torch.utils.data.DataLoader`` is a subclass that timestamps its batches: **loop** = images /
   (from ``iter()``, the workers' start, to the last batch processed, CUDA synchronised),
   **steady** = the same after the first batch; ``wall_s``: the whole script (model, text,
   loop), as ``argtca.bench.zoo``'s ``wall_s`` of an ``argtca.run`` call. With ``T_SHELL``
   (``date +%s.%N`` just before ``python``): ``workers_fork_at_s`` and ``to_main_end_s``, seconds
   from the shell's start of the process to the workers' fork and to the script's end (the
   timeline of ``benchmarks/probes/e2e_timeline.py``; the shell times the exit).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import runpy
import shutil
import sys
import time
import types

T_PY = time.time()

def patch_imports():
    try:
        import ftfy  # noqa: F401
    except ImportError:
        sys.modules["ftfy"] = types.SimpleNamespace(fix_text=lambda s: s)
    try:
        from pkg_resources import packaging  # noqa: F401
    except ImportError:
        import packaging.version
        mod = types.ModuleType("pkg_resources")
        mod.packaging = packaging
        sys.modules["pkg_resources"] = mod


def random_load(name, device="cpu", jit=False, download_root=None):
    import torch
    import clip.clip as cc
    from clip.model import CLIP, build_model
    assert name == "ViT-B/16", name
    torch.manual_seed(0)
    m = CLIP(embed_dim=512, image_resolution=224, vision_layers=12, vision_width=768,
             vision_patch_size=16, context_length=77, vocab_size=49408, transformer_width=512,
             transformer_heads=8, transformer_layers=12)
    with torch.no_grad():
        m.logit_scale.fill_(math.log(100.0))
    model = build_model(m.state_dict()).to(device)
    if str(device) == "cpu":
        model.float()
    return model, 512, cc._transform(224)


TIMES = {}


def timed_loader_class():
    import torch
    from torch.utils.data import DataLoader

    class TimedLoader(DataLoader):
        def __iter__(self):
            TIMES["fork_at"] = time.time()
            t0 = time.perf_counter()
            n, first = 0, None
            for batch in super().__iter__():
                yield batch
                n += 1
                if first is None:
                    first = time.perf_counter()   # the first batch has been processed
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            end = time.perf_counter()
            TIMES.update(batches=n, loop_s=end - t0, first_batch_s=first - t0,
                         steady_s=end - first)
    return TimedLoader


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tpt-src", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--workers", type=int, default=15)
    p.add_argument("--out", default="")
    a, rest = p.parse_known_args()
    rest = [r for r in rest if r != "--"]
    src = os.path.abspath(a.tpt_src)
    data = os.path.abspath(a.data)
    os.makedirs(os.path.join(src, "data", "data_splits"), exist_ok=True)
    shutil.copy(os.path.join(data, "caltech-101", "split_zhou_Caltech101.json"),
                os.path.join(src, "data", "data_splits", "split_zhou_Caltech101.json"))
    link = os.path.join(src, "Caltech101")
    if os.path.islink(link):   # an earlier run's data set
        os.remove(link)
    os.symlink(os.path.join(data, "caltech-101", "101_ObjectCategories"), link)
    n_images = len(json.load(open(os.path.join(data, "caltech-101",
                                               "split_zhou_Caltech101.json")))["test"])
    os.chdir(src)
    sys.path.insert(0, src)
    patch_imports()
    import torch.utils.data
    torch.utils.data.DataLoader = timed_loader_class()
    import clip.clip
    import clip.custom_clip
    clip.clip.load = random_load
    clip.custom_clip.load = random_load
    sys.argv = ["tpt_classification.py", src, "--test_sets", "Caltech101", "-a", "ViT-B/16",
                "-b", "64", "--gpu", "0", "--tpt", "--ctx_init", "a_photo_of_a",
                "-j", str(a.workers), "-p", "100000"] + rest
    t0 = time.perf_counter()
    runpy.run_path(os.path.join(src, "tpt_classification.py"), run_name="__main__")
    wall = time.perf_counter() - t0
    t_end = time.time()
    n = n_images
    t_shell = float(os.environ.get("T_SHELL", T_PY))
    fork = TIMES.pop("fork_at")
    row = {"run": "official TPT (azshue/TPT)", "n": n, "workers": a.workers,
           "wall_s": round(wall, 2),
           "loop_img_s": round(n / TIMES["loop_s"], 2),
           "steady_img_s": round((n - 1) / TIMES["steady_s"], 2),
           "python_start_s": round(T_PY - t_shell, 3),
           "workers_fork_at_s": round(fork - t_shell, 3),
           "to_main_end_s": round(t_end - t_shell, 3), **TIMES}
    print("TPT-OFFICIAL " + json.dumps(row), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
