"""``collect`` never runs what a launch record names: a record pointing to another folder (or
whose job id climbs out of the launch's folder) is refused in one line, and a crafted result
file even inside the launch's own folder is read as plain data (the task counts as failed)
without running it. A record that is not JSON, one without ``folder``, and ``--launcher slurm``
without SLURM are each one line, exit status 2, no traceback."""
import json
import os
import pickle
from pathlib import Path

import pytest

from argtca.experiments.__main__ import main
from argtca.experiments.launch.jobs import read_result
from experiments_cli import call as _call

TINY = ["DATASET.NUM_IMAGES", "2", "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False",
        "USE_CUDA", "False"]
PLAN = ["table1", "demo", "--methods", "zeroshot", "--seeds", "1", "--out-root", "o"] + TINY
RUN = "zeroshot on demo, seed 1"


class _Crafted:
    """Unpickled, it would create ``marker`` (what an attacker's os.system call would do)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def _crafted_result(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(("success", _Crafted(marker))))


@pytest.fixture
def launch(tmp_path, monkeypatch):
    """The plan's launch record path (as collect finds it) and a record writer."""
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    rc, out, err = _call(["collect"] + PLAN)
    assert rc == 1, err   # nothing ran: not finished
    line = next(ln for ln in out.splitlines() if "no launch record " in ln)
    record = Path(line.split("no launch record ", 1)[1].split(":")[0])
    own = record.parent / "logs" / "%j"

    def write(folder=str(own), job_id="4242", **launch_keys):
        entry = {"launcher": "local", "folder": folder,
                 "tasks": [{"job_id": job_id, "runs": [RUN]}], **launch_keys}
        for k in [k for k, v in entry.items() if v is None]:
            del entry[k]
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"command": PLAN, "cwd": str(tmp_path),
                                      "launches": [entry]}))
        return record
    return tmp_path, record, own, write


def _one_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_record_pointing_to_another_folder_is_refused_and_nothing_unpickled(launch):
    tmp, record, own, write = launch
    marker = tmp / "marker"
    evil = tmp / "elsewhere"
    _crafted_result(evil / "4242" / "4242_0_result.pkl", marker)
    write(folder=str(evil / "%j"))
    for argv in (["collect", str(record)], ["collect"] + PLAN):
        rc, out, err = _call(argv)
        assert rc == 2 and not marker.exists()
        assert _one_line(err) == (
            f"error: launch record {record}: launch 1: folder '{evil}/%j' is not this launch's "
            f"log folder {own.resolve()} (the logs are read only there); restore it, or delete "
            f"it (collect then reads what finished from the run folders alone)")


def test_job_id_climbing_out_of_the_launch_folder_is_refused(launch):
    tmp, record, own, write = launch
    marker = tmp / "marker"
    _crafted_result(tmp / "x" / "1" / "1_0_result.pkl", marker)
    write(job_id="../../../x/1")
    rc, out, err = _call(["collect", str(record)])
    assert rc == 2 and not marker.exists()
    assert _one_line(err).startswith(f'error: launch record {record}: launch 1, task 1: job_id '
                                      f'"../../../x/1": expected a job id such as 1234 or 1234_5')


def test_crafted_result_in_the_own_folder_is_not_run(launch):
    """Inside the launch's own folder too (its record's command may name any --out-root): the
    result file is read as plain data; one naming a callable counts as a failed task."""
    tmp, record, own, write = launch
    marker = tmp / "marker"
    job = own.parent / "4242"
    _crafted_result(job / "4242_0_result.pkl", marker)
    (job / "4242_0_log.err").write_text("error: the run's own line\n")
    write()
    rc, out, err = _call(["collect", str(record)])
    assert rc == 1 and not marker.exists(), err
    assert f"[table1] not finished: {RUN}: task 4242: error: the run's own line (log: " \
           f"{job}/4242_0_log.err)" in err


