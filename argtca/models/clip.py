"""CLIP through open_clip: the frozen model and tokenizer of ``cfg.MODEL`` with weights from a tag,
a local file or (only when asked) random. Backbone names: backbones.py; where a tag's weights come
from: pretrained.py; the checks before a run: run_checks.py; the text side: text.py."""
from __future__ import annotations

import contextlib
import logging
from typing import Tuple

import torch.nn as nn

from argtca.utils.paths import resolve_builtin

from .backbones import open_clip_name
from .lean import open_clip
from .pretrained import weights_file
from .weights import ModelError, load_state_dict_into, normalize_state_dict, read_state_dict


def load_clip(cfg, device="cpu") -> Tuple[nn.Module, object]:
    """Build the frozen CLIP of ``cfg.MODEL`` → (model, tokenizer), in eval mode, fp32.

    ``MODEL.PRETRAINED`` is one of
      * a pretrained tag of the backbone (``openai``): open_clip's source for it (the Hugging Face
        Hub first — a populated HF cache works offline with ``HF_HUB_OFFLINE=1`` — then the URL);
      * ``hf-hub:org/name`` (optionally ``@revision``): that Hub repository's
        ``open_clip_model.safetensors`` / ``open_clip_pytorch_model.bin``, from the HF cache when
        offline;
      * a local file: OpenAI's TorchScript archive (``ViT-B-16.pt``), an OpenAI or open_clip state
        dict (``.pt``/``.pth``/``.bin``, with or without a ``state_dict`` wrapper or ``module.``
        prefixes), a ``.safetensors`` file, or argtca's compact ``argtca-clip-v1`` file — read by
        content, never by running code from the file (argtca/models/weights.py);
      * ``builtin:<path>`` for files shipped in the package, or ``random`` (only when asked).
    The weights are loaded into the configured backbone ``MODEL.BACKBONE.NAME``.
    """
    backbone = cfg.MODEL.BACKBONE.NAME
    name = open_clip_name(backbone)
    pretrained = resolve_builtin(str(cfg.MODEL.PRETRAINED).strip())
    if pretrained == "":
        raise ModelError("MODEL.PRETRAINED is empty: give a tag (openai), a checkpoint path, "
                         "hf-hub:org/name, or 'random' for random weights")
    if pretrained.lower() == "random":
        model = open_clip.create_model(name, pretrained=None)
    else:
        path = weights_file(pretrained, name, backbone)
        with _quiet_random_init_warning():  # the weights are loaded right below
            model = open_clip.create_model(name, pretrained=None)
        obj = read_state_dict(path)
        if isinstance(obj, dict) and obj.get("format") == "argtca-clip-v1":
            load_compact_checkpoint(model, path, obj)
        else:
            load_state_dict_into(model, normalize_state_dict(obj, path), path, backbone)
        logging.getLogger(__name__).info("loaded %s weights from %s", name, path)
    tokenizer = open_clip.get_tokenizer(name)
    model = model.float().eval().to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    if not hasattr(model, "token_embedding"):
        raise ModelError(f"{name} keeps its text tower in model.text (CustomTextCLIP); argtca's "
                         f"prompt encoder supports CLIP-style text towers only")
    return model, tokenizer


@contextlib.contextmanager
def _quiet_random_init_warning():
    """open_clip warns 'initialized randomly' when built without a tag; silence it only where we
    load the weights ourselves right after, so the warning stays true wherever it shows."""
    class _F(logging.Filter):
        def filter(self, record):
            return "No pretrained weights loaded" not in record.getMessage()
    f = _F()
    root = logging.getLogger()
    root.addFilter(f)
    try:
        yield
    finally:
        root.removeFilter(f)


def load_compact_checkpoint(model: nn.Module, path: str, obj=None) -> nn.Module:
    """Load argtca's compact checkpoint (fp16, pruned vocabulary rows; see
    argtca.demo.checkpoint); ``obj``: the file's object, read already."""
    from argtca.demo.checkpoint import load_argtca_checkpoint
    return load_argtca_checkpoint(model, path, obj)
