"""CLIP weight files in every format users hold, read without running code from the file.

``read_state_dict(path)`` recognises, by content (not by extension):

* an **OpenAI TorchScript archive** (``ViT-B-16.pt`` from openaipublic / ``clip.load``): a zip with
  ``<name>/data.pkl``, ``code/`` and ``constants.pkl``. Its ``data.pkl`` is read by a restricted
  unpickler (:class:`_TorchScriptUnpickler`) that rebuilds only tensors and the attribute dicts of
  the modules; every other global is refused and no TorchScript code is compiled or run. (We
  do not call ``torch.jit.load``: it does not run arbitrary Python pickles, but it compiles and
  runs the archive's TorchScript, e.g. ``__setstate__`` methods — more than reading weights
  needs.) The result equals ``torch.jit.load(path).state_dict()``.
* a **plain state dict** saved with ``torch.save`` (OpenAI layout or open_clip layout; zip or
  legacy format), optionally wrapped in ``{"state_dict": ...}`` and/or with ``module.`` prefixes
  (open_clip training checkpoints), read with ``torch.load(weights_only=True)``;
* a **safetensors** file (``open_clip_model.safetensors`` from the Hugging Face Hub).

OpenAI's and open_clip's CLIP share one key layout (``visual.conv1.weight``,
``transformer.resblocks.N.attn.in_proj_weight``, ...); OpenAI files add the integer entries
``input_resolution``, ``context_length`` and ``vocab_size``, which are dropped, and keep most
weights in fp16, which are copied into the fp32 model. ``load_state_dict_into`` checks the keys
and shapes against the configured backbone and names a likely backbone on a mismatch.
"""
from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import Dict, Optional

import torch
import torch.nn as nn

__all__ = ["ModelError", "read_state_dict", "read_torchscript_state_dict", "normalize_state_dict",
           "load_state_dict_into", "guess_backbone", "is_torchscript_archive"]

OPENAI_EXTRA_KEYS = ("input_resolution", "context_length", "vocab_size")
_FIX_REDOWNLOAD = ("re-download it (OpenAI's ViT-B-16.pt is 351 MB), or give another "
                   "MODEL.PRETRAINED")


class ModelError(ValueError):
    """Bad backbone/weights input: names the value and the fix."""


# ----------------------------------------------------------------------------- TorchScript
_STORAGE_DTYPES = {
    "FloatStorage": torch.float32, "HalfStorage": torch.float16, "DoubleStorage": torch.float64,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
}


class _StorageType:
    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype


class _ScriptObject:
    """Stand-in for a TorchScript class instance: keeps only its attribute dict."""

    def __new__(cls, *args):   # pickle's NEWOBJ calls __new__ only
        obj = super().__new__(cls)
        obj.attrs = {}
        return obj

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.attrs.update(state)
        else:  # a custom __getstate__ result; kept as data, never interpreted
            self.attrs["__state__"] = state


def _rebuild_tensor(storage, offset, size, stride, *_ignored):
    return torch.as_strided(storage, tuple(size), tuple(stride), int(offset)).clone()


def _identity(value, *_ignored):
    return value


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("collections", "OrderedDict"): OrderedDict,
    ("torch.jit._pickle", "restore_type_tag"): _identity,
    ("torch.jit._pickle", "build_intlist"): _identity,
    ("torch.jit._pickle", "build_doublelist"): _identity,
    ("torch.jit._pickle", "build_boollist"): _identity,
    ("torch.jit._pickle", "build_tensorlist"): _identity,
}


class _TorchScriptUnpickler(pickle.Unpickler):
    """Reads a TorchScript ``data.pkl`` as data: tensors from ``<prefix>/data/<key>``, module
    objects as attribute dicts; any other global is refused."""

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, path: str):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix, self.path = archive, prefix, path
        self.storages: Dict[str, torch.Tensor] = {}
        self.classes: Dict[str, type] = {}

    def find_class(self, module, name):
        if module.startswith("__torch__"):
            key = f"{module}.{name}"
            if key not in self.classes:
                self.classes[key] = type(name, (_ScriptObject,), {})
            return self.classes[key]
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise ModelError(f"{self.path}: the TorchScript archive's data.pkl refers to "
                         f"{module}.{name}, "
                         f"which a weight file does not need; refusing to read it. Use a plain "
                         f"state dict or safetensors file, or " + _FIX_REDOWNLOAD)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise ModelError(f"{self.path}: unexpected persistent id {pid!r} in data.pkl; "
                             + _FIX_REDOWNLOAD)
        _, stype, key, _location, numel = pid[:5]
        dtype = stype.dtype if isinstance(stype, _StorageType) else None
        if dtype is None:
            raise ModelError(f"{self.path}: storage {key!r} has no known dtype; " + _FIX_REDOWNLOAD)
        if key not in self.storages:
            raw = self.archive.read(f"{self.prefix}data/{key}")
            if int(numel) == 0:
                self.storages[key] = torch.empty(0, dtype=dtype)
            else:
                t = torch.frombuffer(bytearray(raw), dtype=dtype)
                if t.numel() != int(numel):
                    raise ModelError(f"{self.path}: storage {key!r} holds {t.numel()} values, "
                                     f"data.pkl says {numel}; the archive is damaged, "
                                     + _FIX_REDOWNLOAD)
                self.storages[key] = t
        return self.storages[key]


