"""argtca/engine/pipeline.py: one batch in flight, finished work handed out before a failure,
and FastEngine.submit == FastEngine.__call__."""
import pytest
import torch

from argtca.engine.fast import FastEngine
from argtca.engine.pipeline import predictions
from argtca.models.text import PromptTextEncoder
from conftest import tiny_cfg
from test_fast_engine import CLASSES, _objective, _views


class _Job:
    def __init__(self, log, i, fail=False):
        self.log, self.i, self.fail = log, i, fail

    def result(self):
        self.log.append(("result", self.i))
        if self.fail:
            raise ValueError(f"batch {self.i} is broken")
        return torch.full((1, 2), float(self.i))


class _Engine:
    def __init__(self, asynchronous, fail_submit_at=None, fail_result_at=None):
        self.asynchronous = asynchronous
        self.log = []
        self.fail_submit_at, self.fail_result_at = fail_submit_at, fail_result_at

    def prepare(self):
        self.log.append(("prepare",))

    def submit(self, views, paths):
        i = int(views)
        if i == self.fail_submit_at:
            raise KeyboardInterrupt
        self.log.append(("submit", i))
        return _Job(self.log, i, fail=i == self.fail_result_at)


def _batches(n):
    return [{"views": i, "path": [f"{i}.jpg"]} for i in range(n)]


def test_one_batch_in_flight_in_order():
    eng = _Engine(asynchronous=True)
    out = [(b["views"], float(p[0, 0])) for b, p in predictions(eng, _batches(3))]
    assert out == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert eng.log == [("prepare",), ("submit", 0), ("submit", 1), ("result", 0),
                       ("submit", 2), ("result", 1), ("result", 2)]


def test_the_timeline_counts_the_batches():
    from argtca.engine.pipeline import loop_timing
    clock = {}
    list(predictions(_Engine(asynchronous=True), _batches(3), clock))
    assert (clock["images_first"], clock["images"]) == (1, 3)       # 1 row of probs per batch
    assert 0 <= clock["prepare"] <= clock["first_s"] <= clock["last_s"]
    # 400 images after the first batch of 16 in 4 s: 100 img/s
    got = loop_timing({"prepare": 0.514, "first_s": 2.0, "last_s": 6.0, "images_first": 16,
                       "images": 416})
    assert got == {"prepare_s": 0.51, "first_batch_s": 2.0, "steady_img_per_s": 100.0}
    assert loop_timing({"prepare": 0.0, "images": 0}) == {"prepare_s": 0.0}   # nothing ran
    assert [m[1] for m in clock["marks"]] == [1, 2, 3]    # images so far after each batch


def test_the_later_half_and_the_workers_pace():
    """The engine used up views made ahead: 16 images a batch, the first done at 5 s, the next
    8 at 0.1 s each (the backlog), the last 8 at 0.4 s each; the later half begins at the batch
    that passed 136 of 272 images (the 9th, at 5.8 s): 128 images in 3.2 s = 40 img/s. Four
    workers took 0.05 s an image: they make 80 img/s."""
    from argtca.engine.pipeline import loop_timing
    marks = [(5.0, 16)] + [(5.0 + 0.1 * i, 16 + 16 * i) for i in range(1, 9)] \
        + [(5.8 + 0.4 * i, 144 + 16 * i) for i in range(1, 9)]
    clock = {"prepare": 0.0, "first_s": 5.0, "last_s": marks[-1][0], "images_first": 16,
             "images": 272, "marks": marks}
    got = loop_timing(clock, {"workers": 1.0, "views": 0.0, "made": 0.05 * 272, "items": 272,
                              "n_workers": 4})
    assert got["steady_img_per_s"] == round(256 / 4.0, 2)          # 64: the backlog's share
    assert got["late_img_per_s"] == 40.0 and got["workers_img_per_s"] == 80.0
    # fewer than 3 batches: no later half; no workers (the main process made the views): none
    two = dict(clock, marks=marks[:2], images=32, last_s=5.1)
    got = loop_timing(two, {"workers": 0.0, "views": 0.0, "made": 1.0, "items": 32,
                            "n_workers": 0})
    assert "late_img_per_s" not in got and "workers_img_per_s" not in got


def test_synchronous_engines_run_one_batch_at_a_time():
    eng = _Engine(asynchronous=False)
    list(predictions(eng, _batches(2)))
    assert eng.log == [("prepare",), ("submit", 0), ("result", 0), ("submit", 1), ("result", 1)]


def test_finished_batch_is_handed_out_before_an_interrupt():
    eng = _Engine(asynchronous=True, fail_submit_at=2)
    got = []
    with pytest.raises(KeyboardInterrupt):
        for b, p in predictions(eng, _batches(4)):
            got.append(b["views"])
    assert got == [0, 1]                    # batch 1 was finished when batch 2 was interrupted


def test_a_failing_check_stops_at_that_batch():
    eng = _Engine(asynchronous=True, fail_result_at=1)
    got = []
    with pytest.raises(ValueError, match="batch 1"):
        for b, p in predictions(eng, _batches(4)):
            got.append(b["views"])
    assert got == [0]


def test_fast_submit_equals_call(tiny_clip, one_thread):
    model, tok = tiny_clip
    enc = PromptTextEncoder(model, tok, [f"{c}." for c in CLASSES])
    fast = FastEngine(model, enc, _objective("ctpt"), tiny_cfg(), "cpu")
    assert fast.asynchronous is False       # CPU: nothing to overlap
    views = _views(12, B=3)
    fast.prepare()
    assert torch.allclose(fast.submit(views).result(), fast(views).float(), atol=1e-6)


