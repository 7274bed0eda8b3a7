"""Where a method's time goes on the CPU (issue 42, item 3's first step): one method through
``python -m argtca.run`` in this process under cProfile, on a generated stand-in (K classes,
``make_synthetic_coop``), CLIP ViT-B/16 at random weights (RLCF's ViT-L/14 reward too), the
method's defaults. Prints the loop's seconds and the cumulative seconds of the pieces a method
spends them in: the image tower (the policy's and the reward model's), the text tower (forward;
its backward is inside ``backward``), autograd's backward, the optimizer, the views loader.

    python benchmarks/probes/profile_methods_cpu.py METHOD [--classes 10] [--images 2]
        [KEY VALUE ...]
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import tempfile
import time
from pathlib import Path

# (label, substring of "file:line(function)" in pstats' keys); first match per label
PIECES = [
    ("image tower (open_clip VisionTransformer.forward)", "open_clip/transformer.py", "forward",
     "VisionTransformer"),
    ("text tower forward (PromptTextEncoder.forward)", "argtca/models/text.py", "forward", ""),
    ("autograd backward (run_backward)", "torch/autograd/__init__.py", "backward", ""),
    ("autograd.grad", "torch/autograd/__init__.py", "grad", ""),
    ("optimizer step", "torch/optim/optimizer.py", "wrapper", ""),
    ("reward image features (RewardCLIP.image_features)", "argtca/models/reward.py",
     "image_features", ""),
    ("views: waiting for the next item", "argtca/views/loader.py", "_next", ""),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("method")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--size", default="64x64", help="stand-in image size WxH")
    p.add_argument("opts", nargs="*", help="KEY VALUE overrides")
    a = p.parse_intermixed_args(argv)
    from argtca.bench.data import make_synthetic_coop
    from argtca.experiments.plan import RunSpec, split_method
    from argtca.run import main as run_main
    w, h = (int(x) for x in a.size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix="argtca_profile_"))
    data = make_synthetic_coop(str(tmp / "d"), a.images, a.classes, seed=a.classes,
                               pool=a.images, size=(w, h))
    method, sel = split_method(a.method)
    spec = RunSpec(method, "caltech101", 1, None, sel,
                   ["DATASET.ATTRIBUTE_FILE", data["attributes"], "MODEL.PRETRAINED", "random",
                    "TRAINER.RLCF.REWARD_PRETRAINED", "random", "VERBOSE", "False",
                    "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False"] + list(a.opts),
                   out_root=tmp / "out")
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        prof.enable()
        rc = run_main(spec.argv(data["root"]))
        prof.disable()
    wall = time.perf_counter() - t0
    if rc != 0:
        print(f"{a.method}: exit {rc}")
        return rc
    summary = json.loads(next((tmp / "out").rglob("summary.json")).read_text())
    timing = summary.get("timing", {})
    st = pstats.Stats(prof)
    print(f"{a.method}: K={a.classes}, {a.images} images ({w}x{h}); run {wall:.1f} s, loop "
          f"{timing.get('loop_s')} s ({timing.get('loop_s', 0) / a.images:.1f} s an image)")
    for label, file_part, func, cls in PIECES:
        best = None
        for (f, line, fn), (cc, nc, tt, ct, callers) in st.stats.items():
            if file_part in f and fn == func:
                if cls and not _in_class(f, line, cls):
                    continue
                if best is None or ct > best[1]:
                    best = (nc, ct)
        if best:
            print(f"  {label:58s} {best[1]:8.1f} s  ({best[0]} calls)")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats("argtca/", 25)
    print("\n".join(out.getvalue().splitlines()[-32:]))
    return 0


def _in_class(path: str, line: int, cls: str) -> bool:
    """Whether ``path``'s function at ``line`` is defined inside class ``cls``."""
    lines = open(path).read().splitlines()
    for i in range(line - 1, -1, -1):
        s = lines[i]
        if s.startswith("class "):
            return s[6:].startswith(cls)
    return False


if __name__ == "__main__":
    raise SystemExit(main())
