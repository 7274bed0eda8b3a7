"""The default CPU views (``TTA.VIEWS_DEVICE cpu``) against TPT's own code: the official
``data/augmix_ops.py`` and ``AugMixAugmenter`` (azshue/TPT), run on the same decoded JPEGs with
the same random draws, give identical tensors (``torch.equal``), AugMix on and off, float32 and
float16. The official files are read at test time, never copied into the repository: from the
checkout or git directory named by ``ARGTCA_TPT_REPO``, else from the fetched mirror
``/work/.mirror/azshue+TPT/repo``; the test skips when neither exists."""
import ast
import os
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image

import argtca.views.cpu as cpu
from argtca.datasets import Datum
from argtca.views.augmix import OpCall
from argtca.views.cpu import CLIP_MEAN, CLIP_STD, ViewGenerator
from argtca.views.dataset import TestTimeDataset, collate_views
from argtca.views.exact import apply_op_exact

MIRROR = "/work/.mirror/azshue+TPT/repo"


def _read_official(rel):
    """Text of ``rel`` in the official TPT repository, or None when it is not on this machine."""
    root = os.environ.get("ARGTCA_TPT_REPO") or MIRROR
    p = Path(root)
    if (p / rel).is_file():                                  # a checkout
        return (p / rel).read_text()
    if (p / "HEAD").is_file() or (p / ".git").exists():      # a (bare) git directory
        try:
            return subprocess.run(["git", f"--git-dir={p / '.git' if (p / '.git').exists() else p}",
                                   "show", f"HEAD:{rel}"], check=True, capture_output=True,
                                  text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
    return None


@pytest.fixture(scope="module")
def tpt():
    """TPT's ``augmix_ops`` module and its ``AugMixAugmenter`` (+ ``augmix``, ``get_preaugment``)
    executed from the official sources; datautils.py's other definitions (dataset builders and
    their imports) are left out."""
    ops_src, utils_src = _read_official("data/augmix_ops.py"), _read_official("data/datautils.py")
    if ops_src is None or utils_src is None:
        pytest.skip(f"official TPT sources not found (set ARGTCA_TPT_REPO to a checkout or git "
                    f"directory of github.com/azshue/TPT, or fetch it to {MIRROR})")
    ops = types.ModuleType("tpt_augmix_ops")
    exec(compile(ops_src, "azshue/TPT/data/augmix_ops.py", "exec"), ops.__dict__)
    tree = ast.parse(utils_src)
    keep = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
            and n.name in ("get_preaugment", "augmix", "AugMixAugmenter")]
    assert len(keep) == 3, "datautils.py no longer defines TPT's AugMix pipeline"
    ns = {"np": np, "torch": torch, "transforms": T, "Image": Image, "augmentations": ops}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "azshue/TPT/data/datautils.py", "exec"),
         ns)
    return types.SimpleNamespace(ops=ops, AugMixAugmenter=ns["AugMixAugmenter"])


class LegacyDraws:
    """The numpy Generator methods argtca's ``sample_plan`` calls, answered by a legacy
    ``RandomState``: the draws TPT takes from ``np.random`` (dirichlet, beta, randint for the
    depth, choice of the op, uniform for the level and the sign)."""

    def __init__(self, state: np.random.RandomState):
        self.rs = state

    def dirichlet(self, alpha):
        return self.rs.dirichlet(alpha)

    def beta(self, a, b):
        return self.rs.beta(a, b)

    def integers(self, low, high=None):
        return self.rs.randint(low, high)

    def uniform(self, low=0.0, high=1.0):
        return self.rs.uniform(low, high)


def _tpt_transforms(size):
    # tpt_classification.py's transforms for the AugMixAugmenter (CLIP's normalisation)
    base = T.Compose([T.Resize(size, interpolation=T.InterpolationMode.BICUBIC),
                      T.CenterCrop(size)])
    pre = T.Compose([T.ToTensor(), T.Normalize(mean=list(CLIP_MEAN), std=list(CLIP_STD))])
    return base, pre


