"""The user commands of scripts/ from the user's own folder: relative paths ($DATA, $ATTRIBUTES,
$OUTPUT_DIR, $PLUGINS, path values) are read from the caller's folder, errors name that folder,
python names the run folder unless OUTPUT_DIR is given, and compare.sh / table1.sh go on after a
failed run, list it and exit non-zero."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from helpers_data import make_tree

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
TINY = ["MODEL.BACKBONE.NAME", "argtca-tiny-test", "MODEL.PRETRAINED", "random",
        "INPUT.SIZE", "(32, 32)", "TTA.N_VIEWS", "4", "DATALOADER.NUM_WORKERS", "0",
        "USE_CUDA", "False", "TRAINER.ARGTCA.GAT.EPOCHS", "2"]


def _env(tmp_path, **extra):
    env = dict(os.environ, PYTHON=sys.executable, ARGTCA_CACHE=str(tmp_path / "cache"), **extra)
    for k in ("DATA", "ATTRIBUTES", "OUTPUT_DIR", "OUT_ROOT", "PLUGINS", "OPTS", "PYTHONPATH"):
        if k not in extra:
            env.pop(k, None)
    return env


def _run(args, cwd, env, timeout=600):
    return subprocess.run(["bash", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _own_folder(tmp_path) -> Path:
    """A user's folder: images/ (two classes, two images each) and a.json beside it."""
    work = tmp_path / "work"
    make_tree(work / "images", {"golden_retriever": 2, "tabby_cat": 2})
    (work / "a.json").write_text(json.dumps({
        "golden retriever": "golden fur floppy ears wagging tail",
        "tabby cat": "striped coat long whiskers soft paws"}))
    return work


