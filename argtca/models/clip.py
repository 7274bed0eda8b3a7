"""CLIP through open_clip: backbone names as CoOp writes them, weights from a tag, a local file or
(only when asked) random, the EOS hidden state used by ArgTCA's graph, and the prompt text encoder
with learnable context vectors used by every test-time tuning method."""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .lean import open_clip  # open_clip without transformers' import time (lean.py)
from .weights import (ModelError, load_state_dict_into, normalize_state_dict,  # noqa: F401
                      read_state_dict)

from argtca.utils.paths import resolve_builtin  # noqa: F401,E402  (re-exported: the model API)
MODEL_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_configs")
open_clip.add_model_config(MODEL_CONFIG_DIR)

# CoOp/TPT spell backbones the OpenAI way. OpenAI weights were trained with QuickGELU; open_clip 3.x's
# plain "ViT-B-16" config uses nn.GELU and only warns, which would silently change every number.
BACKBONES = {
    "ViT-B/16": "ViT-B-16-quickgelu",
    "ViT-B/32": "ViT-B-32-quickgelu",
    "ViT-L/14": "ViT-L-14-quickgelu",
    "RN50": "RN50-quickgelu",
    "RN101": "RN101-quickgelu",
}


def open_clip_name(backbone: str) -> str:
    name = BACKBONES.get(backbone, backbone)
    name = name.replace("/", "-")
    if name not in open_clip.list_models():
        raise ModelError(
            f"unknown backbone MODEL.BACKBONE.NAME={backbone!r} (open_clip name {name!r}); use one of "
            f"{sorted(BACKBONES)} or an open_clip model name / a JSON in {MODEL_CONFIG_DIR}")
    return name


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
        path = _weights_file(pretrained, name, backbone)
        with _quiet_random_init_warning():  # the weights are loaded right below
            model = open_clip.create_model(name, pretrained=None)
        obj = read_state_dict(path)
        if isinstance(obj, dict) and obj.get("format") == "argtca-clip-v1":
            load_compact_checkpoint(model, path)
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


OFFLINE_ROUTES = (
    "Offline, either (a) download OpenAI's ViT-B-16.pt elsewhere "
    "(https://openaipublic.azureedge.net/clip/models/5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85"
    "e4ecb61988df416f/ViT-B-16.pt) and set MODEL.PRETRAINED /path/to/ViT-B-16.pt, or (b) run "
    "`hf download timm/vit_base_patch16_clip_224.openai open_clip_model.safetensors` on a machine "
    "with internet, copy its Hugging Face cache folder (~/.cache/huggingface/hub/"
    "models--timm--vit_base_patch16_clip_224.openai) to the same place here and set "
    "HF_HUB_OFFLINE=1")


def _weights_file(pretrained: str, name: str, backbone: str) -> str:
    """Local path of the weight file that ``MODEL.PRETRAINED`` names (downloading if needed)."""
    if pretrained.startswith("hf-hub:"):
        repo, _, revision = pretrained[len("hf-hub:"):].strip("/").partition("@")
        return hf_hub_weights(repo, revision or None, what=f"MODEL.PRETRAINED={pretrained!r}")
    pathlike = (os.path.sep in pretrained or pretrained.startswith(("~", "."))
                or pretrained.endswith((".pt", ".pth", ".bin", ".safetensors")))
    if pathlike or os.path.exists(pretrained):
        path = os.path.expanduser(pretrained)
        if not os.path.isfile(path):
            hint = (f"; for a Hugging Face Hub repository write hf-hub:{pretrained}"
                    if pretrained.count("/") == 1 and not pretrained.startswith((".", "/", "~")) else "")
            raise ModelError(f"MODEL.PRETRAINED checkpoint not found: {path}; give an existing file "
                             f"(e.g. OpenAI's ViT-B-16.pt) or a tag such as 'openai'{hint}")
        return path
    tags = [t for m, t in open_clip.list_pretrained() if m == name]
    if pretrained not in tags:
        raise ModelError(f"MODEL.PRETRAINED={pretrained!r} is not a pretrained tag of {name} "
                         f"(known: {tags}); give a local checkpoint path or hf-hub:org/name instead")
    pcfg = open_clip.get_pretrained_cfg(name, pretrained)
    errors = []
    if pcfg.get("hf_hub"):
        repo, filename = os.path.split(pcfg["hf_hub"])  # "org/name/" or "org/name/file"
        try:
            return hf_hub_weights(repo, None, filename=filename or None,
                                  what=f"MODEL.PRETRAINED={pretrained!r} ({name})")
        except ModelError as e:
            errors.append(str(e))
    offline = any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
                  for v in ("HF_HUB_OFFLINE", "ARGTCA_OFFLINE"))
    if pcfg.get("url") and not offline:
        from open_clip.pretrained import download_pretrained_from_url
        try:
            return download_pretrained_from_url(pcfg["url"])
        except Exception as e:  # urllib/OSError/RuntimeError (checksum) from open_clip
            errors.append(f"{pcfg['url']}: {type(e).__name__}: {e}")
    raise ModelError(f"could not load {name} weights '{pretrained}' ({'; '.join(errors) or 'no source'})."
                     f" {OFFLINE_ROUTES}")