def _flatten(obj, prefix: str, out: Dict[str, torch.Tensor]) -> None:
    for k, v in obj.attrs.items():
        if isinstance(v, torch.Tensor):
            out[prefix + k] = v
        elif isinstance(v, _ScriptObject):
            _flatten(v, f"{prefix}{k}.", out)


def _archive_prefix(names) -> Optional[str]:
    pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") <= 1]
    if not pkl:
        return None
    return pkl[0][: -len("data.pkl")]


def is_torchscript_archive(names) -> bool:
    prefix = _archive_prefix(names)
    return prefix is not None and (f"{prefix}constants.pkl" in names
                                   or any(n.startswith(f"{prefix}code/") for n in names))


def read_torchscript_state_dict(path: str, data: Optional[bytes] = None
                                ) -> Dict[str, torch.Tensor]:
    """Parameters and buffers of a TorchScript archive, by attribute path (``visual.conv1.weight``),
    without compiling or running anything from it (``data``: the file's bytes, already read)."""
    with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as z:
        names = z.namelist()
        prefix = _archive_prefix(names)
        if prefix is None:
            raise ModelError(f"{path}: zip archive without data.pkl; not a PyTorch checkpoint. "
                             + _FIX_REDOWNLOAD)
        try:
            root = _TorchScriptUnpickler(z.read(prefix + "data.pkl"), z, prefix, path).load()
        except ModelError:
            raise
        except (pickle.UnpicklingError, KeyError, EOFError, zipfile.BadZipFile, RuntimeError,
                TypeError, ValueError) as e:
            raise ModelError(f"{path}: cannot read the TorchScript archive ({type(e).__name__}: "
                             f"{e}); " + _FIX_REDOWNLOAD) from e
    if not isinstance(root, _ScriptObject):
        raise ModelError(f"{path}: the TorchScript archive does not hold a module; "
                         + _FIX_REDOWNLOAD)
    out: Dict[str, torch.Tensor] = OrderedDict()
    _flatten(root, "", out)
    return out


# ----------------------------------------------------------------------------- any file
def _looks_like_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    n = struct.unpack("<Q", head[:8])[0]
    return 0 < n < size and head[8:9] == b"{"


def read_state_dict(path: str):
    """The object stored in a weight file (usually a dict), by content; ModelError otherwise.
    The file is read once (argtca.utils.hashing.read_input): the bytes deserialized are the
    bytes the run's fingerprint names, or the read is refused."""
    from argtca.utils.hashing import read_input
    data = read_input(path)
    size = len(data)
    if size == 0:
        raise ModelError(f"MODEL.PRETRAINED file {path} is empty; " + _FIX_REDOWNLOAD)
    head = data[:64]
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                names = z.namelist()
        except zipfile.BadZipFile as e:
            raise ModelError(f"MODEL.PRETRAINED file {path} is a damaged or incomplete zip "
                             f"archive ({e}; {size} bytes — an interrupted download?); "
                             + _FIX_REDOWNLOAD) from e
        if is_torchscript_archive(names):
            return read_torchscript_state_dict(path, data)
        return _torch_load(path, data)
    if _looks_like_safetensors(head, size):
        from safetensors import SafetensorError
        from safetensors.torch import load
        try:
            return load(data)
        except SafetensorError as e:
            raise ModelError(f"MODEL.PRETRAINED file {path} is a damaged safetensors file ({e}); "
                             + _FIX_REDOWNLOAD) from e
    if head[:1] == b"\x80":  # a pickle: torch.save's legacy (pre-zip) format
        return _torch_load(path, data)
    shown = head[:24].decode("utf-8", "replace")
    kind = ("an HTML page (a failed download?)" if shown.lstrip().startswith("<")
            else "not a checkpoint")
    raise ModelError(f"MODEL.PRETRAINED file {path} is {kind}: it starts with {shown!r}, not a "
                     f"PyTorch zip/pickle or safetensors header; " + _FIX_REDOWNLOAD)