def test_argtca_sh_from_the_users_own_folder(tmp_path):
    work = _own_folder(tmp_path)
    env = _env(tmp_path, DATA="images", ATTRIBUTES="a.json")
    r = _run([SCRIPTS / "argtca.sh", "imagefolder", "div", *TINY], work, env)
    assert r.returncode == 0, r.stdout + r.stderr
    # no OUTPUT_DIR: python's run folder, under output/ of the caller's folder, printed absolute
    recs = list((work / "output").rglob("records.jsonl"))
    assert len(recs) == 1
    run = recs[0].parent
    assert run.name == "seed1" and run.relative_to(work / "output").parts[:2] == (
        "argtca", "imagefolder")
    assert f"* output: {run}" in r.stdout
    assert len(recs[0].read_text().splitlines()) == 4
    cfg = json.loads((run / "config.json").read_text())
    text = json.dumps(cfg)
    assert str(work / "a.json") in text and str(work / "images") in text   # read from work/
    # OUTPUT_DIR relative to the caller's folder too; a path value in KEY VALUE as well
    env = _env(tmp_path, DATA="images")
    r = _run([SCRIPTS / "argtca.sh", "imagefolder", "div", *TINY,
              "DATASET.ATTRIBUTE_FILE", "./a.json"], work, dict(env, OUTPUT_DIR="mine/run"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "mine" / "run" / "records.jsonl").is_file()
    assert f"* output: {work / 'mine' / 'run'}" in r.stdout


def test_relative_paths_that_do_not_exist_name_the_callers_folder(tmp_path):
    work = _own_folder(tmp_path)
    cases = [(dict(DATA="imgs", ATTRIBUTES="a.json"), "DATA=imgs: no such folder", "imgs"),
             (dict(DATA="images", ATTRIBUTES="b.json"), "ATTRIBUTES=b.json: no such file",
              "b.json"),
             (dict(DATA="images", PLUGINS="mine.py"), "PLUGINS: no such file", "mine.py")]
    for extra, needle, name in cases:
        r = _run([SCRIPTS / "argtca.sh", "imagefolder", "div"], work, _env(tmp_path, **extra),
                 timeout=60)
        assert r.returncode == 2, r.stderr
        line = r.stderr.strip()
        assert len(line.splitlines()) == 1 and line.startswith("error: ") and needle in line
        assert f"{work / name}" in line and f"the folder the command ran in, {work})" in line
    r = _run([SCRIPTS / "select_attributes.sh", "imagefolder"], work,
             _env(tmp_path, DATA="nope"), timeout=60)
    assert r.returncode == 2 and f"no such folder {work / 'nope'}" in r.stderr


def test_plugins_parsed_once_for_every_command():
    """$PLUGINS (and the path rules) live in scripts/_common.sh, which every command sources."""
    common = (SCRIPTS / "_common.sh").read_text()
    assert "PLUGINS" in common
    for name in ("argtca.sh", "select_attributes.sh", "baseline.sh", "compare.sh", "table1.sh"):
        text = (SCRIPTS / name).read_text()
        assert '. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"' in text, name
        assert "PL=${PLUGINS" not in text and "OLDPWD" not in text, name
        assert not re.search(r"^\s*cd ", text, re.M), name   # python runs in the caller's folder
    # argtca.sh no longer restates python's run-folder layout
    assert "seed${SEED}" not in (SCRIPTS / "argtca.sh").read_text()


def test_plugin_module_in_the_callers_folder(tmp_path):
    """PLUGINS=my_rule: a module beside the user, not on PYTHONPATH (and a relative .py path)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_rule.py").write_text(
        "from argtca.registry import SELECTOR_REGISTRY\n"
        "@SELECTOR_REGISTRY.register(name='zz_first')\n"
        "def first(emb, node_class, attrs, m_prime, seed=42, **kw):\n"
        "    out = {}\n"
        "    for k in sorted(set(node_class.tolist())):\n"
        "        idx = [i for i, c in enumerate(node_class.tolist()) if c == k]\n"
        "        out[k] = [(i, 0.0) for i in idx[:m_prime]]\n"
        "    return out\n")
    quick = [*TINY, "DATASET.NUM_IMAGES", "2", "VERBOSE", "False"]
    for plugins, out in (("my_rule", "run1"), ("./my_rule.py", "run2")):
        r = _run([SCRIPTS / "argtca.sh", "demo", "zz_first", *quick], work,
                 _env(tmp_path, PLUGINS=plugins, OUTPUT_DIR=out))
        assert r.returncode == 0, r.stdout + r.stderr
        picks = json.loads((work / out / "phase1.json").read_text())["selected"]
        assert len(picks) == 16 and all(len(v) == 2 for v in picks.values())


def _failed_lines(stderr: str):
    return [ln for ln in stderr.splitlines() if "run(s) failed" in ln]


def test_table1_and_compare_go_on_after_a_failed_run(tmp_path):
    """One run fails while it runs (a plug-in selector that raises in Phase 1: names and settings
    pass the checks made before the first run): the others still run, the failure is listed at
    the end, the report holds the rest, and the exit status is 1 -- the same for both commands."""
    from argtca.trainers.catalogue import method_sets
    work = tmp_path / "work"
    work.mkdir()
    (work / "boom.py").write_text(
        "from argtca.registry import SELECTOR_REGISTRY\n"
        "@SELECTOR_REGISTRY.register(name='zz_boom')\n"
        "def boom(emb, node_class, attrs, m_prime, **kw):\n"
        "    raise RuntimeError('this selector always fails')\n")
    env = _env(tmp_path, PLUGINS="./boom.py")
    quick = [*TINY, "DATASET.NUM_IMAGES", "2", "TTA.N_VIEWS", "2", "VERBOSE", "False"]
    r = _run([SCRIPTS / "table1.sh", "demo", "--seeds", "1", "--methods",
              "zeroshot,argtca-zz_boom", "--quiet", *quick], work, env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert _failed_lines(r.stderr) and _failed_lines(r.stderr)[0].startswith(
        "[table1] 1 of 2 run(s) failed")
    assert "argtca-zz_boom on demo" in r.stderr.split("run(s) failed")[1]
    assert len(list((work / "output" / "zeroshot").rglob("summary.json"))) == 1
    assert (work / "output" / "report").is_dir()
    # compare.sh: every method of the comparison plus the extra selector, the same rule
    n = len(method_sets()["all"]) + 1
    r = _run([SCRIPTS / "compare.sh", "demo", *quick], work,
             dict(env, EXTRA_SELECTORS="zz_boom", OUT_ROOT="cmp"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert _failed_lines(r.stderr)[0].startswith(f"[table1] 1 of {n} run(s) failed")
    assert len(list((work / "cmp").rglob("summary.json"))) == n - 1
    assert (work / "cmp" / "report" / "demo").is_dir()
    assert f"-> {work / 'cmp'}" in r.stdout          # absolute run folders


def test_path_values_made_absolute_and_tags_kept(tmp_path):
    """Path keys and path flags are read from the caller's folder; tags, builtin: and hf-hub:
    files and plain values are passed as given."""
    args = ["DATASET.ATTRIBUTE_FILE", "builtin:demo/x.json", "MODEL.PRETRAINED", "openai",
            "MODEL.PRETRAINED", "w/ViT-B-16.pt", "MODEL.PRETRAINED", "hf-hub:org/m",
            "--out-root=o", "--baseline-config", "./t.yaml", "TTA.N_VIEWS", "8",
            "TTA.CTX_CHECKPOINT", "coop/ctx.pth", "DATASET.ROOT", "/abs/data"]
    r = subprocess.run(["bash", "-c", f'. "{SCRIPTS}/_common.sh"; abs_args "$@"; '
                        f'printf "%s\\n" "${{ARGS[@]}}"', "_", *args], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "DATASET.ATTRIBUTE_FILE", "builtin:demo/x.json", "MODEL.PRETRAINED", "openai",
        "MODEL.PRETRAINED", f"{tmp_path}/w/ViT-B-16.pt", "MODEL.PRETRAINED", "hf-hub:org/m",
        f"--out-root={tmp_path}/o", "--baseline-config", f"{tmp_path}/t.yaml", "TTA.N_VIEWS",
        "8", "TTA.CTX_CHECKPOINT", f"{tmp_path}/coop/ctx.pth", "DATASET.ROOT", "/abs/data"]
