"""Compact weight file of the demo CLIP (format ``argtca-clip-v1``).

``torch.save`` of a dict::

    {"format": "argtca-clip-v1", "model_name": "argtca-demo-clip",
     "state_dict": {every model.state_dict() entry except "token_embedding.weight", fp16},
     "vocab_ids": LongTensor[U],            # BPE ids the demo uses (incl. SOT/EOT), sorted
     "vocab_rows": fp16 Tensor[U, width],   # those rows of token_embedding.weight
     "train_command": str, "train_meta": dict}

The token embedding (49408 x width, 79% of the parameters) is pruned to the rows the demo's
captions, prompts, class names, attributes and context inits use; the other rows load as zeros, so
the stock open_clip tokenizer ids still index the embedding directly.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence

import torch

FORMAT = "argtca-clip-v1"
EMB_KEY = "token_embedding.weight"


class CheckpointError(ValueError):
    """A weight file that cannot be loaded; the message names the file and the fix."""


def save_demo_checkpoint(model, path: os.PathLike, vocab_ids: Sequence[int],
                         model_name: str = "argtca-demo-clip", train_command: str = "",
                         train_meta: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    sd = model.state_dict()
    emb = sd[EMB_KEY]
    ids = torch.as_tensor(sorted(set(int(i) for i in vocab_ids)), dtype=torch.long)
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= emb.shape[0]:
        raise ValueError(f"vocab_ids must be non-empty ids in [0, {emb.shape[0]}), got "
                         f"min={int(ids.min()) if ids.numel() else None}")
    ckpt = {
        "format": FORMAT,
        "model_name": model_name,
        "state_dict": {k: v.detach().to("cpu", torch.float16).clone() for k, v in sd.items()
                       if k != EMB_KEY},
        "vocab_ids": ids,
        "vocab_rows": emb.detach().to("cpu", torch.float16)[ids].clone(),
        "train_command": train_command,
        "train_meta": dict(train_meta or {}),
    }
    tmp = f"{path}.tmp"
    torch.save(ckpt, tmp)
    os.replace(tmp, path)
    return ckpt


def read_checkpoint(path: os.PathLike) -> Dict[str, Any]:
    if not os.path.isfile(path):
        raise CheckpointError(f"weight file not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise CheckpointError(f"{path} is not a readable torch file ({e}); re-create it with "
                              f"`python -m argtca.demo.train_clip --out {path}`") from e
    return checked_checkpoint(ckpt, path)


def checked_checkpoint(ckpt: Any, path: os.PathLike) -> Dict[str, Any]:
    """``ckpt`` (a loaded ``argtca-clip-v1`` object), checked: its format and keys."""
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        got = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(f"{path} has format {got!r}, expected {FORMAT!r} (a file written by "
                              f"argtca.demo.checkpoint.save_demo_checkpoint)")
    for k in ("model_name", "state_dict", "vocab_ids", "vocab_rows"):
        if k not in ckpt:
            raise CheckpointError(f"{path} lacks the key {k!r} of format {FORMAT}")
    return ckpt


def load_argtca_checkpoint(model, path: os.PathLike, ckpt: Any = None) -> Dict[str, Any]:
    """Load an ``argtca-clip-v1`` file into ``model`` (built from the config ``model_name``).

    The token embedding is zeroed and the stored rows filled in; everything else must match
    exactly (``load_state_dict(strict=True)``).  Returns the checkpoint's metadata
    (``model_name``, ``train_command``, ``train_meta``, ``n_vocab``).
    """
    # ckpt: the file's object as the caller read it (the bytes its run fingerprinted)
    ckpt = read_checkpoint(path) if ckpt is None else checked_checkpoint(ckpt, path)
    emb = model.token_embedding.weight
    ids, rows = ckpt["vocab_ids"].long(), ckpt["vocab_rows"]
    if rows.dim() != 2 or rows.shape != (ids.numel(), emb.shape[1]):
        raise CheckpointError(f"{path}: vocab_rows has shape {tuple(rows.shape)}, expected "
                              f"({ids.numel()}, {emb.shape[1]}) for model with text width "
                              f"{emb.shape[1]}; was it written for model {ckpt['model_name']!r}?")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= emb.shape[0]):
        raise CheckpointError(f"{path}: vocab_ids outside [0, {emb.shape[0]})")
    sd = dict(ckpt["state_dict"])
    full = torch.zeros_like(emb, device="cpu")
    full[ids] = rows.to(full.dtype)
    sd[EMB_KEY] = full
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{path} (model {ckpt['model_name']!r}) does not fit the model it is "
                              f"loaded into: {e}") from e
    return {"model_name": ckpt["model_name"], "train_command": ckpt.get("train_command", ""),
            "train_meta": ckpt.get("train_meta", {}), "n_vocab": int(ids.numel())}


def load_demo_model(path: Optional[os.PathLike] = None, device: str = "cpu"):
    """Build ``argtca-demo-clip`` and load the shipped (or given) weights; eval mode, fp32."""
    from .model import build_demo_model
    from pathlib import Path
    path = path or Path(__file__).resolve().parent / "assets" / "demo_clip.pt"
    ckpt_name = read_checkpoint(path)["model_name"]
    model = build_demo_model(ckpt_name)
    load_argtca_checkpoint(model, path)
    return model.to(device).eval()
