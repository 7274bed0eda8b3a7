"""An online method's ``stream_state.pt`` is resumed only by the run that saved it
(argtca/trainers/stream_state.py), for every online method: a state copied from another
experiment (other hyper-parameters, another cache capacity, other CLIP weights, another method)
is refused naming the file and the keys that differ; a bare tensor, a dict without position or
state, an empty or foreign adapter state, a state from before fingerprints, and a pickle that
would call ``os.system`` are each one error line; every refusal leaves records.jsonl as it was."""
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from argtca.config.methods import find_trainer, node_of
from argtca.run import main
from argtca.trainers.catalogue import method_config_args, method_names
from argtca.trainers.stream_state import state_structure_problem
from argtca.trainers.zoo import StreamTrainer
from helpers_data import make_caltech

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "32", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
        "VERBOSE", "False", "TTA.N_VIEWS", "4", "TTA.BATCH_IMAGES", "2",
        "TTA.STREAM.CHECKPOINT_IMAGES", "4"]


def _other_experiment(method):
    """A hyper-parameter of another experiment of ``method``: its node's first positive float
    key halved (its first int key + 1 where it has none), as its declared Keys allow."""
    from argtca.config.keys import node_keys
    cls = find_trainer(method)
    keys = node_keys(f"TRAINER.{node_of(cls)}", cls.defaults)
    numbers = [(p, k.default) for p, k in keys.items() if isinstance(k.default, (int, float))
               and not isinstance(k.default, bool) and k.default > 0]
    path, v = next(((p, v / 2) for p, v in numbers if isinstance(v, float)),
                   next(((p, v + 1) for p, v in numbers), (None, None)))
    return [path, repr(v)]


# every online method (the catalogue's): its config arguments and another experiment's setting
METHODS = {m: (method_config_args(m), _other_experiment(m)) for m in method_names("online")}
STOP_AT = 6   # records written when the run is interrupted; the state was saved at 4


def _argv(data, method, out, *extra):
    return ["--root", str(data), "--seed", "1", "--output-dir", str(out),
            "--dataset-config-file", str(REPO / "configs/datasets/caltech101.yaml"),
            *METHODS[method][0], *TINY, *extra]


