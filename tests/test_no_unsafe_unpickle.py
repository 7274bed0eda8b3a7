"""No code path unpickles, with the power to run code, a file whose path a user can edit or name
(a launch record, a run folder, a checkpoint, a stream state): a scan of ``argtca/`` (Python's own
``ast``, so comments and strings never count) for

* ``pickle``/``cloudpickle`` ``load``/``loads`` and ``Unpickler(...)`` called directly;
* ``torch.load`` without ``weights_only=True``;
* ``numpy.load`` with ``allow_pickle=True``;
* submitit's pickles: ``pickle_load``, ``DelayedSubmission.load``, a job's ``result()`` /
  ``results()`` / ``exception()`` (they unpickle its result file) and its ``result_pickle`` /
  ``submitted_pickle`` files;
* a ``pickle.Unpickler`` subclass that does not restrict ``find_class`` (none, or one that
  falls back to ``super().find_class``, which resolves any global).

A restricted unpickler (``find_class`` resolving only an allow-list) is data-only by
construction and may read any file. What is left must be in ``ALLOWED``, each entry with why
the file it reads cannot run code."""
import ast
from pathlib import Path
from typing import List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
PICKLE_MODULES = {"pickle", "cloudpickle", "_pickle", "dill"}
SUBMITIT_READS = {"result", "results", "exception"}
SUBMITIT_FILES = {"result_pickle", "submitted_pickle"}

# (file, what the scan reports) -> why it is safe
ALLOWED = {
    ("argtca/models/coop_ckpt.py", "torch.load without weights_only=True"):
        "CoOp/Dassl checkpoints pickle whole objects, which weights_only refuses: read with "
        "pickle_module=_PICKLE_MODULE, whose _RestrictedUnpickler.find_class resolves only the "
        "globals of PyTorch's own weights-only loader (others become inert placeholders)",
    ("argtca/experiments/launch/jobs.py", "submitit file result_pickle"):
        "a task's result file, in the launch's own log folder, is only tested for existence "
        "and read by read_result through _PlainDataUnpickler, which resolves no global",
}


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _true(call: ast.Call, key: str) -> bool:
    return any(k.arg == key and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def _restricted(cls: ast.ClassDef) -> bool:
    """Defines find_class, which never defers to the base's (any-global) lookup."""
    for f in cls.body:
        if isinstance(f, ast.FunctionDef) and f.name == "find_class":
            return not any(isinstance(n, ast.Attribute) and n.attr == "find_class"
                           and isinstance(n.value, ast.Call)
                           and _dotted(n.value.func) == "super" for n in ast.walk(f))
    return False


def scan(source: str) -> List[Tuple[int, str]]:
    """(line, what) of every unsafe unpickling in ``source``."""
    tree = ast.parse(source)
    aliases = {}   # local name -> dotted origin (import x as y, from x import y)
    submitit = False
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                    a.name.split(".")[0]
                submitit |= a.name.split(".")[0] == "submitit"
        elif isinstance(n, ast.ImportFrom) and n.module:
            for a in n.names:
                aliases[a.asname or a.name] = f"{n.module}.{a.name}"
            submitit |= n.module.split(".")[0] == "submitit"

    def origin(node) -> str:
        d = _dotted(node)
        head, _, rest = d.partition(".")
        base = aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef):
            if any(origin(b).split(".")[-1] == "Unpickler"
                   and origin(b).split(".")[0] in PICKLE_MODULES for b in n.bases) \
                    and not _restricted(n):
                found.append((n.lineno, f"unrestricted Unpickler subclass {n.name}"))
        elif isinstance(n, ast.Call):
            f = origin(n.func)
            mod, _, name = f.rpartition(".")
            if mod.split(".")[0] in PICKLE_MODULES and name in ("load", "loads", "Unpickler"):
                found.append((n.lineno, f"{f}"))
            elif f == "torch.load" and not _true(n, "weights_only"):
                found.append((n.lineno, "torch.load without weights_only=True"))
            elif f in ("numpy.load", "np.load") and _true(n, "allow_pickle"):
                found.append((n.lineno, "numpy.load with allow_pickle=True"))
            elif f.endswith("pickle_load") or f.endswith("DelayedSubmission.load"):
                found.append((n.lineno, f"submitit {f}"))
            elif submitit and isinstance(n.func, ast.Attribute) and n.func.attr in \
                    SUBMITIT_READS and not n.args:
                found.append((n.lineno, f"submitit job .{n.func.attr}()"))
        elif isinstance(n, ast.Attribute) and n.attr in SUBMITIT_FILES:
            found.append((n.lineno, f"submitit file {n.attr}"))
        elif isinstance(n, ast.Name) and aliases.get(n.id, "").endswith("pickle_load"):
            found.append((n.lineno, f"submitit {aliases[n.id]}"))
    return sorted(set(found))


