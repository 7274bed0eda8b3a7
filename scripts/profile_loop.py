"""Where the host's time goes in the test loop (GPU views, fast engine): cProfile of the main
thread over one bench pass. Usage: python scripts/profile_loop.py [N_IMAGES] [VIEWS]"""
import cProfile
import os
import pstats
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from argtca import bench  # noqa: E402
from argtca.bench_data import make_synthetic_coop  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 768
    views = sys.argv[2] if len(sys.argv) > 2 else "gpu"
    args = bench.parse_args(["--workers", os.environ.get("WORKERS", "15")]
                            + os.environ.get("BENCH_ARGS", "").split())
    dev = torch.device(args.device)
    from argtca.models.clip import load_clip
    model, tok = load_clip(bench.bench_cfg(args, {"root": "/tmp", "attributes": ""}, "fast",
                                           "cpu", -1), dev)
    data = make_synthetic_coop(os.path.join(tempfile.mkdtemp(), "K101"), n, 101, seed=101)
    s = bench.Setup(args, data, model, tok, dev)
    on = dev.type == "cuda"
    kw = dict(compile_image=on, compile_text=on, text_attention="math", grad_mode="jacobian")
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
