"""A dataset declares itself once, on its class: its key, aliases, display name, report column
and the tables it belongs to; every list of datasets is derived from the registry, and no hand
list of dataset names is left in the package or the scripts."""
import ast
import re

from argtca.data.sources import SOURCES
from argtca.datasets.catalogue import (ablation_datasets, canon, dataset_classes, display_name,
                                       report_rank, shift_datasets, table1_datasets)
from conftest import REPO


def _names():
    out = set()
    for c in dataset_classes():
        out |= {c.key, c.__name__, *c.aliases}
    return out


def hand_lists(text: str, names, python: bool):
    """Places listing >= 3 dataset names by hand: a Python container of >= 3 of them, or a run
    of >= 3 separated only by spaces, commas, bars or slashes in a string or shell line."""
    alt = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
    run = re.compile(r"(?<![\w.-])(?:%s)(?:[\s,|/]+(?:%s)){2,}(?![\w-])" % (alt, alt))
    found = []
    if python:
        for node in ast.walk(ast.parse(text)):
            # a dict keyed by dataset is per-dataset data (an official preset, an image size),
            # not a list of datasets
            elts = node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else []
            strs = {e.value for e in elts if isinstance(e, ast.Constant)
                    and isinstance(e.value, str)}
            if len(strs & names) >= 3:
                found.append((node.lineno, sorted(strs & names)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    run.search(node.value):
                found.append((node.lineno, run.search(node.value).group(0)))
    else:
        found += [(i, run.search(ln).group(0)) for i, ln in enumerate(text.splitlines(), 1)
                  if run.search(ln)]
    return found


def test_the_lists_are_the_declarations():
    assert table1_datasets() == ["caltech101", "oxford_pets", "stanford_cars", "oxford_flowers",
                                 "food101", "fgvc_aircraft", "dtd", "eurosat", "ucf101"]
    assert table1_datasets(extended=True)[9:] == ["imagenet", "sun397"]
    assert shift_datasets() == ["imagenet", "imagenet_a", "imagenetv2", "imagenet_r",
                                "imagenet_sketch"]
    assert ablation_datasets() == ["caltech101", "oxford_pets", "dtd"]
    for spelling in ("OxfordPets", "oxfordpets", "pets", "Oxford-Pets", "oxford_pets"):
        assert canon(spelling) == "oxford_pets"
    assert display_name("flowers102") == "OxfordFlowers" and canon("my_set") == "my_set"
    assert report_rank("imagenet") < report_rank("caltech101") < report_rank("demo") < \
        report_rank("my_set")
    # every spelling names one dataset
    seen = {}
    for c in dataset_classes():
        for n in {c.key, c.__name__, *c.aliases}:
            k = re.sub(r"[^a-z0-9]", "", n.lower())
            assert seen.setdefault(k, c) is c, (n, c, seen[k])
    # where a dataset comes from is keyed by a registered dataset
    assert set(SOURCES) <= {c.__name__ for c in dataset_classes()}


def test_the_scanner_finds_a_hand_list():
    names = _names()
    assert hand_lists('D = ["caltech101", "oxford_pets", "dtd"]', names, True)
    assert hand_lists("for d in caltech101 dtd eurosat; do", names, False)
    assert not hand_lists('A = ("dtd", "eurosat")', names, True)


def test_no_hand_list_of_dataset_names_remains():
    names = _names()
    bad = []
    for path in sorted((REPO / "argtca").rglob("*.py")) + sorted((REPO / "scripts").iterdir()):
        parts = path.relative_to(REPO).parts
        # the datasets' own package, and the methods' official per-dataset settings (facts about
        # the official code, beside the rule that uses them)
        if path.suffix not in (".py", ".sh") or parts[:2] in (("argtca", "datasets"),
                                                              ("argtca", "adapters")):
            continue
        for line, what in hand_lists(path.read_text(), names, path.suffix == ".py"):
            bad.append(f"{path.relative_to(REPO)}:{line}: {what}")
    assert not bad, "hand lists of datasets (derive them from argtca/datasets/catalogue.py):\n" \
        + "\n".join(bad)
