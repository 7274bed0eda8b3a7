import pytest
import torch

from argtca.models.backbones import BACKBONES, open_clip_name
from argtca.models.clip import load_clip
from argtca.models.weights import ModelError
from argtca.utils.paths import resolve_builtin
from argtca.registry import Registry
from conftest import tiny_cfg


def test_coop_backbone_names_map_to_quickgelu_configs():
    assert open_clip_name("ViT-B/16") == "ViT-B-16-quickgelu"
    assert open_clip_name("RN50") == "RN50-quickgelu"
    for name in BACKBONES:
        assert "quickgelu" in open_clip_name(name)
    with pytest.raises(ModelError, match="ViT-B/16"):
        open_clip_name("ViT-Q/99")


def test_vit_b16_architecture_uses_quickgelu():
    import open_clip
    cfg = open_clip.get_model_config(open_clip_name("ViT-B/16"))
    assert cfg["quick_gelu"] is True and cfg["vision_cfg"]["patch_size"] == 16


def test_pretrained_must_be_explicit_and_paths_must_exist(tmp_path):
    cfg = tiny_cfg(**{"MODEL.PRETRAINED": ""})
    with pytest.raises(ModelError, match="random"):
        load_clip(cfg)
    cfg = tiny_cfg(**{"MODEL.PRETRAINED": str(tmp_path / "missing.pt")})
    with pytest.raises(ModelError, match="missing.pt"):
        load_clip(cfg)
    cfg = tiny_cfg(**{"MODEL.PRETRAINED": "laion2b_nonsense"})
    with pytest.raises(ModelError, match="laion2b_nonsense"):
        load_clip(cfg)


def test_local_checkpoint_path_loads_its_weights(tmp_path):
    torch.manual_seed(0)
    model, _ = load_clip(tiny_cfg())
    path = tmp_path / "tiny.pt"
    torch.save(model.state_dict(), path)
    torch.manual_seed(123)  # a different random init would differ; the file must win
    loaded, _ = load_clip(tiny_cfg(**{"MODEL.PRETRAINED": str(path)}))
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    assert not any(p.requires_grad for p in loaded.parameters())


def test_builtin_paths_resolve_inside_the_package():
    p = resolve_builtin("builtin:demo/assets/demo_attributes.json")
    assert p.endswith("argtca/demo/assets/demo_attributes.json")
    assert resolve_builtin("/abs/file.json") == "/abs/file.json"


def test_registry_errors_list_registered_names():
    reg = Registry("THING")

    @reg.register()
    class Alpha:
        pass

    @reg.register(name="beta")
    def b():
        pass
    assert reg.get("ALPHA") is Alpha and reg.get("beta") is b
    assert reg.registered_names() == ["Alpha", "beta"]
    with pytest.raises(KeyError, match="Alpha, beta"):
        reg.get("gamma")
    with pytest.raises(KeyError, match="already registered"):
        reg.register(name="alpha")(lambda: None)
