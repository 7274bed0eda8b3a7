"""Run by test_exact_ops.py in a subprocess under ``TRITON_INTERPRET=1`` (Triton reads it at
import): ChainRunner's Triton kernels, interpreted on the CPU, against Pillow on chains of every
op, on images whose pixel count is not a multiple of the kernels' block. Prints ``ok N``."""
import sys

import numpy as np
import torch
from PIL import Image

from argtca.views.augmix import OPS, OpCall, sample_plan
from argtca.views.exact import apply_chain_exact
from argtca.views.exact_ops import ChainRunner, encode_op, encode_plan


def images(rng, n, size):
    out = []
    for k in range(n):
        a = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        if k % 4 == 1:
            a = np.linspace(0, 255, size * size * 3).reshape(size, size, 3).astype(np.uint8)
        elif k % 4 == 2:
            a[..., 1] = 77
        elif k % 4 == 3:
            a = (a // 64 * 60 + 10).astype(np.uint8)
        out.append(a)
    return out


def main() -> int:
    runner = ChainRunner("cpu", kernels="triton")
    rng = np.random.default_rng(5)
    n = 0
    for size, severity in ((33, 1.0), (35, 10.0)):
        imgs = images(rng, 8, size)
        plans = [sample_plan(rng, severity, size, OPS) for _ in imgs]
        x = torch.from_numpy(np.stack([a for a in imgs for _ in range(3)]))
        before = x.clone()
        got = runner(x, np.concatenate([encode_plan(p, size) for p in plans])).numpy()
        assert torch.equal(x, before), "the input changed"
        k = 0
        for a, plan in zip(imgs, plans):
            for chain in plan.chains:
                want = np.asarray(apply_chain_exact(Image.fromarray(a), chain))
                assert np.array_equal(got[k], want), (size, chain, int((got[k] != want).sum()))
                k += 1
                n += 1
    # every op alone, three at a time (autocontrast, equalize and a table in one step)
    for ops in ([OpCall("autocontrast"), OpCall("equalize"), OpCall("solarize", 100)],
                [OpCall("rotate", 90), OpCall("shear_y", 0.3), OpCall("posterize", 2)]):
        a = images(rng, 4, 33)[3]
        plans = np.zeros((3, 3, 7))
        for j, op in enumerate(ops):
            plans[j, 0] = encode_op(op, 33)
        got = runner(torch.from_numpy(np.stack([a] * 3)), plans).numpy()
        for j, op in enumerate(ops):
            want = np.asarray(apply_chain_exact(Image.fromarray(a), [op]))
            assert np.array_equal(got[j], want), op
            n += 1
    print(f"ok {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
