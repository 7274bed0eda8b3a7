"""Configuration and other inputs: out-of-range values refused at load (CLI and library), malformed
YAML named with its line, duplicate classes in attribute files, and the demo cache (half-made,
read-only, unwritable, full disk)."""
import errno
import glob
import json
import os
import tempfile
from pathlib import Path

import pytest

import argtca.trainers  # noqa: F401  (registers the trainers and engines the checks look up)
from argtca.attributes import AttributeFileError, load_attributes
from argtca.config import CFG_CHOICES, ConfigError, check_cfg_values, get_cfg_default
from argtca.demo import generator as G
from argtca.run import build_parser, main, setup_cfg
from conftest import REPO, set_keys, tiny_cfg
from helpers_data import make_caltech


def _cfg(trainer="TPT", **over):
    cfg = get_cfg_default()
    cfg.TRAINER.NAME = trainer
    return set_keys(cfg, over)


# ---------------------------------------------------------------------------- value ranges
def test_defaults_and_shipped_configs_pass():
    for t in glob.glob(str(REPO / "configs/trainers/*.yaml")):
        for d in glob.glob(str(REPO / "configs/datasets/*.yaml")):
            cfg = get_cfg_default()
            cfg.merge_from_file(d)
            cfg.merge_from_file(t)
            check_cfg_values(cfg)


def test_choices_match_the_code():
    from argtca.graph.nodes import EDGE_MODES
    from argtca.trainers.argtca import ArgTCA
    assert set(ArgTCA.cfg_ranges["EDGES"]) == set(EDGE_MODES)
    assert get_cfg_default().DATASET.CHECK_IMAGES in CFG_CHOICES["DATASET.CHECK_IMAGES"]


BAD = [
    ("TTA.STEPS", 0, "TPT"), ("TTA.STEPS", -1, "ZeroshotCLIP"), ("TTA.SELECTION_P", 0.0, "TPT"),
    ("TTA.SELECTION_P", 1.5, "TPT"), ("TTA.SELECTION_P", float("nan"), "TPT"),
    ("TTA.N_VIEWS", 1, "CTPT"), ("TTA.N_VIEWS", 0, "ZeroshotCLIP"), ("TTA.PREC", "fp16", "TPT"),
    ("TTA.PREC", "AMP", "TPT"), ("TTA.ENGINE", "turbo", "TPT"), ("TTA.COMPILE", "maybe", "TPT"),
    ("TTA.VIEWS_DEVICE", "tpu", "TPT"),
    ("TTA.AUGMIX", "sometimes", "TPT"), ("TTA.AUGMIX_SEVERITY", 0.05, "TPT"),
    ("TTA.LR", 0.0, "TPT"), ("TTA.LR", float("inf"), "TPT"), ("TTA.WEIGHT_DECAY", -0.1, "TPT"),
    ("TTA.LOSS_SCALE", 0.0, "TPT"), ("TTA.BATCH_IMAGES", 0, "TPT"), ("TTA.N_CTX", 0, "TPT"),
    ("DATALOADER.NUM_WORKERS", -2, "TPT"), ("DATALOADER.PREFETCH", 0, "TPT"),
    ("DATASET.NUM_IMAGES", 0, "TPT"), ("DATASET.CHECK_IMAGES", "full", "TPT"),
    ("INPUT.INTERPOLATION", "lanczos", "TPT"), ("INPUT.PIXEL_STD", [0.2, 0.0, 0.2], "TPT"),
    ("INPUT.PIXEL_MEAN", [0.5, 0.5], "TPT"),
    ("TRAINER.CTPT.LAMBDA", -50.0, "CTPT"), ("TRAINER.OTPT.LAMBDA", -1.0, "OTPT"),
    ("TRAINER.ATPT.LAMBDA", -80.0, "ATPT"), ("TRAINER.ATPT.TAU", 1.5, "ATPT"),
    ("TRAINER.TCA.ALPHA", -10.0, "TCA"), ("TRAINER.TCA.BETA", -1.0, "TCA"),
    ("TRAINER.TCA.NUM_ATTRIBUTES", 0, "TCA"), ("TRAINER.TCA.ENTROPY_INPUT", "logit", "TCA"),
    ("TRAINER.ARGTCA.ALPHA", -1.0, "ArgTCA"), ("TRAINER.ARGTCA.BETA", -35.0, "ArgTCA"),
    ("TRAINER.ARGTCA.NUM_CANDIDATES", 0, "ArgTCA"), ("TRAINER.ARGTCA.JOINT_WEIGHT", 1.5, "ArgTCA"),
    ("TRAINER.ARGTCA.EDGES", "half", "ArgTCA"), ("TRAINER.ARGTCA.EMBEDDINGS", "clip", "ArgTCA"),
    ("TRAINER.ARGTCA.GAT.HEADS", 0, "ArgTCA"), ("TRAINER.ARGTCA.GAT.HIDDEN", 510, "ArgTCA"),
    ("TRAINER.ARGTCA.GAT.DROPOUT", 1.0, "ArgTCA"), ("TRAINER.ARGTCA.GAT.LR", -1e-3, "ArgTCA"),
    ("TRAINER.ARGTCA.GAT.TAU", 0.0, "ArgTCA"), ("TRAINER.ARGTCA.GAT.EPOCHS", -1, "ArgTCA"),
    ("TRAINER.ARGTCA.GAT.LOSS_ON", "x", "ArgTCA"), ("TRAINER.ARGTCA.SELECTOR_SEED", -1, "ArgTCA"),
]


