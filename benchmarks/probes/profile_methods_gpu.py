"""Where a method's time goes on a CUDA device (issue 42, item 3): the CPU probe's run
(``profile_methods_cpu.py``: one ``python -m argtca.run`` in this process on a generated stand-in,
CLIP ViT-B/16 at random weights, RLCF's ViT-L/14 reward too, the method's defaults) on the GPU,
with a synchronising timer around each piece (``torch.cuda.synchronize()`` before and after: the
pieces' seconds are the GPU's and the host's together, and the run is slower than unprobed, since
nothing overlaps; read the shares). Pieces nest (a step contains its text tower).

    python benchmarks/probes/profile_methods_gpu.py METHOD [--classes 101] [--images 48]
        [--size 300x200] [--mode timers|trace|host] [KEY VALUE ...]

``--mode trace``: no timers; torch.profiler over the whole run (CPU and CUDA), then the kernels
by GPU time, the host's operators by their own CPU time, and the GPU's busy share of the loop
(kernel time summed over the loop's seconds): low means the GPU waits for the host.
``--mode host``: no timers; cProfile of the main process (what it does between the GPU's work:
the loader's hand-over, submission, records), by own time and by cumulative time.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

# (label, module, attribute path): wrapped where they exist
PIECES = [
    ("image features of all views (fast/features engine)", "argtca.engine.fast",
     "FastEngine.image_features"),
    ("text tower forward (PromptTextEncoder)", "argtca.models.text", "PromptTextEncoder.forward"),
    ("text tower forward, prefix-shared (PrefixSharedText)", "argtca.engine.text_tower",
     "PrefixSharedText.forward"),
    ("autograd backward", "torch.autograd", "backward"),
    ("autograd.grad", "torch.autograd", "grad"),
    ("reward image features (RewardCLIP)", "argtca.models.reward", "RewardCLIP.image_features"),
    ("fast engine: tune (all steps)", "argtca.engine.fast", "FastEngine._tune_async"),
    ("DynaPrompt: one image's step", "argtca.adapters.dynaprompt", "DynaPromptAdapter.step"),
    ("DynaPrompt: select_prompts", "argtca.adapters.dynaprompt", "select_prompts"),
    ("TTL: frozen prefix", "argtca.models.lora", "LoRATower.prefix"),
    ("TTL: adapted blocks (suffix)", "argtca.models.lora", "LoRATower.suffix"),
    ("TTL: adapt (steps)", "argtca.engine.lora", "LoRAEngine.adapt"),
]

TIMES = defaultdict(float)
CALLS = defaultdict(int)


def _sync():
    # never inside a CUDA graph's capture (the graphed text tower): a synchronize there breaks
    # the capture and the tower would run eagerly, not as the unprobed run does
    if torch.cuda.is_available() and not torch.cuda.is_current_stream_capturing():
        torch.cuda.synchronize()


def _wrap(label, fn):
    def timed(*a, **k):
        _sync()
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            _sync()
            TIMES[label] += time.perf_counter() - t0
            CALLS[label] += 1
    return timed


def _install():
    for label, mod, path in PIECES:
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        owner = m
        *parents, name = path.split(".")
        for p in parents:
            owner = getattr(owner, p, None)
        if owner is None or not hasattr(owner, name):
            continue
        setattr(owner, name, _wrap(label, getattr(owner, name)))


def _profiler(mode):
    if mode == "trace":
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available()
                                         else [])
        return profile(activities=acts)
    if mode == "host":
        import cProfile
        return cProfile.Profile()
    return contextlib.nullcontext()


def _print_trace(prof, loop: float, rows: int) -> None:
    ev = prof.key_averages()
    dev_attr = next((n for n in ("self_device_time_total", "self_cuda_time_total")
                     if hasattr(ev[0], n)), None) if len(ev) else None
    if dev_attr:
        kernels = sum(getattr(e, dev_attr) for e in ev) / 1e6
        print(f"  GPU busy (kernels and copies, all of the run): {kernels:.2f} s; "
              f"the loop {loop:.2f} s: at most {100 * kernels / max(loop, 1e-9):.0f} % busy")
        print(ev.table(sort_by=dev_attr, row_limit=rows,
                       max_name_column_width=60))
    print(ev.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60))


def _print_host(prof, rows: int) -> None:
    import pstats
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(rows)
        print("\n".join(buf.getvalue().splitlines()[6:]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("method")
    p.add_argument("--classes", type=int, default=101)
    p.add_argument("--images", type=int, default=48)
    p.add_argument("--size", default="300x200", help="stand-in image size WxH")
    p.add_argument("--mode", choices=["timers", "trace", "host"], default="timers")
    p.add_argument("--rows", type=int, default=22, help="rows of each trace/host table")
    p.add_argument("opts", nargs="*", help="KEY VALUE overrides")
    a = p.parse_intermixed_args(argv)
    from argtca.bench.data import make_synthetic_coop
    from argtca.experiments.plan import RunSpec, split_method
    from argtca.run import main as run_main
    if a.mode == "timers":
        _install()
    w, h = (int(x) for x in a.size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix="argtca_gprofile_"))
    data = make_synthetic_coop(str(tmp / "d"), a.images, a.classes, seed=a.classes,
                               pool=a.images, size=(w, h))
    method, sel = split_method(a.method)
    spec = RunSpec(method, "caltech101", 1, None, sel,
                   ["DATASET.ATTRIBUTE_FILE", data["attributes"], "MODEL.PRETRAINED", "random",
                    "TRAINER.RLCF.REWARD_PRETRAINED", "random", "VERBOSE", "False"]
                   + list(a.opts), out_root=tmp / "out")
    prof = _profiler(a.mode)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), prof:
        rc = run_main(spec.argv(data["root"]))
    wall = time.perf_counter() - t0
    if rc != 0:
        print(f"{a.method}: exit {rc}")
        return rc
    summary = json.loads(next((tmp / "out").rglob("summary.json")).read_text())
    timing = summary.get("timing", {})
    loop = timing.get("loop_s") or 0
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "the CPU"
    print(f"{a.method} on {dev}: K={a.classes}, {a.images} images "
          f"({w}x{h}); run {wall:.1f} s, loop {loop:.2f} s (synchronised timers: slower than "
          f"unprobed)")
    if torch.cuda.is_available():
        # the run's peak of tensors allocated, and of the caching allocator's reserve (what the
        # card must hold, CUDA graphs' private pools included)
        print(f"  peak GPU memory: {torch.cuda.max_memory_allocated() / 2 ** 30:.2f} GiB "
              f"allocated, {torch.cuda.max_memory_reserved() / 2 ** 30:.2f} GiB reserved")
    if a.mode == "trace":
        _print_trace(prof, loop, a.rows)
    elif a.mode == "host":
        _print_host(prof, a.rows)
    for label, _, _ in PIECES:
        if CALLS[label]:
            share = f" ({100 * TIMES[label] / loop:.0f} % of the loop)" if loop else ""
            print(f"  {label:52s} {TIMES[label]:8.2f} s  {CALLS[label]:6d} calls{share}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
