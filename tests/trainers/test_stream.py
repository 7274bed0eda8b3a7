"""The stream engine of the online methods (argtca/trainers/zoo.py, argtca/trainers/stream.py):
a fixed, seeded order recorded in the run folder and its fingerprint, state carried across
batches, and a resume after an interruption that gives the records of an uninterrupted run.

A probe adapter makes the state matter: its prediction mixes the running mean of the stream's
view-0 features into the class features, so any lost, repeated or reordered image changes later
records."""
import json
from pathlib import Path

import pytest
import torch

from argtca.adapters.base import OnlineAdapter
from argtca.config import ConfigError
from argtca.run_folder import RunFolderError
from argtca.registry import ADAPTER_REGISTRY
from argtca.trainers.stream import Stream, stream_order
from argtca.trainers.zoo import StreamTrainer
from conftest import tiny_cfg
from helpers_data import make_caltech


class Stop(Exception):
    pass


@ADAPTER_REGISTRY.register(name="_stream_probe", override=True)
class StreamProbe(OnlineAdapter):
    stop_after = None   # raise after this many images of this process (an interruption)

    def reset(self):
        self.state = {"sum": torch.zeros_like(self.text[0]), "n": 0}
        self.seen = 0

    def step(self, img):
        if StreamProbe.stop_after is not None and self.seen >= StreamProbe.stop_after:
            raise Stop()
        self.seen += 1
        self.state["sum"] = self.state["sum"] + img[0]
        self.state["n"] += 1
        text = self.text + self.state["sum"] / self.state["n"]
        return (self.logit_scale * img[0] @ text.t()).softmax(-1)


class Probe(StreamTrainer):
    method, label, adapter_name = "probe", "Probe", "_stream_probe"

    @property
    def node(self):
        return self.cfg.TRAINER.TPT


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_caltech(tmp_path_factory.mktemp("stream") / "data", per_class=4)   # 12 images


def _cfg(data, out, **over):
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
                      "TTA.N_VIEWS": 4, "TTA.BATCH_IMAGES": 2,
                      "TTA.STREAM.CHECKPOINT_IMAGES": 4, "OUTPUT_ROOT": str(out), **over})
    cfg.freeze()
    return cfg


def _run(cfg, stop_after=None):
    StreamProbe.stop_after = stop_after
    try:
        t = Probe(cfg)
        try:
            t.test()
        except Stop:
            pass
        return t
    finally:
        StreamProbe.stop_after = None


