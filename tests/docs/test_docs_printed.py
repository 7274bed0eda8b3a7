"""Numbers the docs quote from a command are that command's output, checked here.

A ```text block preceded by ``<!-- printed-by: COMMAND -->`` quotes what COMMAND prints: the
test runs COMMAND with bash in the repository root (offline, no $DATA, CPU only) and requires
each line of the block, verbatim, among its output lines, in the block's order. So README's
"what --plan prints" cannot drift from what it prints (issue 40: the README said "about 6
minutes" where the plan printed 12). A quote must name a command whose output does not depend on
the machine (e.g. ``table1 --plan --rates FILE``: the estimate from one stored rate file).
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from docs_text import DOC_FILES, REPO

MARK = re.compile(r"<!--\s*printed-by:\s*(.+?)\s*-->\s*\n[ \t]*```text\n(.*?)\n[ \t]*```", re.S)


def quotes():
    out = []
    for path in DOC_FILES:
        text = path.read_text()
        for m in MARK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{path.relative_to(REPO)}:{line}", m.group(1), m.group(2)))
    return out


QUOTES = quotes()


@pytest.mark.parametrize("where, command, block", QUOTES, ids=[q[0] for q in QUOTES])
def test_quoted_output_is_what_the_command_prints(where, command, block, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATA", "ARGTCA_RATES")}
    env.update(ARGTCA_OFFLINE="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO),
               ARGTCA_CACHE=os.environ.get("ARGTCA_CACHE") or str(tmp_path / "cache"))
    p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=REPO, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, f"{where}: `{command}` failed:\n{p.stdout[-3000:]}"
    printed = [ln.rstrip() for ln in p.stdout.splitlines()]
    at = 0
    for want in block.splitlines():
        want = want.rstrip()
        try:
            at = printed.index(want, at) + 1
        except ValueError:
            pytest.fail(f"{where}: the docs quote a line `{command}` does not print (in this "
                        f"order):\n  {want}\n--- it printed ---\n" + "\n".join(printed))


def test_the_readme_quotes_the_plan_through_this_check():
    """README's plan numbers come with their command (the demo's plan at the stored CPU rates),
    so a change of rates or estimate fails here."""
    readme = [q for q in QUOTES if q[0].startswith("README.md")]
    assert any("table1 demo --plan --rates benchmarks/rates/cpu-" in q[1] for q in readme)
    # and the prose around them quotes no minutes of its own
    text = (REPO / "README.md").read_text()
    assert "about 6 minutes" not in text and "20–40 minutes" not in text
