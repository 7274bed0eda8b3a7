"""The identity of the code that makes a run: argtca's version and a content hash of its package,
and the files of each plug-in's module closure.

A run's records depend on the code as much as on its settings, and two checkouts that differ in
one line of a method write identical ``config.json`` otherwise. So every run records
``CODE.ARGTCA_VERSION`` and ``CODE.ARGTCA_SHA256`` (:func:`code_keys`) in its fingerprint. These
keys stay out of the experiment's hash (``run_folder.experiment_hash``): an upgrade finds and
re-reads its finished runs, while a resume under other code is refused
(``run_folder.check_code``) and a report never pools runs of two code versions into one cell.

The package hash covers every file of the installed ``argtca`` package (sources, model configs,
the demo's assets), read once per process: about 0.1 s for its ~200 files on a laptop core
(benchmarks/hash_cost.py prints it).
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import sysconfig
from typing import Dict, Iterable, List, Optional

CODE_PREFIX = "CODE."
VERSION_KEY = "CODE.ARGTCA_VERSION"
SOURCE_KEY = "CODE.ARGTCA_SHA256"
# a resume under other code that the user allowed (RUN.CODE_CHANGE allow): the code ids the
# records were continued under, in order
RESUMED_KEY = CODE_PREFIX + "RESUMED_UNDER"

_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def package_dir() -> str:
    import argtca
    return os.path.dirname(os.path.abspath(argtca.__file__))


def _package_files(root: str) -> List[str]:
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.startswith("."))
        out += [os.path.join(d, f) for f in sorted(files)
                if not f.endswith(_SKIP_SUFFIXES) and not f.startswith(".")]
    return out


def files_sha256(paths: Iterable[str], root: str) -> str:
    """The sha256 of the (path relative to ``root``, content sha256) list of ``paths``."""
    from argtca.utils.hashing import content_sha256
    h = hashlib.sha256()
    for p in sorted(paths, key=lambda p: os.path.relpath(p, root)):
        digest = content_sha256(p)
        h.update(f"{os.path.relpath(p, root).replace(os.sep, '/')}\0{digest}\n".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def package_sha256() -> str:
    """The content hash of the argtca package as installed (every file, computed once)."""
    root = package_dir()
    return files_sha256(_package_files(root), root)


def argtca_version() -> str:
    import argtca
    return str(getattr(argtca, "__version__", "0"))


def code_keys() -> Dict[str, str]:
    """The fingerprint keys naming argtca's code."""
    return {VERSION_KEY: argtca_version(), SOURCE_KEY: package_sha256()}


def code_id(fp: Dict[str, object]) -> str:
    """A fingerprint's code as one short text: ``argtca 0.1.0 (source 1a2b3c4d)``; "unknown"
    for a fingerprint written before runs recorded their code."""
    if SOURCE_KEY not in fp:
        return "unknown (the run predates code identity)"
    return f"argtca {fp.get(VERSION_KEY, '?')} (source {str(fp[SOURCE_KEY])[:8]})"


def is_code_key(key: str) -> bool:
    return str(key).startswith(CODE_PREFIX)


def without_code(fp: Dict[str, object]) -> Dict[str, object]:
    return {k: v for k, v in fp.items() if not is_code_key(k)}


# ------------------------------------------------------------------------- plug-in closures
@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple:
    """Folders whose modules are installed libraries or the standard library (not a plug-in's
    own code): stdlib, site-packages, and argtca itself (hashed as argtca's code)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)}
    roots.add(package_dir())
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


def is_own_code(path: str) -> bool:
    """A source file that is neither argtca's, nor an installed library's, nor the standard
    library's: a plug-in's own code."""
    real = os.path.realpath(path)
    return not real.startswith(_library_roots())


# module name -> the modules first imported while it was being imported (argtca/plugins.py)
IMPORTED_WITH: Dict[str, List[str]] = {}


def module_file(name: str) -> Optional[str]:
    f = getattr(sys.modules.get(name), "__file__", None)
    return os.path.abspath(f) if f and os.path.isfile(f) else None


def module_closure(module: str, main_file: str = "") -> List[str]:
    """The source files of a plug-in module's code: its own file, every ``.py`` file of the
    package it belongs to (a helper imported lazily too) and every module first imported while
    it was imported, of those that lie outside the standard library, site-packages and argtca.
    An installed package's plug-in (under site-packages) is its package's files."""
    files = {os.path.abspath(main_file)} if main_file and os.path.isfile(main_file) else set()
    top = module.split(".")[0]
    if top == "_argtca_plugins":   # a --plugin file: its own file, no package around it
        pkg_dir = None
    else:
        pkg = sys.modules.get(top)
        pkg_file = getattr(pkg, "__file__", None)
        pkg_dir = (os.path.dirname(os.path.abspath(pkg_file))
                   if pkg_file and os.path.basename(pkg_file) == "__init__.py" else None)
    if pkg_dir and pkg_dir != package_dir():
        for d, dirs, names in os.walk(pkg_dir):
            dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.startswith("."))
            files |= {os.path.join(d, n) for n in names if n.endswith(".py")}
    for name in IMPORTED_WITH.get(module, []) + IMPORTED_WITH.get(top, []):
        f = module_file(name)
        if f and is_own_code(f):
            files.add(f)
    return sorted(files)
