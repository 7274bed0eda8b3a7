"""The weights a run computes with are the weights its config.json names: the file is read once,
hashed and deserialized from the same bytes, and bytes other than the fingerprinted ones (the file
rewritten after the run hashed it) are refused before any record is made."""
import hashlib
import shutil

import pytest
import torch

from argtca.run import main
from argtca.utils import hashing
from conftest import REPO

DEMO_CLIP = REPO / "argtca" / "demo" / "assets" / "demo_clip.pt"


def _other_weights(path):
    """The demo CLIP with one weight changed (another valid checkpoint of the same model)."""
    ckpt = torch.load(DEMO_CLIP, map_location="cpu", weights_only=True)
    name = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
    ckpt["state_dict"][name] = ckpt["state_dict"][name] + 1
    torch.save(ckpt, path)


def _argv(weights, out):
    return ["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"), "--trainer",
            "zeroshot", "--output-dir", str(out), "MODEL.PRETRAINED", str(weights),
            "DATASET.NUM_IMAGES", "4", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
            "VERBOSE", "False"]


@pytest.mark.usefixtures("one_thread")
def test_weights_rewritten_between_hashing_and_loading_are_refused(tmp_path, monkeypatch,
                                                                   capsys):
    weights = tmp_path / "clip.pt"
    shutil.copy(DEMO_CLIP, weights)
    other = tmp_path / "other.pt"
    _other_weights(other)
    real = hashing.file_sha256

    def hash_then_sync(path):   # the run hashes the file; then a sync replaces it
        digest = real(path)
        if str(path).endswith("clip.pt"):
            shutil.copy(other, weights)
        return digest

    monkeypatch.setattr(hashing, "file_sha256", hash_then_sync)
    out = tmp_path / "run"
    assert main(_argv(weights, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed after this run fingerprinted it" in err[0], err
    want = hashlib.sha256(DEMO_CLIP.read_bytes()).hexdigest()[:16]
    got = hashlib.sha256(other.read_bytes()).hexdigest()[:16]
    assert want in err[0] and got in err[0] and "clip.pt" in err[0]
    assert not (out / "records.jsonl").is_file() or not (out / "records.jsonl").read_text()
    # the weights as they are now run as themselves, in a folder naming them
    monkeypatch.setattr(hashing, "file_sha256", real)
    assert main(_argv(weights, tmp_path / "run2")) == 0
    full = hashlib.sha256(other.read_bytes()).hexdigest()
    assert full in (tmp_path / "run2" / "config.json").read_text()


def test_read_input_checks_only_inside_a_run(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"abc")
    assert hashing.read_input(f) == b"abc"
    with hashing.expected_inputs({"X": str(f)}, {"X": hashlib.sha256(b"abc").hexdigest()}):
        assert hashing.read_input(f) == b"abc"
        f.write_bytes(b"abd")
        with pytest.raises(hashing.InputChangedError, match="X file .*a.bin changed"):
            hashing.read_input(f)


@pytest.mark.usefixtures("one_thread")
def test_an_attribute_file_rewritten_after_it_was_read_is_refused(tmp_path):
    """Read at load time (before the fingerprint): the bytes read are the ones fingerprinted."""
    import json
    from argtca.run import build_trainer, parse_args, setup_cfg
    attrs = tmp_path / "attrs.json"
    shutil.copy(REPO / "argtca" / "demo" / "assets" / "demo_attributes.json", attrs)
    args = parse_args(["--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"),
                       "--config-file", str(REPO / "configs/trainers/tca.yaml"),
                       "--output-root", str(tmp_path / "out"), "DATASET.ATTRIBUTE_FILE",
                       str(attrs), "DATASET.NUM_IMAGES", "4", "USE_CUDA", "False",
                       "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False"])
    trainer = build_trainer(setup_cfg(args))          # reads the attribute file
    data = json.loads(attrs.read_text())
    first = next(iter(data))
    data[first] = "other words " + data[first]
    attrs.write_text(json.dumps(data))                # rewritten before the run hashes it
    with pytest.raises(hashing.InputChangedError, match="attrs.json changed after this run "
                                                        "read it"):
        trainer.fingerprint()
