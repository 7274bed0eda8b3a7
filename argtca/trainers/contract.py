"""The one check of what a plug-in method returns, as the selector contract checks a selector's
answer (argtca/selectors/contract.py).

A method from outside argtca (argtca/plugins.py :func:`~argtca.plugins.method`, or a trainer,
adapter or objective class registered by a ``--plugin`` module or an installed package) must give,
for a batch of B images of a dataset of K classes, probabilities ``[B, K]``: finite, >= 0, each
row summing to 1. An adapter's answer is checked as it returns (:func:`checked_adapter`), and
every batch the loop receives before its records are written (:func:`checked_predictions`), so
a wrong answer stops the run at the first batch that has one, with one line naming the method and
its file and saying what was wrong; the records of the batches before it stay in records.jsonl.
argtca's own methods pass through unchanged (their errors name their settings themselves).
"""
from __future__ import annotations

import os
from typing import Iterable, Iterator, Optional, Sequence, Set, Tuple

import torch

__all__ = ["MethodContractError", "plugin_who", "check_probs", "checked_adapter",
           "checked_predictions"]

# a row's sum may be off by float rounding (a softmax in fp16 under autocast); beyond this the
# answer is not a probability vector
SUM_TOLERANCE = 1e-3


class MethodContractError(ValueError):
    """A plug-in method's answer broke the contract, or its code raised: one line naming it."""


def plugin_source(trainer) -> Tuple[str, Set[str]]:
    """(how errors name ``trainer``'s method, the source files of its plug-in code) when code
    outside argtca provides its method, adapter or objective: ``method "<key>" (plug-in
    <file>)``; ("", empty) for argtca's own."""
    from argtca.trainers.providers import run_providers
    try:
        found = run_providers(trainer)
    except Exception:   # noqa: BLE001 (an unresolvable provider is reported elsewhere)
        return "", set()
    found.pop("SELECTOR", None)   # a selector plug-in has its own contract
    for kind in ("ADAPTER", "OBJECTIVE", "METHOD"):
        if kind in found:
            module, file = found[kind]
            files = {os.path.realpath(f) for _, f in found.values() if f}
            return f'method "{trainer.method}" (plug-in {file or module})', files
    return "", set()


def plugin_who(trainer) -> str:
    """How errors name ``trainer``'s method when it is a plug-in (:func:`plugin_source`)."""
    return plugin_source(trainer)[0]


def raised_in(e: BaseException, files: Set[str]) -> bool:
    """Whether the traceback of ``e`` passes through one of ``files`` (a plug-in's code: the
    command line then names it, argtca/run.py)."""
    tb = e.__traceback__
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) in files:
            return True
        tb = tb.tb_next
    return False


def _image(paths: Optional[Sequence[str]], i: int) -> str:
    if paths is not None and 0 <= i < len(paths):
        return str(paths[i])
    return f"#{i} of the batch"


def check_probs(probs, n_images: int, n_classes: int, who: str, what: str = "its answer",
                paths: Optional[Sequence[str]] = None) -> None:
    """Refuse (MethodContractError, one line) ``probs`` unless it is a float tensor
    ``[n_images, n_classes]`` of finite, non-negative rows summing to 1."""
    def fail(msg: str) -> MethodContractError:
        return MethodContractError(
            f"{who}: {what} {msg}; a method returns, for a batch of B images, class "
            f"probabilities [B, K] (K = the dataset's classes, here B={n_images}, "
            f"K={n_classes}): finite, >= 0, each row summing to 1; nothing was recorded for "
            f"this batch")

    if not isinstance(probs, torch.Tensor):
        raise fail(f"is a {type(probs).__name__}, not a tensor")
    if not probs.is_floating_point():
        raise fail(f"has dtype {probs.dtype}, not a float dtype")
    shape = tuple(probs.shape)
    if len(shape) != 2:
        raise fail(f"has shape {list(shape)}, not [B, K]")
    if shape[0] != n_images:
        raise fail(f"has {shape[0]} rows for a batch of {n_images} images (shape "
                   f"{list(shape)})")
    if shape[1] != n_classes:
        raise fail(f"gives {shape[1]} class probabilities per image, but the dataset has "
                   f"{n_classes} classes (shape {list(shape)})")
    p = probs.detach().float()
    bad = ~torch.isfinite(p).all(-1)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        n = int((~torch.isfinite(p[i])).sum())
        raise fail(f"holds NaN/inf: {n} of {n_classes} probabilities of image {_image(paths, i)}")
    neg = (p < 0).any(-1)
    if bool(neg.any()):
        i = int(neg.nonzero()[0])
        raise fail(f"holds a negative probability ({float(p[i].min()):.4g}) for image "
                   f"{_image(paths, i)}")
    sums = p.sum(-1)
    off = (sums - 1).abs() > SUM_TOLERANCE
    if bool(off.any()):
        i = int(off.nonzero()[0])
        raise fail(f"is not a probability vector for image {_image(paths, i)}: its row sums to "
                   f"{float(sums[i]):.6g} (did it return logits? take their softmax)")


_CHECKED = {}


def checked_adapter(adapter, who: str, n_classes: int):
    """``adapter`` (an instance) whose every answer is checked (:func:`check_probs`); its class
    becomes a subclass of its own that checks in ``__call__``, so its state, traits and
    ``isinstance`` are unchanged."""
    cls = type(adapter)
    sub = _CHECKED.get(cls)
    if sub is None:
        def __call__(self, img):
            out = cls.__call__(self, img)
            n = img.shape[0] if isinstance(img, torch.Tensor) and img.dim() >= 1 else -1
            check_probs(out, n, self._argtca_classes, self._argtca_who, "its adapter's answer")
            return out
        sub = type(cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        _CHECKED[cls] = sub
    adapter.__class__ = sub
    adapter._argtca_who, adapter._argtca_classes = who, int(n_classes)
    return adapter


def _check_the_adapter(engine, who: str, n_classes: int) -> None:
    """The features engine's adapter, made or still to make, checked as it answers."""
    if engine is None or not hasattr(engine, "make_adapter"):
        return
    if getattr(engine, "adapter", None) is not None:   # an online one, built before the loop
        checked_adapter(engine.adapter, who, n_classes)
        return
    make = engine.make_adapter
    if not getattr(make, "_argtca_checked", False):
        def checked_make(text):
            return checked_adapter(make(text), who, n_classes)
        checked_make._argtca_checked = True
        engine.make_adapter = checked_make


def checked_predictions(trainer, results: Iterable[Tuple[dict, torch.Tensor]]
                        ) -> Iterator[Tuple[dict, torch.Tensor]]:
    """The loop's (batch, probabilities), each checked before it is recorded when ``trainer``'s
    method is a plug-in; an exception raised while a plug-in's batch is computed becomes one
    argtca's own methods: ``results`` unchanged. (An exception raised by the plug-in's code keeps
    its type; ``python -m argtca.run`` names the plug-in file in its error line.)"""
    who, _ = plugin_source(trainer)
    if not who:
        yield from results
        return
    n_classes = len(trainer.classnames)
    _check_the_adapter(getattr(trainer, "engine", None), who, n_classes)
    for batch, probs in results:
        check_probs(probs, len(batch["index"]), n_classes, who, paths=batch.get("path"))
        yield batch, probs
