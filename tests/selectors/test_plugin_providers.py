"""Who provides a run's code is part of its identity (argtca/trainers/providers.py): a package
installed between a kill and the resume whose entry point overrides selector ``div``
(``override=True``) refuses the resume in one line naming ``div`` and the package's module and
file, instead of continuing with the other selector's picks; its run is another experiment, whose
fingerprint holds ``PROVIDER.SELECTOR`` and the module's file by content; a trainer registered over
a built-in method is ``PROVIDER.METHOD``. A flag written after the ``KEY VALUE`` overrides is a
flag (it was read as the config key "--output-dir")."""
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from argtca.run_folder import ConfigMismatchError
from argtca.trainers import methods
from conftest import tiny_cfg
from helpers_data import make_caltech
from helpers_procs import python_env

REPO = Path(__file__).resolve().parents[2]
QUICK = ["DATASET.NUM_IMAGES", "8", "TTA.N_VIEWS", "4", "USE_CUDA", "False", "VERBOSE", "False",
         "DATALOADER.NUM_WORKERS", "0", "TRAINER.ARGTCA.EMBEDDINGS", "raw"]
OVERRIDE = '''"""An installed package that replaces argtca's "div" with its own rule."""
from argtca.registry import SELECTOR_REGISTRY


@SELECTOR_REGISTRY.register(name="div", override=True, needs_graph=False)
def last_candidates(emb, node_class, attrs, m_prime, seed=42, **kw):
    ks = node_class.tolist()
    return {k: [(i, 0.0) for i, c in enumerate(ks) if c == k][-m_prime:] for k in sorted(set(ks))}
'''


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _install(site: Path) -> Path:
    """The package as pip leaves it: its module and a dist-info with the entry point."""
    site.mkdir()
    module = site / "zz_div_override.py"
    module.write_text(OVERRIDE)
    info = site / "zz_div_override-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-div-override\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[argtca.selectors]\nbetter_div = zz_div_override\n")
    return module


def _run(out, *site, flags_last=False):
    cmd = [sys.executable, "-m", "argtca.run", "--dataset-config-file",
           "configs/datasets/demo.yaml", "--config-file", "configs/trainers/argtca.yaml",
           "TRAINER.ARGTCA.SELECTOR", "div", *QUICK]
    # the resume as a user typed it: --output-dir after the overrides
    cmd += ["--output-dir", str(out)] if flags_last else []
    if not flags_last:
        cmd[3:3] = ["--output-dir", str(out)]
    return subprocess.run(cmd, cwd=REPO, env=python_env(*site), capture_output=True, text=True,
                          timeout=600)


def _interrupt(out, keep=3):
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines[:keep]) + "\n")
    (out / "summary.json").unlink()
    return (out / "records.jsonl").read_bytes()


def test_an_entry_point_override_installed_before_the_resume_is_refused(tmp_path):
    out = tmp_path / "run"
    p = _run(out)
    assert p.returncode == 0, p.stderr[-3000:]
    fp = json.loads((out / "config.json").read_text())
    assert not any(k.startswith("PROVIDER.") for k in fp)   # built-in code: no provider keys
    kept = _interrupt(out)
    module = _install(tmp_path / "site")                     # pip install between kill and resume
    for flags_last in (False, True):
        p = _run(out, tmp_path / "site", flags_last=flags_last)
        assert p.returncode == 2, p.stderr[-3000:]
        err = [x for x in p.stderr.splitlines() if x.strip()]
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert 'selector "div"' in err[0] and "zz_div_override" in err[0]
        assert str(module) in err[0] and "argtca (built-in)" in err[0]
        assert (out / "records.jsonl").read_bytes() == kept

    # with the package installed the run is another experiment, named by its provider
    other = tmp_path / "other"
    p = _run(other, tmp_path / "site")
    assert p.returncode == 0, p.stderr[-3000:]
    fp2 = json.loads((other / "config.json").read_text())
    assert fp2["PROVIDER.SELECTOR"] == f"zz_div_override ({module})"
    assert fp2["FILE_SHA256.PLUGIN.zz_div_override"] == _sha(module)
    assert {k for k in set(fp) ^ set(fp2)} == {"PROVIDER.SELECTOR",
                                               "FILE_SHA256.PLUGIN.zz_div_override"}
    summary = json.loads((other / "summary.json").read_text())
    assert summary["selector_provider"]["builtin"] is False
    assert summary["inputs"]["PLUGIN.zz_div_override"]["sha256"] == _sha(module)
    picks = json.loads((other / "phase1.json").read_text())["selected"]
    assert picks != json.loads((out / "phase1.json").read_text())["selected"]

    # the package's module edited in place (same size, mtime restored): refused as well
    kept = _interrupt(other)
    st = module.stat()
    time.sleep(0.05)
    module.write_text(OVERRIDE.replace("[-m_prime:]", "[:m_prime] "))
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert module.stat().st_size == st.st_size
    p = _run(other, tmp_path / "site")
    assert p.returncode == 2, p.stderr[-3000:]
    err = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and "PLUGIN.zz_div_override" in err[0] and _sha(module) in err[0]
    assert (other / "records.jsonl").read_bytes() == kept


