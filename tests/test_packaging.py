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


def _setup_literal(name):
    src = (REPO / "setup.py").read_text()
    start = src.index(f"{name}=")
    return eval(src[start + len(name) + 1:src.index("}", start) + 1])   # the literal


def test_configs_are_shipped_in_the_package():
    # configs/ stays the source at the top of the checkout; a wheel carries it as argtca/configs
    assert _setup_literal("package_dir") == {"argtca.configs": "configs",
                                             "argtca.rates": "benchmarks/rates"}
    patterns = _setup_literal("package_data")["argtca.configs"]
    files = [p.relative_to(REPO / "configs").as_posix() for p in (REPO / "configs").rglob("*")
             if p.is_file()]
    missing = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert files and not missing, missing


def test_configs_are_resolved_in_one_place(tmp_path, monkeypatch):
    from argtca.bench import zoo
    from argtca.config import paths
    from argtca.experiments import plan, select_attributes
    assert paths.configs_dir() == REPO / "configs"              # a checkout: its own folder
    assert plan.CONFIGS == zoo.CONFIGS == paths.configs_dir()
    assert select_attributes._CONFIGS == str(paths.configs_dir())
    # an installed package: its own copy, wherever site-packages is
    (tmp_path / "site" / "argtca" / "configs" / "trainers").mkdir(parents=True)
    monkeypatch.setattr(paths, "PACKAGE", tmp_path / "site" / "argtca")
    assert paths.configs_dir() == tmp_path / "site" / "argtca" / "configs"
    spelling = [p.relative_to(REPO).as_posix() for p in (REPO / "argtca").rglob("*.py")
                if '"configs"' in p.read_text() or "parents[2]" in p.read_text()]
    assert spelling == ["argtca/config/paths.py"]


def test_rate_files_are_shipped_and_resolved_in_one_place(tmp_path, monkeypatch):
    # benchmarks/rates (table1 --plan's measured rates) ships as argtca/rates, every file of it
    assert _setup_literal("package_data")["argtca.rates"] == ["*.json"]
    assert list((REPO / "benchmarks" / "rates").glob("*.json"))
    from argtca.experiments import rates
    from argtca.config import paths
    assert rates.rates_dir() == paths.rates_dir() == REPO / "benchmarks" / "rates"
    (tmp_path / "site" / "argtca" / "rates").mkdir(parents=True)
    monkeypatch.setattr(paths, "PACKAGE", tmp_path / "site" / "argtca")
    assert rates.rates_dir() == tmp_path / "site" / "argtca" / "rates"