@pytest.mark.parametrize("key,value,trainer", BAD)
def test_out_of_range_value_is_refused_naming_key_value_range(key, value, trainer):
    with pytest.raises(ConfigError) as e:
        check_cfg_values(_cfg(trainer, **{key: value}))
    msg = str(e.value)
    assert "\n" not in msg and f"{key}={value!r} (allowed: " in msg
    assert msg.count("(allowed: ") == 1          # only the bad key is named


def test_zero_shot_needs_no_steps_or_extra_views():
    check_cfg_values(_cfg("ZeroshotCLIP", **{"TTA.STEPS": 0, "TTA.N_VIEWS": 1}))
    check_cfg_values(_cfg("TPT", **{"TTA.N_VIEWS": 2, "TTA.SELECTION_P": 1.0,
                                    "TTA.AUGMIX": "off", "TTA.AUGMIX_SEVERITY": 0.0}))


def test_every_bad_key_is_listed_in_one_line():
    with pytest.raises(ConfigError) as e:
        check_cfg_values(_cfg("TPT", **{"TTA.STEPS": 0, "TTA.PREC": "half"}))
    assert "TTA.PREC='half'" in str(e.value) and "TTA.STEPS=0" in str(e.value)


def test_library_use_is_checked_by_the_trainer(tmp_path):
    from argtca.registry import TRAINER_REGISTRY
    make_caltech(tmp_path)
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(tmp_path),
                      "TTA.SELECTION_P": 2.0})
    with pytest.raises(ConfigError, match=r"TTA.SELECTION_P=2.0 \(allowed: \(0, 1\]"):
        TRAINER_REGISTRY.get("TPT")(cfg)
    cfg.TTA.SELECTION_P = 0.1
    cfg.TTA.STEPS = 0
    with pytest.raises(ConfigError, match="TTA.STEPS=0"):
        TRAINER_REGISTRY.get("CTPT")(cfg)
    assert TRAINER_REGISTRY.get("ZeroshotCLIP")(cfg).dataset.num_classes == 3