HF_WEIGHT_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def hf_hub_weights(repo: str, revision: Optional[str] = None, filename: Optional[str] = None,
                   what: str = "") -> str:
    """A Hub repository's open_clip weight file through ``huggingface_hub`` (its cache; offline
    with ``HF_HUB_OFFLINE=1``)."""
    from huggingface_hub import constants, hf_hub_download
    errors = []
    for fname in ([filename] if filename else list(HF_WEIGHT_FILES)):
        try:
            return hf_hub_download(repo, fname, revision=revision)
        except Exception as e:  # offline / not cached / no such file / no such repo
            errors.append(f"{fname}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    offline = " (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else ""
    raise ModelError(f"{what or repo}: no open_clip weights of Hub repository {repo!r} in the "
                     f"Hugging Face cache {constants.HF_HUB_CACHE} or online{offline} "
                     f"({'; '.join(errors)}). On a machine with internet run `hf download {repo} "
                     f"{HF_WEIGHT_FILES[0]}` and copy {os.path.join(constants.HF_HUB_CACHE, 'models--' + repo.replace('/', '--'))} "
                     f"here, or download the file and set MODEL.PRETRAINED /path/to/file")


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


def load_compact_checkpoint(model: nn.Module, path: str) -> nn.Module:
    """Load argtca's compact checkpoint (fp16, pruned vocabulary rows; see argtca.demo.checkpoint)."""
    from argtca.demo.checkpoint import load_argtca_checkpoint
    return load_argtca_checkpoint(model, path)


def image_size(model: nn.Module) -> int:
    size = model.visual.image_size
    return int(size[0] if isinstance(size, (tuple, list)) else size)


# ------------------------------------------------------------------------------------- text side
def _run_text_tower(model: nn.Module, x: torch.Tensor, eot_idx: torch.Tensor) -> torch.Tensor:
    """Token embeddings [N, L, W] (already cut to L tokens) → EOS hidden state after ln_final [N, W].

    Exact under CLIP's causal mask: tokens after the last EOS never influence the EOS output."""
    L = x.shape[1]
    cast = model.transformer.get_cast_dtype()
    x = x.to(cast) + model.positional_embedding[:L].to(cast)
    mask = model.attn_mask
    if mask is not None:
        mask = mask[:L, :L]
    x = model.transformer(x, attn_mask=mask)
    x = model.ln_final(x)
    return x[torch.arange(x.shape[0], device=x.device), eot_idx]


def project_text(model: nn.Module, h: torch.Tensor) -> torch.Tensor:
    proj = model.text_projection
    if proj is None:
        return h
    return proj(h) if isinstance(proj, nn.Linear) else h @ proj


@torch.no_grad()
def encode_eos_hidden(model: nn.Module, tokenizer, texts: Sequence[str], device="cpu",
                      batch_size: int = 256) -> torch.Tensor:
    """EOS hidden state (after ln_final, before the text projection) of each text → [N, width]."""
    out = []
    for i in range(0, len(texts), batch_size):
        ids = tokenizer(list(texts[i:i + batch_size])).to(device)
        eot = ids.argmax(-1)
        L = int(eot.max()) + 1
        emb = model.token_embedding(ids[:, :L])
        out.append(_run_text_tower(model, emb, eot).float())
    return torch.cat(out) if out else torch.zeros(0, model.ln_final.normalized_shape[0])


@torch.no_grad()
def encode_texts(model: nn.Module, tokenizer, texts: Sequence[str], device="cpu",
                 batch_size: int = 256) -> torch.Tensor:
    """Normalised text features of plain prompts (cut after the longest EOS) → [N, E]."""
    h = encode_eos_hidden(model, tokenizer, texts, device, batch_size)
    return F.normalize(project_text(model, h.to(device)).float(), dim=-1)


class PromptTextEncoder(nn.Module):
    """Text features of ``[SOS] ctx_1..ctx_n <suffix> [EOS]`` for a list of prompt suffixes.

    The context vectors are *inputs* (``forward(ctx)``), so one encoder serves one image or a batch
    of images each with its own context: ``ctx`` of shape [n_ctx, W] or [B, n_ctx, W] gives
    features [P, E] or [B, P, E] (ℓ2-normalised). ``ctx_init`` holds the token embeddings of the
    initial words (TPT/CoOp: "a photo of a", 4 tokens). The frozen prefix/suffix embeddings are
    buffers, and every sequence is cut right after the longest EOS (exact under the causal mask).
    """

    def __init__(self, model: nn.Module, tokenizer, suffixes: Sequence[str],
                 ctx_init: str = "a photo of a", n_ctx: Optional[int] = None):
        super().__init__()
        if not suffixes:
            raise ValueError("PromptTextEncoder needs at least one prompt suffix")
        self.model = model
        init_ids = tokenizer([ctx_init])[0]
        n_init = int(init_ids.argmax()) - 1  # tokens between SOS and EOS
        if n_ctx is None:
            n_ctx = n_init
        if n_ctx != n_init:
            raise ValueError(f"TTA.N_CTX={n_ctx} but TTA.CTX_INIT={ctx_init!r} has {n_init} tokens; "
                             f"make them agree")
        self.n_ctx = n_ctx
        prompts = [f"{ctx_init} {s}" for s in suffixes]
        ids = tokenizer(prompts)
        eot = ids.argmax(-1)
        L = int(eot.max()) + 1
        dev = model.token_embedding.weight.device
        with torch.no_grad():
            emb = model.token_embedding(ids[:, :L].to(dev)).float()
        self.register_buffer("token_prefix", emb[:, :1].clone(), persistent=False)
        self.register_buffer("token_suffix", emb[:, 1 + n_ctx:].clone(), persistent=False)
        self.register_buffer("eot_idx", eot.to(dev), persistent=False)
        self.register_buffer("ctx_init", emb[0, 1:1 + n_ctx].clone(), persistent=False)
        self.prompts = prompts
        self.seq_len = L

    @property
    def num_prompts(self) -> int:
        return self.token_prefix.shape[0]

    @torch.no_grad()
    def set_context(self, ctx: torch.Tensor) -> None:
        """Start every image from ``ctx`` [n_ctx, W] (e.g. CoOp's learned context) instead of the
        initial words' embeddings."""
        if tuple(ctx.shape) != tuple(self.ctx_init.shape):
            raise ValueError(f"context of shape {tuple(ctx.shape)}; this encoder takes "
                             f"{tuple(self.ctx_init.shape)} (n_ctx x text width)")
        self.ctx_init.copy_(ctx.to(self.ctx_init))

    def forward(self, ctx: torch.Tensor) -> torch.Tensor:
        single = ctx.dim() == 2
        if single:
            ctx = ctx.unsqueeze(0)
        B, P = ctx.shape[0], self.num_prompts
        W = ctx.shape[-1]
        x = torch.cat([
            self.token_prefix.unsqueeze(0).expand(B, -1, -1, -1),
            ctx.unsqueeze(1).expand(-1, P, -1, -1).to(self.token_prefix.dtype),
            self.token_suffix.unsqueeze(0).expand(B, -1, -1, -1),
        ], dim=2).reshape(B * P, self.seq_len, W)
        h = _run_text_tower(self.model, x, self.eot_idx.repeat(B))
        f = F.normalize(project_text(self.model, h).float(), dim=-1).reshape(B, P, -1)
        return f[0] if single else f
