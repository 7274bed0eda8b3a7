"""The "auto" defaults (engine, compilation, loader workers), the fp16 image tower's patch-embedding
matmul, and the cpu-fast views (same draws as TPT's PIL views, bit-identical shortcuts)."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from argtca.config import get_cfg_default
from argtca.config import settle
from argtca.utils import host
from conftest import tiny_cfg


def _resolved(device, n, **over):
    cfg = get_cfg_default()
    for k, v in over.items():
        node, key = k.split(".")
        cfg[node][key] = v
    cfg.freeze()
    return settle.resolve_auto(cfg, device, n)


def test_auto_engine_is_fast_on_cuda_reference_on_cpu():
    cpu, lines = _resolved("cpu", 100)
    assert cpu.TTA.ENGINE == "reference" and cpu.TTA.COMPILE == "off"
    assert any("TTA.ENGINE auto -> reference" in line for line in lines)
    cuda, _ = _resolved("cuda", 100)
    assert cuda.TTA.ENGINE == "fast" and cuda.is_frozen()
    # an explicit choice is kept
    ref, lines = _resolved("cuda", 100, **{"TTA.ENGINE": "reference"})
    assert ref.TTA.ENGINE == "reference" and not any("ENGINE" in line for line in lines)


def test_compile_auto_pays_only_for_long_gpu_view_runs():
    # break-even = COMPILE_SECONDS / SAVED_SECONDS_PER_IMAGE = 63 / 0.0011 = 57272.7 images
    short, _ = _resolved("cuda", 57272, **{"TTA.VIEWS_DEVICE": "gpu"})
    long_, lines = _resolved("cuda", 57273, **{"TTA.VIEWS_DEVICE": "gpu"})
    assert (short.TTA.COMPILE, long_.TTA.COMPILE) == ("off", "on")
    assert any("57273 images x ~1.1 ms saved > ~63 s" in line and "-> on" in line for line in lines)
    food101, _ = _resolved("cuda", 30300, **{"TTA.VIEWS_DEVICE": "gpu"})   # eager: ~30 s faster
    assert food101.TTA.COMPILE == "off"
    cpu_views, lines = _resolved("cuda", 10 ** 6)            # CPU views bound the speed
    assert cpu_views.TTA.COMPILE == "off" and any("CPU" in line for line in lines)
    forced, _ = _resolved("cuda", 5, **{"TTA.COMPILE": "on"})
    assert forced.TTA.COMPILE == "on"


def test_auto_workers_share_the_cores_between_local_ranks(monkeypatch):
    monkeypatch.setattr(host, "usable_cpus", lambda: 32)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert host.auto_workers() == 16                          # 31, capped at 16
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert host.auto_workers() == 15                          # 16 cores per rank, one for the rank
    monkeypatch.setattr(host, "usable_cpus", lambda: 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert host.auto_workers() == 1
    cfg, lines = _resolved("cpu", 10)
    assert cfg.DATALOADER.NUM_WORKERS == 1 and any("NUM_WORKERS -1 -> 1" in x for x in lines)


def test_main_threads_one_on_cuda_with_workers_only():
    on_gpu, lines = _resolved("cuda", 10, **{"DATALOADER.NUM_WORKERS": 15})
    assert on_gpu.DATALOADER.MAIN_THREADS == 1
    assert any("MAIN_THREADS -1 -> 1" in x and "15 loader workers" in x for x in lines)
    no_workers, _ = _resolved("cuda", 10, **{"DATALOADER.NUM_WORKERS": 0})
    cpu, lines = _resolved("cpu", 10, **{"DATALOADER.NUM_WORKERS": 4})
    assert (no_workers.DATALOADER.MAIN_THREADS, cpu.DATALOADER.MAIN_THREADS) == (0, 0)
    assert not any("MAIN_THREADS" in x for x in lines)           # nothing changes: no log line
    explicit, _ = _resolved("cuda", 10, **{"DATALOADER.MAIN_THREADS": 3})
    assert explicit.DATALOADER.MAIN_THREADS == 3


def test_host_threads_sets_and_restores():
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    with host.host_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    with pytest.raises(KeyError):
        with host.host_threads(other):
            raise KeyError("a failing loop still restores the threads")
    assert torch.get_num_threads() == before
    with host.host_threads(0):                                  # 0: torch's default, untouched
        assert torch.get_num_threads() == before


def test_trainer_loop_runs_under_main_threads(tmp_path, monkeypatch):
    from argtca.bench.data import make_synthetic_coop
    from argtca.registry import TRAINER_REGISTRY
    import argtca.trainers  # noqa: F401
    root = make_synthetic_coop(str(tmp_path / "data"), 3, 2, size=(40, 30))["root"]
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    cfg = tiny_cfg(**{"TRAINER.NAME": "TPT", "DATASET.NAME": "Caltech101",
                      "DATASET.ROOT": str(root), "OUTPUT_DIR": str(tmp_path / "out"),
                      "TTA.N_VIEWS": 2, "DATALOADER.MAIN_THREADS": want})
    cfg.freeze()
    tr = TRAINER_REGISTRY.get("TPT")(cfg)
    seen = []
    make = tr.make_records
    monkeypatch.setattr(tr, "make_records",
                        lambda b, p: seen.append(torch.get_num_threads()) or make(b, p))
    assert tr.test()["n"] == 3
    assert seen == [want] * 3 and torch.get_num_threads() == before


def test_compile_accepts_old_booleans():
    cfg = get_cfg_default()
    cfg.merge_from_list(["TTA.COMPILE", "True"])
    assert cfg.TTA.COMPILE == "on"
    cfg.merge_from_list(["TTA.COMPILE", "off"])
    assert cfg.TTA.COMPILE == "off"


def test_fingerprint_records_the_resolved_engine(tmp_path):
    """A CPU run with the defaults records TTA.ENGINE reference, so the folder resumes under
    "auto" and under an explicit "reference" alike."""
    from argtca.bench.data import make_synthetic_coop
    from argtca.registry import TRAINER_REGISTRY
    import argtca.trainers  # noqa: F401
    root = make_synthetic_coop(str(tmp_path / "data"), 4, 2, size=(40, 30))["root"]
    over = {"TRAINER.NAME": "TPT", "DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root),
            "OUTPUT_DIR": str(tmp_path / "out"), "TTA.N_VIEWS": 2}
    cfg = tiny_cfg(**over)
    cfg.TTA.ENGINE = "auto"
    cfg.freeze()
    tr = TRAINER_REGISTRY.get("TPT")(cfg)
    assert tr.cfg.TTA.ENGINE == "reference" and tr.batch_images == 1
    tr.test()
    fp = json.loads((tmp_path / "out" / "config.json").read_text())
    assert fp["TTA.ENGINE"] == "reference" and fp["TTA.COMPILE"] == "off"
    cfg2 = tiny_cfg(**dict(over, **{"TTA.ENGINE": "reference"}))
    cfg2.freeze()
    assert TRAINER_REGISTRY.get("TPT")(cfg2).test()["n"] == 4    # resumes: same fingerprint


def test_patch_embedding_matmul_equals_the_convolution():
    from argtca.engine.towers import PatchEmbedMatmul
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 24, kernel_size=8, stride=8, bias=False)
    x = torch.randn(5, 3, 32, 40)
    mm = PatchEmbedMatmul(conv)
    assert torch.allclose(mm(x), conv(x), atol=1e-5)
    assert mm(x).shape == (5, 24, 4, 5)
    with pytest.raises(ValueError):
        PatchEmbedMatmul(torch.nn.Conv2d(3, 4, kernel_size=3, stride=1))


def test_fast_image_tower_equals_open_clip_tower(tiny_clip):
    from argtca.engine.towers import PatchEmbedMatmul, fast_image_tower
    model, _ = tiny_clip
    v32 = fast_image_tower(model.visual, torch.float32)
    assert isinstance(v32.conv1, PatchEmbedMatmul)
    x = torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        ref = model.encode_image(x)
        assert torch.allclose(v32(x), ref, atol=1e-5)
        half = fast_image_tower(model.visual, torch.bfloat16)(x.bfloat16()).float()
    assert half.dtype == torch.float32 and torch.allclose(half, ref, atol=0.1 * ref.abs().max())
    assert next(model.visual.parameters()).dtype == torch.float32   # the model is untouched


def test_compiled_blocks_share_one_graph_and_equal_the_tower(tiny_clip):
    """compile_blocks: every lean block runs through one compilation (one graph for all of
    them, not one per block or one for the whole tower) and the outputs are the tower's."""
    import torch._dynamo
    from argtca.engine.towers import LeanBlock, compile_blocks, fast_image_tower
    model, _ = tiny_clip
    x = torch.randn(4, 3, 32, 32)
    import copy
    eager = fast_image_tower(model.visual, torch.float32)
    blocks = eager.transformer.resblocks
    g = torch.Generator().manual_seed(0)
    for _ in range(2):   # three blocks with weights of their own
        blk = copy.deepcopy(blocks[0])
        with torch.no_grad():
            for p in blk.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
        blocks.append(blk)
    assert len(blocks) == 3 and all(isinstance(b, LeanBlock) for b in blocks)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = compile_blocks(copy.deepcopy(eager), backend="eager")
    with torch.no_grad():
        assert torch.allclose(compiled(x), eager(x), atol=1e-6)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert not isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule)   # not whole
    assert len({id(b.__dict__["block_fn"]) for b in compiled.transformer.resblocks}) == 1
    assert "block_fn" not in blocks[0].__dict__   # the compiled copy's blocks only
    whole = compile_blocks(fast_image_tower(model.visual, torch.float32, lean_blocks=False),
                           backend="eager")           # open_clip's blocks: the whole tower
    assert isinstance(whole, torch._dynamo.eval_frame.OptimizedModule)
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["translate_x", "translate_y", "rotate"])
def test_fast_ops_are_bit_identical_to_pil(name):
    from argtca.views.augmix import OpCall, apply_op, apply_op_fast
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (30, 37, 3), dtype=np.uint8)
    mags = [0.0] if name == "rotate" else [-7.0, -1.0, 0.0, 3.0, 7.0, 40.0]
    for v in mags:
        op = OpCall(name, v)
        want = np.asarray(apply_op(Image.fromarray(img), op))
        got = apply_op_fast(img, op)
        assert np.array_equal(got, want), (name, v)
        if v:
            assert not np.array_equal(got, img)   # the op did something


