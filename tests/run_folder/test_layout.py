"""The run folder is its own package below the engine: it imports only the config and the
utilities, the report and the Dassl bridge reach it without the engine, and no import circle
runs through it."""
import ast
from pathlib import Path

from conftest import REPO

PKG = REPO / "argtca"


def _imports(path: Path):
    """The argtca modules a file imports (relative imports resolved), anywhere in the file."""
    mod = ".".join(path.relative_to(REPO).with_suffix("").parts)
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("argtca"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base[: len(base) - (node.level - 1)]
                name = ".".join(parts + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("argtca"):
                yield name
                # ``from argtca import run_folder``: a name may be a module
                for a in node.names:
                    sub = REPO.joinpath(*name.split("."), a.name)
                    if sub.is_dir() or sub.with_suffix(".py").is_file():
                        yield f"{name}.{a.name}"


def _files(sub):
    return sorted((PKG / sub).rglob("*.py"))


def test_run_folder_is_a_package_importing_only_config_and_utils():
    files = _files("run_folder")
    assert {p.name for p in files} >= {"__init__.py", "fingerprint.py", "folder.py",
                                       "records.py", "lock.py"}
    assert not (PKG / "engine" / "run_folder.py").exists()
    allowed = ("argtca.config", "argtca.utils", "argtca.run_folder")
    bad = {(p.name, m) for p in files for m in _imports(p)
           if m != "argtca" and not m.startswith(allowed)}
    assert bad == set()


def test_report_and_dassl_bridge_get_run_folder_names_without_the_engine():
    # the report re-derives how "auto" resolved for old runs with argtca/config/settle.py,
    # nothing of the engine
    for sub, allowed in (("report", set()), ("dassl_plugin", set())):
        engine = {m for p in _files(sub) for m in _imports(p)
                  if m == "argtca.engine" or m.startswith("argtca.engine.")}
        assert engine <= allowed, (sub, engine)
    assert any(m.startswith("argtca.run_folder") for p in _files("report") for m in _imports(p))


def test_no_import_circle_through_the_run_folder():
    graph = {}
    for p in PKG.rglob("*.py"):
        mod = ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        graph[mod] = set(_imports(p))
    # modules only: "from argtca.run_folder import X" names the package
    graph = {m: {t for t in ts if t in graph and t != m} for m, ts in graph.items()}
    start = [m for m in graph if m.startswith("argtca.run_folder")]
    assert start
    for m in start:
        seen, todo = set(), list(graph[m])
        while todo:
            t = todo.pop()
            if t not in seen:
                seen.add(t)
                todo.extend(graph[t])
        assert m not in seen, m