# ---------------------------------------------------------------------------- YAML and CLI
def _setup(*argv):
    return setup_cfg(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("text,want", [
    ("TTA:\n  STEPS: 1\n  N_VIEWS: [8\nDATASET:\n  NAME: x\n",
     "line 4, column 8: malformed YAML"),
    ("TTA:\n\tSTEPS: 2\n", "line 2, column 1: malformed YAML"),
    ("- TTA\n- STEPS\n", "must hold a YAML mapping"),
    ("TTA:\n  STEPZ: 1\n", "unknown key TTA.STEPZ"),
    ("TTA:\n  LR: 1\n", "TTA.LR must be float (default 0.005)"),
    ("TTA:\n  AUGMIX: on\n", "TTA.AUGMIX must be str"),
])
def test_bad_yaml_names_the_file_and_line(tmp_path, capsys, text, want):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        _setup("--config-file", str(p))
    assert str(e.value).startswith(f"--config-file {p}") and want in str(e.value)
    assert "\n" not in str(e.value)
    assert main(["--dataset-config-file", str(p), "--trainer", "tpt"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {str(e.value).replace('--config-file', '--dataset-config-file')}"


def test_non_utf8_yaml_and_missing_file(tmp_path):
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=rf"^--config-file {p}: not UTF-8 text"):
        _setup("--config-file", str(p))
    with pytest.raises(ConfigError, match="--config-file not found: /nope.yaml"):
        _setup("--config-file", "/nope.yaml")


def test_cli_values_checked_before_anything_runs(tmp_path, capsys):
    assert main(["--trainer", "tpt", "--output-dir", str(tmp_path / "o"),
                 "TTA.SELECTION_P", "1.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: configuration value out of range: TTA.SELECTION_P=1.5")
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="command-line override: unknown key TTA.STEPZ"):
        _setup("TTA.STEPZ", "1")
    with pytest.raises(ConfigError, match="command-line override: TTA.N_VIEWS must be int"):
        _setup("TTA.N_VIEWS", "many")


# ---------------------------------------------------------------------------- attribute files
def test_duplicate_class_key_is_refused_with_both_values(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text('{"cat": "furry small whiskers", "dog": "loyal", "cat": "striped big"}')
    with pytest.raises(AttributeFileError) as e:
        load_attributes(str(p), ["cat", "dog"], 1)
    assert str(e.value) == (f"attribute file {str(p)!r}: class 'cat' is given twice, as "
                            f"'furry small whiskers' and as 'striped big'; keep one entry per "
                            f"class.")
    p.write_text('{"cat": "furry small", "dog": "loyal", "cat": "furry small"}')   # exact repeat
    assert load_attributes(str(p), ["cat", "dog"], 1)["cat"] == ["furry", "small"]


def test_keys_naming_the_same_class_must_agree(tmp_path):
    p = tmp_path / "norm.json"
    p.write_text(json.dumps({"Golden_Retriever": "gold fluffy", "golden retriever": "black"}))
    with pytest.raises(AttributeFileError,
                       match=r"keys 'Golden_Retriever' and 'golden retriever' "
                             r"name the same class .* 'gold fluffy' vs 'black'"):
        load_attributes(str(p), ["golden retriever"], 1)
    p.write_text(json.dumps({"Golden_Retriever": "gold  fluffy",
                             "golden retriever": "gold fluffy"}))
    got = load_attributes(str(p), ["golden retriever"], 2)
    assert got["golden retriever"] == ["gold", "fluffy"]


# ---------------------------------------------------------------------------- demo cache
@pytest.fixture
def tiny_demo(monkeypatch):
    """The generator with one image per class and split (48 images, fast)."""
    monkeypatch.setattr(G, "SPLIT_COUNTS", {"train": 1, "val": 1, "test": 1})


def _no_writes(monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", a[0] if a else None)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    monkeypatch.setattr(G, "write_dataset", refuse)


def test_complete_cache_is_only_read(tmp_path, tiny_demo, monkeypatch):
    final = G.ensure_dataset(seed=3, root=tmp_path)
    assert G.cache_problem(final, 3) is None
    before = {p: p.stat().st_mtime_ns for p in final.rglob("*")}
    _no_writes(monkeypatch)
    assert G.ensure_dataset(seed=3, root=tmp_path) == final
    assert {p: p.stat().st_mtime_ns for p in final.rglob("*")} == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_read_only_cache_folder(tmp_path, tiny_demo):
    final = G.ensure_dataset(seed=3, root=tmp_path)
    os.chmod(tmp_path, 0o555)
    try:
        assert G.ensure_dataset(seed=3, root=tmp_path) == final
        with pytest.raises(G.DemoCacheError, match="cannot create the demo dataset"):
            G.ensure_dataset(seed=4, root=tmp_path)
    finally:
        os.chmod(tmp_path, 0o755)


@pytest.mark.parametrize("damage", ["image", "meta", "split"])
def test_half_made_cache_is_regenerated(tmp_path, tiny_demo, damage):
    final = G.ensure_dataset(seed=3, root=tmp_path)
    victim = {"image": final / G.IMAGE_DIR / G.relpath("test", 2, 0), "meta": final / "meta.json",
              "split": final / G.SPLIT_FILE}[damage]
    if damage == "split":
        victim.write_text('{"train": [')
    else:
        victim.unlink()
    assert G.cache_problem(final, 3) is not None
    assert G.ensure_dataset(seed=3, root=tmp_path) == final
    assert G.cache_problem(final, 3) is None
    assert [p.name for p in tmp_path.iterdir()] == [final.name]


def test_half_made_cache_that_cannot_be_rewritten(tmp_path, tiny_demo, monkeypatch):
    final = G.ensure_dataset(seed=3, root=tmp_path)
    (final / "meta.json").unlink()
    _no_writes(monkeypatch)
    with pytest.raises(G.DemoCacheError) as e:
        G.ensure_dataset(seed=3, root=tmp_path)
    assert str(e.value) == (f"the demo dataset in {final} is incomplete (no meta.json) and cannot "
                            f"be regenerated there (Permission denied): delete that folder or "
                            f"make {tmp_path} writable, or choose a writable folder")


def test_unwritable_or_full_cache_is_one_line(tmp_path, tiny_demo, monkeypatch):
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    real = G.write_dataset

    def full(root, seed=0, counts=None):
        real(root, seed, counts)
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(root) / "meta.json"))
    monkeypatch.setattr(G, "write_dataset", full)
    with pytest.raises(G.DemoCacheError, match=r"cannot write the demo dataset to .*cache "
                                               r"\(No space left on device: .*meta.json\); free "
                                               r"space or set ARGTCA_CACHE"):
        G.ensure_dataset(seed=3)
    assert list((tmp_path / "cache").iterdir()) == []        # the temporary folder is gone
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "file"))
    with pytest.raises(G.DemoCacheError, match=r"cannot create the demo dataset in .*file/demo-.* "
                                               r"set ARGTCA_CACHE to a writable folder"):
        G.ensure_dataset(seed=3)