def test_cpu_fast_views_statistically_equal_pil_views(tmp_path):
    # cpu-fast resizes its crops with torch's uint8 kernel (within one level of PIL's) and blends
    # its warps in float32, so views are statistically, not bit-, equal (bounds measured in
    # tests/views/test_cpu_fast_views.py). Uniform noise resized to 32 px is the worst case for the
    # resize: measured mean 0.059 levels (|delta| * 255 * std), max 8.1; plain views within one
    # level (measured max 1.0 on 6 % of the values).
    from argtca.views.cpu import CLIP_STD, FastViewGenerator, ViewGenerator
    rng = np.random.default_rng(2)
    img = Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8))
    lvl = 255 * torch.tensor(CLIP_STD).view(3, 1, 1)
    vg = ViewGenerator(size=32, n_views=12, augmix=True)
    ref = vg(img, 5, 3)
    fast = FastViewGenerator.like(vg)(img, 5, 3)
    assert torch.equal(fast[0], ref[0])
    assert ((fast - ref).abs() * lvl).mean() < 0.1
    assert not torch.allclose(ref[1], ref[2])    # the views differ from each other
    plain = ViewGenerator(size=32, n_views=5, augmix=False)
    d = (FastViewGenerator.like(plain)(img, 1, 0) - plain(img, 1, 0)).abs() * lvl
    assert d.max() < 1 + 1e-3


