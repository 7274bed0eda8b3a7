"""The offline demo: generator determinism, CoOp split layout, atomic cache, attribute file,
caption tokenisation, weight-file format and the shipped weights' recorded zero-shot accuracy."""
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from argtca.demo import generator as G
from argtca.demo.render import (CLASSNAMES, POSSIBLE_ATTRIBUTES, SIZE_RANGE, SYNONYM_GROUPS,
                                expand_synonyms, size_words)

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "argtca" / "demo" / "assets"


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    """The default demo dataset generated once into a private cache (ARGTCA_CACHE)."""
    cache = tmp_path_factory.mktemp("argtca_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ARGTCA_CACHE", str(cache))
        root = G.ensure_dataset()
        yield root


@pytest.fixture
def demo_env(demo_root, monkeypatch):
    monkeypatch.setenv("ARGTCA_CACHE", str(demo_root.parent))
    return demo_root


# ----------------------------------------------------------------------------- generator
@pytest.mark.parametrize("stream", [G.STREAMS["pool"], G.STREAMS["test"]])
def test_same_seed_same_image_different_seed_different(stream):
    for label in range(len(CLASSNAMES)):
        a = G.render_sample(7, stream, label, 3)
        b = G.render_sample(7, stream, label, 3)
        assert a.image.dtype == np.uint8 and a.image.shape == (64, 64, 3)
        assert np.array_equal(a.image, b.image)
        assert a.attributes == b.attributes and a.styles == b.styles
        c = G.render_sample(8, stream, label, 3)
        d = G.render_sample(7, stream, label, 4)
        assert not np.array_equal(a.image, c.image)
        assert not np.array_equal(a.image, d.image)


def test_png_bytes_deterministic():
    def png(seed):
        buf = io.BytesIO()
        Image.fromarray(G.render_sample(seed, G.STREAMS["test"], 5, 0).image).save(buf,
                                                                                  format="PNG")
        return buf.getvalue()
    assert png(0) == png(0) and png(0) != png(1)


def test_pool_does_not_depend_on_workers_or_chunking():
    a = G.render_pool(3, 2, workers=1, chunk=512)
    b = G.render_pool(3, 2, workers=2, chunk=5)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert a[2] == b[2] and a[3] == b[3]
    assert a[1].tolist() == [lab for _ in range(2) for lab in range(len(CLASSNAMES))]


def test_domains_differ_as_designed():
    train = [G.render_sample(0, G.STREAMS["pool"], lab, i) for i in range(6) for lab in range(16)]
    test = [G.render_sample(0, G.STREAMS["test"], lab, i) for i in range(6) for lab in range(16)]
    assert all(s.styles == (("shifted", 1.0),) for s in test)
    names = [n for s in train for n, _ in s.styles]
    assert set(names) <= set(G.STYLES) and len(set(names)) >= 4
    assert all(0.0 <= t <= 1.0 for s in train for _, t in s.styles)
    assert 0.35 < sum(1 for s in train if s.styles) / len(train) < 0.85
    # the shifted domain is darker on average (dark palette backgrounds)
    assert np.mean([s.image.mean() for s in test]) < np.mean([s.image.mean() for s in train]) - 15


def test_instance_attributes_are_declared():
    for label, cname in enumerate(CLASSNAMES):
        allowed = (expand_synonyms(set(POSSIBLE_ATTRIBUTES[cname]))
                   | {"small", "medium-sized", "large"})
        for i in range(12):
            for stream in (G.STREAMS["pool"], G.STREAMS["test"]):
                s = G.render_sample(1, stream, label, i)
                assert s.attributes <= allowed, (cname, s.attributes - allowed)
                for group in SYNONYM_GROUPS:        # synonyms come together or not at all
                    assert len(s.attributes & set(group)) in (0, len(group))


