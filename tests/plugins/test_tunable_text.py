"""An online adapter that tunes prompts (``needs_text_tower``, as DynaPrompt) is given the engine's
text tower alone (argtca/engine/reference.py TunableText), never the engine: through it the
context's class features come out as the engine's own text tower gives them. An adapter still
declaring the old trait ``needs_engine`` is refused in one line that says what to write."""
import subprocess
import sys

from conftest import REPO

PLUGIN = '''
import json, os
import torch
from argtca.adapters.base import OnlineAdapter
from argtca.plugins import method


@method("zz_tower", family="online")
class Tower(OnlineAdapter):
    NEEDS = True

    def __init__(self, node, cfg, text, logit_scale, **kw):
        tower = kw["tower"]
        with torch.no_grad(), tower.autocast():
            feats = tower(tower.ctx_init.float()[None])           # [1, K, E]
        public = sorted(n for n in dir(tower) if not n.startswith("_"))
        with open(os.environ["ZZ_OUT"], "w") as f:
            json.dump({"type": type(tower).__name__, "public": public, "amp": tower.amp,
                       "shape": list(feats.shape),
                       # the tower's class features are the run's zero-shot class features
                       "max_diff": float((torch.nn.functional.normalize(feats[0].float(), dim=-1)
                                          - text.float()).abs().max())}, f)
        super().__init__(node, cfg, text, logit_scale)

    def step(self, img):
        return self.clip_logits(img[:1])[0].softmax(-1)


Tower.needs_text_tower = Tower.NEEDS
'''


def _run(tmp_path, plugin_text):
    plugin = tmp_path / "zz_tower.py"
    plugin.write_text(plugin_text)
    env = {**__import__("os").environ, "ZZ_OUT": str(tmp_path / "tower.json")}
    return subprocess.run(
        [sys.executable, "-m", "argtca.run", "--plugin", str(plugin), "--trainer", "zz_tower",
         "--dataset-config-file", str(REPO / "configs/datasets/demo.yaml"), "--output-dir",
         str(tmp_path / "run"), "DATASET.NUM_IMAGES", "2", "USE_CUDA", "False",
         "DATALOADER.NUM_WORKERS", "0", "VERBOSE", "False"],
        capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=600)


def test_the_adapter_gets_the_text_tower_alone(tmp_path):
    import json
    r = _run(tmp_path, PLUGIN)
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "tower.json").read_text())
    assert got["type"] == "TunableText" and got["amp"] is False   # the CPU runs in fp32
    assert got["public"] == ["amp", "autocast", "ctx_init", "encoder"]   # no model, no loop
    assert got["shape"][:2] == [1, 16]                                  # the demo's 16 classes
    assert got["max_diff"] < 1e-5


def test_the_old_trait_is_one_line_naming_the_new_one(tmp_path):
    r = _run(tmp_path, PLUGIN.replace("Tower.needs_text_tower = Tower.NEEDS",
                                      "Tower.needs_engine = True"))
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert "needs_engine" in err[0] and "needs_text_tower = True" in err[0]
    assert "zz_tower" in err[0] and not (tmp_path / "run").exists()
