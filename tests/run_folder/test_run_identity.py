"""The identity of a run: one experiment = one folder
(``output/<method>/<dataset>/<hash8>/seed<N>``, hash8 naming every setting that can change a
number), inputs named by their content (sha256 of weights, attribute, split and plug-in files; a
file replaced at the same path is refused on resume, naming it and both hashes), derived files
checked (temperature.json), a run that recorded nothing replaced by a corrected one."""
import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from argtca.run import main
from helpers_data import make_caltech, write_attributes, make_caltech_with_val

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "32", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
        "VERBOSE", "False", "TTA.N_VIEWS", "4"]


def _args(root, method="tpt", *extra, out=None, seed=1):
    a = ["--root", str(root), "--seed", str(seed),
         "--dataset-config-file", str(REPO / "configs/datasets/caltech101.yaml"),
         "--config-file", str(REPO / f"configs/trainers/{method}.yaml")]
    if out is not None:
        a += ["--output-dir", str(out)]
    return a + TINY + list(extra)


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    """Default run folders are relative to the current folder: a fresh one per test."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def data(tmp_path):
    return make_caltech(tmp_path / "data")


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _err_lines(capsys):
    return [x for x in capsys.readouterr().err.splitlines() if x.strip()]


def _run_dirs(tmp_path, method="tpt"):
    return sorted(p for p in (tmp_path / "output" / method / "caltech101").glob("*/seed*"))


def _records(out):
    return (Path(out) / "records.jsonl").read_text().splitlines()


def _interrupt(out, keep=3):
    """As if the run had been killed after ``keep`` images."""
    lines = _records(out)
    (Path(out) / "records.jsonl").write_text("\n".join(lines[:keep]) + "\n")
    (Path(out) / "summary.json").unlink()


# ----------------------------------------------------------------------- one experiment, one folder
def test_two_settings_two_folders_same_settings_one(data, tmp_path, capsys):
    assert main(_args(data)) == 0
    out = capsys.readouterr().out
    dirs = _run_dirs(tmp_path)
    assert len(dirs) == 1 and dirs[0].name == "seed1" and len(dirs[0].parent.name) == 8
    assert f"argtca: run folder {dirs[0]}" in out          # absolute, printed at the start
    assert main(_args(data, "tpt", "TTA.LR", "0.01")) == 0        # another setting
    dirs = _run_dirs(tmp_path)
    assert len(dirs) == 2 and len({d.parent.name for d in dirs}) == 2
    for d in dirs:   # each folder holds its own six records, and says what it stands for
        assert len(_records(d)) == 6
    lr = {json.loads((d.parent / "settings.json").read_text())["overrides"].get("TTA.LR")
          for d in dirs}
    assert lr == {None, 0.01}                                 # 0.005 is the default
    # the same settings again: the finished folder is re-read, nothing recomputed
    before = {d: (d / "records.jsonl").read_text() for d in dirs}
    assert main(_args(data, "tpt", "TTA.LR", "0.01")) == 0
    assert _run_dirs(tmp_path) == dirs
    (d01,) = [d for d in dirs if json.loads((d.parent / "settings.json").read_text())[
        "overrides"].get("TTA.LR") == 0.01]
    assert json.loads((d01 / "summary.json").read_text())["images_this_session"] == 0
    assert {d: (d / "records.jsonl").read_text() for d in dirs} == before


def test_seeds_are_siblings_and_speed_keys_share_the_folder(data, tmp_path):
    assert main(_args(data)) == 0
    assert main(_args(data, seed=2)) == 0
    # loader workers and verbosity cannot change a number: the same folder (re-read)
    assert main(_args(data, "tpt", "DATALOADER.NUM_WORKERS", "1", "VERBOSE", "True")) == 0
    dirs = _run_dirs(tmp_path)
    assert [d.name for d in dirs] == ["seed1", "seed2"] and dirs[0].parent == dirs[1].parent
    s1 = json.loads((dirs[0] / "summary.json").read_text())
    assert s1["images_this_session"] == 0 and s1["experiment"] == dirs[0].parent.name
    # a subset of the test set is another experiment
    assert main(_args(data, "tpt", "DATASET.NUM_IMAGES", "4")) == 0
    assert len({d.parent for d in _run_dirs(tmp_path)}) == 2


def test_interrupted_default_run_resumes_in_its_folder(data, tmp_path):
    assert main(_args(data)) == 0
    (d,) = _run_dirs(tmp_path)
    full = _records(d)
    _interrupt(d)
    assert main(_args(data)) == 0
    assert _run_dirs(tmp_path) == [d] and _records(d) == full
    assert json.loads((d / "summary.json").read_text())["images_this_session"] == 3


def test_default_folder_helpers():
    from argtca.run_folder import experiment_hash
    from argtca.trainers.identity import default_output_dir
    fp = {"SEED": 3, "TTA.LR": 0.005, "TEST_SET.N_IMAGES": 6}
    want = hashlib.sha256(json.dumps({"TEST_SET.N_IMAGES": 6, "TTA.LR": 0.005},
                                     sort_keys=True).encode()).hexdigest()[:8]
    assert experiment_hash(fp) == want == experiment_hash(dict(fp, SEED=1))
    assert experiment_hash(dict(fp, **{"TTA.LR": 0.01})) != want
    assert default_output_dir("tpt", "demo", fp) == os.path.join("output", "tpt", "demo", want,
                                                                   "seed3")


def test_explicit_output_dir_still_refuses_other_settings(data, tmp_path, capsys):
    out = tmp_path / "mine"
    assert main(_args(data, out=out)) == 0
    capsys.readouterr()
    assert main(_args(data, "tpt", "TTA.LR", "0.01", out=out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "TTA.LR: 0.005 -> 0.01" in err[0]
    assert not (tmp_path / "output").exists()


@pytest.mark.parametrize("explicit", [True, False])
def test_run_that_failed_before_its_first_record_does_not_block(data, tmp_path, capsys,
                                                                explicit):
    """Weights not found: the run stops in one line and leaves no folder behind (nothing it made
    is left: config.json, run.lock, the experiment folder); the corrected command runs."""
    out = tmp_path / "mine" if explicit else None
    missing = tmp_path / "nowhere" / "ViT-B-16.pt"
    assert main(_args(data, "tpt", "MODEL.PRETRAINED", str(missing), out=out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and str(missing) in err[0]
    assert not (out.exists() if explicit else _run_dirs(tmp_path))
    assert main(_args(data, out=out)) == 0
    run = out if explicit else [d for d in _run_dirs(tmp_path)
                                if (d / "summary.json").is_file()][0]
    assert len(_records(run)) == 6
    assert json.loads((run / "config.json").read_text())["MODEL.PRETRAINED"] == "random"


def test_a_folder_with_records_is_never_taken_over(data, tmp_path, capsys):
    out = tmp_path / "mine"
    assert main(_args(data, out=out)) == 0
    _interrupt(out, keep=1)
    capsys.readouterr()
    assert main(_args(data, "tpt", "TTA.STEPS", "2", out=out)) == 2
    assert "different configuration" in capsys.readouterr().err
    assert len(_records(out)) == 1


# ------------------------------------------------------------------------- inputs by content
@pytest.fixture
def weights(tmp_path):
    from argtca.models.clip import load_clip
    from conftest import tiny_cfg

    def make(path, seed):
        torch.manual_seed(seed)
        model, _ = load_clip(tiny_cfg())
        torch.save(model.state_dict(), path)
        return path
    return make


def test_weights_replaced_at_the_same_path_is_refused(data, tmp_path, capsys, weights):
    w = weights(tmp_path / "w.pt", 0)
    out = tmp_path / "mine"
    assert main(_args(data, "tpt", "MODEL.PRETRAINED", str(w), out=out)) == 0
    summary = json.loads((out / "summary.json").read_text())
    old = _sha(w)
    assert summary["inputs"]["MODEL.PRETRAINED"] == {"path": str(w), "sha256": old}
    assert json.loads((out / "config.json").read_text())["FILE_SHA256.MODEL.PRETRAINED"] == old
    _interrupt(out)
    kept = _records(out)
    weights(w, 1)                                   # other weights, same path
    new = _sha(w)
    assert new != old
    capsys.readouterr()
    assert main(_args(data, "tpt", "MODEL.PRETRAINED", str(w), out=out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and str(w) in err[0] and old in err[0] and new in err[0]
    assert "MODEL.PRETRAINED" in err[0] and "changed since these records were made" in err[0]
    assert _records(out) == kept
    # without --output-dir the two weights files are two experiments
    assert main(_args(data, "tpt", "MODEL.PRETRAINED", str(w))) == 0
    weights(w, 0)
    assert main(_args(data, "tpt", "MODEL.PRETRAINED", str(w))) == 0
    dirs = _run_dirs(tmp_path)
    assert len({d.parent for d in dirs}) == 2
    hashes = {json.loads((d / "summary.json").read_text())["inputs"]["MODEL.PRETRAINED"]["sha256"]
              for d in dirs}
    assert hashes == {old, new}


def test_attribute_file_replaced_is_refused(data, tmp_path, capsys):
    attrs = write_attributes(tmp_path / "attrs.json")
    out = tmp_path / "tca"
    a = ["DATASET.ATTRIBUTE_FILE", str(attrs)]
    assert main(_args(data, "tca", *a, out=out)) == 0
    old = _sha(attrs)
    assert json.loads((out / "summary.json").read_text())["inputs"]["DATASET.ATTRIBUTE_FILE"][
        "sha256"] == old
    _interrupt(out)
    table = json.loads(attrs.read_text())
    first = next(iter(table))
    table[first] = " ".join(reversed(str(table[first]).split()))   # other attributes first
    attrs.write_text(json.dumps(table))
    capsys.readouterr()
    assert main(_args(data, "tca", *a, out=out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and str(attrs) in err[0] and old in err[0] and _sha(attrs) in err[0]


def test_split_file_and_plugin_changes_are_refused(data, tmp_path, capsys):
    # a plug-in the run uses (its selector); one it does not use is not an input of the run
    # (tests/plugins/test_plugin_scope.py)
    rule = ("from argtca.registry import SELECTOR_REGISTRY\n"
            "from argtca.selectors.rand import select_random\n"
            "X = {}\n"
            "@SELECTOR_REGISTRY.register(name='zz_split', needs_graph=False, override=True)\n"
            "def pick(*a, **kw):\n"
            "    return select_random(*a, **kw)\n")
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(rule.format(1))
    attrs = write_attributes(tmp_path / "attrs.json")
    out = tmp_path / "run"
    args = ["--plugin", str(plugin)] + _args(data, "argtca", "TRAINER.ARGTCA.SELECTOR", "zz_split",
                                             "DATASET.ATTRIBUTE_FILE", str(attrs), out=out)
    assert main(args) == 0
    fp = json.loads((out / "config.json").read_text())
    split = data / "caltech-101" / "split_zhou_Caltech101.json"
    assert fp["FILE_SHA256.PLUGIN.my_plugin"] == _sha(plugin)
    assert fp["FILE_SHA256.SPLIT_FILE"] == _sha(split)
    _interrupt(out)
    plugin.write_text(rule.format(2))
    capsys.readouterr()
    assert main(args) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and str(plugin) in err[0] and _sha(plugin) in err[0]
    plugin.write_text(rule.format(1))
    # the split file's val part changes (the test images stay): still another input
    s = json.loads(split.read_text())
    s["val"] = s["test"][:2]
    old = _sha(split)
    split.write_text(json.dumps(s))
    assert main(args) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and str(split) in err[0] and old in err[0] and _sha(split) in err[0]
    assert "TEST_SET" not in err[0]
    split.write_text(json.dumps(dict(s, val=s["train"])))   # back to the original content
    assert _sha(split) == old
    assert main(args) == 0


def test_a_folder_from_before_input_hashes_is_upgraded(data, tmp_path):
    out = tmp_path / "run"
    assert main(_args(data, out=out)) == 0
    fp = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(
        {k: v for k, v in fp.items() if not k.startswith("FILE_SHA256.")}))
    assert main(_args(data, out=out)) == 0
    assert json.loads((out / "config.json").read_text()) == fp


def test_file_hash_is_cached_by_file_version(tmp_path, monkeypatch):
    from argtca.utils import hashing
    monkeypatch.setattr(hashing, "RACY_SECONDS", 0.0)   # a file just written is cached too
    p = tmp_path / "w.bin"
    p.write_bytes(b"a" * 1000)
    want = hashlib.sha256(b"a" * 1000).hexdigest()
    assert hashing.file_sha256(str(p)) == want
    disk = json.loads(Path(hashing.hash_cache_path()).read_text())
    assert disk[str(p.resolve())]["sha256"] == want
    hashing._MEMO.clear()   # a new process: the on-disk cache answers, the file is not read

    class NoHash:
        def __init__(self, *a):
            raise AssertionError("hashed again")
    monkeypatch.setattr(hashing.hashlib, "sha256", NoHash)
    assert hashing.file_sha256(str(p)) == want
    monkeypatch.undo()
    monkeypatch.setattr(hashing, "RACY_SECONDS", 0.0)
    p.write_bytes(b"b" * 1000)                  # same size, new content and mtime
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10 ** 9))
    assert hashing.file_sha256(str(p)) == hashlib.sha256(b"b" * 1000).hexdigest()
    disk = json.loads(Path(hashing.hash_cache_path()).read_text())
    assert disk[str(p.resolve())]["sha256"] == hashlib.sha256(b"b" * 1000).hexdigest()


# ------------------------------------------------------------------------- derived: temperature
@pytest.fixture
def ts_data(tmp_path):
    return make_caltech_with_val(tmp_path / "ts")


def _ts_args(root, out):
    return _args(root, "zeroshot_ts", "TRAINER.TS.FIT_ON", "zeroshot", out=out)


def test_deleted_or_edited_temperature_is_refused_not_replaced(ts_data, tmp_path, capsys):
    out = tmp_path / "ts"
    assert main(_ts_args(ts_data, out)) == 0
    T = json.loads((out / "temperature.json").read_text())["T"]
    s = json.loads((out / "summary.json").read_text())
    assert s["temperature"]["T"] == T and T != 1.16
    assert s["temperature"]["sha256"] == _sha(out / "temperature.json")
    saved = (out / "temperature.json").read_bytes()
    # finished run, temperature.json deleted: refused (today: the config's T = 1.16 reported)
    (out / "temperature.json").unlink()
    capsys.readouterr()
    assert main(_ts_args(ts_data, out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "temperature.json" in err[0] and "restore it" in err[0]
    assert json.loads((out / "summary.json").read_text())["temperature"]["T"] == T
    # interrupted run, temperature.json deleted: refused too (records made with the old T)
    _interrupt(out, keep=2)
    assert main(_ts_args(ts_data, out)) == 2
    assert "temperature.json is missing" in _err_lines(capsys)[0]
    # edited by hand: refused naming both hashes
    edited = json.loads(saved)
    edited["T"] = 2.0
    (out / "temperature.json").write_text(json.dumps(edited, indent=1))
    assert main(_ts_args(ts_data, out)) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and hashlib.sha256(saved).hexdigest() in err[0]
    assert _sha(out / "temperature.json") in err[0]
    # restored: resumes with the T the records were made with
    (out / "temperature.json").write_bytes(saved)
    assert main(_ts_args(ts_data, out)) == 0
    assert json.loads((out / "summary.json").read_text())["temperature"]["T"] == T


def test_missing_temperature_before_any_record_is_fitted_again(ts_data, tmp_path):
    out = tmp_path / "ts"
    assert main(_ts_args(ts_data, out)) == 0
    T = json.loads((out / "temperature.json").read_text())["T"]
    full = _records(out)
    (out / "records.jsonl").unlink()
    (out / "summary.json").unlink()
    (out / "temperature.json").unlink()
    assert main(_ts_args(ts_data, out)) == 0
    assert json.loads((out / "temperature.json").read_text())["T"] == pytest.approx(T, abs=1e-9)
    assert _records(out) == full


def test_argtca_graph_vocabulary_file_is_an_input(data, tmp_path):
    """GAT.TRAIN_ON files train the graph: they are inputs (checked before Phase 1 runs)."""
    from argtca.run_folder import ConfigMismatchError, check_or_write_fingerprint
    from argtca.run import build_parser, build_trainer, setup_cfg
    attrs = write_attributes(tmp_path / "attrs.json")
    vocab = write_attributes(tmp_path / "vocab.json")
    out = tmp_path / "argtca"
    args = _args(data, "argtca", "DATASET.ATTRIBUTE_FILE", str(attrs),
                 "TRAINER.ARGTCA.GAT.TRAIN_ON", f"['{vocab}']", out=out)

    def trainer():
        return build_trainer(setup_cfg(build_parser().parse_args(args)))
    t = trainer()
    fp = t.fingerprint()
    old = _sha(vocab)
    assert fp["FILE_SHA256.TRAINER.ARGTCA.GAT.TRAIN_ON.vocab.json"] == old
    assert fp["FILE_SHA256.DATASET.ATTRIBUTE_FILE"] == _sha(attrs)
    out.mkdir()
    check_or_write_fingerprint(str(out), fp, t.input_paths)
    (out / "records.jsonl").write_text(json.dumps(
        {"index": 0, "path": t.dataset.test[0].impath, "label": 0, "pred": 0, "conf": 0.5}) + "\n")
    table = json.loads(vocab.read_text())
    table["extra class"] = "big small"
    vocab.write_text(json.dumps(table))
    t = trainer()
    with pytest.raises(ConfigMismatchError) as e:
        check_or_write_fingerprint(str(out), t.fingerprint(), t.input_paths)
    assert str(vocab) in str(e.value) and old in str(e.value) and _sha(vocab) in str(e.value)