@pytest.mark.parametrize("argv, out, opts", [
    (["TTA.STEPS", "1", "--output-dir", "o"], "o", ["TTA.STEPS", "1"]),
    (["--seed", "2", "TTA.STEPS", "1", "--output-dir=o", "TTA.STREAM.SEED", "-1"], "o",
     ["TTA.STEPS", "1", "TTA.STREAM.SEED", "-1"]),
    (["TTA.CTX_INIT", "--output-dir", "--output-dir", "o"], "o", ["TTA.CTX_INIT", "--output-dir"]),
    (["--", "TTA.CTX_INIT", "x", "--output-dir", "o"], "", ["--", "TTA.CTX_INIT", "x",
                                                            "--output-dir", "o"]),
])
def test_flags_after_the_overrides_are_flags(argv, out, opts):
    from argtca.run import parse_args
    args = parse_args(argv)
    assert args.output_dir == out and args.opts == opts


# ------------------------------------------------------------------ a method over a built-in
class TPT(methods.TPT):
    """A user's TPT, registered over the built-in (its numbers may differ)."""


def _cfg(data, out):
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
                      "TTA.N_VIEWS": 4, "OUTPUT_DIR": str(out)})
    cfg.freeze()
    return cfg


def test_a_method_registered_over_a_built_in_is_its_provider(tmp_path):
    data = make_caltech(tmp_path / "data")
    out = tmp_path / "run"
    builtin = methods.TPT(_cfg(data, out))
    assert not any(k.startswith("PROVIDER.") for k in builtin.fingerprint())
    builtin.test()
    kept = _interrupt(out, keep=2)
    mine = TPT(_cfg(data, out))
    fp = mine.fingerprint()
    here = os.path.abspath(__file__)
    assert fp["PROVIDER.METHOD"] == f"{TPT.__module__} ({here})"
    assert fp[f"FILE_SHA256.PLUGIN.{TPT.__module__}"] == _sha(here)
    with pytest.raises(ConfigMismatchError) as e:
        mine.test()
    msg = str(e.value)
    assert "\n" not in msg and "method tpt (trainer TPT)" in msg and here in msg
    assert "argtca (built-in)" in msg
    assert (out / "records.jsonl").read_bytes() == kept


def test_a_function_entry_point_named_like_a_built_in_is_one_clear_error(tmp_path, monkeypatch):
    from argtca.selectors import PluginError, load_entry_points
    site = tmp_path / "site"
    site.mkdir()
    (site / "zz_fn_div.py").write_text("def other(emb, node_class, attrs, m_prime, **kw):\n"
                                       "    return {}\n")
    info = site / "zz_fn_div-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-fn-div\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[zz.test.selectors]\ndiv = zz_fn_div:other\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(PluginError) as e:
        load_entry_points("zz.test.selectors")
    msg = str(e.value)
    assert msg.startswith("selector entry point div = zz_fn_div:other (group zz.test.selectors, "
                          "package zz-fn-div) takes the name of the registered selector 'div'")
    assert "override=True" in msg
