"""argtca inside the real Dassl.pytorch and CoOp (../shared/vendor): CoOp's own train.py runs every
argtca trainer and writes the per-image results ``python -m argtca.run`` writes.

The CoOp runs happen in two subprocesses (argtca imported before / after CoOp's own modules; see
tests/helpers_dassl.py), started together and batched, while the argtca.run references run here.
Skipped, saying why, when Dassl (installed or vendored) or CoOp's sources are absent."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from argtca.dassl_plugin import dassl_name
from argtca.trainers.catalogue import catalogue
from conftest import REPO
from helpers_dassl import COOP, coop_env
from helpers_data import make_caltech

TRAIN_PY = COOP / "train.py"
DEMO_YAML = str(REPO / "configs" / "datasets" / "demo.yaml")
# method key -> its trainer's name under Dassl, from the catalogue: the paper's rows (run in
# either import order) ...
METHODS = {m.method: dassl_name(m.trainer) for m in catalogue() if m.paper and m.rows}
# ... and the field's other methods: run through CoOp's train.py with the one added import line
# (the "after" order), checked record for record against python -m argtca.run
ZOO = {m.method: dassl_name(m.trainer) for m in catalogue() if not m.paper and m.rows}
# every registered trainer (temperature scaling's reference rows too)
ARGTCA_DASSL_TRAINERS = {dassl_name(m.trainer) for m in catalogue()}
SMALL = ["DATASET.NUM_IMAGES", "8", "TTA.N_VIEWS", "4", "USE_CUDA", "False",
         "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False", "TRAINER.ARGTCA.GAT.EPOCHS", "5"]
# the exact change a CoOp user makes (README, "Inside Dassl/CoOp")
SED_ONE_LINE = r"/^import trainers.zsclip$/a import argtca.dassl_compat"


def test_import_subprocess_from_repo_root_is_not_shadowed():
    # a top-level `selectors` or `datasets` package would shadow the stdlib / HuggingFace / CoOp's
    r = subprocess.run([sys.executable, "-c",
                        "import subprocess, selectors; print(selectors.__file__)"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert str(REPO) not in r.stdout
    assert not (REPO / "selectors").exists() and not (REPO / "datasets").exists()


def test_extend_cfg_adds_our_keys_and_keeps_theirs():
    from yacs.config import CfgNode as CN
    from argtca.dassl_plugin.config import extend_cfg
    cfg = CN()
    cfg.TRAINER = CN()
    cfg.TRAINER.NAME = "ArgTCA"
    cfg.TRAINER.COOP = CN()
    cfg.TRAINER.COOP.N_CTX = 16
    cfg.INPUT = CN()
    cfg.INPUT.INTERPOLATION = "bilinear"
    extend_cfg(cfg)
    assert cfg.TRAINER.COOP.N_CTX == 16 and cfg.TRAINER.NAME == "ArgTCA"
    assert cfg.INPUT.INTERPOLATION == "bilinear"          # theirs is kept (and checked later)
    assert cfg.TRAINER.ARGTCA.SELECTOR == "div" and cfg.TTA.N_VIEWS == 64
    assert cfg.INPUT.SIZE == (224, 224) and cfg.MODEL.PRETRAINED == "openai"


def test_input_size_is_a_pair_and_an_old_int_is_read_as_square(tmp_path):
    from argtca.config import get_cfg_default
    cfg = get_cfg_default()
    assert cfg.INPUT.SIZE == (224, 224)
    old = tmp_path / "old.yaml"
    old.write_text("INPUT:\n  SIZE: 96\n")
    cfg.merge_from_file(str(old))
    assert cfg.INPUT.SIZE == (96, 96)
    cfg.merge_from_list(["INPUT.SIZE", "48"])
    assert cfg.INPUT.SIZE == (48, 48)
    cfg.merge_from_list(["INPUT.SIZE", "(40, 40)"])
    assert cfg.INPUT.SIZE == (40, 40)
    cfg.merge_from_file(DEMO_YAML)
    assert cfg.INPUT.SIZE == (64, 64)
    bad = tmp_path / "bad.yaml"
    bad.write_text("INPUT:\n  SIZE: big\n")
    with pytest.raises(ValueError, match="INPUT"):
        cfg.merge_from_file(str(bad))


# ------------------------------------------------------------------------ real Dassl + CoOp
def _coop_argv(trainer, config, out, seed=1, flags=(), opts=()):
    return (["--seed", str(seed), "--trainer", trainer, "--dataset-config-file", DEMO_YAML,
             "--config-file", str(REPO / "configs" / "trainers" / f"{config}.yaml"),
             "--output-dir", str(out)] + list(flags) + SMALL + list(opts))


def _caltech_tree(root):
    """A tiny CoOp-layout Caltech101 whose train/val hold every class (Dassl counts classes on
    train_x), class folders with '_' in their names."""
    make_caltech(root, per_class=3)
    split_path = root / "caltech-101" / "split_zhou_Caltech101.json"
    split = json.loads(split_path.read_text())
    split["train"] = split["val"] = [e for e in split["test"] if e[0].endswith("0000.jpg")]
    split_path.write_text(json.dumps(split))
    return root


CALTECH_OPTS = ["--backbone", "argtca-demo-clip", "INPUT.SIZE", "(64, 64)", "MODEL.PRETRAINED",
                "builtin:demo/assets/demo_clip.pt", "TTA.N_VIEWS", "4", "USE_CUDA", "False",
                "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False"]


@pytest.fixture(scope="module")
def coop(tmp_path_factory, one_thread):
    """Every CoOp-side run, done once: returns the two drivers' results and the output folders."""
    env = coop_env()
    base = tmp_path_factory.mktemp("coop")
    data = _caltech_tree(tmp_path_factory.mktemp("caltech"))
    bare = base / "bare.yaml"
    bare.write_text('TRAINER:\n  NAME: "TPT"\n')
    before = [{"name": m, "argv": _coop_argv(t, m, base / "before" / m)} for m, t in METHODS.items()
              if m != "tpt"]
    before += [{"name": f"tpt_seed{s}",
                "argv": _coop_argv("TPT", "tpt", base / "before" / "tpt" / f"seed{s}", seed=s,
                                   opts=["VERBOSE", "True"])}
               for s in (1, 2, 3)]
    before += [
        {"name": "caltech", "argv": ["--root", str(data), "--seed", "1", "--trainer", "TPT",
                                     "--dataset-config-file", str(COOP / "configs" / "datasets" /
                                                                  "caltech101.yaml"),
                                     "--config-file", str(REPO / "configs/trainers/tpt.yaml"),
                                     "--output-dir", str(base / "before" / "caltech")]
                                    + CALTECH_OPTS},
        {"name": "dassl_defaults", "argv": ["--root", str(data), "--trainer", "TPT",
                                            "--dataset-config-file",
                                            str(COOP / "configs" / "datasets" / "caltech101.yaml"),
                                            "--config-file", str(bare),
                                            "--output-dir", str(base / "refused1")]},
        {"name": "size", "argv": _coop_argv("TPT", "tpt", base / "refused2",
                                            flags=["--backbone", "ViT-B/16"])},
        {"name": "model_dir", "argv": _coop_argv("TCA", "tca", base / "refused3",
                                                 flags=["--eval-only", "--model-dir", "/nowhere"])},
    ]
    # the "after" order also runs through --eval-only, as CoOp's zeroshot.sh does
    after = [{"name": m, "argv": _coop_argv(t, m, base / "after" / m,
                                            flags=["--eval-only"] if m == "zeroshot" else [])}
             for m, t in {**METHODS, **ZOO}.items()]
    procs = {}
    for order, runs, extra in (("before", before, {}),
                               ("after", after, {"probe_demo": True, "collide_after": True})):
        spec = base / f"{order}.json"
        spec.write_text(json.dumps({"order": order, "train_py": str(TRAIN_PY), "runs": runs,
                                    **extra}))
        log = open(base / f"{order}.log", "w")
        procs[order] = (subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "helpers_dassl.py"), str(spec),
             str(base / f"{order}.result.json")], env=env, cwd=str(base), stdout=log,
            stderr=subprocess.STDOUT), log)
    # meanwhile, here: the same runs through argtca's own command line
    from argtca.run import main
    for m, t in {**METHODS, **ZOO}.items():
        argv = ["--seed", "1", "--trainer", t, "--dataset-config-file", DEMO_YAML, "--config-file",
                str(REPO / "configs" / "trainers" / f"{m}.yaml"), "--output-dir",
                str(base / "ref" / m)] + SMALL
        assert main(argv) == 0, m
    assert main(["--root", str(data), "--seed", "1", "--trainer", "TPT", "--dataset-config-file",
                 str(REPO / "configs/datasets/caltech101.yaml"), "--config-file",
                 str(REPO / "configs/trainers/tpt.yaml"), "--output-dir",
                 str(base / "ref" / "caltech")] + CALTECH_OPTS) == 0
    results = {}
    for order, (p, log) in procs.items():
        p.wait(timeout=900)
        log.close()
        out = (base / f"{order}.log").read_text()
        assert p.returncode == 0, f"{order} driver failed:\n{out[-4000:]}"
        results[order] = json.loads((base / f"{order}.result.json").read_text())
    return {"base": base, "env": env, "data": data, **results}


