"""MODEL.PRETRAINED in every format users hold, made here with the tiny test CLIP: each must load
to exactly the weights that were saved; broken files give one error naming the file and the fix."""
import copy
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import open_clip
import pytest
import torch

from argtca.models.clip import load_clip
from argtca.models.weights import ModelError
from argtca.models.weights import guess_backbone, read_torchscript_state_dict

from conftest import REPO, tiny_cfg

OPENAI_INTS = {"input_resolution": 32, "context_length": 77, "vocab_size": 49408}


@pytest.fixture(scope="module")
def ref():
    """The tiny CLIP with weights exactly representable in fp16 (OpenAI ships fp16 weights)."""
    import argtca.models.backbones  # noqa: F401  (registers the tiny config)
    torch.manual_seed(1)
    m = open_clip.create_model("argtca-tiny-test", pretrained=None).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.half().float())
    return m


def _ref_sd(m):
    return {k: v.clone() for k, v in m.state_dict().items()}


def _loaded(path_or_tag, **env):
    model, _ = load_clip(tiny_cfg(**{"MODEL.PRETRAINED": str(path_or_tag)}))
    return model.state_dict()


def _assert_same(sd, want):
    assert sorted(sd) == sorted(want)
    for k in want:
        assert sd[k].dtype == torch.float32, k
        assert torch.equal(sd[k], want[k].float()), k


def save_openai_torchscript(model, path: Path) -> None:
    """OpenAI's release format: a TorchScript archive of the whole CLIP in fp16, with the integer
    entries input_resolution / context_length / vocab_size."""
    m = copy.deepcopy(model)
    for k, v in OPENAI_INTS.items():
        if hasattr(m, k):      # open_clip keeps some of them as plain int attributes
            delattr(m, k)
        m.register_buffer(k, torch.tensor(v))
    ids = torch.zeros(1, 77, dtype=torch.long)
    traced = torch.jit.trace_module(
        m, {"encode_image": (torch.ones(1, 3, 32, 32),), "encode_text": (ids,)}, check_trace=False)
    traced.half()
    torch.jit.save(traced, str(path))


# ----------------------------------------------------------------------------- formats
def test_openai_torchscript_archive(ref, tmp_path):
    p = tmp_path / "ViT-B-16.pt"
    save_openai_torchscript(ref, p)
    with zipfile.ZipFile(p) as z:   # a real TorchScript archive: code + constants + data.pkl
        names = z.namelist()
    assert any("/code/" in n for n in names) and any(n.endswith("constants.pkl") for n in names)
    with pytest.raises(RuntimeError, match="TorchScript"):   # the reproduction
        torch.load(p, weights_only=True)
    # the restricted reader sees exactly what torch.jit.load's state_dict holds
    mine = read_torchscript_state_dict(str(p))
    jit = torch.jit.load(str(p), map_location="cpu").state_dict()
    assert sorted(mine) == sorted(jit)
    assert all(torch.equal(mine[k], jit[k]) and mine[k].dtype == jit[k].dtype for k in jit)
    assert mine["visual.conv1.weight"].dtype == torch.float16 and int(mine["vocab_size"]) == 49408
    _assert_same(_loaded(p), _ref_sd(ref))


def test_openai_plain_state_dict(ref, tmp_path):
    sd = {k: v.half() for k, v in ref.state_dict().items()}
    sd.update({k: torch.tensor(v) for k, v in OPENAI_INTS.items()})
    p = tmp_path / "ViT-B-16-state.pt"
    torch.save(sd, p)
    _assert_same(_loaded(p), _ref_sd(ref))


def test_open_clip_training_checkpoint_wrapped_and_prefixed(ref, tmp_path):
    ckpt = {"epoch": 3, "name": "run1",
            "state_dict": {"module." + k: v for k, v in ref.state_dict().items()}}
    p = tmp_path / "epoch_3.pt"
    torch.save(ckpt, p)
    _assert_same(_loaded(p), _ref_sd(ref))


