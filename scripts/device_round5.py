"""Round 5 of issue 11 on one GPU: the Jacobian at θ0 (Jᵀ, grad mode "jacobian"), built by the
written-out forward mode of argtca.engine.text_tower, timed per dataset size. Usage:
python scripts/device_round5.py OUTDIR jac101 jac1000 ...; one JSON line a row. With
``OLD=path/to/text_tower.py`` (an earlier copy of the module) its ``text_tangents`` is timed too,
and the two Jᵀ are compared."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from argtca.bench import setup as bench  # noqa: E402
from argtca.engine import text_tower  # noqa: E402


def _old_module():
    path = os.environ.get("OLD", "")
    if not path or not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("text_tower_old", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def time_jacobian(eng, mod, compile: bool, chunk: int, dev):
    """Seconds of one Jᵀ build by ``mod.text_jacobian`` (``mod``: this text_tower module or an
    earlier copy of it), the Jᵀ and the peak GiB."""
    text = mod.PrefixSharedText(eng.text_encoder, attention="manual")
    x0 = eng.text_encoder.ctx_init.detach().float()
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    t = time.perf_counter()
    with eng.autocast():
        out = mod.text_jacobian(text, x0, chunk=chunk, compile=compile)
    if cuda:
        torch.cuda.synchronize(dev)
    return (time.perf_counter() - t, out,
            torch.cuda.max_memory_allocated(dev) / 2 ** 30 if cuda else 0.0)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "round5"
    parts = sys.argv[2:] or ["jac101"]
    os.makedirs(out, exist_ok=True)
    rows = []
    old = _old_module()

    def emit(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(out, "round5.json"), "w") as f:
            json.dump(rows, f, indent=1)

    for p in parts:
        if p.startswith("jac"):
            K = int(p[3:])
            args, dev, s = bench.script_setup(16, K=K)
            eng = s.engine("fast", grad_mode="jacobian", compile_image=False)
            per = eng.num_prompts * int(eng.text_encoder.seq_len)
            n, W = eng.text_encoder.ctx_init.shape
            chunk0 = max(1, min(int(n) * int(W), 8 * eng.text_tokens // max(1, per)))
            gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
            compiles = (False, True) if dev.type == "cuda" else (False,)
            impls = [("split", text_tower)]
            if old is not None:
                impls.append(("round4", old))
            ref = {}
            for name, fn in impls:
                for compile, chunk, reps in ((False, chunk0, 1), (True, chunk0, 2)):
                    if compile not in compiles or (name == "round4" and chunk != chunk0):
                        continue
                    for r in range(reps):
                        try:
                            sec, jt, peak = time_jacobian(eng, fn, compile, chunk, dev)
                        except Exception as e:   # out of memory at a large chunk
                            emit({"K": K, "impl": name, "error": f"{type(e).__name__}: {e}"[:300]})
                            break
                        row = {"K": K, "prompts": eng.num_prompts, "impl": name,
                               "compiled": compile, "chunk": chunk, "call": r + 1,
                               "seconds": round(sec, 2), "peak_gib": round(peak, 2), "gpu": gpu}
                        if ref:
                            a = next(iter(ref.values()))
                            row["max_rel_diff_vs_first"] = float((jt - a).abs().max() / a.abs().max())
                        else:
                            ref[name] = jt
                        emit(row)
                        del jt
                        if dev.type == "cuda":
                            torch.cuda.empty_cache()
            if dev.type == "cuda":
                from torch.profiler import ProfilerActivity, profile
                text = text_tower.PrefixSharedText(eng.text_encoder, attention="manual")
                x0 = eng.text_encoder.ctx_init.detach().float()
                basis = torch.eye(n * W, device=dev)[:chunk0].view(-1, n, W)
                with eng.autocast(), torch.no_grad():
                    text_tower.text_tangents(text, x0, basis)
                    torch.cuda.synchronize(dev)
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        text_tower.text_tangents(text, x0, basis)
                        torch.cuda.synchronize(dev)
                table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
                print(table, flush=True)
                with open(os.path.join(out, f"profile_jac{K}.txt"), "w") as f:
                    f.write(table)


if __name__ == "__main__":
    main()