def _records(folder):
    with open(folder / "records.jsonl") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return sorted(recs, key=lambda r: r["index"])


def _ok(result, name):
    r = result["runs"][name]
    assert r["ok"], f"{name}: {r.get('type')}: {r.get('message')}\n{r.get('traceback')}"


def _same_records(a, b):
    ra, rb = _records(a), _records(b)
    assert len(ra) == len(rb) > 0
    for x, y in zip(ra, rb):
        assert (x["index"], x["path"], x["label"], x["pred"]) == \
            (y["index"], y["path"], y["label"], y["pred"])
        assert abs(x["conf"] - y["conf"]) <= 1e-6
        assert abs(x["p_label"] - y["p_label"]) <= 1e-6


@pytest.mark.parametrize("order, method", [(o, m) for o in ("before", "after") for m in METHODS]
                         + [("after", m) for m in ZOO])
def test_coop_train_py_gives_argtca_run_results(coop, order, method):
    name = "tpt_seed1" if (order, method) == ("before", "tpt") else method
    _ok(coop[order], name)
    folder = coop["base"] / order / method
    if name == "tpt_seed1":
        folder = folder / "seed1"
    _same_records(folder, coop["base"] / "ref" / method)
    ref = json.loads((coop["base"] / "ref" / method / "summary.json").read_text())
    got = json.loads((folder / "summary.json").read_text())
    assert got["n"] == ref["n"] == 8 and got["trainer"] == ref["trainer"]
    for k in ("accuracy", "ece", "adaece", "mce"):
        assert abs(got[k] - ref[k]) < 1e-6


