"""CLIP through open_clip: backbone names as CoOp writes them, weights from a tag, a local file or
(only when asked) random, the EOS hidden state used by ArgTCA's graph, and the prompt text encoder
with learnable context vectors used by every test-time tuning method."""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from contextvars import ContextVar
from typing import Dict, Optional, Sequence, Tuple
from urllib.parse import urlsplit

import torch
import torch.nn as nn
import torch.nn.functional as F

from .lean import open_clip  # open_clip without transformers' import time (lean.py)
from .weights import (ModelError, load_state_dict_into, normalize_state_dict,  # noqa: F401
                      read_state_dict)

from argtca.utils.paths import resolve_builtin  # noqa: F401,E402  (re-exported: the model API)
MODEL_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_configs")
open_clip.add_model_config(MODEL_CONFIG_DIR)

# CoOp/TPT spell backbones the OpenAI way. OpenAI weights were trained with QuickGELU; open_clip
# 3.x's plain "ViT-B-16" config uses nn.GELU and only warns, which would silently change every
# number.
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
            f"unknown backbone MODEL.BACKBONE.NAME={backbone!r} (open_clip name {name!r}); "
            f"use one of "
            f"{sorted(BACKBONES)} or an open_clip model name / a JSON in {MODEL_CONFIG_DIR}")
    return name


def backbone_image_size(backbone: str) -> Optional[Tuple[int, int]]:
    """(height, width) of the images the backbone's open_clip config declares; None when it
    declares none."""
    mc = open_clip.get_model_config(open_clip_name(backbone)) or {}
    size = (mc.get("vision_cfg") or {}).get("image_size")
    if isinstance(size, (list, tuple)):
        return tuple(int(s) for s in size)
    return (int(size), int(size)) if size else None


def _input_size(cfg) -> Tuple[int, int]:
    size = cfg.INPUT.SIZE
    return tuple(int(s) for s in size) if isinstance(size, (list, tuple)) else (int(size),) * 2


def check_input_size(cfg) -> None:
    """``INPUT.SIZE`` must be the backbone's image size (a ViT's position embedding and a
    ResNet's attention pool are fixed to it): refused before anything runs (from the open_clip
    config), not by a tensor-shape error after Phase 1."""
    backbone = str(cfg.MODEL.BACKBONE.NAME)
    need = backbone_image_size(backbone)
    have = _input_size(cfg)
    if need is not None and have != tuple(need):
        raise ModelError(f"INPUT.SIZE ({have[0]}, {have[1]}) does not fit MODEL.BACKBONE.NAME="
                         f"{backbone}, which takes {need[0]}x{need[1]} images: set INPUT.SIZE "
                         f"\"({need[0]}, {need[1]})\" (or use a backbone that takes "
                         f"{have[0]}x{have[1]} images)")


def _real_weights(cfg) -> bool:
    p = str(cfg.MODEL.PRETRAINED).strip().lower()
    return bool(p) and p != "random" and not p.startswith("builtin:")


