"""Where a ``MODEL.PRETRAINED`` tag's weight file comes from: a local path, the Hugging Face Hub
cache (``hf-hub:org/name`` or the tag's ``hf_hub``), or open_clip's URL, and, offline or without
a network, one error saying which file to copy here."""
from __future__ import annotations

import os
import socket
from typing import Dict, Optional, Tuple
from urllib.parse import urlsplit

from .lean import open_clip
from .weights import ModelError

OFFLINE_ROUTES = (
    "Offline, either (a) download OpenAI's ViT-B-16.pt elsewhere "
    "(https://openaipublic.azureedge.net/clip/models/5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85"
    "e4ecb61988df416f/ViT-B-16.pt) and set MODEL.PRETRAINED /path/to/ViT-B-16.pt, or (b) run "
    "`hf download timm/vit_base_patch16_clip_224.openai open_clip_model.safetensors` on a machine "
    "with internet, copy its Hugging Face cache folder (~/.cache/huggingface/hub/"
    "models--timm--vit_base_patch16_clip_224.openai) to the same place here and set "
    "HF_HUB_OFFLINE=1")


def weights_file(pretrained: str, name: str, backbone: str) -> str:
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