def test_coop_caltech101_class_on_a_tiny_tree(coop):
    _ok(coop["before"], "caltech")
    got, ref = coop["base"] / "before" / "caltech", coop["base"] / "ref" / "caltech"
    _same_records(got, ref)
    recs = _records(got)
    assert len(recs) == 9 and {r["label"] for r in recs} == {0, 1, 2}
    # CoOp's reader wrote its few-shot folder into the data root, argtca's reader nothing
    assert (coop["data"] / "caltech-101" / "split_fewshot").is_dir()
    assert "TPT on Caltech101, seed 1" in (got / "log.txt").read_text().splitlines()


def test_log_has_one_result_block_from_dasslS_logger(coop):
    _ok(coop["before"], "tpt_seed2")
    folder = coop["base"] / "before" / "tpt" / "seed2"
    lines = (folder / "log.txt").read_text().splitlines()
    s = json.loads((folder / "summary.json").read_text())
    assert lines.count("=> result") == 1 and lines.count("TPT on Demo, seed 2") == 1
    i = lines.index("=> result")
    assert lines[i - 1] == "TPT on Demo, seed 2"
    assert lines[i + 1:i + 6] == ["* total: 8", f"* accuracy: {s['accuracy']:.2f}%",
                                  f"* ece: {s['ece']:.2f}%", f"* adaece: {s['adaece']:.2f}%",
                                  f"* mce: {s['mce']:.2f}%"]
    assert not list(folder.glob("log.txt-*"))   # one log per run folder


