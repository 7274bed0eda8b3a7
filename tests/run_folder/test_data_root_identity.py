"""Where the data is mounted is not part of a run's identity: the same test set under /data or a
node's /scratch is one experiment (one folder, one report cell), identified by its content
(root-relative paths and labels, class names, split files by sha256). An own ImageFolder keeps
its location (its file names are the user's: two folders may hold other images under the same
names). Run folders written while DATASET.ROOT was in the fingerprint still resume."""
import json
import os
from types import SimpleNamespace

import pytest

from argtca.config import get_cfg_default
from argtca.run_folder import (NON_RESULT_KEYS, ConfigMismatchError,
                               check_or_write_fingerprint, experiment_hash,
                               run_fingerprint)
from argtca.report.identity import is_result_key, settings_of


class Demoish(SimpleNamespace):
    pass


class ImageFolder(SimpleNamespace):   # the name is what marks an own folder
    pass


def _ds(cls, root):
    items = [SimpleNamespace(impath=os.path.join(root, c, f"{i}.jpg"), label=k)
             for k, c in enumerate(["cat", "dog"]) for i in range(3)]
    return cls(root=root, test=items, classnames=["cat", "dog"])


def _cfg(root):
    cfg = get_cfg_default()
    cfg.DATASET.ROOT = root
    return cfg


def test_data_root_and_output_root_are_not_result_keys():
    assert {"DATASET.ROOT", "OUTPUT_ROOT"} <= NON_RESULT_KEYS
    assert not is_result_key("DATASET.ROOT") and not is_result_key("OUTPUT_ROOT")
    # the report never splits cells by it, old config.json files included
    assert "DATASET.ROOT" not in settings_of({"DATASET.ROOT": "/data"}, {})


def test_same_data_at_another_root_is_one_experiment():
    a = run_fingerprint(_cfg("/data"), _ds(Demoish, "/data"), "cpu")
    b = run_fingerprint(_cfg("/scratch/u1"), _ds(Demoish, "/scratch/u1"), "cpu")
    assert a == b and experiment_hash(a) == experiment_hash(b)
    assert "DATASET.ROOT" not in a and "TEST_SET.ROOT" not in a
    # other images (another relative path) are another experiment wherever they are
    other = _ds(Demoish, "/data")
    other.test[0].impath = "/data/cat/9.jpg"
    assert run_fingerprint(_cfg("/data"), other, "cpu") != a


def test_own_image_folder_keeps_its_location():
    a = run_fingerprint(_cfg("/photos/day"), _ds(ImageFolder, "/photos/day"), "cpu")
    b = run_fingerprint(_cfg("/photos/night"), _ds(ImageFolder, "/photos/night"), "cpu")
    assert a["TEST_SET.ROOT"] == "/photos/day" and b["TEST_SET.ROOT"] == "/photos/night"
    assert a["TEST_SET.ITEMS_SHA256"] == b["TEST_SET.ITEMS_SHA256"]   # same names, other images
    assert experiment_hash(a) != experiment_hash(b)


def _old_folder(tmp_path, fp, root):
    """A folder written while DATASET.ROOT was in the fingerprint, with one record."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(dict(fp, **{"DATASET.ROOT": root})))
    (d / "records.jsonl").write_text('{"index": 0, "pred": 0, "label": 0, "conf": 0.9}\n')
    return d


def test_old_folder_resumes_at_another_root(tmp_path):
    old = run_fingerprint(_cfg("/data"), _ds(Demoish, "/data"), "cpu")
    d = _old_folder(tmp_path, old, "/data")
    new = run_fingerprint(_cfg("/scratch"), _ds(Demoish, "/scratch"), "cpu")
    check_or_write_fingerprint(str(d), new)          # no refusal: the same test set
    assert json.loads((d / "config.json").read_text()) == new   # upgraded, without the root
    check_or_write_fingerprint(str(d), new)


def test_old_image_folder_resumes_in_place_only(tmp_path):
    fp = run_fingerprint(_cfg("/photos/day"), _ds(ImageFolder, "/photos/day"), "cpu")
    old = {k: v for k, v in fp.items() if k != "TEST_SET.ROOT"}
    d = _old_folder(tmp_path, old, "/photos/day")
    check_or_write_fingerprint(str(d), fp)
    assert json.loads((d / "config.json").read_text()) == fp
    (d / "config.json").write_text(json.dumps(dict(old, **{"DATASET.ROOT": "/photos/day"})))
    night = run_fingerprint(_cfg("/photos/night"), _ds(ImageFolder, "/photos/night"), "cpu")
    with pytest.raises(ConfigMismatchError, match="TEST_SET.ROOT"):
        check_or_write_fingerprint(str(d), night)
