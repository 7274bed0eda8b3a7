"""What README.md and docs/*.md name exists: scripts, ``python -m argtca...`` modules, their
command-line flags (read from the real argparse parsers), config keys (argtca/config/defaults.py),
repository paths, and the targets and #anchors of their links; and the README sections and doc
anchors that the package's own help and messages point to.

Names are read from code (fenced blocks and `inline` spans), where the docs put what a reader
types. A flag is checked against the parser of the command it follows on the same line (a
script is the command it runs); a flag written alone in a span must belong to some argtca
command, or to one of the outside tools listed in EXTERNAL_FLAGS.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import runpy
import sys
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from docs_text import DOC_FILES, REPO, all_blocks

_DOCS = list(DOC_FILES)

# a script -> the command it runs (module, subcommand); None: it takes KEY VALUE pairs only
SCRIPT_COMMANDS: Dict[str, Optional[Tuple[str, Optional[str]]]] = {
    "table1.sh": ("argtca.experiments", "table1"), "compare.sh": ("argtca.experiments", "table1"),
    "table2.sh": ("argtca.experiments", "table2"), "shift.sh": ("argtca.experiments", "shift"),
    "sensitivity.sh": ("argtca.experiments", "sweep"),
    "table3.sh": ("argtca.experiments", "table3"),
    "tune_baselines.sh": ("argtca.experiments", "tune"),
    "select_attributes.sh": ("argtca.experiments.select_attributes", None),
    "bench.sh": ("argtca.bench", None),
    "argtca.sh": None, "baseline.sh": None, "sweep.sh": None, "ablation.sh": None,
}
# how to reach a module's parser: the argv that makes it parse (a subcommand's own parser)
PARSER_ARGV = {"argtca.attributes": ["generate", "--help"]}
# flags of other tools that the docs show beside argtca's
EXTERNAL_FLAGS = {
    # torchrun / sbatch (docs/performance.md, workflows.md#cluster)
    "--nproc_per_node", "--nnodes", "--rdzv_id", "--rdzv_backend", "--rdzv_endpoint", "--nodes",
    "--ntasks-per-node", "--gpus-per-node", "--cpus-per-task", "--time", "--array",
    # the #SBATCH lines a cluster session greps for (workflows.md#cluster)
    "--gpus", "--cpus",
    # CoOp's train.py and parse_test_res.py (docs/dassl.md, workflows.md)
    "--eval-only", "--model-dir", "--load-epoch", "--trainer", "--backbone", "--test-log",
    "--keyword",
    # pytest-xdist (README's test command)
    "--dist",
}
# keys of a run's fingerprint (config.json) that are not config keys: the test set, the device
# type, input files' hashes, an online method's order (argtca/run_folder/, trainers)
FINGERPRINT_ONLY = re.compile(r"^(TEST_SET|FILE_SHA256|STREAM|PROVIDER|CODE)\.|^RUN\.DEVICE_TYPE$")
# Dassl's and CoOp's keys (docs/dassl.md): checked against Dassl's defaults and CoOp's train.py
# (extend_cfg) where ../shared/vendor has them
DASSL_KEYS = {"TEST.SPLIT", "DATASET.NUM_SHOTS"}
COOP_KEYS = {"DATASET.SUBSAMPLE_CLASSES"}
VENDOR = REPO.parent / "shared" / "vendor"
# paths the docs name as examples of files a user creates
EXAMPLE_PATHS = {"argtca/selectors/my_rule.py"}

TOP = {"argtca", "configs", "scripts", "tests", "benchmarks", "docs"}
KEY = re.compile(r"(?<![\w.$/])[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)+(?![\w(])")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")
MODULE = re.compile(r"-m\s+(argtca[\w.]*)(?:\s+([a-z][\w-]*))?")
SCRIPT = re.compile(r"(?:scripts/)?\b([\w-]+\.sh)\b")
PATH = re.compile(r"(?<![\w/.~$-])((?:argtca|configs|scripts|tests|benchmarks|docs)/[\w./*-]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _fences(text: str) -> List[Tuple[int, int]]:
    spans, start = [], None
    for m in re.finditer(r"^[ \t]*```.*$", text, re.M):
        if start is None:
            start = m.start()
        else:
            spans.append((start, m.end()))
            start = None
    return spans


def prose(text: str) -> str:
    """``text`` with its fenced blocks blanked (line numbers kept)."""
    for a, b in reversed(_fences(text)):
        text = text[:a] + re.sub(r"[^\n]", " ", text[a:b]) + text[b:]
    return text


def code_pieces() -> Iterator[Tuple[str, str]]:
    """(where, code): each logical line of every fenced block (``\\`` continuations joined) and
    each inline code span of the prose."""
    for b in all_blocks():
        if b.language not in ("bash", "python"):   # output and file formats: not commands
            continue
        for i, line in enumerate(b.source.replace("\\\n", " ").splitlines()):
            yield f"{_rel(b.path)}:{b.line + 1 + i}", line
    for path in DOC_FILES:
        text = prose(path.read_text())
        for m in SPAN.finditer(text):
            yield f"{_rel(path)}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1)
    if DOC_FILES == _DOCS:   # the scripts' header comments are their docs (not in the self-test)
        for path in sorted((REPO / "scripts").glob("*.sh")):
            for i, line in enumerate(path.read_text().splitlines()[1:], 2):
                if not line.startswith("#"):
                    break
                yield f"{_rel(path)}:{i}", line[1:]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


# ------------------------------------------------------------------------------------ parsers
class _Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


@lru_cache(maxsize=None)
def parser_of(module: str) -> argparse.ArgumentParser:
    """The argparse parser ``python -m module`` builds: the module runs as ``__main__`` with
    ``--help`` until its first parse call, which hands over the parser instead of parsing."""
    def grab(self, *args, **kwargs):
        raise _Captured(self)
    names = ("parse_args", "parse_known_args", "parse_intermixed_args",
             "parse_known_intermixed_args")
    saved = {n: getattr(argparse.ArgumentParser, n) for n in names}
    argv = sys.argv
    try:
        for n in names:
            setattr(argparse.ArgumentParser, n, grab)
        args = PARSER_ARGV.get(module, ["--help"])
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore", RuntimeWarning)   # runpy: module already imported
            if module.endswith(".py"):
                sys.argv = [module] + args
                runpy.run_path(str(REPO / module), run_name="__main__")
            else:
                sys.argv = [module] + args
                runpy.run_module(module, run_name="__main__", alter_sys=False)
    except _Captured as c:
        return c.parser
    except SystemExit:
        pass
    finally:
        for n, f in saved.items():
            setattr(argparse.ArgumentParser, n, f)
        sys.argv = argv
    raise AssertionError(f"python -m {module} --help built no argparse parser")


def _subparsers(p: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    out: Dict[str, argparse.ArgumentParser] = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            out.update(a.choices)
    return out


def flags_of(module: str, sub: Optional[str]) -> Set[str]:
    p = parser_of(module)
    subs = _subparsers(p)
    if sub in subs:
        p = subs[sub]
    return {o for a in p._actions for o in a.option_strings}


def all_flags() -> Set[str]:
    out: Set[str] = set()
    for module in MODULES:
        p = parser_of(module)
        for q in [p, *_subparsers(p).values()]:
            out |= {o for a in q._actions for o in a.option_strings}
    return out


MODULES = ["argtca.run", "argtca.experiments", "argtca.experiments.select_attributes",
           "argtca.report", "argtca.data", "argtca.attributes", "argtca.bench",
           "argtca.bench.zoo", "argtca.bench.check_images", "argtca.demo.evaluate",
           "argtca.demo.train_clip", "scripts/graph_transfer_demo.py"]


def _command_at(code: str) -> Tuple[Optional[Tuple[str, Optional[str]]], int, bool]:
    """(command, where its arguments start, whether the piece names a command at all)."""
    m = MODULE.search(code)
    if m:
        return (m.group(1), m.group(2)), m.end(1), True
    m = re.search(r"scripts/graph_transfer_demo\.py", code)
    if m:
        return ("scripts/graph_transfer_demo.py", None), m.end(), True
    m = SCRIPT.search(code)
    if m and m.group(1) in SCRIPT_COMMANDS:
        return SCRIPT_COMMANDS[m.group(1)], m.end(), True
    return None, 0, bool(re.match(r"\s*(\w+=\S+\s+)*(pip|git|sed|srun|torchrun|hf|cd|for|"
                                  r"HEAD=|python (train|parse_test_res)\.py)", code))


# ------------------------------------------------------------------------------------ tests
def test_scripts_and_modules_named_exist():
    missing = []
    for where, code in code_pieces():
        for m in SCRIPT.finditer(code):
            if code[max(0, m.start() - 1):m.start()] == "/":   # a script of another folder
                path = re.findall(r"[\w./-]+$", code[:m.end()])[0]
                if not (REPO / path).is_file():
                    missing.append(f"{where}: {path}")
                continue
            if m.group(1) != "_common.sh" and not (REPO / "scripts" / m.group(1)).is_file():
                missing.append(f"{where}: scripts/{m.group(1)}")
            elif m.group(1) not in SCRIPT_COMMANDS and m.group(1) != "_common.sh":
                missing.append(f"{where}: {m.group(1)} is not in this test's SCRIPT_COMMANDS")
        for m in MODULE.finditer(code):
            if importlib.util.find_spec(m.group(1)) is None:
                missing.append(f"{where}: python -m {m.group(1)}")
    assert not missing, "the docs name what does not exist:\n" + "\n".join(missing)


def test_flags_named_exist():
    known = all_flags() | EXTERNAL_FLAGS
    bad = []
    for where, code in code_pieces():
        cmd, at, is_command = _command_at(code)
        flags = [f for f in FLAG.findall(code[at:])]
        if cmd is not None:
            if cmd[0] == "argtca.experiments" and cmd[1] == "collect":
                continue
            own = flags_of(*cmd)
            bad += [f"{where}: {f} is no flag of {' '.join(x for x in cmd if x)}"
                    for f in flags if f not in own]
        elif not is_command:   # flags alone in a span: some argtca command's, or a known tool's
            bad += [f"{where}: {f} is no flag of any argtca command" for f in flags
                    if f not in known]
    assert not bad, "the docs name flags the commands do not have:\n" + "\n".join(bad)


def _cfg_keys() -> Tuple[Set[str], Set[str]]:
    from argtca.config import get_cfg_default
    from argtca.plugins import load_plugins
    from helpers_registry import registries_restored
    with registries_restored():
        # the plug-ins the docs show declare their own nodes (docs/own-method.md)
        load_plugins(str(p) for p in sorted((REPO / "docs" / "examples").glob("*.py")))
        return _walk_cfg(get_cfg_default())


def _walk_cfg(cfg) -> Tuple[Set[str], Set[str]]:
    leaves, nodes = set(), set()

    def walk(node, prefix):
        for k, v in node.items():
            key = f"{prefix}{k}"
            if hasattr(v, "items"):
                nodes.add(key)
                walk(v, key + ".")
            else:
                leaves.add(key)
    walk(cfg, "")
    return leaves, nodes


def test_config_keys_named_exist():
    leaves, nodes = _cfg_keys()
    every = leaves | nodes
    bad = []
    for where, code in code_pieces():
        for key in KEY.findall(code):
            if key in every or FINGERPRINT_ONLY.search(key) or key in DASSL_KEYS | COOP_KEYS:
                continue
            # a key written from its section down (``GAT.BIAS`` for TRAINER.ARGTCA.GAT.BIAS)
            if any(k.endswith("." + key) for k in every):
                continue
            bad.append(f"{where}: {key}")
    assert not bad, ("the docs name config keys that argtca/config/defaults.py does not "
                     "define:\n" + "\n".join(bad))


def test_dassl_and_coop_keys_named_are_theirs():
    coop = VENDOR / "CoOp" / "train.py"
    if not coop.is_file():
        pytest.skip(f"{coop} is absent")
    text = coop.read_text()
    assert all(f"cfg.{k} =" in text for k in COOP_KEYS)
    dassl = VENDOR / "Dassl.pytorch" / "dassl" / "config" / "defaults.py"
    text = dassl.read_text()
    assert all(f"_C.{k} =" in text for k in DASSL_KEYS)


def test_repository_paths_named_exist():
    bad = []
    for where, code in code_pieces():
        for p in PATH.findall(code):
            p = re.sub(r"[.:,;)]+$", "", p)
            if any(c in p for c in "<{") or "..." in p or p in EXAMPLE_PATHS:
                continue
            hits = list(REPO.glob(p)) if "*" in p else [REPO / p]
            if not any(h.exists() for h in hits):
                bad.append(f"{where}: {p}")
    assert not bad, "the docs name repository paths that do not exist:\n" + "\n".join(bad)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    h = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", prose(path.read_text()),
                                                  re.M)}


def test_links_and_anchors_resolve():
    bad = []
    for path in DOC_FILES:
        text = prose(path.read_text())
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            line = text.count("\n", 0, m.start()) + 1
            if not dest.exists():
                bad.append(f"{_rel(path)}:{line}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{_rel(path)}:{line}: {target} (no such heading)")
    assert not bad, "links that lead nowhere:\n" + "\n".join(bad)


def _doc_pointers(text: str) -> List[str]:
    """The README sections and doc pages/anchors a text points a reader to."""
    out = []
    for m in re.finditer(r"README(?: section)? ([\"'])(.+?)\1", text):
        out.append(f"README.md#{slug(m.group(2))}")
    for m in re.finditer(r"(?<![\w/])((?:docs/[\w-]+|README)\.md)(#[\w-]+)?", text):
        out.append(m.group(1) + (m.group(2) or ""))
    return out


def _resolves(pointer: str) -> bool:
    file, _, anchor = pointer.partition("#")
    dest = REPO / file
    return dest.is_file() and (not anchor or anchor in anchors(dest))


def test_help_texts_point_to_existing_docs():
    """``python -m argtca.experiments --help`` (and every command's help) names README sections
    and doc anchors that exist."""
    bad = []
    for module in MODULES:
        p = parser_of(module)
        for q in [p, *_subparsers(p).values()]:
            texts = [q.description or "", q.epilog or ""]
            texts += [a.help or "" for a in q._actions]
            texts += [g.title or "" for g in q._action_groups]
            for t in texts:
                bad += [f"{module}: {x}" for x in _doc_pointers(t) if not _resolves(x)]
    assert not bad, "help texts point to docs that do not exist:\n" + "\n".join(bad)


def test_package_messages_point_to_existing_docs():
    """The package's messages and docstrings name README sections and doc pages that exist."""
    bad = []
    for f in sorted((REPO / "argtca").rglob("*.py")):
        for x in _doc_pointers(f.read_text()):
            if not _resolves(x):
                bad.append(f"{f.relative_to(REPO)}: {x}")
    assert not bad, "the package points to docs that do not exist:\n" + "\n".join(bad)


@pytest.mark.parametrize("bad_doc, what", [
    ("Run `bash scripts/tabel1.sh demo`.", "scripts/tabel1.sh"),
    ("Set `TTA.N_VEIWS 8`.", "TTA.N_VEIWS"),
    ("`python -m argtca.experiments table1 --seed 1`", "--seed is no flag"),
    ("See [x](docs/nowhere.md).", "no such file"),
])
def test_the_checks_catch_drift(bad_doc, what, tmp_path, monkeypatch):
    """Each check fails on a page that names something that does not exist."""
    import docs_text
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\n{bad_doc}\n")
    mod = sys.modules[__name__]
    monkeypatch.setattr(mod, "DOC_FILES", [page])
    monkeypatch.setattr(mod, "REPO", REPO)
    monkeypatch.setattr(mod, "all_blocks", lambda: docs_text.blocks(page))
    if "no such file" in what:
        (tmp_path / "docs").mkdir()
    failures = []
    for check in (test_scripts_and_modules_named_exist, test_flags_named_exist,
                  test_config_keys_named_exist, test_links_and_anchors_resolve):
        try:
            check()
        except AssertionError as e:
            failures.append(str(e))
    assert any(what in f for f in failures), failures


def test_json_blocks_and_the_attribute_file_example():
    """Every ```json block parses; own-data.md's attribute-file example is read by the real
    loader and is what the shipped demo file holds for those classes."""
    import json
    from argtca.attributes.files import load_attributes
    blocks = [b for b in all_blocks() if b.language == "json"]
    for b in blocks:
        json.loads(b.source)
    example = next(b for b in blocks if b.path.name == "own-data.md")
    shown = json.loads(example.source)
    demo = REPO / "argtca" / "demo" / "assets" / "demo_attributes.json"
    shipped = json.loads(demo.read_text())
    assert shown == {k: shipped[k] for k in shown}
    loaded = load_attributes(str(demo), list(shown), num_required=10)
    assert loaded == {k: v.split() for k, v in shown.items()}