def test_parse_test_res_reads_accuracy_and_ece_over_three_seeds(coop):
    for s in (1, 2, 3):
        _ok(coop["before"], f"tpt_seed{s}")
    folder = coop["base"] / "before" / "tpt"
    summaries = [json.loads((folder / f"seed{s}" / "summary.json").read_text()) for s in (1, 2, 3)]
    for key in ("accuracy", "ece"):
        r = subprocess.run([sys.executable, str(COOP / "parse_test_res.py"), str(folder),
                            "--test-log", "--keyword", key], env=coop["env"], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        printed = [float(round(x[key], 2)) for x in summaries]   # the log shows two decimals
        m = re.search(rf"\* {key}: ([\d.]+)% \+- ([\d.]+)%", r.stdout)
        assert m, r.stdout
        assert m.group(1) == f"{np.mean(printed):.2f}" and m.group(2) == f"{np.std(printed):.2f}"
        assert r.stdout.count(f"{key}: ") >= 4   # one line per seed plus the summary
    # the seeds' ECEs differ (views are drawn from SEED), so a parser reading one seed would fail
    assert len({round(x["ece"], 2) for x in summaries}) == 3


def _added(snaps, later, earlier):
    return {reg: {n: o for n, o in snaps[later][reg].items() if n not in snaps[earlier][reg]}
            for reg in snaps[later]}


def test_argtca_and_coop_register_disjoint_names_in_either_order(coop):
    regs = {}
    for order in ("before", "after"):
        snaps = coop[order]["snapshots"]
        if order == "before":
            ours, theirs = _added(snaps, "argtca", "dassl"), _added(snaps, "coop", "argtca")
        else:
            theirs, ours = _added(snaps, "coop", "dassl"), _added(snaps, "argtca", "coop")
        regs[order] = (ours, theirs, snaps["dassl"])
        print(order, "argtca:", {r: sorted(v) for r, v in ours.items()})
        print(order, "CoOp:  ", {r: sorted(v) for r, v in theirs.items()})
    ours, theirs, dassl = regs["before"]
    assert regs["after"][0] == ours and regs["after"][1] == theirs   # same in either order
    assert set(ours["TRAINER"]) == ARGTCA_DASSL_TRAINERS
    assert set(ours["DATASET"]) == {"Demo"} and ours["EVALUATOR"] == {}
    assert {"ZeroshotCLIP", "CoOp", "CoCoOp"} <= set(theirs["TRAINER"])
    assert {"OxfordPets", "Caltech101", "ImageNet"} <= set(theirs["DATASET"])
    for reg in ours:
        assert not set(ours[reg]) & (set(theirs[reg]) | set(dassl[reg])), reg
        assert all(o.startswith("argtca.") for o in ours[reg].values())
        assert all(o.startswith(("datasets.", "trainers.")) for o in theirs[reg].values())
    # CoOp's ZeroshotCLIP stays CoOp's
    for order in ("before", "after"):
        final = coop[order]["snapshots"]["coop" if order == "before" else "argtca"]
        assert final["TRAINER"]["ZeroshotCLIP"] == "trainers.zsclip.ZeroshotCLIP"


def test_a_later_registration_under_an_argtca_name_names_both_owners(coop):
    c = coop["after"]["collide_after"]
    assert c["type"] == "NameCollisionError"
    assert "someone_elses_plugin.ArgTCA" in c["message"]
    assert "argtca.dassl_plugin.trainers.ArgTCA" in c["message"]


def test_an_earlier_registration_under_an_argtca_name_names_both_owners(coop):
    code = ("import dassl.engine\nfrom dassl.engine import TRAINER_REGISTRY\n"
            "TPT = type('TPT', (), {'__module__': 'someone_elses_plugin'})\n"
            "TRAINER_REGISTRY.register(TPT)\nimport argtca.dassl_compat\n")
    r = subprocess.run([sys.executable, "-c", code], env=coop["env"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Dassl's TRAINER registry: \"TPT\" is registered by "
                           "someone_elses_plugin.TPT")
    assert "argtca.dassl_plugin.trainers.TPT" in last


def test_dassl_defaults_are_refused_naming_the_keys(coop):
    r = coop["before"]["runs"]["dassl_defaults"]
    assert not r["ok"] and r["type"].endswith("DasslSetupError")
    msg = r["message"]
    for part in ("SEED=-1", "--seed", "MODEL.BACKBONE.NAME is empty", "--backbone ViT-B/16",
                 "INPUT.INTERPOLATION=bilinear", "INPUT.PIXEL_MEAN=[0.485,0.456,0.406]",
                 "INPUT.PIXEL_STD=[0.229,0.224,0.225]", "INPUT.INTERPOLATION bicubic"):
        assert part in msg, (part, msg)
    assert not (coop["base"] / "refused1" / "records.jsonl").exists()


def test_a_size_the_backbone_does_not_take_is_refused(coop):
    r = coop["before"]["runs"]["size"]
    assert not r["ok"] and "INPUT.SIZE=(64, 64)" in r["message"] and "224x224" in r["message"]


def test_a_missing_model_dir_is_one_line_through_the_one_import_line(coop, tmp_path):
    # --model-dir names a CoOp run whose learned context starts the tuning (test_coop_ckpt.py);
    # a folder that is not there is one line naming it
    r = coop["before"]["runs"]["model_dir"]
    assert not r["ok"] and r["message"].startswith(
        "--model-dir /nowhere: TTA.CTX_CHECKPOINT=/nowhere: no such file or folder")
    # the README's one-line change applied to a copy of CoOp's train.py, run as users run it
    train = tmp_path / "train.py"
    shutil.copy(TRAIN_PY, train)
    subprocess.run(["sed", "-i", SED_ONE_LINE, str(train)], check=True)
    text = train.read_text()
    assert text.count("import argtca.dassl_compat\n") == 1
    assert len(text.splitlines()) == len(TRAIN_PY.read_text().splitlines()) + 1
    p = subprocess.run([sys.executable, str(train)] + _coop_argv(
        "TCA", "tca", tmp_path / "out", flags=["--eval-only", "--model-dir", "/nowhere"]),
        env=coop["env"], capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1].startswith(
        "error: --model-dir /nowhere: TTA.CTX_CHECKPOINT=/nowhere: no such file or folder")
    assert "Traceback" not in p.stderr


def test_demo_under_dassl_has_real_splits_shots_and_base_new(coop):
    from argtca.demo.generator import SPLIT_FILE, ensure_dataset
    split = json.loads((ensure_dataset() / SPLIT_FILE).read_text())
    names = {e[1]: e[2] for part in split.values() for e in part}
    k = len(names)
    demo = coop["after"]["demo"]
    full = demo["-1_all"]
    for part, key in (("train_x", "train"), ("val", "val"), ("test", "test")):
        assert [e[0] for e in full[part]] == [os.path.basename(e[0]) for e in split[key]]
        assert [e[1] for e in full[part]] == [e[1] for e in split[key]]
    assert len(full["train_x"]) > 0
    assert not ({e[0] for e in full["train_x"]} & {e[0] for e in full["test"]})
    shots = demo["2_all"]
    for part, per_class in (("train_x", 2), ("val", 2)):
        counts = np.bincount([e[1] for e in shots[part]], minlength=k)
        assert counts.tolist() == [per_class] * k
    train_names = {os.path.basename(e[0]) for e in split["train"]}
    assert {e[0] for e in shots["train_x"]} <= train_names
    assert shots["test"] == full["test"]
    half = (k + 1) // 2
    base, new = demo["-1_base"], demo["-1_new"]
    for part, key in (("train_x", "train"), ("val", "val"), ("test", "test")):
        assert [e[0] for e in base[part]] == [os.path.basename(e[0]) for e in split[key]
                                              if e[1] < half]
        assert [e[1] for e in new[part]] == [e[1] - half for e in split[key] if e[1] >= half]
    assert (sorted({(e[1], e[2]) for e in new["test"]})
            == [(i - half, names[i]) for i in range(half, k)])
