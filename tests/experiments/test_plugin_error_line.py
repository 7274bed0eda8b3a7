"""A --plugin file that does not import (a syntax error) or does not exist is one ``error:``
line and exit status 2 in every entry point that takes --plugin (issue 39, item 4): each
sub-command of ``python -m argtca.experiments`` (and its ``collect COMMAND`` form),
``python -m argtca.experiments.select_attributes``, ``python -m argtca.run`` and the catalogue.
Before, the experiments ended in a PluginError traceback (exit 1), or, for table3, in "no table
(message above)" with exit 1. Nothing is run or written."""
import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from argtca.experiments.__main__ import main

REPO = Path(__file__).resolve().parents[2]
TINY = ["DATASET.NUM_IMAGES", "2", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False"]
COMMANDS = {"table1": [], "shift": [], "ood": ["--ood", "dtd"], "table2": [], "sweep": [],
            "table3": [], "tune": []}


@pytest.fixture
def bad_plugins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "broken.py").write_text("def register(:\n    pass\n")
    return {"syntax": (str(tmp_path / "broken.py"), "SyntaxError: invalid syntax"),
            "missing": (str(tmp_path / "absent.py"), "no such file: ")}


def _call(entry, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = entry(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("kind", ["syntax", "missing"])
@pytest.mark.parametrize("command", list(COMMANDS) + ["collect"])
def test_every_experiments_command_gives_one_line(bad_plugins, tmp_path, command, kind):
    path, says = bad_plugins[kind]
    head = ["collect", "table1"] if command == "collect" else [command]
    argv = head + ["demo"] + COMMANDS.get(command, []) + ["--plugin", path, "--out-root", "o"]
    rc, out, err = _call(main, argv + TINY)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: --plugin {path}: ") and says in lines[0], err
    assert not (tmp_path / "o").exists()   # nothing run, no report


@pytest.mark.parametrize("kind", ["syntax", "missing"])
def test_other_entry_points_give_one_line(bad_plugins, kind):
    import argtca.run
    from argtca.experiments import select_attributes
    from argtca.trainers import catalogue
    path, says = bad_plugins[kind]
    for entry, argv in ((argtca.run.main, ["--trainer", "zeroshot", "--plugin", path]),
                        (select_attributes.main, ["demo", "--plugin", path]),
                        (catalogue.main, ["--plugin", path])):
        rc, out, err = _call(entry, argv)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (entry, err)
        assert path in lines[0] and says in lines[0], err


def test_no_traceback_from_the_process(bad_plugins):
    """The process as a user runs it: one line on stderr, exit 2."""
    path, says = bad_plugins["syntax"]
    p = subprocess.run([sys.executable, "-m", "argtca.experiments", "table1", "demo",
                        "--plugin", path] + TINY, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"error: --plugin {path}: importing it failed: SyntaxError: invalid syntax "
        f"(broken.py, line 1)"], p.stderr