# ----------------------------------------------------------------------------- dataset on disk
def test_split_file_is_coop_format_with_expected_counts(demo_root):
    split = json.loads((demo_root / G.SPLIT_FILE).read_text())
    assert set(split) == {"train", "val", "test"}
    for name, per_class in G.SPLIT_COUNTS.items():
        entries = split[name]
        assert len(entries) == per_class * len(CLASSNAMES)
        for rel, label, cname in entries:
            assert isinstance(rel, str) and isinstance(label, int) and CLASSNAMES[label] == cname
            assert (demo_root / "images" / rel).is_file()
            assert rel.startswith(cname.replace(" ", "_") + "/")
        labels = [e[1] for e in entries]
        assert sorted(labels[:len(CLASSNAMES)]) == list(range(len(CLASSNAMES)))  # balanced prefix
        assert all(labels.count(k) == per_class for k in range(len(CLASSNAMES)))
    all_rel = [e[0] for n in split for e in split[n]]
    assert len(set(all_rel)) == len(all_rel)
    # files on disk are exactly the generator's images
    rel, label, _ = split["test"][37]
    idx = int(rel.rsplit("_", 1)[1].split(".")[0])
    disk = np.asarray(Image.open(demo_root / "images" / rel))
    assert np.array_equal(disk,
                          G.render_sample(G.DEFAULT_SEED, G.STREAMS["test"], label, idx).image)


def test_cache_folder_name_and_reuse(demo_root, monkeypatch):
    assert demo_root.name == f"demo-{G.GENERATOR_VERSION}-{G.DEFAULT_SEED}"
    called = []
    monkeypatch.setattr(G, "write_dataset", lambda *a, **k: called.append(1))
    assert G.ensure_dataset(root=demo_root.parent) == demo_root
    assert not called


