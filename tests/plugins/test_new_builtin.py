"""A new built-in method touches at most four files: its class, its YAML, its test and the methods
doc. Here a throwaway online method is one file put into argtca/adapters' package path (as a new
file there would be; its YAML is optional, the node's defaults are declared with the class), and
every list of methods picks it up with no other edit: the catalogue (CLI, baseline.sh's list),
table1's sets and rows, the zoo benchmark, the report's family order, the config defaults and
value checks, and Dassl's registry. It runs in a subprocess, so nothing stays registered."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

NEW_METHOD = textwrap.dedent('''
    """A throwaway online method: CLIP's logits plus a running mean of the stream's features."""
    from argtca.adapters.base import OnlineAdapter, Range
    from argtca.plugins import method


    @method("zz_newm", label="ZZ New", defaults={"WEIGHT": 0.5})
    class ZZNew(OnlineAdapter):
        cfg_ranges = {"WEIGHT": Range(lambda v: 0 <= v <= 1, "[0, 1]")}

        def reset(self):
            self.state = {"n": 0}

        def step(self, img):
            self.state["n"] += 1
            return self.clip_logits(img[0]).softmax(-1)
''')

DRIVER = textwrap.dedent('''
    import contextlib, importlib.util, io, json, re, sys
    # a new file in argtca/adapters: the package's path holds the test's folder too
    spec = importlib.util.find_spec("argtca.adapters")
    spec.submodule_search_locations.append(sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["argtca.adapters"] = mod
    spec.loader.exec_module(mod)
    out = {}

    def printed(fn, *a):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = fn(*a)
        return rc, buf.getvalue()

    from argtca.trainers import catalogue as cat
    out["names"] = cat.method_names()
    out["online"] = cat.method_names("online")
    out["sets"] = cat.method_sets()
    out["baseline_list"] = printed(cat.main, ["--exclude-family", "argtca"])[1].split()
    out["table"] = [x for x in printed(cat.main, ["--table"])[1].splitlines() if "zz_newm" in x]
    out["run_args"] = cat.method_config_args("zz_newm")
    from argtca.experiments.plan import METHODS, ZOO_METHODS
    out["plan"] = [METHODS, ZOO_METHODS]
    from argtca.bench.zoo import METHODS as BENCH
    out["bench"] = BENCH
    from argtca.experiments.__main__ import main
    rc, text = printed(main, ["table1", "demo", "--seeds", "1", "--dry-run", "--methods", "zoo",
                              "--out-root", sys.argv[2]])
    out["dry_run"] = [rc, re.findall(r"would run: (\\S+) on demo", text)]
    from argtca.report.runs import declared_methods
    out["report"] = declared_methods().get("zz_newm")
    from argtca.config import ConfigError, check_cfg_values, get_cfg_default
    cfg = get_cfg_default()
    out["node"] = dict(cfg.TRAINER.ZZ_NEWM)
    cfg.TRAINER.NAME = "ZZ_NEWM"
    cfg.TRAINER.ZZ_NEWM.WEIGHT = 3.0
    try:
        check_cfg_values(cfg)
        out["check"] = "passed"
    except ConfigError as e:
        out["check"] = str(e)
    from argtca.trainers.providers import builtin_module
    cls = cat.find_trainer("zz_newm")
    out["builtin"] = builtin_module(cls.__module__)
    try:
        import argtca.dassl_compat as dc
        out["dassl"] = dc.REGISTERED["trainers"].get("ZZ_NEWM") if dc.HAVE_DASSL else "absent"
    except Exception as e:   # noqa: BLE001 (Dassl's runtime dependencies missing)
        out["dassl"] = f"absent: {e}"
    print(json.dumps(out))
''')


def test_a_new_builtin_file_is_in_every_list(tmp_path):
    folder = tmp_path / "adapters_extra"
    folder.mkdir()
    (folder / "zz_newm.py").write_text(NEW_METHOD)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
           "ARGTCA_OFFLINE": "1", "ARGTCA_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, str(driver), str(folder), str(tmp_path / "out")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    # the online family, after the online methods registered before it; table order
    assert got["online"][-1] == "zz_newm" and got["names"][got["names"].index("zz_newm") + 1:] \
        == ["argtca"]
    assert "zz_newm" in got["sets"]["zoo"] and "zz_newm" in got["sets"]["all"]
    assert "zz_newm" not in got["sets"]["paper"]
    assert "zz_newm" in got["baseline_list"]                    # scripts/baseline.sh's METHODS
    assert got["table"] == ["zz_newm        Online         ZZ New"]
    assert got["run_args"] == ["--trainer", "zz_newm"]          # no YAML: its declared defaults
    assert "zz_newm" in got["plan"][0] and "zz_newm" in got["plan"][1]
    assert "zz_newm" in got["bench"]
    assert got["dry_run"][0] == 0 and got["dry_run"][1][-1] == "zz_newm"
    assert got["report"]["family"] == "online" and got["report"]["label"] == "ZZ New"
    assert got["node"] == {"WEIGHT": 0.5}
    assert "TRAINER.ZZ_NEWM.WEIGHT=3.0 (allowed: [0, 1])" in got["check"]
    assert got["builtin"] is True                               # argtca's own: no PROVIDER key
    if not str(got["dassl"]).startswith("absent"):
        assert got["dassl"] == "ZZ_NEWM"                        # Dassl's name -> argtca's