def test_select_attributes_bad_input_is_one_line(capsys):
    """select_attributes reports bad input as one error line and exit 2, like argtca.run."""
    from argtca.experiments.select_attributes import main as select_main
    assert select_main(["demo", "--selectors", "no_such_selector"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "no_such_selector" in err[0]
    assert select_main(["demo", "TRAINER.ARGTCA.NO_SUCH_KEY", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NO_SUCH_KEY" in err[0]


# ------------------------------------------------------------------ checks before anything runs
_DEMO_TINY = ["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
              "--config-file", str(REPO / "configs/trainers/argtca.yaml"),
              "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
              "DATASET.NUM_IMAGES", "2", "TTA.N_VIEWS", "2", "USE_CUDA", "False",
              "DATALOADER.NUM_WORKERS", "0", "TRAINER.ARGTCA.GAT.EPOCHS", "2"]


def test_input_size_checked_against_the_backbone_before_phase1(tmp_path, capsys):
    """The tiny backbone takes 32x32 images: INPUT.SIZE (64, 64) is one line naming the key,
    both sizes and the fix, before Phase 1 trains or a run folder is made."""
    out = tmp_path / "run"
    rc = main(["--output-dir", str(out), *_DEMO_TINY, "INPUT.SIZE", "(64, 64)"])
    cap = capsys.readouterr()
    assert rc == 2
    assert cap.err.strip() == (
        'error: INPUT.SIZE (64, 64) does not fit MODEL.BACKBONE.NAME=argtca-tiny-test, which '
        'takes 32x32 images: set INPUT.SIZE "(32, 32)" (or use a backbone that takes 64x64 '
        'images)')
    assert "[phase 1]" not in cap.out and not out.exists()


def test_require_cuda_refuses_a_cpu_run(tmp_path, capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_cfg_default().RUN.REQUIRE_CUDA is False
    out = tmp_path / "run"
    rc = main(["--output-dir", str(out), *_DEMO_TINY, "INPUT.SIZE", "(32, 32)", "USE_CUDA",
               "True", "RUN.REQUIRE_CUDA", "True"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: RUN.REQUIRE_CUDA is True but CUDA is not available")
    assert err[0].endswith("or set RUN.REQUIRE_CUDA False") and not out.exists()
    # USE_CUDA False (the CPU on purpose) contradicts it just as well
    rc = main(["--output-dir", str(out), *_DEMO_TINY, "INPUT.SIZE", "(32, 32)",
               "RUN.REQUIRE_CUDA", "True"])
    assert rc == 2 and "RUN.REQUIRE_CUDA is True but USE_CUDA is False" in capsys.readouterr().err


def test_real_weights_on_the_cpu_warn_loudly_with_the_time(tmp_path, capsys, monkeypatch):
    """ViT-B/16 with real weights and no CUDA: a banner with the estimated time, once the
    weights are known to be there; weights that cannot be had (offline in the tests) are the
    one-line error with nothing before it (the single run checks its files first, as table1's
    preflight does)."""
    import torch

    import argtca.models.run_checks as C
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(C, "_cpu_gflops", lambda: 100.0)
    out = tmp_path / "run"
    args = ["--output-dir", str(out), "--dataset-config-file",
            str(REPO / "configs/datasets/demo.yaml"), "--config-file",
            str(REPO / "configs/trainers/tpt.yaml"), "MODEL.BACKBONE.NAME", "ViT-B/16",
            "INPUT.SIZE", "(224, 224)", "DATASET.NUM_IMAGES", "300",
            "DATALOADER.NUM_WORKERS", "0"]
    rc = main(args + ["MODEL.PRETRAINED", "openai"])
    err = capsys.readouterr().err
    assert rc == 2
    assert [ln for ln in err.splitlines() if ln.strip()] == [err.strip()]
    assert err.startswith("error: MODEL.PRETRAINED openai: offline")
    weights = tmp_path / "ViT-B-16.pt"   # there, though no checkpoint: the banner, then its error
    weights.write_bytes(b"not a checkpoint")
    rc = main(args + ["MODEL.PRETRAINED", str(weights)])
    err = capsys.readouterr().err
    assert rc == 2
    banner = [ln for ln in err.splitlines() if ln.startswith("argtca: WARNING")]
    assert len(banner) == 5 and "CUDA is not available" in banner[1]
    assert f"ViT-B/16 with weights '{weights}' runs on the CPU" in banner[1]
    # ViT-B/16 at 224: 12 blocks x (12*197*768^2 + 2*197^2*768) = 17.45 G multiply-adds per
    # view; 300 images x 64 views x 34.9 GFLOP / 100 GFLOP/s = 6700 s
    assert "at least 1 h 51 min for 300 images x 64 views" in banner[2]
    assert "RUN.REQUIRE_CUDA True" in banner[3] and "USE_CUDA False" in banner[3]
    assert err.strip().splitlines()[-1].startswith("error: ")
    # the CPU chosen on purpose, or the demo's shipped weights: no warning
    rc = main(["--output-dir", str(out), "--dataset-config-file",
               str(REPO / "configs/datasets/demo.yaml"), "--config-file",
               str(REPO / "configs/trainers/tpt.yaml"), "MODEL.BACKBONE.NAME", "ViT-B/16",
               "MODEL.PRETRAINED", "openai", "INPUT.SIZE", "(224, 224)", "USE_CUDA", "False",
               "DATASET.NUM_IMAGES", "2", "DATALOADER.NUM_WORKERS", "0"])
    assert rc == 2 and "WARNING" not in capsys.readouterr().err
    from argtca.models.run_checks import check_before_run
    demo = get_cfg_default()
    demo.merge_from_file(str(REPO / "configs/datasets/demo.yaml"))
    check_before_run(demo, "cpu", 320)
    assert "WARNING" not in capsys.readouterr().err