@pytest.mark.parametrize("fmt", ["bin", "safetensors", "legacy"])
def test_open_clip_state_dict_files(ref, tmp_path, fmt):
    sd = ref.state_dict()
    if fmt == "safetensors":
        from safetensors.torch import save_file
        p = tmp_path / "open_clip_model.safetensors"
        save_file({k: v.contiguous() for k, v in sd.items()}, str(p))
    elif fmt == "bin":
        p = tmp_path / "open_clip_pytorch_model.bin"
        torch.save(sd, p)
    else:   # torch.save's pre-1.6 (non-zip) format, under a name without extension
        p = tmp_path / "weights"
        torch.save(sd, p, _use_new_zipfile_serialization=False)
        p = Path(str(p))
    _assert_same(_loaded(p), _ref_sd(ref))


# ----------------------------------------------------------------------------- Hugging Face cache
def _fake_hf_cache(hf_home: Path, repo: str, ref) -> None:
    """The layout huggingface_hub reads offline: models--org--name/{refs/main, snapshots/<rev>/}."""
    from safetensors.torch import save_file
    rev = "0123456789abcdef0123456789abcdef01234567"
    d = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    snap = d / "snapshots" / rev
    snap.mkdir(parents=True)
    (d / "refs").mkdir()
    (d / "refs" / "main").write_text(rev)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()},
              str(snap / "open_clip_model.safetensors"))
    (snap / "open_clip_config.json").write_text(json.dumps({"model_cfg": {}}))


_CHILD = r"""
import sys, torch
sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
from conftest import tiny_cfg
from argtca.models.clip import load_clip
from argtca.models.weights import ModelError
if {register_tag!r}:
    import open_clip.pretrained as P
    P._PRETRAINED["argtca-tiny-test"] = {{"openai": dict(hf_hub="argtca-test/tiny-clip/", url="https://example.invalid/x.pt")}}
try:
    model, _ = load_clip(tiny_cfg(**{{"MODEL.PRETRAINED": {pretrained!r}}}))
except ModelError as e:
    print("MODEL_ERROR", e); sys.exit(3)
torch.save(model.state_dict(), {out!r})
"""


def _run_child(tmp_path, hf_home, pretrained, register_tag=False):
    out = tmp_path / "loaded.pt"
    code = _CHILD.format(repo=str(REPO), tests=str(REPO / "tests"), register_tag=register_tag,
                         pretrained=pretrained, out=str(out))
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    return r, out


def test_hf_hub_id_from_offline_cache(ref, tmp_path):
    hf = tmp_path / "hf"
    _fake_hf_cache(hf, "argtca-test/tiny-clip", ref)
    r, out = _run_child(tmp_path, hf, "hf-hub:argtca-test/tiny-clip")
    assert r.returncode == 0, r.stdout + r.stderr
    _assert_same(torch.load(out, weights_only=True), _ref_sd(ref))
    # the tag route: a tag whose source is a Hub repository resolves through the same cache
    r, out = _run_child(tmp_path, hf, "openai", register_tag=True)
    assert r.returncode == 0, r.stdout + r.stderr
    _assert_same(torch.load(out, weights_only=True), _ref_sd(ref))
    # the documented repository is where open_clip's own 'openai' tag for ViT-B/16 points
    assert open_clip.get_pretrained_cfg("ViT-B-16-quickgelu", "openai")["hf_hub"] == \
        "timm/vit_base_patch16_clip_224.openai/"


def test_hf_offline_not_cached_says_which_file_where_and_the_line(tmp_path):
    r, _ = _run_child(tmp_path, tmp_path / "empty-hf", "hf-hub:argtca-test/absent")
    assert r.returncode == 3
    msg = r.stdout.strip()
    assert len(msg.splitlines()) == 1 and "offline (HF_HUB_OFFLINE" in msg
    assert "Needed: open_clip_model.safetensors (https://huggingface.co/argtca-test/absent/" \
           "resolve/main/open_clip_model.safetensors)" in msg
    assert str(tmp_path / "empty-hf" / "hub") in msg
    assert msg.endswith("pass MODEL.PRETRAINED ~/weights/open_clip_model.safetensors")
    r, _ = _run_child(tmp_path, tmp_path / "empty-hf", "openai", register_tag=True)
    assert r.returncode == 3
    msg = r.stdout.strip()
    # both sources of the tag are named; offline, neither is tried
    assert "MODEL.PRETRAINED openai: offline" in msg and "x.pt (https://example.invalid/x.pt)" \
        in msg and "argtca-test/tiny-clip/resolve/main/open_clip_model.safetensors" in msg
    assert "Errno" not in msg and "Retry" not in r.stderr