def _sources():
    for p in sorted((REPO / "argtca").rglob("*.py")):
        yield p.relative_to(REPO).as_posix(), p.read_text(encoding="utf-8")


def test_no_unsafe_unpickling_in_argtca():
    offenders, used = [], set()
    for rel, src in _sources():
        for line, what in scan(src):
            if (rel, what) in ALLOWED:
                used.add((rel, what))
            else:
                offenders.append(f"{rel}:{line}: {what}")
    assert not offenders, "unpickling that can run code from a file a user can edit:\n" + \
        "\n".join(offenders)
    assert used == set(ALLOWED), f"allow-list entries no longer needed: {set(ALLOWED) - used}"


@pytest.mark.parametrize("src, what", [
    ("import pickle\npickle.load(open(p, 'rb'))\n", "pickle.load"),
    ("import pickle as pk\npk.loads(b)\n", "pickle.loads"),
    ("from pickle import load\nload(f)\n", "pickle.load"),
    ("import cloudpickle\ncloudpickle.load(f)\n", "cloudpickle.load"),
    ("import pickle\npickle.Unpickler(f).load()\n", "pickle.Unpickler"),
    ("import torch\ntorch.load(p)\n", "torch.load without weights_only=True"),
    ("import torch\ntorch.load(p, weights_only=False)\n", "torch.load without weights_only=True"),
    ("import numpy as np\nnp.load(p, allow_pickle=True)\n", "numpy.load with allow_pickle=True"),
    ("from submitit.core.utils import pickle_load\npickle_load(p)\n",
     "submitit submitit.core.utils.pickle_load"),
    ("import submitit\nsubmitit.helpers.DelayedSubmission.load(p)\n",
     "submitit submitit.helpers.DelayedSubmission.load"),
    ("import submitit\njob = submitit.LocalJob(f, '1')\njob.result()\n", "submitit job .result()"),
    ("import submitit\nx = job.paths.result_pickle\n", "submitit file result_pickle"),
    ("import pickle\nclass U(pickle.Unpickler):\n    pass\n", "unrestricted Unpickler subclass U"),
    ("import pickle\nclass U(pickle.Unpickler):\n    def find_class(self, m, n):\n"
     "        return super().find_class(m, n)\n", "unrestricted Unpickler subclass U"),
])
def test_the_scan_finds_each_kind(src, what):
    assert [w for _, w in scan(src)] == [what], scan(src)


@pytest.mark.parametrize("src", [
    "import torch\ntorch.load(p, map_location='cpu', weights_only=True)\n",
    "import pickle\nclass U(pickle.Unpickler):\n    def find_class(self, m, n):\n"
    "        raise pickle.UnpicklingError(m)\nU(f).load()\n",
    "import numpy as np\nnp.load(p)\n",
    "fut.result()\n",   # a Future of a module that does not use submitit
    "# pickle.load(f) in a comment\ns = 'torch.load(p)'\n",
])
def test_the_scan_passes_safe_reads(src):
    assert scan(src) == []