def _interrupted(data, method, out, *extra):
    """A run of ``method`` stopped (Ctrl-C) after STOP_AT images, its state saved at 4."""
    orig = StreamTrainer.after_batch

    def after_batch(self, records):
        orig(self, records)
        if len(records) >= STOP_AT:
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(StreamTrainer, "after_batch", after_batch)
        assert main(_argv(data, method, out, *extra)) == 130
    assert len((out / "records.jsonl").read_text().splitlines()) == STOP_AT
    assert torch.load(out / "stream_state.pt", weights_only=True)["position"] == 4
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Per method: this experiment's interrupted run and another experiment's."""
    root = tmp_path_factory.mktemp("state")
    data = make_caltech(root / "data", per_class=4)   # 12 images, 3 classes
    torch.set_num_threads(1)
    out = {"data": data}
    for m, (_, other) in METHODS.items():
        out[m] = _interrupted(data, m, root / m / "own")
        out[m, "other"] = _interrupted(data, m, root / m / "other", *other)
    return out


def _copy(runs, method, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(runs[method], dst)
    return dst


def _resume_refused(runs, method, out, capsys, *extra):
    records = (out / "records.jsonl").read_bytes()
    capsys.readouterr()
    assert main(_argv(runs["data"], method, out, *extra)) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {out / 'stream_state.pt'}: ")
    assert f"delete {out} to start the stream over" in err[0]
    assert (out / "records.jsonl").read_bytes() == records   # the finished records are kept
    return err[0]


@pytest.mark.parametrize("method", list(METHODS))
def test_own_state_resumes_to_the_end(runs, method, tmp_path):
    out = _copy(runs, method, tmp_path)
    assert main(_argv(runs["data"], method, out)) == 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert [r["stream_pos"] for r in recs] == list(range(12))
    saved = torch.load(out / "stream_state.pt", weights_only=True)
    assert saved["position"] == 12 and saved["adapter"] == method
    assert json.loads(saved["fingerprint"]) == json.loads((out / "config.json").read_text())


@pytest.mark.parametrize("method", list(METHODS))
def test_a_state_of_other_hyper_parameters_is_refused(runs, method, tmp_path, capsys):
    out = _copy(runs, method, tmp_path)
    shutil.copy2(runs[method, "other"] / "stream_state.pt", out / "stream_state.pt")
    key, value = METHODS[method][1]
    err = _resume_refused(runs, method, out, capsys)
    assert "saved by another experiment" in err
    assert f"{key}: " in err and value in err


@pytest.mark.parametrize("method", list(METHODS))
def test_a_state_of_other_clip_weights_is_refused(runs, method, tmp_path, capsys):
    weights = tmp_path / "w.pt"
    from argtca.models.clip import load_clip
    from conftest import tiny_cfg
    torch.manual_seed(0)
    torch.save(load_clip(tiny_cfg())[0].state_dict(), weights)
    out = _interrupted(runs["data"], method, tmp_path / "w", "MODEL.PRETRAINED", str(weights))
    torch.manual_seed(1)
    torch.save(load_clip(tiny_cfg())[0].state_dict(), tmp_path / "w2.pt")
    other = _interrupted(runs["data"], method, tmp_path / "w2", "MODEL.PRETRAINED",
                         str(tmp_path / "w2.pt"))
    shutil.copy2(other / "stream_state.pt", out / "stream_state.pt")
    err = _resume_refused(runs, method, out, capsys, "MODEL.PRETRAINED", str(weights))
    assert "FILE_SHA256.MODEL.PRETRAINED" in err and "saved by another experiment" in err


def _donor(runs, method):
    """Another online method whose adapter state has another structure than ``method``'s."""
    own = _own(runs, method)["state"]
    return next(m for m in METHODS if m != method
                and state_structure_problem(_own(runs, m)["state"], own))


@pytest.mark.parametrize("method", list(METHODS))
def test_another_methods_state_is_refused(runs, method, tmp_path, capsys):
    out = _copy(runs, method, tmp_path)
    donor_method = _donor(runs, method)
    shutil.copy2(runs[donor_method] / "stream_state.pt", out / "stream_state.pt")
    err = _resume_refused(runs, method, out, capsys)
    assert "saved by another experiment" in err and "TRAINER.NAME" in err
    # the same state relabelled with this run's fingerprint and adapter: its tensors are not
    # this adapter's
    own = torch.load(runs[method] / "stream_state.pt", weights_only=True)
    donor = torch.load(runs[donor_method] / "stream_state.pt", weights_only=True)
    torch.save(dict(own, state=donor["state"]), out / "stream_state.pt")
    err = _resume_refused(runs, method, out, capsys)
    assert "not a state of" in err and "adapter" in err


def _own(runs, method):
    return torch.load(runs[method] / "stream_state.pt", weights_only=True)


class _System:
    def __reduce__(self):
        return (os.system, ("echo pwned > pwned.txt",))