def _closed_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_hub_is_known_at_once(tmp_path, monkeypatch):
    """No network and no HF_HUB_OFFLINE: one connection attempt tells, then only the cache is
    read (huggingface_hub's 5 retries per file took ~50 s) and one line says what to copy."""
    import time

    import huggingface_hub
    import open_clip.pretrained as P
    from huggingface_hub import constants

    import argtca.models.pretrained as C
    for v in ("ARGTCA_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    port = _closed_port()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(C, "_REACHABLE", {})
    monkeypatch.setitem(P._PRETRAINED, "argtca-tiny-test", {"openai": dict(
        hf_hub="argtca-test/tiny-clip/", url=f"http://127.0.0.1:{port}/x.pt")})
    calls = []
    real = huggingface_hub.hf_hub_download

    def spy(*a, **kw):
        calls.append(kw.get("local_files_only"))
        return real(*a, **kw)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", spy)
    t0 = time.time()
    with pytest.raises(C.OfflineWeightsError) as e:
        load_clip(tiny_cfg(**{"MODEL.PRETRAINED": "openai"}))
    assert time.time() - t0 < 5
    assert calls and all(calls)          # the cache only, never the network
    msg = str(e.value)
    assert msg.startswith(f"MODEL.PRETRAINED openai: no network (127.0.0.1 unreachable) and "
                          f"argtca-tiny-test's weights are not in the Hugging Face cache "
                          f"{tmp_path / 'hub'}. Needed: open_clip_model.safetensors")
    assert msg.endswith("pass MODEL.PRETRAINED ~/weights/open_clip_model.safetensors")
    assert C.reachable(f"http://127.0.0.1:{port}/") is False


# ----------------------------------------------------------------------------- broken input
def _err(path_or_tag) -> str:
    with pytest.raises(ModelError) as e:
        load_clip(tiny_cfg(**{"MODEL.PRETRAINED": str(path_or_tag)}))
    return str(e.value)


def test_not_a_checkpoint(tmp_path, ref):
    p = tmp_path / "ViT-B-16.pt"
    p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\n")
    msg = _err(p)
    assert str(p) in msg and "not a checkpoint" in msg and "re-download" in msg
    p.write_text("<!DOCTYPE html><html>Access denied</html>")
    assert "HTML page" in _err(p)
    p.write_bytes(b"")
    assert "empty" in _err(p)


def test_truncated_archive(tmp_path, ref):
    full = tmp_path / "full.pt"
    save_openai_torchscript(ref, full)
    p = tmp_path / "ViT-B-16.pt"
    p.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    msg = _err(p)
    assert str(p) in msg and "incomplete zip" in msg and "re-download" in msg


def test_wrong_models_keys_name_the_backbone(tmp_path):
    sd = {"visual.conv1.weight": torch.zeros(768, 3, 16, 16), "visual.proj": torch.zeros(768, 512),
          "text_projection": torch.zeros(512, 512)}
    sd.update({f"visual.transformer.resblocks.{i}.ln_1.weight": torch.zeros(768)
               for i in range(12)})
    assert guess_backbone(sd) == "ViT-B/16"
    p = tmp_path / "vitb16.pt"
    torch.save(sd, p)
    msg = _err(p)
    assert str(p) in msg and "argtca-tiny-test" in msg and "MODEL.BACKBONE.NAME ViT-B/16" in msg
    assert "shape mismatch" in msg and "missing keys" in msg
    torch.save([1, 2], p)
    assert "not a state dict" in _err(p)


def test_pickled_code_is_never_run(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    p = tmp_path / "evil.pt"
    torch.save({"x": Evil()}, p)
    assert "does not unpickle" in _err(p)
    assert not marker.exists()
    # the same inside a TorchScript-shaped archive: refused by the restricted reader
    q = tmp_path / "evil_ts.pt"
    with zipfile.ZipFile(q, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps(Evil(), protocol=2))
        z.writestr("evil/constants.pkl", pickle.dumps((), protocol=2))
        z.writestr("evil/version", "3\n")
    msg = _err(q)
    assert str(q) in msg and "refusing" in msg
    assert not marker.exists()


def test_missing_file_and_hub_spelling(tmp_path):
    msg = _err(tmp_path / "nope.pt")
    assert str(tmp_path / "nope.pt") in msg and "not found" in msg
    assert "hf-hub:org/name" in _err("org/name")