def _records(t):
    path = Path(t.output_dir()) / "records.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_order_is_seeded_recorded_and_in_the_fingerprint(data, tmp_path):
    t = _run(_cfg(data, tmp_path))
    recs = _records(t)
    order = stream_order(12, "shuffle", 1)
    assert sorted(order) == list(range(12)) and order != list(range(12))
    # records are written in stream order and carry their position
    assert [r["index"] for r in recs] == order
    assert [r["stream_pos"] for r in recs] == list(range(12))
    folder = Path(t.output_dir())
    saved = json.loads((folder / "stream.json").read_text())
    assert saved["indices"] == order and saved["seed"] == 1 and saved["order"] == "shuffle"
    fp = json.loads((folder / "config.json").read_text())
    assert fp["STREAM.ORDER_SHA256"] == saved["sha256"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["stream"]["sha256"] == saved["sha256"] and summary["family"] == "online"
    # the default stream seed is the run's seed; another stream seed is another experiment
    other = _run(_cfg(data, tmp_path, **{"TTA.STREAM.SEED": 5}))
    assert Path(other.output_dir()).parent != folder.parent
    assert [r["index"] for r in _records(other)] == stream_order(12, "shuffle", 5)
    index = _run(_cfg(data, tmp_path, **{"TTA.STREAM.ORDER": "index"}))
    assert [r["index"] for r in _records(index)] == list(range(12))


def test_the_order_changes_the_numbers(data, tmp_path):
    a = _records(_run(_cfg(data, tmp_path / "a")))
    b = _records(_run(_cfg(data, tmp_path / "b", **{"TTA.STREAM.SEED": 5})))
    conf_a = {r["index"]: r["conf"] for r in a}
    conf_b = {r["index"]: r["conf"] for r in b}
    assert conf_a != conf_b    # the probe's state depends on what came before


@pytest.mark.parametrize("stop_after", [4, 11])   # 30 % and 90 % of 12 images
def test_resume_after_interruption_gives_identical_records(data, tmp_path, stop_after):
    full = _records(_run(_cfg(data, tmp_path / "full")))
    cfg = _cfg(data, tmp_path / "cut")
    t = _run(cfg, stop_after=stop_after)
    done = _records(t)
    assert len(done) < 12
    state = torch.load(Path(t.output_dir()) / "stream_state.pt", weights_only=True)
    assert state["position"] % 2 == 0 and state["position"] <= len(done)   # batch boundary
    resumed = _records(_run(cfg))
    assert resumed == full


def test_records_after_the_last_checkpoint_are_made_again(data, tmp_path, capsys):
    cfg = _cfg(data, tmp_path, **{"TTA.STREAM.CHECKPOINT_IMAGES": 8})
    t = _run(cfg, stop_after=6)          # records 0..5 written, state saved at 0 only
    assert len(_records(t)) == 6
    assert not (Path(t.output_dir()) / "stream_state.pt").exists()
    capsys.readouterr()
    cfg2 = cfg.clone()
    cfg2.defrost()
    cfg2.VERBOSE = True
    cfg2.freeze()
    _run(cfg2)
    assert "6 records after the last stream checkpoint" in capsys.readouterr().out
    assert [r["stream_pos"] for r in _records(t)] == list(range(12))


def test_online_methods_refuse_torchrun(data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="online method.*one process"):
        Probe(_cfg(data, tmp_path))


def test_a_prompt_tuning_method_refuses_the_features_engine(data, tmp_path):
    from argtca.trainers.methods import TPT
    with pytest.raises(ConfigError, match="TTA.ENGINE=features"):
        TPT(_cfg(data, tmp_path, **{"TTA.ENGINE": "features"}))


# ------------------------------------------------------------------ a real method, a real kill
@pytest.mark.parametrize("method", ["dmn", "dynaprompt"])
def test_sigkill_mid_stream_then_resume_gives_the_uninterrupted_records(tmp_path, one_thread,
                                                                       method):
    """DMN-ZS (state: its memory) and DynaPrompt (state: its prompt buffer, use counts and order)
    killed with SIGKILL at ~30 % and ~90 % of a 30-image stream, then resumed: the records equal
    an uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from argtca.run import main
    from conftest import REPO

    data = make_caltech(tmp_path / "data", per_class=10)

    def argv(out):
        return ["--root", str(data), "--seed", "1", "--output-dir", str(out),
                "--dataset-config-file", str(REPO / "configs/datasets/caltech101.yaml"),
                "--config-file", str(REPO / f"configs/trainers/{method}.yaml"),
                "MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
                "INPUT.SIZE", "32", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
                "VERBOSE", "False", "TTA.N_VIEWS", "8", "TTA.BATCH_IMAGES", "2",
                "TTA.STREAM.CHECKPOINT_IMAGES", "4"]

    assert main(argv(tmp_path / "full")) == 0
    full = [json.loads(x) for x in (tmp_path / "full/records.jsonl").read_text().splitlines()]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    for n_kill in (9, 27):
        out = tmp_path / f"cut{n_kill}"
        p = subprocess.Popen([sys.executable, "-c", "import sys, torch; torch.set_num_threads(1);"
                              " from argtca.run import main; sys.exit(main(sys.argv[1:]))",
                              *argv(out)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        rec = out / "records.jsonl"
        t0 = time.time()
        try:
            while not (rec.is_file() and rec.read_text().count("\n") >= n_kill):
                assert p.poll() is None and time.time() - t0 < 120, "run ended early"
                time.sleep(0.002)
        finally:
            p.kill()
            p.wait()
        assert p.returncode == -signal.SIGKILL
        assert n_kill <= len(rec.read_text().splitlines()) < 30
        assert main(argv(out)) == 0
        got = [json.loads(x) for x in rec.read_text().splitlines()]
        assert got == full


# ------------------------------------------------------------- the Stream value on its own
class _Counter:
    """The smallest online adapter: its state counts the images it has seen."""
    online = True

    def __init__(self):
        self.state, self.length = {"n": 0}, None

    def state_dict(self):
        return dict(self.state)

    def state_shapes(self, position):
        return {"n": position}

    def load_state_dict(self, state):
        self.state = dict(state)

    def begin_stream(self, n):
        self.length = n


def test_a_stream_of_10_killed_after_6_resumes_at_its_checkpoint_4(tmp_path):
    out = str(tmp_path)
    first = Stream(10, "shuffle", 1)
    fp = dict(first.fingerprint_keys(), SEED=1)
    assert first.resume(out, [], fp, "counter") == [] and first.position == 0
    assert first.pending([]) == first.order and sorted(first.order) == list(range(10))
    assert not first.due(3, 4) and first.due(4, 4)
    first.save(4, {"n": 4}, fp, "counter")          # the state after 4 images
    made = [{"index": i} for i in first.order[:6]]   # 6 records written, then killed
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in made))

    again = Stream(10, "shuffle", 1)
    kept = again.resume(out, made[::-1], fp, "counter")   # the file's order does not matter
    assert (again.position, again.dropped) == (4, 2)
    assert [r["index"] for r in kept] == first.order[:4]
    assert again.pending(kept) == first.order[4:]          # 6 images to run, in stream order
    assert json.loads((tmp_path / "stream.json").read_text())["indices"] == first.order
    assert [again.position_of(i) for i in first.order] == list(range(10))
    assert not again.due(7, 4) and again.due(8, 4) and again.due(10, 100)   # and at the end
    adapter = _Counter()
    again.restore(adapter, "Counter")
    assert adapter.state == {"n": 4} and adapter.length == 10
    # the 2 records after the checkpoint leave records.jsonl once the state is restored
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["index"] for x in lines] == first.order[:4]

    # another order (another stream seed) is refused in one line, naming the file
    other = Stream(10, "shuffle", 2)
    assert other.order != first.order
    with pytest.raises(RunFolderError) as e:
        other.resume(out, kept, dict(other.fingerprint_keys(), SEED=1), "counter")
    msg = str(e.value)
    assert "\n" not in msg and "stream_state.pt: saved for another stream order" in msg
    assert first.sha256 in msg and other.sha256 in msg
