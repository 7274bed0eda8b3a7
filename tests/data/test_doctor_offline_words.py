"""``python -m argtca.data check`` never downloads, so it reads argtca's cache only; its notes
must say so, not claim that the user set ARGTCA_OFFLINE (the doctor sets it itself)."""
from argtca.data.__main__ import main

from helpers_data import make_caltech


def _check(tmp_path, capsys):
    root = make_caltech(tmp_path / "data")
    (root / "caltech-101" / "split_zhou_Caltech101.json").unlink()   # neither here nor cached
    rc = main(["check", "caltech101", "--root", str(root), "--no-open"])
    return rc, capsys.readouterr().out


def test_check_without_offline_does_not_say_it_is_set(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ARGTCA_OFFLINE", raising=False)
    monkeypatch.setenv("ARGTCA_DOWNLOADS", str(tmp_path / "empty_cache"))
    rc, out = _check(tmp_path, capsys)
    assert rc == 1 and "BROKEN" in out
    assert "ARGTCA_OFFLINE" not in out, out
    assert ("split_zhou_Caltech101.json is not in argtca's cache (python -m argtca.data check "
            "never downloads" in out)
    assert "fix: run any argtca command on this dataset once with network access" in out
    import os
    assert "ARGTCA_OFFLINE" not in os.environ   # the doctor's own setting is undone


def test_check_with_offline_set_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ARGTCA_OFFLINE", "1")
    monkeypatch.setenv("ARGTCA_DOWNLOADS", str(tmp_path / "empty_cache"))
    rc, out = _check(tmp_path, capsys)
    assert rc == 1 and "is not cached and ARGTCA_OFFLINE is set" in out
    assert "fix: unset ARGTCA_OFFLINE (it is set here) and run any argtca command" in out
