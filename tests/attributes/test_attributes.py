"""argtca.attributes: the TCA attribute-file loader and its errors."""
import hashlib
import json
from pathlib import Path

import pytest

from argtca.attributes import (AttributeFileError, attribute_file_hash, dedupe_attributes,
                               load_attributes)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "tca_attributes"


def write(tmp_path, obj, name="attrs.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(p)


def test_load_exact_and_normalised_lookup(tmp_path):
    path = write(tmp_path, {"apple pie": "delicious pie sweet",
                            "Golden Retriever": "dog golden fur",
                            "golden_retriever": "dog  golden fur"})   # same class, same list
    out = load_attributes(path, ["apple_pie", "Golden Retriever", "golden retriever"], 3)
    assert list(out) == ["apple_pie", "Golden Retriever", "golden retriever"]
    assert out["apple_pie"] == ["delicious", "pie", "sweet"]          # '_' -> ' '
    assert out["Golden Retriever"] == ["dog", "golden", "fur"]        # exact key
    # no exact key: case-insensitive match with '_' as space
    assert out["golden retriever"] == ["dog", "golden", "fur"]
    # two keys of one class with different lists: refused (tests/config/test_input_config.py)


def test_dedupe_keeps_first_occurrence(tmp_path):
    path = write(tmp_path, {"a": "Red red  RED blue Blue green red"})
    assert load_attributes(path, ["a"], 7)["a"] == ["Red", "red", "RED", "blue", "Blue", "green",
                                                     "red"]
    assert load_attributes(path, ["a"], 3, dedupe=True)["a"] == ["Red", "blue", "green"]
    assert dedupe_attributes([" x", "X ", "y"]) == [" x", "y"]
    with pytest.raises(AttributeFileError, match=r"'a' has 3"):      # counted after dedupe
        load_attributes(path, ["a"], 4, dedupe=True)


def test_hash_is_sha256_of_content(tmp_path):
    path = write(tmp_path, {"a": "x y"})
    assert attribute_file_hash(path) == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    other = write(tmp_path, {"a": "x z"}, "b.json")
    assert attribute_file_hash(other) != attribute_file_hash(path)


def test_empty_path_says_where_files_come_from():
    with pytest.raises(AttributeFileError) as e:
        load_attributes("", ["a"], 1)
    msg = str(e.value)
    for part in ("rhebbalaguppe/TCA_PromptWithoutPanic", "TCA/Attributes", "_2_V.json",
                 "DATASET.ATTRIBUTE_FILE"):
        assert part in msg


def test_missing_file(tmp_path):
    p = str(tmp_path / "nope.json")
    with pytest.raises(AttributeFileError, match="not found") as e:
        load_attributes(p, ["a"], 1)
    assert p in str(e.value) and "DATASET.ATTRIBUTE_FILE" in str(e.value)


def test_malformed_json(tmp_path):
    p = write(tmp_path, '{"a": "x y",')
    with pytest.raises(AttributeFileError, match="not valid JSON") as e:
        load_attributes(p, ["a"], 1)
    assert p in str(e.value)


def test_not_a_dict_of_strings(tmp_path):
    with pytest.raises(AttributeFileError, match="holds a list"):
        load_attributes(write(tmp_path, ["x"]), ["a"], 1)
    p = write(tmp_path, {"a": "x", "b": ["y", "z"], "c": 3}, "b.json")
    with pytest.raises(AttributeFileError) as e:
        load_attributes(p, ["a"], 1)
    assert "'b': list" in str(e.value) and "'c': int" in str(e.value) and p in str(e.value)


def test_missing_classes_are_all_named(tmp_path):
    p = write(tmp_path, {"a": "x y"})
    with pytest.raises(AttributeFileError) as e:
        load_attributes(p, ["a", "zebra", "yak", "wolf"], 1)
    msg = str(e.value)
    assert "3 of the 4" in msg and all(f"'{c}'" in msg for c in ("zebra", "yak", "wolf"))


def test_too_few_attributes_names_class_and_count(tmp_path):
    p = write(tmp_path, {"a": "x y z", "b": "x", "c": "u v"})
    with pytest.raises(AttributeFileError) as e:
        load_attributes(p, ["a", "b", "c"], 3)
    msg = str(e.value)
    assert "'b' has 1" in msg and "'c' has 2" in msg and "'a'" not in msg


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/tca_attributes absent")
def test_real_files_load():
    files = sorted(SHARED.glob("*_2_V.json"))
    assert len(files) == 11
    for f in files:
        raw = json.loads(f.read_text())
        out = load_attributes(str(f), list(raw), 1)
        assert all(out[c] == raw[c].split() for c in raw)
    # hand count: DTD 'grid' repeats 5 words ("simple digital design pattern template")
    dtd = load_attributes(str(SHARED / "DescribableTextures_2_V.json"), ["grid"], 5, dedupe=True)
    assert dtd["grid"] == ["simple", "digital", "design", "pattern", "template"]
