"""A ``TRAINER.ARGTCA.GAT.TRAIN_ON`` vocabulary whose values are not attribute strings (an int,
null, an empty string, a list holding a number) is one line at load time naming the file, the
classes and their values, and the fix; before, ``[str(v) for v in 5]`` was an internal-error
traceback once Phase 1 started."""
import contextlib
import io
import json
from pathlib import Path

import pytest

from argtca.graph.nodes import GraphInputError
from argtca.graph.transfer import read_vocabulary, resolve_sources
from argtca.run import main
from helpers_data import make_caltech, write_attributes

REPO = Path(__file__).resolve().parents[2]
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "32", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False",
        "VERBOSE", "False", "TTA.N_VIEWS", "2"]


@pytest.mark.parametrize("values, shown", [
    ({"cat": 5, "dog": None}, "'cat': 5, 'dog': null"),
    ({"cat": "furry small", "dog": ""}, "'dog': \"\""),
    ({"cat": ["furry", 3]}, "'cat': [\"furry\", 3]"),
])
def test_bad_values_are_one_line_naming_the_file(tmp_path, values, shown):
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps(values))
    with pytest.raises(GraphInputError) as e:
        resolve_sources([str(vocab)], "", "x")
    assert str(e.value) == (
        f"TRAINER.ARGTCA.GAT.TRAIN_ON vocab.json: {vocab}: every class needs a string of "
        f"space-separated attributes (TCA format), but {shown}; fix these values in the file")


@pytest.mark.parametrize("text, why", [("[1, 2]", "is not a TCA attribute file"),
                                       ("{}", "is not a TCA attribute file"),
                                       ("{bad", "cannot be read as JSON")])
def test_not_an_object_or_not_json(tmp_path, text, why):
    vocab = tmp_path / "v.json"
    vocab.write_text(text)
    with pytest.raises(GraphInputError, match=rf"^TRAINER.ARGTCA.GAT.TRAIN_ON v.json: {vocab}"
                                              rf":? {why}.*; fix the file or the entry$"):
        resolve_sources([str(vocab)], "", "x")


def test_strings_and_lists_of_strings_read(tmp_path):
    vocab = tmp_path / "v.json"
    vocab.write_text(json.dumps({"cat": "furry  small", "dog": ["loyal", " wet "]}))
    assert read_vocabulary("x", str(vocab)) == {"cat": ["furry", "small"], "dog": ["loyal", "wet"]}


def test_run_command_says_it_in_one_line_before_any_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = make_caltech(tmp_path / "data")
    attrs = write_attributes(tmp_path / "attrs.json")
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"cat": 5, "dog": None}))
    out = tmp_path / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["--root", str(data), "--seed", "1", "--output-dir", str(out),
                   "--dataset-config-file", str(REPO / "configs/datasets/caltech101.yaml"),
                   "--config-file", str(REPO / "configs/trainers/argtca.yaml")] + TINY
                  + ["DATASET.ATTRIBUTE_FILE", str(attrs),
                     "TRAINER.ARGTCA.GAT.TRAIN_ON", f"['{vocab}']"])
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in err.getvalue(), err.getvalue()
    assert lines[-1] == (
        f"error: TRAINER.ARGTCA.GAT.TRAIN_ON vocab.json: {vocab}: every class needs a string of "
        f"space-separated attributes (TCA format), but 'cat': 5, 'dog': null; fix these values "
        f"in the file")
    assert not (out / "records.jsonl").exists()