def test_interrupted_generation_leaves_nothing(tmp_path, monkeypatch):
    def broken(root, seed=0, counts=None):
        (Path(root) / "images").mkdir()
        (Path(root) / "images" / "half.png").write_bytes(b"x")
        raise KeyboardInterrupt
    monkeypatch.setattr(G, "write_dataset", broken)
    with pytest.raises(KeyboardInterrupt):
        G.ensure_dataset(seed=5, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_incomplete_folder_is_regenerated(tmp_path):
    final = G.dataset_dir(9, tmp_path)
    (final / "images").mkdir(parents=True)
    (final / "stray.txt").write_text("half-made")
    assert G.cache_problem(final, 9) == f"no {G.SPLIT_FILE}"
    assert G.ensure_dataset(seed=9, root=tmp_path) == final
    assert G.cache_problem(final, 9) is None and not (final / "stray.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [final.name]   # no temp/stale left


def test_demo_dataset_class_reads_the_split(demo_env):
    from argtca.config import get_cfg_default
    from argtca.datasets import DataError, build_dataset
    from argtca.registry import DATASET_REGISTRY
    cfg = get_cfg_default()
    cfg.merge_from_file(str(REPO / "configs" / "datasets" / "demo.yaml"))
    cfg.DATASET.ROOT = "/nonexistent"                       # ignored by the demo
    assert DATASET_REGISTRY.get("demo").__name__ == "Demo"
    ds = build_dataset(cfg)
    assert ds.classnames == list(CLASSNAMES) and ds.fine_grained is True
    assert len(ds.test) == G.SPLIT_COUNTS["test"] * 16
    assert Path(ds.test[0].impath) == demo_env / "images" / "tomato" / "test_000.png"
    cfg.DATASET.NUM_IMAGES = 20
    ds = build_dataset(cfg)
    assert len(ds.test) == 20 and len({d.label for d in ds.test}) == 16
    cfg.DATASET.NUM_IMAGES = -1
    cfg.DATASET.SPLIT = "val"
    assert len(build_dataset(cfg).test) == G.SPLIT_COUNTS["val"] * 16
    cfg.DATASET.SPLIT = "testing"
    with pytest.raises(DataError, match="testing"):
        build_dataset(cfg)


def test_demo_config_paths_resolve():
    from argtca.config import get_cfg_default
    from argtca.utils.paths import resolve_builtin
    cfg = get_cfg_default()
    cfg.merge_from_file(str(REPO / "configs" / "datasets" / "demo.yaml"))
    assert cfg.INPUT.SIZE == (64, 64) and cfg.MODEL.BACKBONE.NAME == "argtca-demo-clip"
    assert (Path(resolve_builtin(cfg.MODEL.PRETRAINED)).resolve()
            == (ASSETS / "demo_clip.pt").resolve())
    assert Path(resolve_builtin(cfg.DATASET.ATTRIBUTE_FILE)).resolve() == \
        (ASSETS / "demo_attributes.json").resolve()


# ----------------------------------------------------------------------------- attributes
def test_attribute_file_covers_every_class_and_is_grounded():
    raw = json.loads((ASSETS / "demo_attributes.json").read_text())
    assert set(raw) == set(CLASSNAMES)
    for cname, text in raw.items():
        assert isinstance(text, str)
        attrs = text.split()
        assert len(attrs) >= 10 and len(set(attrs)) == len(attrs), cname
        assert all("_" not in a and a == a.lower() for a in attrs)
        lo, hi = SIZE_RANGE[cname]
        sizes = {w for s in np.linspace(lo * 0.9, hi, 50) for w in size_words(s)}
        allowed = expand_synonyms(set(POSSIBLE_ATTRIBUTES[cname])) | sizes
        assert set(attrs) <= allowed, (cname, set(attrs) - allowed)
    # selection must matter: shared words and near-synonym pairs exist
    counts = {}
    for text in raw.values():
        for a in text.split():
            counts[a] = counts.get(a, 0) + 1
    assert counts["round"] >= 6 and counts["red"] >= 6
    assert sum(1 for t in raw.values() for g in SYNONYM_GROUPS if set(g) <= set(t.split())) >= 6


# ----------------------------------------------------------------------------- captions / text
def test_caption_ids_equal_open_clip_tokenizer():
    import open_clip
    from argtca.demo.captions import CaptionTokenizer, caption_text, demo_vocab_ids, sample_caption
    tok = open_clip.get_tokenizer("ViT-B-32")
    ct = CaptionTokenizer()
    rng = random.Random(0)
    caps = []
    for i in range(150):
        s = G.render_sample(0, G.STREAMS["pool"], i % 16, i)
        words, mix = sample_caption(rng, CLASSNAMES[s.label], sorted(s.attributes), s.styles)
        caps.append(words)
        if mix is not None:
            assert len(mix[0]) == 4 and 0 <= mix[1] <= 1
    assert torch.equal(ct.batch(caps, pad_to=77), tok([caption_text(c) for c in caps]))
    vocab = set(demo_vocab_ids().tolist())
    assert {49406, 49407} <= vocab and len(vocab) < 400
    used = set(tok([caption_text(c) for c in caps]).flatten().tolist()) - {0}
    assert used <= vocab


def test_truncated_text_forward_and_soft_style_mix():
    from argtca.demo.model import build_demo_model, encode_text_ids
    from argtca.demo.train_clip import soft_style_embeddings
    import open_clip
    torch.manual_seed(0)
    model = build_demo_model()
    ids = open_clip.get_tokenizer("ViT-B-32")(["a photo of a tomato.",
                                               "a noisy photo of the green lime"])
    with torch.no_grad():
        ref = model.encode_text(ids)
        assert torch.allclose(encode_text_ids(model, ids), ref, atol=1e-5)
        ctx = model.token_embedding(ids[0, 1:5])
        assert torch.allclose(encode_text_ids(model, ids, ctx=ctx)[0], ref[0], atol=1e-5)
        emb = model.token_embedding(ids)
        neutral = ids[0:1, 1:5]
        t1 = soft_style_embeddings(model, ids, torch.tensor([1]), neutral, torch.tensor([1.0]))
        assert torch.allclose(t1, emb)
        t0 = soft_style_embeddings(model, ids, torch.tensor([1]), neutral, torch.tensor([0.25]))
        want = 0.25 * emb[1, 1:5] + 0.75 * model.token_embedding(neutral[0])
        assert torch.allclose(t0[1, 1:5], want, atol=1e-6)
        assert torch.equal(t0[0], emb[0]) and torch.equal(t0[1, 5:], emb[1, 5:])


# ----------------------------------------------------------------------------- weight file
def test_checkpoint_roundtrip_and_errors(tmp_path):
    from argtca.demo.checkpoint import (CheckpointError, load_argtca_checkpoint,
                                        save_demo_checkpoint)
    from argtca.demo.model import build_demo_model
    torch.manual_seed(1)
    a = build_demo_model()
    ids = [49406, 49407, 320, 1125]
    p = tmp_path / "w.pt"
    save_demo_checkpoint(a, p, ids, train_command="cmd", train_meta={"steps": 1})
    raw = torch.load(p, weights_only=True)
    assert "token_embedding.weight" not in raw["state_dict"]
    assert all(v.dtype == torch.float16 for v in raw["state_dict"].values())
    assert raw["vocab_rows"].dtype == torch.float16 and raw["vocab_ids"].tolist() == sorted(ids)
    b = build_demo_model()
    meta = load_argtca_checkpoint(b, p)
    assert meta["train_command"] == "cmd" and meta["n_vocab"] == 4
    sa, sb = a.state_dict(), b.state_dict()
    for k in sa:
        if k == "token_embedding.weight":
            continue
        assert torch.equal(sb[k], sa[k].half().float()), k
    emb = sb["token_embedding.weight"]
    assert torch.equal(emb[ids], sa["token_embedding.weight"][ids].half().float())
    mask = torch.ones(emb.shape[0], dtype=torch.bool)
    mask[ids] = False
    assert emb[mask].abs().sum() == 0
    torch.save({"format": "other"}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="argtca-clip-v1"):
        load_argtca_checkpoint(b, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_argtca_checkpoint(b, tmp_path / "missing.pt")


def test_ece_matches_hand_computation():
    """The demo's evaluation uses the runs' ECE (argtca.metrics), in percent."""
    from argtca.demo.evaluate import metrics
    conf = torch.tensor([0.9, 0.92, 0.5, 0.51, 1.0])
    probs = torch.stack([conf, 1 - conf], 1)                 # class 0 is every prediction
    labels = torch.tensor([0, 1, 0, 0, 0])
    # bins (0.85,0.9]:{0.9} (0.9,0.95]:{0.92} (0.45,0.5]:{0.5} (0.5,0.55]:{0.51} (0.95,1]:{1.0}
    want = (abs(0.9 - 1) + abs(0.92 - 0) + abs(0.5 - 1) + abs(0.51 - 1) + 0) / 5
    got = metrics(probs, labels)
    assert got["ece"] == pytest.approx(100 * want) and got["accuracy"] == pytest.approx(80.0)


def test_shipped_weights_reproduce_recorded_zero_shot(demo_env):
    from argtca.demo.checkpoint import load_demo_model, read_checkpoint
    from argtca.demo.evaluate import load_split_images, zero_shot
    weights = ASSETS / "demo_clip.pt"
    ref = json.loads((ASSETS / "demo_reference.json").read_text())
    assert weights.stat().st_size < 5e6
    ckpt = read_checkpoint(weights)
    assert ckpt["model_name"] == "argtca-demo-clip"
    assert ckpt["train_command"].startswith("python -m argtca.demo.train_clip")
    assert ref["generator_version"] == G.GENERATOR_VERSION and ref["split"] == "test"
    model = load_demo_model(weights)
    imgs, labels = load_split_images(demo_env, "test")
    assert labels.numel() == ref["zero_shot"]["n"]
    got = zero_shot(model, imgs, labels, template=ref["template"])
    assert got["accuracy"] == pytest.approx(ref["zero_shot"]["accuracy"], abs=0.5)
    assert got["ece"] == pytest.approx(ref["zero_shot"]["ece"], abs=0.5)
    assert 100 / 16 * 3 < got["accuracy"] < 90                 # far above chance, far from perfect
