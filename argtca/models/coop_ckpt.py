"""CoOp's learned context as the initial context of test-time tuning (TPT's "TPT + CoOp" rows).

CoOp (KaiyangZhou/CoOp) saves its prompt learner with Dassl's ``save_checkpoint`` under
``<output>/prompt_learner/model.pth.tar-<epoch>`` (and ``model-best.pth.tar`` when it validates):
a dict ``{"state_dict": {"ctx", "token_prefix", "token_suffix"}, "epoch", "optimizer",
"scheduler", "val_result"}``. Only ``state_dict["ctx"]`` is used: ``[n_ctx, width]`` (a generic
context) — the prefix/suffix embeddings belong to CoOp's training classes and are rebuilt here from
the evaluated classes, as CoOp's own ``load_model`` does.

Reading the file runs no code from it. Dassl pickles whole objects into the checkpoint (the
scheduler's ``state_dict`` holds the successor scheduler object, and with it the optimiser), so
``torch.load(weights_only=True)`` refuses CoOp's files; ``weights_only=False`` would execute
whatever the file names, which is only acceptable for files one trusts. argtca reads the file with
:class:`_RestrictedUnpickler`: tensors and the containers PyTorch's own ``weights_only`` loader
allows are rebuilt; any other class or function named in the file is replaced by an inert
:class:`OpaqueObject` (never imported, never called), which is enough to reach ``ctx``.

Class-specific contexts (CoOp's ``CSC True``: ``ctx`` of shape ``[n_cls, n_ctx, width]``) are
refused: test-time tuning tunes one context shared by every class prompt, and the checkpoint's
classes need not be the evaluated ones.
"""
from __future__ import annotations

import os
import pickle
import types
from typing import Dict, Optional

import torch

from .weights import ModelError


class CoopCheckpointError(ModelError):
    """A CoOp checkpoint that cannot initialise the context; the message names the file, the
    value and the fix."""


class OpaqueObject:
    """Stand-in for any class or function a checkpoint names outside the tensor allow-list: it is
    never imported or run; its pickled state is kept as plain data."""

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args = args
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):   # REDUCE with an opaque callable
        return OpaqueObject(*args)

    def __setstate__(self, state):
        self.state = state


def _opaque_global(module: str, name: str):
    return type(f"Opaque[{module}.{name}]", (OpaqueObject,), {"__module__": __name__})


def _allowed_globals() -> Dict[str, object]:
    try:   # the list PyTorch's weights_only loader trusts (rebuild functions, dtypes, storages)
        from torch._weights_only_unpickler import _get_allowed_globals
        return dict(_get_allowed_globals())
    except Exception:   # pragma: no cover - private API moved: the minimum for tensors
        import collections
        import torch._utils as tu
        return {"collections.OrderedDict": collections.OrderedDict,
                "torch._utils._rebuild_tensor_v2": tu._rebuild_tensor_v2,
                "torch._utils._rebuild_parameter": tu._rebuild_parameter,
                "torch.FloatStorage": torch.FloatStorage, "torch.HalfStorage": torch.HalfStorage}


class _RestrictedUnpickler(pickle.Unpickler):
    _allowed: Optional[Dict[str, object]] = None

    def find_class(self, module, name):
        if _RestrictedUnpickler._allowed is None:
            _RestrictedUnpickler._allowed = _allowed_globals()
        obj = self._allowed.get(f"{module}.{name}")
        if obj is not None:
            return obj
        if module == "torch" and name.endswith("Storage") and hasattr(torch, name):
            return getattr(torch, name)
        return _opaque_global(module, name)


_PICKLE_MODULE = types.SimpleNamespace(__name__="argtca_restricted_pickle",
                                       Unpickler=_RestrictedUnpickler,
                                       load=lambda f, **kw: _RestrictedUnpickler(f, **kw).load())