def _vit_gflop_per_view(backbone: str) -> Optional[float]:
    """Forward GFLOP of a ViT image tower per view (2 x multiply-adds of the attention blocks);
    None for other towers."""
    mc = open_clip.get_model_config(open_clip_name(backbone)) or {}
    v = mc.get("vision_cfg") or {}
    size, patch, width, layers = (v.get(k) for k in ("image_size", "patch_size", "width",
                                                      "layers"))
    if not all(isinstance(x, int) for x in (size, patch, width, layers)):
        return None
    tokens = (size // patch) ** 2 + 1
    macs = layers * (12 * tokens * width ** 2 + 2 * tokens ** 2 * width)
    return 2 * macs / 1e9


def _cpu_gflops() -> float:
    """This machine's fp32 matrix-multiply rate in GFLOP/s (a ~0.1 s measurement)."""
    a = torch.randn(768, 768)
    torch.mm(a, a)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.1:
        torch.mm(a, a)
        n += 1
    return 2 * 768 ** 3 * n / (time.perf_counter() - t0) / 1e9


def _duration(seconds: float) -> str:
    m = int(seconds // 60)
    return f"{m // 60} h {m % 60} min" if m >= 60 else f"{max(m, 1)} min"


def cpu_run_warning(cfg, n_images: int, n_views: int, gflops: Optional[float] = None) -> str:
    """The warning for real weights on the CPU: what runs, the estimated time, the fixes."""
    backbone = str(cfg.MODEL.BACKBONE.NAME)
    per_view = _vit_gflop_per_view(backbone)
    if per_view is not None:
        rate = gflops if gflops is not None else _cpu_gflops()
        est = (f"estimated time: at least {_duration(n_images * n_views * per_view / rate)} for "
               f"{n_images} images x {n_views} views (the image tower alone, at the {rate:.0f} "
               f"GFLOP/s measured here)")
    else:
        est = f"{n_images} images x {n_views} views: expect hours"
    bar = "=" * 78
    why = ("PyTorch was built without CUDA" if torch.version.cuda is None
           else "no usable CUDA device")
    return "\n".join(f"argtca: WARNING {line}" for line in (
        bar, f"CUDA is not available ({why}): {backbone} with weights "
        f"{cfg.MODEL.PRETRAINED!r} runs on the CPU;", est + ".",
        "Run on a machine with a GPU, set RUN.REQUIRE_CUDA True to make this an error, or "
        "USE_CUDA False to run on the CPU on purpose.", bar))


def check_before_run(cfg, device, n_images: int) -> None:
    """The checks of a run that need the backbone, before any data is read or trained on:
    ``INPUT.SIZE`` against the backbone; on a machine without CUDA an error under
    ``RUN.REQUIRE_CUDA``, else a loud warning with the estimated time when real weights would
    run on the CPU. ``cfg``: the configuration the engine sees (zero-shot: one view)."""
    from argtca.config import ConfigError
    check_input_size(cfg)
    if torch.device(device).type == "cuda":
        return
    run = cfg.get("RUN")
    if run is not None and bool(run.get("REQUIRE_CUDA", False)):
        what = ("USE_CUDA is False" if not cfg.USE_CUDA else
                "CUDA is not available (torch.cuda.is_available() is False; torch "
                f"{torch.__version__}, CUDA build {torch.version.cuda})")
        raise ConfigError(f"RUN.REQUIRE_CUDA is True but {what}: run on a machine with a GPU "
                          f"(and USE_CUDA True), or set RUN.REQUIRE_CUDA False")
    if cfg.USE_CUDA and _real_weights(cfg):
        shown = CPU_WARNING_SHOWN.get()   # a batch of runs (argtca.experiments) shows it once
        if shown is None or not shown:
            print(cpu_run_warning(cfg, n_images, int(cfg.TTA.N_VIEWS)), file=sys.stderr,
                  flush=True)
        if shown is not None:
            shown.append(True)


# None: every run warns; a list (set by argtca.experiments' runner around its runs): the first
# run that would compute on the CPU with real weights warns, the others do not repeat the box
CPU_WARNING_SHOWN: ContextVar[Optional[list]] = ContextVar("argtca_cpu_warning_shown",
                                                          default=None)


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
                    if pretrained.count("/") == 1
                    and not pretrained.startswith((".", "/", "~")) else "")
            raise ModelError(f"MODEL.PRETRAINED checkpoint not found: {path}; "
                             f"give an existing file "
                             f"(e.g. OpenAI's ViT-B-16.pt) or a tag such as 'openai'{hint}")
        return path
    tags = [t for m, t in open_clip.list_pretrained() if m == name]
    if pretrained not in tags:
        raise ModelError(f"MODEL.PRETRAINED={pretrained!r} is not a pretrained tag of {name} "
                         f"(known: {tags}); "
                         f"give a local checkpoint path or hf-hub:org/name instead")
    pcfg = open_clip.get_pretrained_cfg(name, pretrained)
    errors = []
    if pcfg.get("hf_hub"):
        repo, filename = os.path.split(pcfg["hf_hub"])  # "org/name/" or "org/name/file"
        try:
            return hf_hub_weights(repo, None, filename=filename or None,
                                  what=f"MODEL.PRETRAINED={pretrained!r} ({name})")
        except ModelError as e:
            if not isinstance(e, OfflineWeightsError):
                errors.append(str(e))
    url = pcfg.get("url")
    if url and not _offline() and reachable(url):
        from open_clip.pretrained import download_pretrained_from_url
        try:
            return download_pretrained_from_url(url)
        except Exception as e:  # urllib/OSError/RuntimeError (checksum) from open_clip
            errors.append(f"{url}: {type(e).__name__}: {e}")
    if not errors:   # nothing failed but the network: say what to copy here, in one line
        raise OfflineWeightsError(_offline_message(f"MODEL.PRETRAINED {pretrained}", name,
                                                   pcfg))
    raise ModelError(f"could not load {name} weights '{pretrained}' ({'; '.join(errors)})."
                     f" {OFFLINE_ROUTES}")


class OfflineWeightsError(ModelError):
    """No network (or offline asked for) and the weights are not in a local cache."""


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "ARGTCA_OFFLINE"))


