"""argtca's test-time trainers as Dassl trainers.

Each is a Dassl ``TrainerX`` whose data come from Dassl's ``DataManager`` (the dataset ``DATASET.NAME``
names) and whose ``test()`` runs the argtca trainer of the same method on the split's Datum list with
argtca's own multi-view loader. Nothing is trained: ``train()`` (CoOp's driver without
``--eval-only``) runs the test-time evaluation, and so does ``--eval-only``; ``--model-dir`` is
refused (there is no trained model to load).
"""
from __future__ import annotations

import sys

import torch
from dassl.engine import TrainerX

from .config import DasslSetupError, check_dassl_cfg
from .datasets import test_set_from_dassl


class DasslTestTimeTrainer(TrainerX):
    argtca_trainer = ""   # name in argtca's TRAINER_REGISTRY

    def check_cfg(self, cfg):
        check_dassl_cfg(cfg, type(self).__name__)

    def build_data_loader(self):
        super().build_data_loader()
        self.test_set = test_set_from_dassl(self.cfg, self.dm.dataset)

    def build_model(self):
        from argtca.registry import TRAINER_REGISTRY
        cls = TRAINER_REGISTRY.get(self.argtca_trainer)
        self.argtca = cls(self.cfg, dataset=self.test_set, device=self.device)
        self.argtca.log_result = self._log_result
        self.summary = None

    def _log_result(self, out_dir, header, lines):
        # CoOp's train.py tees stdout into OUTPUT_DIR/log.txt (Dassl's Logger): that logger is the
        # file's one writer. Without it (trainer built by hand) argtca writes <out_dir>/log.txt.
        from dassl.utils.logger import Logger
        if isinstance(sys.stdout, Logger) and getattr(sys.stdout, "file", None) is not None:
            print("\n".join([header] + list(lines) + [f"* output: {out_dir}"]), flush=True)
        else:
            type(self.argtca).log_result(self.argtca, out_dir, header, lines)

    def load_model(self, directory, epoch=None):
        if directory:
            raise DasslSetupError(
                f"--model-dir {directory}: {type(self).__name__} tunes prompts per test image, "
                f"starting every image from the pre-trained CLIP (MODEL.PRETRAINED) and "
                f"TTA.CTX_INIT; there is no trained model to load. Drop --model-dir (and "
                f"--load-epoch); --eval-only is optional")

    def train(self, *args, **kwargs):
        print(f"{type(self).__name__}: test-time adaptation, nothing to train; evaluating the "
              f"{self.cfg.TEST.SPLIT} split")
        return self.test()

    def test(self, split=None):
        if split not in (None, str(self.cfg.TEST.SPLIT)):
            raise DasslSetupError(f"{type(self).__name__}.test(split={split!r}): this trainer "
                                  f"was built for TEST.SPLIT={self.cfg.TEST.SPLIT!r}")
        with torch.enable_grad():   # Dassl's test() is no_grad; test-time tuning needs gradients
            self.summary = self.argtca.test()
        return self.summary["accuracy"]


def make_trainer_class(dassl_name: str, argtca_name: str) -> type:
    cls = type(dassl_name, (DasslTestTimeTrainer,), {
        "argtca_trainer": argtca_name, "__module__": __name__, "__qualname__": dassl_name,
        "__doc__": f"argtca's {argtca_name} as a Dassl trainer."})
    return cls