def _jpegs(tmp_path, n):
    from argtca.bench.data import _jpeg_pool
    paths = []
    for k, data in enumerate(_jpeg_pool(n, size=(300, 225), seed=3)):
        p = tmp_path / f"img{k}.jpg"
        p.write_bytes(data)
        paths.append(p)
    return paths


def _same_draws(monkeypatch, torch_seed, np_seed):
    """argtca's per-item generators replaced by the streams TPT draws from (torch's global
    generator state, numpy's legacy global RandomState), seeded alike for both sides."""
    def item_rngs(seed, index):
        g = torch.Generator()
        g.manual_seed(torch_seed)
        return g, LegacyDraws(np.random.RandomState(np_seed))
    monkeypatch.setattr(cpu, "item_rngs", item_rngs)


def _official_views(official, path, torch_seed: int, np_seed: int) -> torch.Tensor:
    """The official AugMixAugmenter's views of ``path`` under the given torch and numpy seeds,
    the global generators' states restored after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        state = np.random.get_state()
        np.random.seed(np_seed)
        try:
            return torch.stack(official(Image.open(path).convert("RGB")))
        finally:
            np.random.set_state(state)


@pytest.mark.parametrize("augmix,n_views,dtype", [(True, 64, torch.float32),
                                                  (True, 24, torch.float16),
                                                  (False, 24, torch.float32)])
def test_views_identical_to_official_tpt_augmixaugmenter(tpt, tmp_path, monkeypatch, augmix,
                                                         n_views, dtype):
    size = 224
    paths = _jpegs(tmp_path, 2)
    base, pre = _tpt_transforms(size)
    official = tpt.AugMixAugmenter(base, pre, n_views=n_views - 1, augmix=augmix)
    vg = ViewGenerator(size=size, n_views=n_views, augmix=augmix)
    items = [Datum(str(p), 0, "c") for p in paths]
    ds = TestTimeDataset(items, vg, seed=0)
    ds.out_dtype = dtype
    for k, path in enumerate(paths):
        _same_draws(monkeypatch, 100 + k, 200 + k)
        ours = ds[k]["views"]
        ref = _official_views(official, path, 100 + k, 200 + k)
        assert ours.shape == ref.shape == (n_views, 3, size, size) and ours.dtype == dtype
        assert torch.equal(ours, ref.to(dtype)), \
            f"image {k}: {(ours != ref.to(dtype)).any(-1).any(-1).any(-1).nonzero().ravel()}"


def test_every_op_identical_to_official_op_functions(tpt):
    """Each official op function (it draws its own magnitude from np.random) against
    ``apply_op_exact`` with the magnitude argtca's ``sample_op`` draws from the same legacy
    stream: identical pixels, 60 draws an op on a 224 px crop."""
    from argtca.views.augmix import sample_op
    from argtca.bench.data import _jpeg_pool
    import io
    img = Image.open(io.BytesIO(_jpeg_pool(1, size=(300, 225), seed=5)[0])).convert("RGB")
    img = img.resize((224, 224), Image.BILINEAR)
    for fn in tpt.ops.augmentations:
        for s in range(60):
            state = np.random.get_state()
            np.random.seed(s)
            try:
                ref = np.asarray(fn(img, 1))
            finally:
                np.random.set_state(state)
            op = sample_op(fn.__name__, 1, LegacyDraws(np.random.RandomState(s)), 224)
            assert np.array_equal(np.asarray(apply_op_exact(img, op)), ref), (fn.__name__, s, op)


@pytest.mark.parametrize("axis", ["translate_x", "translate_y"])
def test_translation_as_crop_equals_pil_bilinear_affine(axis):
    """PIL's bilinear AFFINE at an integer offset (TPT's translate ops) = a crop with a black
    border, at every offset inside and past the image, on a non-square image."""
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (37, 53, 3), dtype=np.uint8))
    for t in range(-60, 61):
        co = (1, 0, t, 0, 1, 0) if axis == "translate_x" else (1, 0, 0, 0, 1, t)
        ref = img.transform(img.size, Image.AFFINE, co, resample=Image.BILINEAR)
        got = apply_op_exact(img, OpCall(axis, t))
        assert got.size == img.size and np.array_equal(np.asarray(got), np.asarray(ref)), t


def test_float16_views_equal_rounded_float32_views():
    """``dtype=torch.float16`` (what the loader sends under amp) is the float32 views rounded
    once; the old generator had no such argument."""
    img = Image.fromarray(np.random.default_rng(1).integers(0, 256, (30, 41, 3), dtype=np.uint8))
    vg = ViewGenerator(size=32, n_views=9, augmix=True)
    v32 = vg(img, seed=2, index=5)
    v16 = vg(img, seed=2, index=5, dtype=torch.float16)
    assert v16.dtype == torch.float16 and torch.equal(v16, v32.half())
    with pytest.raises(ValueError, match="dtype"):
        vg(img, seed=2, index=5, dtype=torch.float64)


def test_collate_in_a_worker_writes_shared_memory():
    """In a DataLoader worker the batch is stacked straight into shared memory (sent to the main
    process without a copy), outside one into ordinary memory; the same values either way."""
    from torch.utils.data import _utils
    items = [{"index": i, "views": torch.full((2, 3, 4, 4), float(i)), "label": i, "path": "p"}
             for i in range(3)]
    plain = collate_views(items)
    assert not plain["views"].is_shared()
    _utils.worker._worker_info = _utils.worker.WorkerInfo(id=0, num_workers=1, seed=0,
                                                          dataset=None)
    try:
        shared = collate_views(items)
    finally:
        _utils.worker._worker_info = None
    assert shared["views"].is_shared() and torch.equal(shared["views"], plain["views"])


@pytest.mark.parametrize("augmix,n_views,dtype,ops", [(True, 64, torch.float32, False),
                                                      (True, 64, torch.float32, True),
                                                      (True, 24, torch.float16, False),
                                                      (False, 12, torch.float16, False)])
def test_engine_float_stage_identical_to_official_tpt_augmixaugmenter(tpt, tmp_path, monkeypatch,
                                                                      augmix, n_views, dtype,
                                                                      ops):
    """``TTA.VIEWS_FLOAT engine``: the uint8 images a worker ships (``PixelViewDataset``) turned
    into views by the consumer's float stage (``PixelMixer``, run here on the CPU) equal TPT's
    own ``AugMixAugmenter`` and the workers' views (``ExactMixer``), tensor for tensor. With
    ``ops`` (``TTA.VIEWS_OPS engine``) the worker ships only the crops and the encoded chains,
    and the consumer runs the AugMix ops too (``ChainRunner``)."""
    from argtca.views.dataset import PixelViewDataset
    from argtca.views.exact import PixelMixer
    size = 224
    paths = _jpegs(tmp_path, 2)
    base, pre = _tpt_transforms(size)
    official = tpt.AugMixAugmenter(base, pre, n_views=n_views - 1, augmix=augmix)
    vg = ViewGenerator(size=size, n_views=n_views, augmix=augmix)
    items = [Datum(str(p), 0, "c") for p in paths]
    pixels = PixelViewDataset(items, vg, seed=0, ops=ops)
    workers = TestTimeDataset(items, vg, seed=0)
    workers.out_dtype = dtype
    mixer = PixelMixer(CLIP_MEAN, CLIP_STD, augmix, ops=ops)
    for k, path in enumerate(paths):
        _same_draws(monkeypatch, 100 + k, 200 + k)
        item = pixels[k]
        assert item["pixels"].dtype == torch.uint8 and item["pixels"].shape == (
            1 + (n_views - 1) * (4 if augmix and not ops else 1), size, size, 3)
        plans = item["plans"].numpy() if ops else None
        ours = mixer(item["pixels"], item["mix"],
                     torch.empty(n_views, 3, size, size, dtype=dtype), plans=plans)
        assert torch.equal(ours, workers[k]["views"]), k
        ref = _official_views(official, path, 100 + k, 200 + k)
        assert torch.equal(ours, ref.to(dtype)), \
            f"image {k}: {(ours != ref.to(dtype)).any(-1).any(-1).any(-1).nonzero().ravel()}"