_REACHABLE: Dict[Tuple[str, int], bool] = {}


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether ``url``'s host accepts a connection (one try per host and process): without a
    network this is known in milliseconds, before huggingface_hub's retries (about 25 s a
    file)."""
    parts = urlsplit(url)
    key = (parts.hostname or "", parts.port or (80 if parts.scheme == "http" else 443))
    if key not in _REACHABLE:
        try:
            socket.create_connection(key, timeout=timeout).close()
            _REACHABLE[key] = True
        except OSError:
            _REACHABLE[key] = False
    return _REACHABLE[key]


def _offline_message(subject: str, name: str, pcfg: dict) -> str:
    from huggingface_hub import constants
    why = ("offline (HF_HUB_OFFLINE / ARGTCA_OFFLINE is set)" if _offline()
           else f"no network ({urlsplit(constants.ENDPOINT).hostname} unreachable)")
    repo, filename = os.path.split(pcfg.get("hf_hub") or "")
    files = []
    if repo:
        fname = filename or HF_WEIGHT_FILES[0]
        files.append((fname, f"{constants.ENDPOINT}/{repo}/resolve/main/{fname}"))
    if pcfg.get("url"):
        files.append((os.path.basename(urlsplit(pcfg["url"]).path), pcfg["url"]))
    if not files:
        return (f"{subject}: {why} and {name}'s weights are not cached here;"
                f" download them elsewhere and pass MODEL.PRETRAINED /path/to/the/file")
    need = " or ".join(f"{f} ({u})" for f, u in files)
    return (f"{subject}: {why} and {name}'s weights are not in the Hugging "
            f"Face cache {constants.HF_HUB_CACHE}. Needed: {need}. Download it on a machine with "
            f"internet, copy it here (e.g. to ~/weights/) and pass MODEL.PRETRAINED "
            f"~/weights/{files[0][0]}")


HF_WEIGHT_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def hf_hub_weights(repo: str, revision: Optional[str] = None, filename: Optional[str] = None,
                   what: str = "") -> str:
    """A Hub repository's open_clip weight file through ``huggingface_hub`` (its cache; offline
    with ``HF_HUB_OFFLINE=1``, or when the Hub cannot be reached: then only the cache is read,
    and an :class:`OfflineWeightsError` says what to copy here)."""
    from huggingface_hub import constants, hf_hub_download
    local_only = _offline() or not reachable(constants.ENDPOINT)
    errors = []
    for fname in ([filename] if filename else list(HF_WEIGHT_FILES)):
        try:
            return hf_hub_download(repo, fname, revision=revision, local_files_only=local_only)
        except Exception as e:  # offline / not cached / no such file / no such repo
            errors.append(f"{fname}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    if local_only:
        raise OfflineWeightsError(_offline_message(what or f"hf-hub:{repo}", repo,
                                                   {"hf_hub": f"{repo}/{filename or ''}"}))
    folder = os.path.join(constants.HF_HUB_CACHE, "models--" + repo.replace("/", "--"))
    raise ModelError(f"{what or repo}: no open_clip weights of Hub repository {repo!r} in the "
                     f"Hugging Face cache {constants.HF_HUB_CACHE} or online "
                     f"({'; '.join(errors)}). On a machine with internet run `hf download {repo} "
                     f"{HF_WEIGHT_FILES[0]}` and copy {folder} here, or download the file and set "
                     f"MODEL.PRETRAINED /path/to/file")


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
    """Load argtca's compact checkpoint (fp16, pruned vocabulary rows; see
    argtca.demo.checkpoint)."""
    from argtca.demo.checkpoint import load_argtca_checkpoint
    return load_argtca_checkpoint(model, path)


def image_size(model: nn.Module) -> int:
    size = model.visual.image_size
    return int(size[0] if isinstance(size, (tuple, list)) else size)


# ------------------------------------------------------------------------------------- text side
def _run_text_tower(model: nn.Module, x: torch.Tensor, eot_idx: torch.Tensor) -> torch.Tensor:
    """Token embeddings [N, L, W] (already cut to L tokens) → EOS hidden state after ln_final
    [N, W].

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
            raise ValueError(f"TTA.N_CTX={n_ctx} but TTA.CTX_INIT={ctx_init!r} "
                             f"has {n_init} tokens; "
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