def _tiny_trainer(tmp_path, workers):
    from argtca.bench.data import make_synthetic_coop
    from argtca.registry import TRAINER_REGISTRY
    import argtca.trainers  # noqa: F401
    make_synthetic_coop(str(tmp_path / "data"), n_images=6, n_classes=3, pool=6, size=(48, 36))
    cfg = tiny_cfg(**{"TRAINER.NAME": "TPT", "DATASET.NAME": "Caltech101",
                      "DATASET.ROOT": str(tmp_path / "data"), "OUTPUT_DIR": str(tmp_path / "out"),
                      "TTA.N_VIEWS": 4, "TTA.ENGINE": "fast", "TTA.BATCH_IMAGES": 2,
                      "DATALOADER.NUM_WORKERS": workers})
    cfg.freeze()
    return TRAINER_REGISTRY.get("TPT")(cfg)


def test_loader_workers_start_at_start_and_continue(tmp_path):
    """start() forks the workers at once (not at the first next()); iterating afterwards goes on
    from them: every image once, in order. A plain iter() also starts them at once."""
    import multiprocessing as mp
    tr = _tiny_trainer(tmp_path, workers=2)
    before = set(mp.active_children())   # by identity: an older child may exit meanwhile
    ld = tr.views_loader([0, 1, 2, 3, 4]).start()
    assert len(set(mp.active_children()) - before) == 2          # forked, nothing asked yet
    assert [int(i) for b in ld for i in b["index"]] == [0, 1, 2, 3, 4]
    ld2 = tr.views_loader([5])
    it = iter(ld2)
    assert len(set(mp.active_children()) - before) == 4
    assert [int(i) for b in it for i in b["index"]] == [5]


def test_the_trainer_starts_the_workers_before_it_builds_the_model(tmp_path, monkeypatch):
    import multiprocessing as mp
    tr = _tiny_trainer(tmp_path, workers=2)
    seen = []
    build = type(tr).build_model

    def build_model(self):
        # the loader's 2 workers are up already (counted by identity: a child left by an
        # earlier test may exit meanwhile)
        seen.append(len(set(mp.active_children()) - before))
        build(self)
    monkeypatch.setattr(type(tr), "build_model", build_model)
    before = set(mp.active_children())
    s = tr.test()
    assert seen == [2] and s["n"] == 6


def test_a_failed_build_leaves_no_workers_and_no_records(tmp_path, monkeypatch):
    """The workers start before the model is built; when the build fails, its error reaches the
    caller and the workers go with the loader."""
    import gc
    import multiprocessing as mp
    import time
    tr = _tiny_trainer(tmp_path, workers=2)
    before = set(mp.active_children())   # by identity: an older child may exit meanwhile
    started = []

    def broken(self):
        started.extend(set(mp.active_children()) - before)
        assert len(started) == 2
        raise ValueError("weights file x.pt: wrong width; fix it")
    monkeypatch.setattr(type(tr), "build_model", broken)
    with pytest.raises(ValueError, match="wrong width"):
        tr.test()
    gc.collect()
    deadline = time.time() + 30
    while any(p.is_alive() for p in started) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(p.is_alive() for p in started)
    assert not (tmp_path / "out" / "records.jsonl").exists() or \
        (tmp_path / "out" / "records.jsonl").read_text() == ""


def test_the_bound_is_where_the_host_thread_spent_the_loop():
    from argtca.engine.pipeline import loop_bound, loop_timing
    # an engine running ahead: result() waits for the device, submit() only queues
    clock = {"prepare": 1.0, "result": 6.0, "submit": 0.5, "asynchronous": True,
             "first_s": 2.0, "last_s": 11.0, "images_first": 16, "images": 64}
    t = dict(loop_timing(clock, {"workers": 2.0, "views": 0.25}), loop_s=11.0)
    assert (t["engine_s"], t["launch_s"], t["wait_workers_s"], t["views_s"]) == (6.0, 0.5, 2.0,
                                                                                 0.25)
    # 10 s after the per-dataset work: 2 waiting for workers, 6 for the GPU, 2 the main thread's
    assert loop_bound(t, "cuda") == {"bound": "GPU", "shares": {
        "views workers": 0.2, "engine": 0.6, "main process": 0.2}}
    assert loop_bound(t, "cpu")["bound"] == "engine (CPU)"
    # a synchronous engine computes in submit(): that is the engine's time too
    sync = dict(clock, asynchronous=False, result=0.5, submit=1.5)
    t = dict(loop_timing(sync, {"workers": 6.5, "views": 0.0}), loop_s=11.0)
    assert t["engine_s"] == 2.0 and t["launch_s"] == 0.0
    assert loop_bound(t, "cuda") == {"bound": "views workers", "shares": {
        "views workers": 0.65, "engine": 0.2, "main process": 0.15}}
    # the main thread's own work (views on the device side, records) left over
    t = dict(loop_timing(sync, {"workers": 1.0, "views": 5.0}), loop_s=11.0)
    assert loop_bound(t, "cuda")["bound"] == "main process"
    # waits clocked apart from the loop that add up to more than it (10 s): shares of their sum
    t = dict(loop_timing(sync, {"workers": 10.0, "views": 0.0}), loop_s=11.0)
    assert loop_bound(t, "cuda") == {"bound": "views workers", "shares": {
        "views workers": round(10 / 12, 3), "engine": round(2 / 12, 3), "main process": 0.0}}
    # a clock without the host split (an older summary) has no bound
    assert loop_bound({"loop_s": 3.0, "prepare_s": 0.0}) == {}