def test_read_result_plain_data_only(tmp_path):
    marker = tmp_path / "marker"
    _crafted_result(tmp_path / "bad.pkl", marker)
    assert read_result(tmp_path / "bad.pkl") is None and not marker.exists()
    (tmp_path / "ok.pkl").write_bytes(pickle.dumps(("success", [RUN]), protocol=5))
    assert read_result(tmp_path / "ok.pkl") == ("success", [RUN])
    (tmp_path / "torn.pkl").write_bytes(pickle.dumps(("error", "Traceback ..."))[:-3])
    assert read_result(tmp_path / "torn.pkl") is None
    (tmp_path / "other.pkl").write_bytes(pickle.dumps([1, 2, 3]))
    assert read_result(tmp_path / "other.pkl") is None


def test_record_not_json_or_without_folder_is_one_line(launch):
    tmp, record, own, write = launch
    record.parent.mkdir(parents=True)
    record.write_text('{"command": ["table1"], "launches": [')
    rc, out, err = _call(["collect", str(record)])   # given by name: __main__ says so
    assert rc == 2 and _one_line(err).startswith(f"error: collect {record}: not a launch record")
    rc, out, err = _call(["collect"] + PLAN)   # found from the command (was a traceback)
    assert rc == 2
    assert _one_line(err).startswith(f"error: launch record {record}: not JSON (Expecting ")
    write(folder=None)
    rc, out, err = _call(["collect"] + PLAN)
    assert rc == 2
    assert _one_line(err) == (
        f"error: launch record {record}: launch 1: no 'folder' (every launch the launcher "
        f"writes has launcher, folder and tasks); restore it, or delete it (collect then reads "
        f"what finished from the run folders alone)")
    # deleted, as the line says: collect works from the run folders alone
    record.unlink()
    rc, out, err = _call(["collect"] + PLAN)
    assert rc == 1 and f"[table1] not finished: {RUN}: never submitted" in err


def test_slurm_launcher_without_slurm_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))   # no srun, no sbatch
    rc, out, err = _call(PLAN + ["--launcher", "slurm"])
    assert rc == 2 and _one_line(err) == (
        "error: --launcher slurm: SLURM is not available on this machine (no srun or sbatch on "
        "PATH); submit from the cluster's login node, or use --launcher local for submitit's "
        "local jobs on this machine")
    assert not (tmp_path / "o").exists()   # nothing planned on disk, nothing submitted
    # its dry run needs no SLURM
    rc, out, err = _call(PLAN + ["--launcher", "slurm", "--dry-run"])
    assert rc == 0 and "would submit: " in out, err