def test_cpu_fast_loader_serves_views(tmp_path):
    from argtca.bench.data import make_synthetic_coop
    from argtca.datasets import build_dataset
    from argtca.views.loader import build_views_loader
    root = make_synthetic_coop(str(tmp_path / "data"), 4, 2, size=(40, 30))["root"]
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(root),
                      "TTA.N_VIEWS": 3, "TTA.VIEWS_DEVICE": "cpu-fast", "TTA.AUGMIX": "on"})
    ds = build_dataset(cfg)
    cpu = cfg.clone()
    cpu.TTA.VIEWS_DEVICE = "cpu"
    a = list(build_views_loader(cfg, ds, 1, [0, 2], 2, "cpu", 0))
    b = list(build_views_loader(cpu, ds, 1, [0, 2], 2, "cpu", 0))
    assert a[0]["views"].shape == (2, 3, 3, 32, 32)
    # view 0 identical; the random views statistically equal (torch-resized crops, float32
    # warps: measured mean 0.0006 levels, max 1.4 levels)
    assert torch.equal(a[0]["views"][:, 0], b[0]["views"][:, 0])
    from argtca.views.cpu import CLIP_STD
    d = (a[0]["views"] - b[0]["views"]).abs() * 255 * torch.tensor(CLIP_STD).view(3, 1, 1)
    assert d.mean() < 0.05
