"""The README's order of commands in one fresh output folder, through the scripts as a user types
them: the demo (argtca.sh), then Table 1 on a subset (table1.sh), then compare.sh on the whole
(here: another subset, at CI size). Each run lands in its own experiment folder
``output/<method>/<dataset>/<hash8>/seed<N>``: nothing is refused, runs of other settings never
share a folder, and a run of the same settings (compare.sh's ArgTCA-Div = the demo's command) is
found and only re-read."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# CI size: two views, a 2-epoch graph, no loader workers (NUM_IMAGES is set per command)
TINY = "TTA.N_VIEWS 2 DATALOADER.NUM_WORKERS 0 TRAINER.ARGTCA.GAT.EPOCHS 2 USE_CUDA False"
STARTED = re.compile(r"^\[table1\] \d+/(\d+) (.+) on demo, seed 1 -> (\S+)"
                     r"( \(finished: re-read\))?$")


def _n_methods():
    from argtca.trainers.catalogue import method_sets
    return len(method_sets()["all"])


def _bash(cwd, *args, **env):
    e = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(REPO), **env)
    for k in ("DATA", "OUTPUT_DIR", "OUT_ROOT", "OPTS", "ATTRIBUTES", "PLUGINS"):
        e.pop(k, None)
    e.update(env)
    p = subprocess.run(["bash", str(REPO / "scripts" / args[0]), *args[1:]], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    for text in (p.stdout, p.stderr):   # no run was refused or failed
        assert "different configuration" not in text and "error" not in text.lower(), text
    return p.stdout


def _runs(stdout):
    out = {}
    for line in stdout.splitlines():
        m = STARTED.match(line)
        if m:
            assert int(m.group(1)) == _n_methods(), line
            out[m.group(2)] = (Path(m.group(3)), bool(m.group(4)))
    assert len(out) == _n_methods(), stdout   # every family's methods
    return out


def test_readme_commands_in_order_share_one_output_folder(tmp_path):
    cache = str(tmp_path / "cache")
    demo = _bash(tmp_path, "argtca.sh", "demo", "div", "DATASET.NUM_IMAGES", "4",
                 *TINY.split(), ARGTCA_CACHE=cache)
    demo_dir = Path(re.search(r"^\* output: (\S+)$", demo, re.M).group(1))
    assert re.fullmatch(rf"{tmp_path}/output/argtca/demo/[0-9a-f]{{8}}/seed1", str(demo_dir))
    t1 = _runs(_bash(tmp_path, "table1.sh", "demo", "--seeds", "1", "--quiet",
                     "DATASET.NUM_IMAGES", "3", OPTS=TINY, ARGTCA_CACHE=cache))
    cmp = _runs(_bash(tmp_path, "compare.sh", "demo", "--quiet",
                      OPTS=f"DATASET.NUM_IMAGES 4 {TINY}", ARGTCA_CACHE=cache))
    # all under the caller's output/, one folder per run, never shared by other settings
    dirs = [d for d, _ in t1.values()] + [d for d, _ in cmp.values()]
    assert all(str(d).startswith(f"{tmp_path}/output/") for d in dirs)
    assert len(set(dirs)) == 2 * _n_methods() and demo_dir not in [d for d, _ in t1.values()]
    assert cmp["argtca-div"] == (demo_dir, True)                    # the same settings: re-read
    assert not any(skipped for _, skipped in t1.values())
    assert [name for name, (_, skipped) in cmp.items() if skipped] == ["argtca-div"]
    for runs, n in ((t1, 3), (cmp, 4)):
        for d, _ in runs.values():
            assert json.loads((d / "summary.json").read_text())["n"] == n
            settings = json.loads((d.parent / "settings.json").read_text())
            assert settings["overrides"]["DATASET.NUM_IMAGES"] == n and \
                settings["experiment"] == d.parent.name
    # each method: one experiment folder per subset size, both beside each other
    for m in ("zeroshot", "tpt", "ctpt", "otpt", "atpt", "tca"):
        assert len(list((tmp_path / "output" / m / "demo").glob("*/seed1/summary.json"))) == 2
    assert len(list((tmp_path / "output/argtca/demo").glob("*/seed1/summary.json"))) == 4
    # the same Table-1 command again: every run is found finished and only re-read
    again = _runs(_bash(tmp_path, "table1.sh", "demo", "--seeds", "1", "--quiet",
                        "DATASET.NUM_IMAGES", "3", OPTS=TINY, ARGTCA_CACHE=cache))
    assert again == {k: (d, True) for k, (d, _) in t1.items()}