def test_record_whose_command_loads_a_plugin_is_refused_and_not_imported(tmp_path, monkeypatch):
    """A record's command is re-run by collect: a --plugin it names would be imported (code run)
    because someone edited the record. The command is read by its own parser (options spelled in
    full): every spelling that parser takes for --plugin is refused as loading code, and the
    shortened ones (which argparse used to take for --plugin) as not a command at all. Each is
    one line naming the record; the plug-in never runs, in any sub-command."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "imported"
    plugin = tmp_path / "evil.py"
    plugin.write_text(f"open({str(marker)!r}, 'w').close()\n")
    record = tmp_path / "plan.json"
    loads = (["--plugin", str(plugin)], [f"--plugin={plugin}"])
    shortened = (["--plug", str(plugin)], [f"--plu={plugin}"], ["--p", str(plugin)])
    for command in ("table1", "shift", "ood", "table2", "sweep", "table3", "tune"):
        plan = [command, "demo", "--out-root", "o"] + TINY
        for spelled in loads + shortened:
            record.write_text(json.dumps({"command": plan + spelled, "cwd": str(tmp_path)}))
            rc, out, err = _call(["collect", str(record)])
            assert rc == 2 and not marker.exists(), (spelled, err)
            assert len(err.strip().splitlines()) == 1 and err.startswith("error: collect "), err
            assert str(record) in err and str(plugin) in err, err
            assert ("loads plug-in code" in err) == (spelled in loads), err
            if spelled in shortened:
                assert "unrecognized arguments: " + spelled[0].split("=")[0] in err, err


@pytest.mark.parametrize("command", ["table1", "shift", "ood", "table2", "sweep", "table3",
                                     "tune", "run", "catalogue", "select_attributes"])
def test_shortened_plugin_option_is_an_unknown_option(tmp_path, monkeypatch, command, capsys):
    """argparse's abbreviations are off for every command that takes --plugin and is run from
    a record or a script: --plug FILE / --plu=FILE are unknown options (exit 2, nothing
    imported), --plugin and --plugin= load the file."""
    import argtca.run
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "imported"
    plugin = tmp_path / "evil.py"
    plugin.write_text(f"open({str(marker)!r}, 'w').close()\n")
    from argtca.experiments import select_attributes
    from argtca.trainers import catalogue
    entry, head = {"run": (argtca.run.main, ["--trainer", "zeroshot"]),
                   "catalogue": (catalogue.main, ["--table"]),
                   "select_attributes": (select_attributes.main, ["demo"])}.get(
        command, (main, [command, "demo"]))
    for spelled in (["--plug", str(plugin)], [f"--plu={plugin}"]):
        with pytest.raises(SystemExit) as e:
            entry(head + spelled + ["--root", str(tmp_path)])
        assert e.value.code == 2 and not marker.exists()
        err = capsys.readouterr().err   # argparse's words, or select_attributes' own
        assert ("unrecognized arguments: " + spelled[0].split("=")[0] in err
                or "unknown option(s) ['" + spelled[0].split("=")[0] in err), err
    if command in ("catalogue", "select_attributes"):
        return
    if command == "run":
        parsed = argtca.run.parse_args(["--plugin", "a.py", "--plugin=b.py"] + head)
    else:
        from argtca.experiments.__main__ import _parse
        parsed = _parse(head + ["--plugin", "a.py", "--plugin=b.py"])
    assert parsed.plugin == ["a.py", "b.py"]


def test_local_launcher_checks_what_the_runs_share_before_submitting(tmp_path, monkeypatch):
    """--launcher local with a weights file that is not there: the one message of the inline
    runner, exit 2, before anything is submitted (no launch record, no run folder)."""
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nowhere" / "weights.pt"
    rc, out, err = _call(["table1", "demo", "--methods", "zeroshot", "--seeds", "1",
                          "--out-root", "o", "--launcher", "local", "--wait",
                          "MODEL.PRETRAINED", str(missing)] + TINY)
    assert rc == 2 and "no run started" in err and str(missing) in err, err
    assert not (tmp_path / "o").exists()


def test_slurm_launcher_checks_what_the_runs_share_before_submitting(tmp_path, monkeypatch):
    """--launcher slurm with a weights file that is not there: the inline runner's one message,
    exit 2, before any sbatch (no launch record, no run folder, no job). The runs are checked as
    the GPU node will run them: RUN.REQUIRE_CUDA on this CPU-only machine stops nothing."""
    from submitit.slurm.test_slurm import mocked_slurm
    monkeypatch.setenv("ARGTCA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nowhere" / "weights.pt"
    plan = ["table1", "demo", "--methods", "zeroshot", "--seeds", "1", "--out-root", "o",
            "--launcher", "slurm"]
    with mocked_slurm():
        rc, out, err = _call(plan + ["MODEL.PRETRAINED", str(missing)] + TINY)
    assert rc == 2 and "no run started" in err and str(missing) in err, err
    assert "submitting" not in out and "submitted" not in out
    assert not (tmp_path / "o").exists()
    # what the node has is not held against this machine: submitted as one array task
    gpu = TINY[:-2] + ["USE_CUDA", "True", "RUN.REQUIRE_CUDA", "True"]
    with mocked_slurm():
        rc, out, err = _call(plan + gpu)
    assert rc == 0 and "submitted 1 task(s)" in out, err
    assert len(list((tmp_path / "o" / "launches").glob("*.json"))) == 1
