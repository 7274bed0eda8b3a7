"""The contract of a plug-in method (argtca/trainers/contract.py): an answer of the wrong shape,
with NaN, with the wrong number of classes or that is not a probability vector stops the run at
the first batch that has one, in one line naming the plug-in file, and the records of the batches
before it stay in records.jsonl; an exception raised in the plug-in's code is one line naming the
file and line; a bad declaration is one line at import. Each plug-in is a file of the test's own
folder, loaded as ``--plugin`` loads it; the registries are restored afterwards."""
import json
import sys
import textwrap

import pytest

import argtca.adapters  # noqa: F401  (every registration, before the fixture saves them)
import argtca.trainers  # noqa: F401
from argtca.config import get_cfg_default
from argtca.registry import ADAPTER_REGISTRY, OBJECTIVE_REGISTRY, TRAINER_REGISTRY
from conftest import tiny_cfg
from helpers_data import make_caltech

HEAD = textwrap.dedent('''
    import torch
    from argtca.adapters import Adapter
    from argtca.engine.objectives import Objective
    from argtca.plugins import method
''')

# key -> (the class body's answer, what the one error line says)
BAD_ADAPTERS = {
    "zz_shape": ("p.unsqueeze(-1)", "has shape [4, 3, 1], not [B, K]"),
    "zz_nan": ("torch.full_like(p, float('nan'))", "holds NaN/inf: 3 of 3 probabilities of "
                                                   "image "),
    "zz_classes": ("p[:, :2].softmax(-1)", "gives 2 class probabilities per image, but the "
                                           "dataset has 3 classes (shape [4, 2])"),
    "zz_logits": ("logits", "is not a probability vector for image "),
    "zz_rows": ("p[:1]", "has 1 rows for a batch of 4 images"),
}


def adapter_source(key, answer, late=False):
    return HEAD + textwrap.dedent(f'''
        @method("{key}", label="bad {key}")
        class Bad(Adapter):
            calls = 0

            def __call__(self, img):
                Bad.calls += 1
                logits = self.clip_logits(img[:, 0])
                p = logits.softmax(-1)
                if {late} and Bad.calls == 1:   # the first batch is right
                    return p
                return {answer}
    ''')


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_caltech(tmp_path_factory.mktemp("contract") / "data", per_class=4)   # 12 images


@pytest.fixture
def registered():
    """The registries and modules as they were before the test's plug-ins."""
    saved = [(r, dict(r._obj_map), dict(r._names), dict(r._traits))
             for r in (ADAPTER_REGISTRY, OBJECTIVE_REGISTRY, TRAINER_REGISTRY)]
    mods = set(sys.modules)
    yield
    for r, objs, names, traits in saved:
        r._obj_map, r._names, r._traits = objs, names, traits
    for m in set(sys.modules) - mods:
        if m.startswith("_argtca_plugins."):
            del sys.modules[m]


def _load(tmp_path, name, source):
    from argtca.plugins import load_plugins
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    load_plugins([str(path)])
    return path


def _cfg(data, out, trainer, **over):
    cfg = tiny_cfg(**{"DATASET.NAME": "Caltech101", "DATASET.ROOT": str(data),
                      "TTA.N_VIEWS": 2, "TTA.BATCH_IMAGES": 4, "OUTPUT_DIR": str(out),
                      "TRAINER.NAME": trainer, **over})
    cfg.freeze()
    return cfg


def _records(out):
    path = out / "records.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] \
        if path.is_file() else []


@pytest.mark.parametrize("key", sorted(BAD_ADAPTERS))
def test_a_wrong_answer_stops_at_the_first_batch_naming_the_file(key, data, tmp_path,
                                                                  registered, one_thread):
    from argtca.trainers.contract import MethodContractError
    answer, said = BAD_ADAPTERS[key]
    path = _load(tmp_path, f"my_{key}", adapter_source(key, answer))
    out = tmp_path / "run"
    with pytest.raises(MethodContractError) as e:
        TRAINER_REGISTRY.get(key.upper())(_cfg(data, out, key.upper())).test()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f'method "{key}" (plug-in {path}): its adapter\'s answer ')
    assert said in msg and "nothing was recorded for this batch" in msg
    assert _records(out) == []


def test_the_records_before_a_wrong_batch_are_kept(data, tmp_path, registered, one_thread):
    from argtca.run import main
    path = _load(tmp_path, "my_late", adapter_source("zz_late", "p * float('nan')", late=True))
    out = tmp_path / "run"
    argv = ["--plugin", str(path), "--trainer", "zz_late", "--output-dir", str(out),
            "DATASET.NAME", "Caltech101", "DATASET.ROOT", str(data), "MODEL.BACKBONE.NAME",
            "argtca-tiny-test", "MODEL.PRETRAINED", "random", "INPUT.SIZE", "(32, 32)",
            "TTA.N_VIEWS", "2", "TTA.BATCH_IMAGES", "4", "USE_CUDA", "False", "VERBOSE", "False",
            "DATALOADER.NUM_WORKERS", "0"]
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    assert rc == 2
    last = err.getvalue().strip().splitlines()[-1]
    assert last.startswith(f'error: method "zz_late" (plug-in {path}): its adapter\'s answer '
                           f'holds NaN/inf')
    recs = _records(out)
    assert sorted(r["index"] for r in recs) == [0, 1, 2, 3]   # the first batch, recorded


