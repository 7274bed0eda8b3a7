"""DMN-ZS (argtca/adapters/dmn.py): the memory's contents and the read-out of a short stream worked
out by hand with numpy, the per-dataset weight, an exact state round trip mid-stream, and one
demo run."""
import io
import os

import numpy as np
import torch

from argtca.adapters.dmn import DMNAdapter
from argtca.config import get_cfg_default
from toy_stream import FEATURES as F, TEXT, softmax

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCALE, BETA, W = 5.0, 5.5, 0.5


def make(name="Demo", **keys):
    cfg = get_cfg_default()
    cfg.DATASET.NAME = name
    cfg.TTA.SELECTION_P = 0.67              # int(3 x .67) = 2 of 3 views give the pseudo-label
    for k, v in keys.items():
        cfg.TRAINER.DMN[k] = v
    return DMNAdapter(cfg.TRAINER.DMN, cfg, torch.tensor(TEXT, dtype=torch.float32), SCALE)


def read_out(f, memory):
    """p_text(view 0) and p_mem by the paper's formulas; ``memory``: class -> stored features."""
    protos = []
    for k in range(3):
        entries = list(memory.get(k, [])) + [TEXT[k]]      # the text feature: the static memory
        c = sum(np.exp(-BETA * (1 - f @ m)) * m for m in entries)
        protos.append(c / np.linalg.norm(c))
    p_mem = softmax(SCALE * np.stack(protos) @ f)
    p_text = softmax(SCALE * TEXT @ f)
    return (p_text + W * p_mem) / (1 + W)


def test_stream_memory_and_readout_by_hand():
    # entropies (nats) of softmax(5 f·t): f1 .460, f2 .200, f3 .126, f4 .684; all but f2 -> class 0
    a = make(MEMORY_SIZE=1, BETA=BETA, MEMORY_WEIGHT=W)
    p = {i: softmax(SCALE * TEXT @ F[i]) for i in F}

    def ent(q):
        return -(q * np.log(q)).sum()

    # image A, views (f1, f3, f4): f3 and f1 are the confident ones; their mean probability says
    # class 0 with entropy H_A; view 0 (f1) enters class 0's empty memory
    h_a = ent((p[3] + p[1]) / 2)
    # image B, views (f2, f2, f1): class 1, view 0 (f2) fills class 1
    # image C, views (f3, f3, f2): class 0 with entropy .126 < H_A: f3 replaces f1 (full at 1)
    # image D, views (f4, f4, f4): class 0 with entropy .684 > .126: nothing changes
    assert ent(p[3]) < h_a < ent(p[4])
    stream = [((1, 3, 4), {0: [F[1]]}), ((2, 2, 1), {0: [F[1]], 1: [F[2]]}),
              ((3, 3, 2), {0: [F[3]], 1: [F[2]]}), ((4, 4, 4), {0: [F[3]], 1: [F[2]]})]
    for views, memory in stream:
        img = torch.tensor(np.stack([F[i] for i in views]), dtype=torch.float32)
        got = a.step(img).numpy()
        np.testing.assert_allclose(got, read_out(F[views[0]], memory), rtol=1e-5, atol=1e-7)
    st = a.state
    assert st["count"].tolist() == [1, 1, 0]
    np.testing.assert_allclose(st["features"][0, 0].numpy(), F[3], rtol=1e-6)
    np.testing.assert_allclose(st["features"][1, 0].numpy(), F[2], rtol=1e-6)
    np.testing.assert_allclose(float(st["entropy"][0, 0]), ent(p[3]), rtol=1e-4)


def test_presets():
    assert make("DescribableTextures").memory_weight == 10.0
    assert make("Caltech101").memory_weight == 0.3
    assert make("Demo").memory_weight == 1.0                # ImageNet's
    assert make("Caltech101", MEMORY_WEIGHT=2.0).memory_weight == 2.0


def test_state_round_trip_mid_stream_is_exact():
    g = torch.Generator().manual_seed(0)
    text = torch.nn.functional.normalize(torch.randn(6, 8, generator=g), dim=-1)
    imgs = torch.nn.functional.normalize(torch.randn(40, 8, 8, generator=g), dim=-1)
    cfg = get_cfg_default()
    cfg.TRAINER.DMN.MEMORY_SIZE = 3                         # full classes: replacements happen
    a = DMNAdapter(cfg.TRAINER.DMN, cfg, text, 10.0)
    a(imgs[:20])
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = DMNAdapter(cfg.TRAINER.DMN, cfg, text, 10.0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert int((b.state["count"] == 3).sum()) >= 2
    assert torch.equal(a(imgs[20:]), b(imgs[20:]))
