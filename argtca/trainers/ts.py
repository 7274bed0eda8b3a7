"""Temperature scaling: the reference rows of every calibration table ("Zero-shot CLIP + TS",
"TPT + TS"; C-TPT's code has the ``tpt_ts`` row).

A method here is its base method (prompts, objective, tuning — unchanged) whose *final* class
probabilities are ``softmax(log p / T)``, ``p`` the base method's probabilities (for class-prompt
methods ``log p`` are the logits up to a per-image constant, so this is ``softmax(logits / T)``,
exactly C-TPT's ``softmax(output / T)``). The tuning never sees ``T``.

``TRAINER.TS``:

* ``FIT "val"``: ``T`` minimises the NLL of the validation split (``VAL_SPLIT``, the first
  ``VAL_IMAGES``) — of zero-shot CLIP's logits (``FIT_ON "zeroshot"``, one pass, cheap) or of the
  method's own outputs (``FIT_ON "method"``: TPT tunes every validation image, as it will every
  test image). NLL(1/T) is convex in 1/T; :func:`fit_temperature` finds its minimum by bisection
  on the derivative. The fitted value, the validation set and the NLL before/after are cached in
  the run folder (``temperature.json``) and reused on resume; the summary records them.
* ``FIT "fixed"``: ``T = TRAINER.TS.T`` (C-TPT's script: 1.16 for ViT, 1.15 for RN).

A validation split that shares images with the evaluated split (CoOp's ImageNet reader uses its
test set as val) is refused: fitting there would see the test labels.
"""
from __future__ import annotations

import math
import os
from typing import Dict, List

import torch

from argtca.config.keys import Key, Range
from argtca.plugins import method
from argtca.run_folder import (RunFolderError, check_derived, config_hash, has_records,
                               record_derived, result_fingerprint)
from argtca.utils.io import read_json_object, write_json
from argtca.trainers.base import zeroshot_cfg
from argtca.trainers.methods import TPT, ZeroshotCLIP

BETA_RANGE = (1e-3, 1e3)   # 1/T searched in [0.001, 1000]


class TemperatureError(ValueError):
    """A temperature-scaling setting that cannot work; the message names the key and the fix."""


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, iters: int = 200) -> float:
    """The T > 0 minimising mean NLL of ``softmax(logits / T)`` (float64 bisection on
    d NLL / d(1/T) = mean(E_p[z] - z_y), non-decreasing in 1/T). Clamped to 1/T in BETA_RANGE
    (a validation set the logits separate perfectly has no finite optimum)."""
    z = logits.double()
    y = labels.long()
    zy = z.gather(1, y[:, None])[:, 0]

    def grad(beta):
        p = (beta * z).softmax(-1)
        return float(((p * z).sum(-1) - zy).mean())

    lo, hi = math.log(BETA_RANGE[0]), math.log(BETA_RANGE[1])
    if grad(math.exp(hi)) <= 0:
        return 1.0 / BETA_RANGE[1]
    if grad(math.exp(lo)) >= 0:
        return 1.0 / BETA_RANGE[0]
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if grad(math.exp(mid)) > 0:
            hi = mid
        else:
            lo = mid
    return 1.0 / math.exp(0.5 * (lo + hi))


def nll(logits: torch.Tensor, labels: torch.Tensor, T: float) -> float:
    return float(torch.nn.functional.cross_entropy(logits.double() / T, labels.long()))


def scaled_objective(base):
    """``base`` with ``probs(logits) = softmax(log p / T)``; ``T`` is the attribute
    ``temperature`` (1 until fitted) and ``capture`` (a list) collects ``log p`` when set. The
    class is a subclass of ``type(base)``, so the engines' shortcuts for its loss still apply."""
    cls = type(base)

    def log_probs(self, logits):
        if hasattr(cls, "log_probs"):
            return cls.log_probs(self, logits)
        return logits.float().log_softmax(-1)

    def probs(self, logits):
        logp = log_probs(self, logits)
        if self.capture is not None:
            self.capture.append(logp.detach().double().cpu())
        return (logp / self.temperature).softmax(-1)

    ts_cls = type(f"TemperatureScaled{cls.__name__}", (cls,), {"probs": probs})
    obj = ts_cls.__new__(ts_cls)
    obj.__dict__.update(base.__dict__)
    obj.temperature, obj.capture = 1.0, None
    return obj


# TRAINER.TS, the node both temperature-scaled methods declare (``node="TS"``) besides their base
# method's (``base_node``: its prompts and objective keys)
TS_DEFAULTS = {
    "FIT": Key("val", "\"val\": T minimises the NLL of the validation split; \"fixed\": T = "
               "TRAINER.TS.T", choices=("val", "fixed")),
    "T": Key(1.16, "the fixed temperature (C-TPT's tpt_ts: 1.16 ViT, 1.15 RN)",
             check=Range(lambda v: v > 0, "> 0 (C-TPT: 1.16 ViT, 1.15 RN)")),
    "FIT_ON": Key("method", "\"method\": the method's own outputs on val (TPT tunes each val "
                  "image); \"zeroshot\": zero-shot CLIP's (one cheap pass)",
                  choices=("method", "zeroshot")),
    "VAL_SPLIT": Key("val", "split of the split file T is fitted on"),
    "VAL_IMAGES": Key(-1, ">0: only the first N validation images",
                      check=Range(lambda v: v == -1 or v >= 1, "-1 for all, or N >= 1", True)),
}


