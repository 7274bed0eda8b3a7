"""Where the host's time goes in the test loop (GPU views, fast engine): cProfile of the main
thread over one bench pass.
Usage: [EAGER=1] python benchmarks/probes/profile_loop.py [N_IMAGES] [VIEWS]"""
import cProfile
import os
import pstats
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from argtca.bench import setup as bench  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 768
    views = sys.argv[2] if len(sys.argv) > 2 else "gpu"
    args, dev, s = bench.script_setup(n)
    on = dev.type == "cuda" and os.environ.get("EAGER", "0") != "1"   # EAGER=1: the CLI's default
    kw = dict(compile_image=on, compile_text=on, grad_mode="jacobian")
    bench.warmup(s, kinds=("fast",), **kw)
    bench.run_pass(s, "fast", views, min(n, 128), **kw)          # loader/engine warm
    prof = cProfile.Profile()
    prof.enable()
    row = bench.run_pass(s, "fast", views, n, **kw)
    prof.disable()
    print(row)
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(30)
    st.sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
