"""A method's official code, read at test time from a fetched copy of its repository and never
copied into this one; a test that needs it is skipped, saying where to put it, when it is absent.

``ARGTCA_OFFICIAL_CODE`` names a folder holding, per repository ``owner/name``, either a git
mirror ``owner+name/repo`` (read at the pinned commit with ``git show``) or a checkout
``owner+name/`` (read as it is). Default: /work/.mirror (where the agents' fetch puts mirrors).
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = "ARGTCA_OFFICIAL_CODE"


def official_source(repo: str, path: str, commit: str) -> str:
    """The text of ``path`` in the official ``repo`` at ``commit`` (skip when not here)."""
    base = Path(os.environ.get(ENV, "/work/.mirror")) / repo.replace("/", "+")
    git_dir = base / "repo"
    if git_dir.is_dir():
        r = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout
    if (base / path).is_file():
        return (base / path).read_text()
    pytest.skip(f"the official code of {repo} ({path} at {commit[:7]}) is not here: set {ENV} "
                f"to a folder holding {base.name}/repo (a git mirror) or {base.name}/ (a "
                f"checkout)")


def official_module(repo: str, path: str, commit: str, tmp_path: Path):
    """``path`` of the official ``repo`` imported as a fresh module (its globals its own)."""
    src = official_source(repo, path, commit)
    name = "official_" + Path(path).stem + f"_{abs(hash(str(tmp_path)))}"
    file = tmp_path / f"{name}.py"
    file.write_text(src)
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