def restricted_load(path: str):
    """``torch.load`` of ``path`` through :class:`_RestrictedUnpickler` (no code from the file)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False,
                          pickle_module=_PICKLE_MODULE)
    except Exception as e:   # zip/pickle/format errors: one line naming the file
        raise CoopCheckpointError(
            f"{path}: cannot read it as a CoOp/Dassl checkpoint ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:160] if str(e) else ''}); give the prompt_learner/"
            f"model.pth.tar-<epoch> file CoOp's train.py wrote") from None


def resolve_checkpoint(path: str, epoch: int = 0) -> str:
    """The checkpoint file that ``path`` (+ ``epoch``) names, in Dassl's ``load_model`` order:

    * a file: itself (``epoch`` must be 0 or agree with its ``model.pth.tar-<epoch>`` name);
    * a CoOp output folder (with ``prompt_learner/``) or a ``prompt_learner`` folder:
      ``model.pth.tar-<epoch>`` when ``epoch > 0``; else ``model-best.pth.tar``; else the file
      Dassl last wrote (the folder's ``checkpoint`` record; CoOp without validation keeps only
      the last epoch).
    """
    path = os.path.expanduser(str(path))
    epoch = int(epoch or 0)
    if os.path.isfile(path):
        base = os.path.basename(path)
        if epoch > 0 and base.startswith("model.pth.tar-") and base != f"model.pth.tar-{epoch}":
            raise CoopCheckpointError(f"TTA.CTX_CHECKPOINT={path} is epoch "
                                      f"{base.rsplit('-', 1)[1]} but TTA.CTX_CHECKPOINT_EPOCH="
                                      f"{epoch}; give the folder, or set the epoch to 0")
        return path
    if not os.path.isdir(path):
        raise CoopCheckpointError(f"TTA.CTX_CHECKPOINT={path}: no such file or folder; give CoOp's "
                                  f"output folder (the one holding prompt_learner/) or a "
                                  f"prompt_learner/model.pth.tar-<epoch> file")
    folder = os.path.join(path, "prompt_learner")
    if not os.path.isdir(folder):
        folder = path
    if epoch > 0:
        f = os.path.join(folder, f"model.pth.tar-{epoch}")
        if not os.path.isfile(f):
            have = sorted(n for n in os.listdir(folder) if n.startswith("model"))
            raise CoopCheckpointError(f"no CoOp checkpoint {f} (epoch {epoch}); the folder has "
                                      f"{have or 'no model files'}: set TTA.CTX_CHECKPOINT_EPOCH "
                                      f"(CoOp's --load-epoch) to one of them")
        return f
    best = os.path.join(folder, "model-best.pth.tar")
    if os.path.isfile(best):
        return best
    record = os.path.join(folder, "checkpoint")
    if os.path.isfile(record):
        with open(record) as fh:
            name = fh.readline().strip()
        if name and os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise CoopCheckpointError(f"{folder}: no model-best.pth.tar and no Dassl 'checkpoint' record "
                              f"naming a model file; give the epoch (TTA.CTX_CHECKPOINT_EPOCH or "
                              f"--load-epoch) or the file itself")


def load_coop_context(path: str, epoch: int = 0) -> Dict[str, object]:
    """``{"file", "ctx" [n_ctx, width] float32, "epoch"}`` from a CoOp checkpoint."""
    f = resolve_checkpoint(path, epoch)
    obj = restricted_load(f)
    sd = obj.get("state_dict", obj) if isinstance(obj, dict) else None
    if not isinstance(sd, dict) or "ctx" not in sd:
        keys = sorted(sd)[:8] if isinstance(sd, dict) else type(obj).__name__
        raise CoopCheckpointError(f"{f}: no 'ctx' in its state_dict (found {keys}); this is not a "
                                  f"CoOp prompt_learner checkpoint (CoCoOp's meta-net contexts are "
                                  f"not supported)")
    ctx = sd["ctx"]
    if not isinstance(ctx, torch.Tensor) or not ctx.is_floating_point():
        raise CoopCheckpointError(f"{f}: state_dict['ctx'] is {type(ctx).__name__}, not a float "
                                  f"tensor")
    if ctx.dim() == 3:
        raise CoopCheckpointError(
            f"{f}: class-specific contexts (CoOp's TRAINER.COOP.CSC True, ctx of shape "
            f"{tuple(ctx.shape)}) are not supported: test-time tuning tunes one context shared by "
            f"all classes; use a CoOp run with CSC False")
    if ctx.dim() != 2:
        raise CoopCheckpointError(f"{f}: state_dict['ctx'] has shape {tuple(ctx.shape)}; CoOp's "
                                  f"generic context is [n_ctx, width]")
    if not bool(torch.isfinite(ctx).all()):
        raise CoopCheckpointError(f"{f}: state_dict['ctx'] has NaN/inf values")
    ep = obj.get("epoch") if isinstance(obj, dict) else None
    return {"file": f, "ctx": ctx.detach().float().clone(),
            "epoch": ep if isinstance(ep, int) else None}


def check_context(ctx: torch.Tensor, n_ctx: int, width: int, backbone: str, file: str) -> None:
    """The checkpoint's context against the run: context length (TTA.N_CTX) and the text width
    of the backbone."""
    if ctx.shape[1] != width:
        raise CoopCheckpointError(
            f"{file}: context width {ctx.shape[1]} does not match MODEL.BACKBONE.NAME={backbone} "
            f"(text width {width}); use the backbone CoOp was trained with (CoOp's --backbone / "
            f"MODEL.BACKBONE.NAME of that run)")
    if ctx.shape[0] != int(n_ctx):
        raise CoopCheckpointError(
            f"{file}: {ctx.shape[0]} context vectors but TTA.N_CTX={n_ctx}; set TTA.N_CTX "
            f"{ctx.shape[0]} (CoOp's TRAINER.COOP.N_CTX of that run)")


def placeholder_init(n_ctx: int) -> str:
    """CoOp's prompt prefix for a learned context: ``"X X ... X"`` (one token each)."""
    return " ".join(["X"] * int(n_ctx))
