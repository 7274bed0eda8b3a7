"""An episodic adapter cannot carry state from batch to batch: whatever a plug-in's adapter does
to itself (its text features edited in place, an attribute grown), the next batch sees it as it
was built, so a resumed run equals an uninterrupted one, and the run says what was undone."""
import json
import subprocess
import sys

from conftest import REPO

LEAKY = '''
import torch
from argtca.adapters import Adapter
from argtca.plugins import method


@method("leaky", family="training-free")
class Leaky(Adapter):
    """Zero-shot CLIP that shifts its class features after every batch (a bug a user might
    write): left alone, batch n would see the classes rolled n times."""

    @classmethod
    def needs_views(cls, node, cfg):
        return False

    def __call__(self, img):
        probs = self.clip_logits(img[:, 0]).softmax(-1)
        self.text[:] = torch.roll(self.text, 1, 0)
        self.seen = getattr(self, "seen", 0) + img.shape[0]
        return probs
'''


def _run(tmp_path, out, plugin):
    return subprocess.run(
        [sys.executable, "-m", "argtca.run", "--plugin", str(plugin), "--trainer", "leaky",
         "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"), "--output-dir",
         str(out), "DATASET.NUM_IMAGES", "16", "TTA.BATCH_IMAGES", "4", "USE_CUDA", "False",
         "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False"],
        capture_output=True, text=True, cwd=str(tmp_path), timeout=600)


def _records(out):
    return sorted((json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()),
                  key=lambda r: r["index"])


def test_an_adapter_that_edits_its_text_features_cannot_affect_later_batches(tmp_path):
    plugin = tmp_path / "leaky.py"
    plugin.write_text(LEAKY)
    whole = tmp_path / "whole"
    r = _run(tmp_path, whole, plugin)
    assert r.returncode == 0, r.stderr
    assert "changed seen, text during a batch; each batch saw it as built" in r.stdout, r.stdout
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["adapter_state_undone"] == ["seen", "text"]
    # killed after its first batch, then resumed
    part = tmp_path / "part"
    assert _run(tmp_path, part, plugin).returncode == 0
    lines = (part / "records.jsonl").read_text().splitlines(True)
    (part / "records.jsonl").write_text("".join(lines[:4]))
    (part / "summary.json").unlink()
    r = _run(tmp_path, part, plugin)
    assert r.returncode == 0, r.stderr
    assert _records(part) == _records(whole)
    # every batch saw the classes as built: each prediction is zero-shot CLIP's own
    zs = tmp_path / "zs"
    r = subprocess.run(
        [sys.executable, "-m", "argtca.run", "--trainer", "zeroshot", "--dataset-config-file",
         str(REPO / "configs/datasets/demo.yaml"), "--output-dir", str(zs),
         "DATASET.NUM_IMAGES", "16", "USE_CUDA", "False", "DATALOADER.NUM_WORKERS", "0",
         "VERBOSE", "False"], capture_output=True, text=True, cwd=str(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr
    assert [x["pred"] for x in _records(whole)] == [x["pred"] for x in _records(zs)]


def test_containers_of_tensors_are_given_back_and_named():
    """A list or dict of tensors grown or replaced in a batch is given back as built; telling
    whether it changed compares its items by identity (``==`` on tensors would raise)."""
    import torch
    from argtca.engine.features import EpisodicState

    class Holder:
        pass

    a = Holder()
    a.text, a.cache, a.table = torch.ones(2, 2), [torch.zeros(3)], {"x": torch.ones(1)}
    state = EpisodicState(a)
    a.cache[0] = torch.ones(3)         # same length, another tensor
    a.table["x"] = torch.zeros(1)
    state.restore(a)
    assert state.changed() == ["cache", "table"]
    assert float(a.cache[0].sum()) == 0 and float(a.table["x"].sum()) == 1
    fresh = EpisodicState(a)
    fresh.restore(a)
    assert fresh.changed() == []