def test_an_exception_in_plugin_code_is_one_line_naming_the_file(data, tmp_path, registered,
                                                                 one_thread):
    from argtca.run import main
    source = HEAD + textwrap.dedent('''
        @method("zz_raise")
        class Raises(Adapter):
            def __call__(self, img):
                return {}["no such key"]
    ''')
    path = _load(tmp_path, "my_raise", source)
    line = [i for i, x in enumerate(source.splitlines(), 1) if "no such key" in x][0]
    argv = ["--plugin", str(path), "--trainer", "zz_raise", "--output-dir", str(tmp_path / "r"),
            "DATASET.NAME", "Caltech101", "DATASET.ROOT", str(data), "MODEL.BACKBONE.NAME",
            "argtca-tiny-test", "MODEL.PRETRAINED", "random", "INPUT.SIZE", "(32, 32)",
            "TTA.N_VIEWS", "2", "USE_CUDA", "False", "VERBOSE", "False",
            "DATALOADER.NUM_WORKERS", "0"]
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    assert rc == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err.getvalue()
    assert lines[0].startswith(f"error: the plug-in code at {path}:{line} failed: KeyError: "
                               f"no such key")


def test_an_objective_with_the_wrong_number_of_classes(data, tmp_path, registered, one_thread):
    """A prompt-tuning method: TPT's loop with the plug-in's objective, whose probabilities
    leave a class out."""
    from argtca.trainers.contract import MethodContractError
    path = _load(tmp_path, "my_objective", HEAD + textwrap.dedent('''
        @method("zz_obj", defaults={"WEIGHT": 1.0})
        class Short(Objective):
            def probs(self, logits):
                return logits[..., :-1].float().softmax(-1)
    '''))
    cls = TRAINER_REGISTRY.get("ZZ_OBJ")
    assert (cls.method, cls.family, cls.objective_name, cls.tunes) == \
        ("zz_obj", "tpt-family", "zz_obj", True)
    with pytest.raises(MethodContractError) as e:
        cls(_cfg(data, tmp_path / "run", "ZZ_OBJ", **{"TTA.STEPS": 1})).test()
    assert str(e.value).startswith(f'method "zz_obj" (plug-in {path}): its answer gives 2 class '
                                   f'probabilities per image, but the dataset has 3 classes')


def test_its_node_joins_the_defaults_only_while_it_is_loaded(tmp_path, registered):
    assert "ZZ_NODE" not in get_cfg_default().TRAINER
    _load(tmp_path, "my_node", HEAD + textwrap.dedent('''
        @method("zz_node", defaults={"ALPHA": 0.5, "SUB": {"N": 3}})
        class Node(Adapter):
            def __call__(self, img):
                return self.clip_logits(img[:, 0]).softmax(-1)
    '''))
    node = get_cfg_default().TRAINER.ZZ_NODE
    assert (node.ALPHA, node.SUB.N) == (0.5, 3)
    from argtca.config.methods import drop_foreign_nodes
    cfg = get_cfg_default()
    cfg.TRAINER.NAME = "TPT"
    drop_foreign_nodes(cfg)             # another method's run does not carry it
    assert "ZZ_NODE" not in cfg.TRAINER and "TDA" in cfg.TRAINER
    cfg = get_cfg_default()
    cfg.TRAINER.NAME = "zz_node"
    drop_foreign_nodes(cfg)
    assert cfg.TRAINER.ZZ_NODE.ALPHA == 0.5


@pytest.mark.parametrize("decl, said", [
    ('@method("Bad Key")\nclass A(Adapter):\n    pass\n', "the key must be lower-case"),
    ('@method("tpt")\nclass A(Adapter):\n    pass\n', "the method key 'tpt' is taken by the "
                                                      "trainer argtca.trainers.methods.TPT"),
    ('@method("zz_fam", family="argtca")\nclass A(Adapter):\n    pass\n',
     "an adapter is a training-free or online method"),
    ('@method("zz_cls")\nclass A:\n    pass\n', "declares a subclass of argtca.adapters.Adapter"),
])
def test_a_bad_declaration_is_one_line_at_import(decl, said, tmp_path, registered):
    from argtca.plugins import PluginError, load_plugins
    path = tmp_path / "my_bad.py"
    path.write_text(HEAD + decl)
    with pytest.raises(PluginError) as e:
        load_plugins([str(path)])
    msg = str(e.value)
    assert msg.startswith(f"--plugin {path}: method ") and said in msg and "\n" not in msg
