"""Where the shipped configuration files are: the one place that resolves ``configs/``.

``configs/`` (``trainers/<method>.yaml``, ``datasets/<name>.yaml``) is kept at the top of the
checkout, where the scripts and the docs name it. An installed package carries a copy of it as
package data, ``argtca/configs/`` (setup.py maps the folder there when it builds a wheel), so the
commands that read it (``python -m argtca.experiments``, ``argtca.bench.zoo``) work without the
checkout. A checkout (or an editable install of one) reads the checkout's folder."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]     # the argtca package folder


def configs_dir() -> Path:
    """The configs folder: the installed package's copy when there is one, else the checkout's
    (the folder above the package)."""
    shipped = PACKAGE / "configs"
    if (shipped / "trainers").is_dir():
        return shipped
    return PACKAGE.parent / "configs"


def rates_dir() -> Path:
    """The measured rates of ``python -m argtca.bench table1`` (read by ``table1 --plan``): the
    installed package's copy (``argtca/rates``, setup.py maps ``benchmarks/rates`` there) when
    there is one, else the checkout's ``benchmarks/rates``."""
    shipped = PACKAGE / "rates"
    if shipped.is_dir():
        return shipped
    return PACKAGE.parent / "benchmarks" / "rates"


def repo_dir() -> Path:
    """The folder above the package: the checkout for a source tree, site-packages for an
    installed package (the scripts/ and docs/ exist only in a checkout)."""
    return PACKAGE.parent


if __name__ == "__main__":    # python -m argtca.config.paths: where the configs are
    print(configs_dir())
