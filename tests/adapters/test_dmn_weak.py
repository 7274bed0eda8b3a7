"""TTA-VLM's dmn_weak (argtca/adapters/dmn_weak.py): the memory's contents and the read-out of a
short stream worked out with numpy (a full class always takes the newcomer, unlike DMN-ZS), the same
stream through TTA-VLM's ``DMN_WEAK`` (TomSheng21/tta-vlm, read from a fetched copy), and an exact
state round trip mid-stream."""
import io
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from argtca.adapters.dmn import DMNAdapter
from argtca.adapters.dmn_weak import DMNWeakAdapter
from argtca.config import get_cfg_default
from helpers_official import official_module
from toy_stream import FEATURES as FEAT, TEXT, softmax

TTA_VLM = ("TomSheng21/tta-vlm", "online_method/dmn_weak.py",
           "bcc735fe49cbd2ab5b683781c41c66e1d3f78589")
SCALE, BETA, W = 5.0, 5.5, 0.5


def make(cls=DMNWeakAdapter, text=TEXT, scale=SCALE, **keys):
    cfg = get_cfg_default()
    node = cfg.TRAINER.DMNWEAK if cls is DMNWeakAdapter else cfg.TRAINER.DMN
    for k, v in keys.items():
        node[k] = v
    return cls(node, cfg, torch.tensor(text, dtype=torch.float32), scale)


def read_out(f, memory):
    protos = []
    for k in range(3):
        entries = list(memory.get(k, [])) + [TEXT[k]]
        c = sum(np.exp(-BETA * (1 - f @ m)) * m for m in entries)
        protos.append(c / np.linalg.norm(c))
    return (softmax(SCALE * TEXT @ f) + W * softmax(SCALE * np.stack(protos) @ f)) / (1 + W)


def test_stream_memory_and_readout_by_hand():
    # view-0 entropies -Σ p log(p + 1e-5) of softmax(5 f·t): f1 .460, f3 .126, f4 .684; all three
    # say class 0. Memory of 1 a class: f1 enters, f3 replaces it (lower entropy), and f4 replaces
    # f3 although its entropy is higher (DMN-ZS would keep f3)
    a = make(MEMORY_SIZE=1, BETA=BETA, MEMORY_WEIGHT=W)
    ent = {i: -(softmax(SCALE * TEXT @ FEAT[i]) * np.log(softmax(SCALE * TEXT @ FEAT[i]) + 1e-5)
                ).sum() for i in FEAT}
    assert ent[3] < ent[1] < ent[4]
    stream = [(1, {0: [FEAT[1]]}), (2, {0: [FEAT[1]], 1: [FEAT[2]]}),
              (3, {0: [FEAT[3]], 1: [FEAT[2]]}), (4, {0: [FEAT[4]], 1: [FEAT[2]]})]
    for i, memory in stream:
        got = a.step(torch.tensor(FEAT[i], dtype=torch.float32)[None]).numpy()
        np.testing.assert_allclose(got, read_out(FEAT[i], memory), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(a.state["features"][0, 0].numpy(), FEAT[4], rtol=1e-6)
    np.testing.assert_allclose(float(a.state["entropy"][0, 0]), ent[4], rtol=1e-5)
    assert a.state["count"].tolist() == [1, 1, 0]
    zs = make(DMNAdapter, MEMORY_SIZE=1, BETA=BETA, MEMORY_WEIGHT=W)
    for i, _ in stream:
        zs.step(torch.tensor(FEAT[i], dtype=torch.float32)[None])
    np.testing.assert_allclose(zs.state["features"][0, 0].numpy(), FEAT[3], rtol=1e-6)


# the official code's notices on the CPU (CUDA-only amp, sparse tensors in beta)
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_matches_tta_vlm(tmp_path):
    mod = official_module(*TTA_VLM, tmp_path)
    g = torch.Generator().manual_seed(0)
    K, E, n, scale = 4, 8, 40, 20.0
    text = F.normalize(torch.randn(K, E, generator=g), dim=-1)
    feats = F.normalize(text[torch.randint(0, K, (n,), generator=g)]
                        + 0.8 * torch.randn(n, E, generator=g), dim=-1)

    class Model:                      # the CLIP of TTA-VLM's runner, on given features
        def eval(self):
            return self

        def get_text_features(self):
            return text

        def forward_features(self, images):
            return images, text, torch.tensor(scale)

    ref = mod.DMN_WEAK(Model(), "cpu")
    ref.max_len = 3                   # small, so that full classes evict
    ref.prepare_model_and_optimization(types.SimpleNamespace())
    a = make(text=text.numpy(), scale=scale, MEMORY_SIZE=3, BETA=5.5, MEMORY_WEIGHT=1.0)
    for i in range(n):
        want = ref.adaptation_process(None, feats[i:i + 1], None)["output"][0] / 2
        torch.testing.assert_close(a.step(feats[i:i + 1]), want, rtol=1e-5, atol=1e-6)
    assert torch.equal(a.state["count"], ref.mem.counts) and int(a.state["count"].min()) == 3
    torch.testing.assert_close(a.state["features"], ref.mem.memory)
    torch.testing.assert_close(a.state["entropy"], ref.mem.ent_mem)


def test_state_round_trip_mid_stream_is_exact():
    g = torch.Generator().manual_seed(0)
    text = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    imgs = F.normalize(torch.randn(40, 1, 8, generator=g), dim=-1)
    a = make(text=text.numpy(), scale=10.0, MEMORY_SIZE=3)
    a(imgs[:20])
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make(text=text.numpy(), scale=10.0, MEMORY_SIZE=3)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert int((b.state["count"] == 3).sum()) >= 2
    rest = b(imgs[20:])
    assert torch.equal(a(imgs[20:]), rest)
    assert not torch.allclose(make(text=text.numpy(), scale=10.0, MEMORY_SIZE=3)(imgs[20:]),
                              rest)
