"""Selectors from the user's own code, outside the argtca package: ``--plugin MODULE`` (CLI and
scripts) and the ``argtca.selectors`` entry-point group, each through a real subprocess on the
embedded demo."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from argtca.attributes import dedupe_attributes
from helpers_procs import python_env

REPO = Path(__file__).resolve().parents[2]
DEMO_ATTRS = REPO / "argtca" / "demo" / "assets" / "demo_attributes.json"
QUICK = ["DATASET.NUM_IMAGES", "8", "TTA.N_VIEWS", "4", "USE_CUDA", "False", "VERBOSE", "False",
         "DATALOADER.NUM_WORKERS", "0", "TRAINER.ARGTCA.EMBEDDINGS", "raw"]

USER_SELECTOR = textwrap.dedent('''
    """A user's selector, outside argtca: the last M' candidates of each class."""
    from argtca.registry import SELECTOR_REGISTRY

    @SELECTOR_REGISTRY.register(name="zz_last")
    def last_ones(emb, node_class, attrs, m_prime, seed=42, **kw):
        assert emb is not None and emb.shape[0] == len(attrs)   # it is given the embeddings
        out = {}
        for k in sorted(set(node_class.tolist())):
            idx = [i for i, c in enumerate(node_class.tolist()) if c == k]
            out[k] = [(i, 0.0) for i in idx[-m_prime:]]
        return out
''')


def _expected_last_two():
    data = json.loads(DEMO_ATTRS.read_text())
    return {c: dedupe_attributes(v.split())[:10][-2:] for c, v in data.items()}


@pytest.fixture
def user_folder(tmp_path):
    folder = tmp_path / "my_code"          # not inside the package, not on sys.path by default
    folder.mkdir()
    (folder / "my_selectors.py").write_text(USER_SELECTOR)
    return folder


def test_plugin_module_runs_on_the_demo_through_the_script(user_folder, tmp_path):
    out = tmp_path / "run"
    env = python_env(user_folder)
    env.update(PLUGINS="my_selectors", OUTPUT_DIR=str(out))
    p = subprocess.run(["bash", "scripts/argtca.sh", "demo", "zz_last", *QUICK], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    p1 = json.loads((out / "phase1.json").read_text())
    assert p1["settings"]["SELECTOR"] == "zz_last"
    assert p1["selected"] == _expected_last_two()
    s = json.loads((out / "summary.json").read_text())
    assert s["n"] == 8 and s["selector"] == "zz_last"
    # without the plugin the selector is unknown: one error line naming the registered ones
    env.pop("PLUGINS")
    env["OUTPUT_DIR"] = str(tmp_path / "other")
    p = subprocess.run(["bash", "scripts/argtca.sh", "demo", "zz_last", *QUICK], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 2 and "zz_last" in p.stderr and "div" in p.stderr


def test_plugin_as_a_file_path_in_select_attributes_and_bad_plugin(user_folder, tmp_path):
    path = user_folder / "my_selectors.py"
    p = subprocess.run([sys.executable, "-m", "argtca.experiments.select_attributes", "demo",
                        "--plugin", str(path), "--selectors", "tca,zz_last", "--num-classes", "16",
                        "--device", "cpu", "TRAINER.ARGTCA.EMBEDDINGS", "raw"],
                       cwd=tmp_path, env=python_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [line.split("|") for line in p.stdout.splitlines()[2:]]
    got = {r[0].strip(): r[2].strip() for r in rows}
    assert got == {c: ", ".join(v) for c, v in _expected_last_two().items()}
    p = subprocess.run([sys.executable, "-m", "argtca.run", "--plugin", "no_such_module_zz",
                        "--dataset-config-file", "configs/datasets/demo.yaml"], cwd=REPO,
                       env=python_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("error: --plugin no_such_module_zz")


def _distribution(site, entry_points_txt):
    """An 'installed' package in ``site``: a module and its dist-info with entry points."""
    (site / "zz_ep_pkg.py").write_text(
        "from argtca.registry import SELECTOR_REGISTRY\n"
        "@SELECTOR_REGISTRY.register(name='zz_ep_module')\n"
        "def first(emb, node_class, attrs, m_prime, seed=42, **kw):\n"
        "    ks = sorted(set(node_class.tolist()))\n"
        "    return {k: [(i, 1.0) for i, c in enumerate(node_class.tolist()) if c == k][:m_prime]"
        " for k in ks}\n"
        "def unregistered(emb, node_class, attrs, m_prime, seed=42, **kw):\n"
        "    return first(emb, node_class, attrs, m_prime)\n")
    info = site / "zz_ep_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-ep-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points_txt)


def test_entry_point_group_registers_modules_and_functions(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _distribution(site, "[argtca.selectors]\nmod = zz_ep_pkg\n"
                        "zz_ep_func = zz_ep_pkg:unregistered\n")
    code = ("from argtca.registry import SELECTOR_REGISTRY as R\n"
            "import argtca.selectors\n"
            "print(R.get('zz_ep_module').__name__, R.get('zz_ep_func').__name__)")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=python_env(site),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["first", "unregistered"]
    # and a selector lookup in the CLI finds it with no --plugin (the side-by-side table)
    p = subprocess.run([sys.executable, "-m", "argtca.experiments.select_attributes", "demo",
                        "--selectors", "tca,zz_ep_func", "--num-classes", "16", "--device", "cpu",
                        "TRAINER.ARGTCA.EMBEDDINGS", "raw"], cwd=tmp_path, env=python_env(site),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [line.split("|") for line in p.stdout.splitlines()[2:]]
    assert len(rows) == 16 and all(r[1].strip() == r[2].strip() for r in rows)  # = tca here


def test_broken_entry_point_is_one_error_line(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _distribution(site, "[argtca.selectors]\nbroken = zz_missing_module_xyz\n")
    p = subprocess.run([sys.executable, "-m", "argtca.run", "--dataset-config-file",
                        "configs/datasets/demo.yaml", "--config-file",
                        "configs/trainers/argtca.yaml", "--output-dir", str(tmp_path / "run"),
                        *QUICK], cwd=REPO, env=python_env(site), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 2
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: selector entry point broken = zz_missing_module_xyz")
    assert "zz-ep-pkg" in last and "uninstall" in last


OVERRIDE_RANDOM = textwrap.dedent('''
    """A user's file called random.py that replaces the built-in "random" selector on purpose and
    reads no embeddings."""
    from argtca.registry import SELECTOR_REGISTRY

    @SELECTOR_REGISTRY.register(name="random", override=True, needs_graph=False)
    def last_ones(emb, node_class, attrs, m_prime, seed=42, **kw):
        assert emb is None
        ks = node_class.tolist()
        return {k: [(i, 0.0) for i, c in enumerate(ks) if c == k][-m_prime:]
                for k in sorted(set(ks))}
''')


def _run(tmp_path, plugin, selector, out):
    opts = [o for o in QUICK if o not in ("TRAINER.ARGTCA.EMBEDDINGS", "raw")]  # gat (default)
    return subprocess.run([sys.executable, "-m", "argtca.run", "--plugin", str(plugin),
                           "--dataset-config-file", "configs/datasets/demo.yaml",
                           "--config-file", "configs/trainers/argtca.yaml", "--output-dir",
                           str(out), "TRAINER.ARGTCA.SELECTOR", selector, "VERBOSE", "True",
                           *opts], cwd=REPO, env=python_env(), capture_output=True, text=True,
                          timeout=600)


def test_plugin_without_embeddings_trains_no_gat_and_is_named_in_the_records(tmp_path):
    folder = tmp_path / "my_code"
    folder.mkdir()
    plugin = folder / "random.py"       # the standard library's name: must not shadow it
    plugin.write_text(OVERRIDE_RANDOM)
    out = tmp_path / "run"
    p = _run(tmp_path, plugin, "random", out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[phase 1] trained" not in p.stdout and "stored" not in p.stdout
    p1 = json.loads((out / "phase1.json").read_text())
    assert p1["loss_curve"] == [] and p1["store_key"] is None and p1["attention"] == {}
    assert p1["selected"] == _expected_last_two()
    provider = {"name": "random", "builtin": False, "module": "_argtca_plugins.random",
                "file": str(plugin), "needs_graph": False}
    assert p1["selector"] == provider
    s = json.loads((out / "summary.json").read_text())
    assert s["selector"] == "random" and s["selector_provider"] == provider


def test_a_plugin_answer_that_breaks_the_contract_is_one_error_line(tmp_path):
    plugin = tmp_path / "wrong.py"
    plugin.write_text(textwrap.dedent('''
        from argtca.registry import SELECTOR_REGISTRY

        @SELECTOR_REGISTRY.register(name="zz_wrong", needs_graph=False)
        def other_class(emb, node_class, attrs, m_prime, seed=42, **kw):
            ks = node_class.tolist()   # class k gets class k+1's first nodes
            return {k: [(ks.index((k + 1) % (max(ks) + 1)) + j, 1.0) for j in range(m_prime)]
                    for k in sorted(set(ks))}
    '''))
    p = _run(tmp_path, plugin, "zz_wrong", tmp_path / "run")
    assert p.returncode == 2, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    classes = list(json.loads(DEMO_ATTRS.read_text()))
    assert last.startswith(f'error: selector "zz_wrong" (plug-in {plugin}): class '
                           f'{classes[0]!r} (index 0), entry 0: node 10 ')
    assert f"belongs to class {classes[1]!r} (index 1)" in last
    assert "Traceback" not in p.stderr
