"""GPU time of the GPU view maker, the per-op oracle (tests/oracles) vs the fused maker, on one
random batch.

    python3 benchmarks/probes/bench_gpu_views.py [--images 16] [--views 64] [--size 224]
                                                 [--iters 20] [--no-compile]

Builds a ``collate_gpu_views``-shaped batch (random pixels, random crops/flips/AugMix plans of
TPT's shape: 3 chains of depth 1-3, all 9 ops) on CUDA and prints, per maker variant: the time
per batch and per image over ``--iters`` calls after warm-up (CUDA events), the summed kernel
time of one call (torch.profiler) and its kernel count, and the difference to the reference
views on this device (float16 work dtype: within its rounding; float32: bit for bit expected
where the arithmetic is the same). Imports only ``argtca.views.gpu`` and what it imports
(no open_clip). On a machine without CUDA it runs the same on the CPU (slow).
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root

import torch  # noqa: E402

from argtca.views.cpu import ViewGenerator  # noqa: E402
from argtca.views.gpu import GpuViewMaker  # noqa: E402
from tests.oracles.gpu_views_reference import ReferenceGpuViewMaker, random_view_batch  # noqa: E402


def timed(fn, batch, iters, dev):
    for _ in range(3):
        out = fn(batch)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn(batch)
        b.record()
        torch.cuda.synchronize()
        return out, a.elapsed_time(b) / iters
    t = time.perf_counter()
    for _ in range(iters):
        fn(batch)
    return out, (time.perf_counter() - t) * 1000 / iters


def kernel_time(fn, batch, dev, top=0):
    """Summed device time (ms) and number of device kernels of one call; optionally the top
    kernels by time."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn(batch)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    if dev.type != "cuda":
        return float("nan"), 0, ""
    kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in kern) / 1000
    table = ""
    if top:
        agg = {}
        for e in kern:
            n, t = agg.get(e.name, (0, 0.0))
            agg[e.name] = (n + 1, t + e.device_time / 1000)
        rows = sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]
        table = "\n".join(f"      {t:7.3f} ms  x{n:<3d} {name[:110]}" for name, (n, t) in rows)
    return total, len(kern), table


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument("--views", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    B, V, S = args.images, args.views, args.size
    print(f"torch {torch.__version__}; device: "
          f"{torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'cpu'}; "
          f"batch {B} images x {V} views, {S}x{S}, AugMix 3 chains of depth 1-3")
    vg = ViewGenerator(size=S, n_views=V, augmix=True)
    batch = random_view_batch(B, V, S, seed=0, device=dev)

    ref = ReferenceGpuViewMaker(vg)
    want, ms = timed(ref, batch, args.iters, dev)
    kt, nk, table = kernel_time(ref, batch, dev, top=12)
    print(f"reference           : {ms:7.2f} ms/batch {ms / B:6.3f} ms/image (events); "
          f"kernels {kt:7.2f} ms/batch {kt / B:6.3f} ms/image, {nk} kernels")
    print(table)

    # float32 work dtype, the reference's grid and mixing arithmetic: bit for bit on this device
    try:
        r32 = ReferenceGpuViewMaker(vg, work_dtype=torch.float32)(batch)
        n32m = GpuViewMaker(vg, work_dtype=torch.float32)
        n32m.fold_mix = ""
        n32m.exact_grid = True
        n32 = n32m(batch)
        d = (n32 - r32).abs()
        print(f"float32 work dtype, exact grid + mixing, vs reference float32: bit-identical "
              f"{torch.equal(n32, r32)}, max |d| {d.max().item():.2e}, share differing "
              f"{(d > 0).float().mean().item():.2e}")
    except Exception as e:
        print(f"float32 check FAILED {type(e).__name__}: {e}")

    variants = [("fused (default)", GpuViewMaker(vg), 14)]
    for fold, name in (("tmp", "fused, mix via tmp"), ("", "fused, exact mixing")):
        mk = GpuViewMaker(vg)
        mk.fold_mix = fold
        variants.append((name, mk, 0))
    variants.append(("fused, float32 warps", GpuViewMaker(vg, work_dtype=torch.float32), 6))
    if not args.no_compile and dev.type == "cuda":
        mix_only = GpuViewMaker(vg, compile=True)
        mix_only._compiled_lut = mix_only._compiled_warp = False
        variants.append(("compiled mix", mix_only, 0))
        mix_lut = GpuViewMaker(vg, compile=True)
        mix_lut._compiled_warp = False
        variants.append(("compiled mix + LUT", mix_lut, 0))
        variants.append(("compiled all", GpuViewMaker(vg, compile=True), 12))
    for name, maker, top in variants:
        try:
            t0 = time.perf_counter()
            maker(batch)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            first = time.perf_counter() - t0
            got, ms = timed(maker, batch, args.iters, dev)
            kt, nk, table = kernel_time(maker, batch, dev, top=top)
            d = (got - want).abs()
            print(f"{name:20s}: {ms:7.2f} ms/batch {ms / B:6.3f} ms/image (events); kernels "
                  f"{kt:7.2f} ms/batch {kt / B:6.3f} ms/image, {nk} kernels; first call "
                  f"{first:.1f} s; vs reference: max |d| {d.max().item():.4f}, mean "
                  f"{d.mean().item():.2e}, share > 0.01: {(d > 0.01).float().mean().item():.2e}")
            if table:
                print(table)
        except Exception as e:   # report and go on with the other variants
            print(f"{name:20s}: FAILED {type(e).__name__}: {e}")

    try:
        from torch._dynamo.utils import counters
        print("dynamo:", {k: dict(v) for k, v in counters.items() if k in ("stats", "recompiles")})
    except Exception:
        pass


if __name__ == "__main__":
    main()