BAD = {
    "bare tensor": (lambda own: torch.zeros(3), "holds a Tensor, not a stream state"),
    "no position": (lambda own: {k: v for k, v in own.items() if k != "position"},
                    "no position"),
    "no state": (lambda own: {k: v for k, v in own.items() if k != "state"}, "no state"),
    "neither": (lambda own: {"order_sha256": own["order_sha256"]}, "no position and no state"),
    "empty adapter state": (lambda own: dict(own, state={}), "the adapter state is empty"),
    "position out of range": (lambda own: dict(own, position=99), "position 99"),
    "no fingerprint": (lambda own: {k: v for k, v in own.items() if k != "fingerprint"},
                       "without the fingerprint of its run"),
    "os.system pickle": (lambda own: dict(own, state=_System()),
                         "refused, nothing in it was loaded: it asks to import"),
}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_state_file_is_one_line(runs, method, kind, tmp_path, capsys, monkeypatch):
    make, says = BAD[kind]
    out = _copy(runs, method, tmp_path)
    obj = make(_own(runs, method))
    if kind == "os.system pickle":   # a plain pickle too, not only torch's zip format
        with open(out / "stream_state.pt", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    else:
        torch.save(obj, out / "stream_state.pt")
    monkeypatch.chdir(tmp_path)
    err = _resume_refused(runs, method, out, capsys)
    assert says in err, err
    assert not (tmp_path / "pwned.txt").exists()
    if kind == "os.system pickle":   # torch's own format holding the same object
        torch.save(obj, out / "stream_state.pt")
        assert says in _resume_refused(runs, method, out, capsys)
        assert not (tmp_path / "pwned.txt").exists()


def _buffers(state, keys=()):
    """(keys, the value one image off) for every buffer of an adapter state: a tensor one row
    short, a 0-d counter one more, a list one item short."""
    if isinstance(state, dict):
        for k, v in state.items():
            yield from _buffers(v, keys + (k,))
    elif isinstance(state, torch.Tensor):
        yield keys, (state[:-1] if state.dim() else state + 1)
    elif isinstance(state, list) and state:
        yield keys, state[:-1]


def _at(state, keys):
    for k in keys:
        state = state[k]
    return state


@pytest.mark.parametrize("method", list(METHODS))
def test_a_buffer_of_the_wrong_length_is_one_line(runs, method, tmp_path, capsys):
    """Every buffer of the saved state (ECALP's graph that grows by a row an image, OnZeta's
    step count, DynaPrompt's prompt lists, the fixed caches) one image off its saved position:
    the resume is refused in one line naming stream_state.pt, the buffer and the fix, records
    kept (before: a bare torch "Sizes of tensors must match", or silently other numbers)."""
    found = list(_buffers(_own(runs, method)["state"]))
    assert found
    for keys, value in found:
        out = _copy(runs, method, tmp_path / "-".join(keys))
        bad = _own(runs, method)
        _at(bad["state"], keys[:-1])[keys[-1]] = value
        torch.save(bad, out / "stream_state.pt")
        err = _resume_refused(runs, method, out, capsys)
        where = "".join(f"[{k!r}]" for k in keys)
        assert f"at image 4 of the stream (state{where} " in err, err


@pytest.mark.parametrize("method", list(METHODS))
def test_declared_state_shapes_hold_at_every_position(runs, method, tmp_path, monkeypatch):
    """What each online method declares its state holds after n images is what it holds at
    every position of a stream (one image a batch, a checkpoint an image: ECALP's candidate
    store goes through all its widths by image 12), and every buffer that starts empty is
    declared, so no resumed buffer goes unchecked."""
    from argtca.trainers.stream_state import _zero_sized
    seen = []
    orig = StreamTrainer.save_state

    def save_state(self, position):
        adapter = self.engine.adapter
        state, declared = adapter.state_dict(), adapter.state_shapes(position)
        fresh = type(adapter).__new__(type(adapter))
        fresh.__dict__.update(adapter.__dict__)
        fresh.reset()
        fresh_state = fresh.state_dict()
        assert state_structure_problem(state, fresh_state, declared=declared) is None
        for keys, buf in _buffers(fresh_state):
            if isinstance(buf, torch.Tensor) and _zero_sized(buf):
                assert isinstance(_at(declared, keys), tuple), keys
        seen.append(position)
        orig(self, position)

    monkeypatch.setattr(StreamTrainer, "save_state", save_state)
    assert main(_argv(runs["data"], method, tmp_path / "run", "TTA.BATCH_IMAGES", "1",
                      "TTA.STREAM.CHECKPOINT_IMAGES", "1")) == 0
    assert seen == list(range(1, 13))