def _torch_load(path: str, data: Optional[bytes] = None):
    try:
        return torch.load(io.BytesIO(data) if data is not None else path, map_location="cpu",
                          weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelError(f"MODEL.PRETRAINED file {path} holds Python objects that argtca does not "
                         f"unpickle (weights_only: {str(e).splitlines()[0][:160]}); re-save its "
                         f"weights as a state dict (torch.save(model.state_dict(), file)) or use "
                         f"safetensors") from e
    except (RuntimeError, EOFError, zipfile.BadZipFile) as e:
        raise ModelError(f"MODEL.PRETRAINED file {path} cannot be read ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200]}); " + _FIX_REDOWNLOAD) from e


def normalize_state_dict(obj, path: str) -> Dict[str, torch.Tensor]:
    """Unwrap ``{"state_dict": ...}``, strip ``module.``, drop OpenAI's integer entries."""
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not obj:
        raise ModelError(f"MODEL.PRETRAINED file {path} holds a {type(obj).__name__}, not a state "
                         f"dict of tensors; give a CLIP checkpoint")
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise ModelError(f"MODEL.PRETRAINED file {path}: entries {bad[:3]} are not named tensors; "
                         f"not a CLIP state dict")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return OrderedDict((k, v) for k, v in obj.items() if k not in OPENAI_EXTRA_KEYS)


# OpenAI backbones by (visual width, patch size, visual layers) / ResNet stage widths
_VIT_BACKBONES = {(768, 16, 12): "ViT-B/16", (768, 32, 12): "ViT-B/32", (1024, 14, 24): "ViT-L/14"}


def guess_backbone(sd: Dict[str, torch.Tensor]) -> Optional[str]:
    """The OpenAI backbone name (CoOp spelling) a CLIP state dict fits, when recognisable."""
    w = sd.get("visual.conv1.weight")
    if w is not None and w.dim() == 4 and "visual.proj" in sd:
        layers = len({k.split(".")[3] for k in sd if k.startswith("visual.transformer.resblocks.")})
        return _VIT_BACKBONES.get((w.shape[0], w.shape[-1], layers))
    if "visual.layer1.0.conv1.weight" in sd:
        n3 = len({k.split(".")[2] for k in sd if k.startswith("visual.layer3.")})
        return {6: "RN50", 23: "RN101"}.get(n3)
    return None


def load_state_dict_into(model: nn.Module, sd: Dict[str, torch.Tensor], path: str,
                         backbone: str) -> None:
    """Copy ``sd`` into ``model`` (dtype converted); ModelError naming keys/shapes on a mismatch."""
    from open_clip.convert import convert_state_dict
    sd = dict(convert_state_dict(model, sd))
    own = model.state_dict()
    # buffers the model does not persist (attn_mask) are in TorchScript state dicts: not weights
    non_persistent = {n for n, _ in model.named_buffers()} - set(own)
    for k in non_persistent:
        sd.pop(k, None)
    if ("logit_scale" in sd and "logit_scale" in own
            and sd["logit_scale"].dim() != own["logit_scale"].dim()):
        sd["logit_scale"] = sd["logit_scale"].reshape(own["logit_scale"].shape)
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    shapes = [f"{k} {tuple(sd[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in sd and sd[k].shape != own[k].shape]
    if missing or unexpected or shapes:
        guess = guess_backbone(sd)
        hint = (f"it looks like {guess}: set MODEL.BACKBONE.NAME {guess}"
                if guess and guess != backbone
                else "set MODEL.BACKBONE.NAME to the model the checkpoint was trained as")
        parts = []
        if shapes:
            parts.append(f"{len(shapes)} shape mismatches, e.g. {shapes[0]}")
        if missing:
            parts.append(f"{len(missing)} missing keys, e.g. {missing[:3]}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys, e.g. {unexpected[:3]}")
        raise ModelError(f"MODEL.PRETRAINED file {path} does not fit MODEL.BACKBONE.NAME="
                         f"{backbone} ({'; '.join(parts)}); {hint}")
    with torch.no_grad():
        for k, v in own.items():
            v.copy_(sd[k])
