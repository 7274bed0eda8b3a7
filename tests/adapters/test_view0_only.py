"""Where a method's rule reads view 0 alone (TDA and DPE on the fine-grained sets, as their
official runners), the loader makes one view an image: the records equal a run fed every view."""
import json

import pytest

from argtca.registry import ADAPTER_REGISTRY
from argtca.run import main
from conftest import REPO


def _records(folder):
    return [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines() if x]


@pytest.mark.parametrize("method, key", [("tda", "TDA"), ("dpe", "DPE")])
def test_view0_methods_load_one_view_and_give_the_same_records(tmp_path, monkeypatch, method,
                                                               key):
    monkeypatch.chdir(REPO)
    import argtca.adapters  # noqa: F401
    cls = ADAPTER_REGISTRY.get(method)

    def run(out):
        argv = ["--dataset-config-file", "configs/datasets/demo.yaml", "--config-file",
                f"configs/trainers/{method}.yaml", "--output-dir", str(out),
                "DATASET.NUM_IMAGES", "16", "TTA.N_VIEWS", "8", "TTA.BATCH_IMAGES", "4",
                "USE_CUDA", "False", "VERBOSE", "False", "DATALOADER.NUM_WORKERS", "0"]
        assert main(argv) == 0
        return _records(out)

    seen = []
    real = cls.__call__

    def spy(self, img):
        seen.append(int(img.shape[1]))
        return real(self, img)

    monkeypatch.setattr(cls, "__call__", spy)
    one = run(tmp_path / "one")
    assert set(seen) == {1}                      # the demo is not an ImageNet set: view 0 only
    seen.clear()
    monkeypatch.setattr(cls, "needs_views", classmethod(lambda c, node, cfg: True))
    every = run(tmp_path / "every")
    assert set(seen) == {8}
    assert one == every
