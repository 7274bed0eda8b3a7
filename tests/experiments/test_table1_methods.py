"""Table 1's rows: the paper's methods, the field's training-free and online methods, and the
names ``paper`` / ``zoo`` that stand for those lists in ``--methods``."""
import re

from argtca.experiments.__main__ import main
from argtca.experiments.plan import METHODS, PAPER_METHODS, ZOO_METHODS
from argtca.trainers.catalogue import method_names


def _would_run(capsys, *methods, tmp_path):
    argv = ["table1", "demo", "--seeds", "1", "--dry-run", "--out-root", str(tmp_path)]
    if methods:
        argv += ["--methods", ",".join(methods)]
    assert main(argv) == 0
    return re.findall(r"would run: (\S+) on demo", capsys.readouterr().out)


def test_default_rows_are_every_family_and_the_names_expand(capsys, tmp_path):
    assert _would_run(capsys, tmp_path=tmp_path) == METHODS
    assert set(METHODS) == set(PAPER_METHODS) | set(ZOO_METHODS)
    assert _would_run(capsys, "paper", tmp_path=tmp_path) == PAPER_METHODS
    # a name given twice runs once
    assert _would_run(capsys, "zoo", "tda", tmp_path=tmp_path) == ZOO_METHODS
    # the default order is the report's order of families
    plain = [m.split("-")[0] for m in METHODS]
    assert plain == sorted(plain, key=method_names().index)
