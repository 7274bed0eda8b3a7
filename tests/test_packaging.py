"""What a non-editable install ships: every folder of argtca's code is a package that setup.py's
find_packages finds, and the data files the code reads at run time are in package_data."""
import fnmatch
import os
from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[1]


def test_every_code_folder_is_a_package_that_setup_finds():
    found = set(find_packages(str(REPO), include=["argtca", "argtca.*"]))
    folders = {".".join(Path(d).relative_to(REPO).parts)
               for d, _, files in os.walk(REPO / "argtca")
               if "__pycache__" not in d and any(f.endswith(".py") for f in files)}
    assert folders and folders <= found, sorted(folders - found)


def test_data_files_the_code_reads_are_package_data():
    ns = {}
    src = (REPO / "setup.py").read_text()
    start = src.index("package_data=")
    ns["data"] = eval(src[start + len("package_data="):src.index("}", start) + 1])   # the literal
    patterns = ns["data"]["argtca"]
    data = [p.relative_to(REPO / "argtca").as_posix() for p in (REPO / "argtca").rglob("*")
            if p.is_file() and p.suffix in (".csv", ".json", ".pt")]
    missing = [f for f in data if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert data and not missing, missing