class TemperatureScaled:
    """Mix-in: ``base_node`` names the base method's config node (its prompts/objective keys)."""

    base_node = ""
    shared_build = True   # temperature.json: rank 0 fits T, the others read it
    rows = ()             # a reference row on request, in none of table1's method sets

    @property
    def node(self):
        return self.cfg.TRAINER.get(self.base_node)

    @property
    def ts(self):
        return self.cfg.TRAINER.TS

    @property
    def display_label(self) -> str:
        if str(self.ts.FIT) == "fixed":
            return f"{self.label} (T={float(self.ts.T):g})"
        return self.label

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        ts = cfg.TRAINER.TS
        if str(ts.FIT) not in ("val", "fixed"):
            raise TemperatureError(f"TRAINER.TS.FIT={ts.FIT!r}: use 'val' (fit T on the "
                                   f"validation split) or 'fixed' (T = TRAINER.TS.T)")
        if str(ts.FIT_ON) not in ("zeroshot", "method"):
            raise TemperatureError(f"TRAINER.TS.FIT_ON={ts.FIT_ON!r}: use 'zeroshot' or 'method'")
        if not (float(ts.T) > 0 and math.isfinite(float(ts.T))):
            raise TemperatureError(f"TRAINER.TS.T={ts.T!r}: a temperature is > 0 (C-TPT: 1.16 "
                                   f"ViT, 1.15 RN)")

    def build_objective(self):
        return scaled_objective(super().build_objective())

    def build_model(self) -> None:
        super().build_model()
        self.ts_info = self.choose_temperature()
        self.objective.temperature = float(self.ts_info["T"])

    # ------------------------------------------------------------------ T
    def val_dataset(self):
        """The validation split (``TRAINER.TS.VAL_SPLIT``, first ``VAL_IMAGES``); under Dassl the
        plugin passes DataManager's as ``val_set``."""
        ds = getattr(self, "val_set", None)
        if ds is None:
            from argtca.datasets import build_dataset
            cfg = self.cfg.clone()
            cfg.defrost()
            cfg.DATASET.SPLIT = str(self.ts.VAL_SPLIT)
            cfg.DATASET.NUM_IMAGES = int(self.ts.VAL_IMAGES)
            try:
                ds = build_dataset(cfg)
            except Exception as e:
                raise TemperatureError(
                    f"TRAINER.TS.FIT val: cannot read split {self.ts.VAL_SPLIT!r} of "
                    f"{self.cfg.DATASET.NAME} ({str(e).splitlines()[0][:200]}); set "
                    f"TRAINER.TS.VAL_SPLIT to a validation split, "
                    f"or TRAINER.TS.FIT fixed") from None
        if list(ds.classnames) != list(self.dataset.classnames):
            raise TemperatureError(f"TRAINER.TS: the {self.ts.VAL_SPLIT!r} split's classes differ "
                                   f"from the evaluated split's; fix the split file")
        shared = {d.impath for d in ds.test} & {d.impath for d in self.dataset.test}
        if shared:
            raise TemperatureError(
                f"TRAINER.TS.FIT val: the {self.ts.VAL_SPLIT!r} split shares {len(shared)} images "
                f"with the evaluated split (e.g. {sorted(shared)[0]}): "
                f"fitting T there sees the test "
                f"labels; use TRAINER.TS.FIT fixed (TRAINER.TS.T) for this dataset")
        return ds

    def _val_key(self, ds) -> Dict[str, object]:
        from argtca.run_folder import run_fingerprint
        fit_on = str(self.ts.FIT_ON)
        cfg = self.cfg if fit_on == "method" else self.run_cfg_zeroshot
        nodes = self.config_nodes(cfg)   # as in the run's fingerprint: the nodes it reads
        return {"fit_on": fit_on,
                "val": config_hash(run_fingerprint(cfg, ds, self.device.type, nodes=nodes)),
                "config": config_hash(result_fingerprint(cfg, nodes))}

    @property
    def run_cfg_zeroshot(self):
        return zeroshot_cfg(self.cfg)

    def choose_temperature(self) -> Dict[str, object]:
        if str(self.ts.FIT) == "fixed":
            return {"fit": "fixed", "T": float(self.ts.T)}
        ds = self.val_dataset()
        key = self._val_key(ds)
        out_dir = self.output_dir()
        path = os.path.join(out_dir, "temperature.json")
        old = self._read_temperature(out_dir)
        if old is not None and old.get("key") == key:
            return old
        if has_records(out_dir):
            # images are already recorded with the T of that file: another T would mix two
            # calibrations in one run
            what = ("is missing" if not os.path.isfile(path) else
                    "is unreadable or was fitted on another validation set")
            raise RunFolderError(
                f"{path} {what}, but {out_dir} holds records made with the temperature it held: "
                f"restore it, or delete {out_dir} (or pass another --output-dir) to start over")
        logits, labels = self.val_logits(ds)
        T = fit_temperature(logits, labels)
        info = {"fit": "val", "fit_on": key["fit_on"], "split": str(self.ts.VAL_SPLIT),
                "n_val": int(labels.numel()), "T": T, "nll_val_T1": nll(logits, labels, 1.0),
                "nll_val": nll(logits, labels, T), "key": key}
        write_json(path, info)
        info["sha256"] = record_derived(out_dir, "temperature.json")   # checked when re-read
        if self.cfg.VERBOSE:
            print(f"argtca: temperature T={T:.4f} fitted on {info['n_val']} {info['split']} images "
                  f"({info['fit_on']} outputs; val NLL {info['nll_val_T1']:.4f} -> "
                  f"{info['nll_val']:.4f})", flush=True)
        return info

    @staticmethod
    def _read_temperature(out_dir: str):
        """``temperature.json`` of ``out_dir`` with its sha256 (checked against the hash noted
        when it was written), or None when it is absent or unreadable."""
        fix = (f"restore it, or delete {out_dir} (or pass another --output-dir) to start over")
        digest = check_derived(out_dir, "temperature.json", fix)
        if digest is None:
            return None
        try:
            info = read_json_object(os.path.join(out_dir, "temperature.json"), "", "")
            T = float(info["T"])
        except (ValueError, KeyError, TypeError, OSError):
            return None
        if not (T > 0 and math.isfinite(T)):
            return None
        info["sha256"] = digest
        return info

    def val_logits(self, ds):
        """log p of every validation image under the base method (T = 1) and the labels."""
        from argtca.views.loader import build_views_loader
        from argtca.engine.reference import ReferenceEngine
        method = str(self.ts.FIT_ON) == "method"
        cfg = self.run_cfg if method else self.run_cfg_zeroshot
        engine = self.engine if method else ReferenceEngine(
            self.model, self.text_encoder, self.objective, cfg, self.device)
        loader = build_views_loader(cfg, ds, int(self.cfg.SEED), list(range(len(ds.test))),
                                    self.batch_images if method else 1, self.device,
                                    int(self.cfg.DATALOADER.NUM_WORKERS),
                                    int(self.cfg.DATALOADER.PREFETCH))
        from argtca.utils.host import loop_threads
        captured: List[torch.Tensor] = []
        labels: List[int] = []
        self.objective.capture = captured
        try:   # the test loop's thread rule (DATALOADER.MAIN_THREADS) for this loop too
            with loop_threads(self.cfg):
                for batch in loader:
                    engine(batch["views"], batch["path"])
                    labels.extend(int(y) for y in batch["label"])
        finally:
            self.objective.capture = None
        return torch.cat([c.reshape(-1, c.shape[-1]) for c in captured]), torch.tensor(labels)

    def finish(self, out_dir, records, fp, elapsed, n_new, timing=None):
        info = getattr(self, "ts_info", None)
        if info is None:   # resumed with nothing left to run: the fit the records were made with
            if str(self.ts.FIT) == "fixed":
                info = {"fit": "fixed", "T": float(self.ts.T)}   # T is in the fingerprint
            else:
                info = self._read_temperature(out_dir)
                if info is None:
                    path = os.path.join(out_dir, "temperature.json")
                    raise RunFolderError(
                        f"{path} is missing or unreadable: it holds the temperature the records "
                        f"of {out_dir} were made with; restore it, or delete {out_dir} (or pass "
                        f"another --output-dir) to start over")
        summary = super().finish(out_dir, records, fp, elapsed, n_new, timing)
        summary["temperature"] = {k: v for k, v in info.items() if k != "key"}
        summary["trainer_cfg"].update({f"TRAINER.TS.{k}": v for k, v in self.ts.items()})
        write_json(os.path.join(out_dir, "summary.json"), summary)
        return summary


@method("zeroshot_ts", label="Zero-shot CLIP + TS", family="zero-shot", node="TS",
        base_node="ZEROSHOTCLIP", defaults=TS_DEFAULTS)
class ZeroshotTS(TemperatureScaled, ZeroshotCLIP):
    """Zero-shot CLIP with temperature scaling (T fitted on the validation split, or fixed)."""


@method("tpt_ts", label="TPT + TS", family="tpt-family", node="TS", base_node="TPT",
        defaults=TS_DEFAULTS)
class TPTTS(TemperatureScaled, TPT):
    """TPT with temperature scaling of its final prediction (C-TPT's ``tpt_ts`` row)."""
