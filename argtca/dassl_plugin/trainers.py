"""argtca's test-time trainers as Dassl trainers.

Each is a Dassl ``TrainerX`` whose data come from Dassl's ``DataManager`` (the dataset
``DATASET.NAME`` names) and whose ``test()`` runs the argtca trainer of the same method on the
split's Datum list with argtca's own multi-view loader. Nothing is trained: ``train()`` (CoOp's
driver without ``--eval-only``) runs the test-time evaluation, and so does ``--eval-only``;
``--model-dir``/``--load-epoch`` (with ``--eval-only``, as CoOp's train.py reads them) name a CoOp
run whose learned context starts the tuning (``TTA.CTX_CHECKPOINT``; argtca/models/coop_ckpt.py).
"""
from __future__ import annotations

import sys

import torch
from dassl.engine import TrainerX

from .config import DasslSetupError, check_dassl_cfg, plugin_names
from .datasets import test_set_from_dassl


class DasslTestTimeTrainer(TrainerX):
    argtca_trainer = ""   # name in argtca's TRAINER_REGISTRY

    def check_cfg(self, cfg):
        check_dassl_cfg(cfg, type(self).__name__)

    def build_data_loader(self):
        super().build_data_loader()
        self.test_set = test_set_from_dassl(self.cfg, self.dm.dataset)

    def build_model(self):
        from argtca.config.methods import drop_foreign_nodes
        from argtca.plugins import loaded_plugin_files
        from argtca.registry import TRAINER_REGISTRY

        cls = TRAINER_REGISTRY.get(self.argtca_trainer)
        cfg = self.cfg.clone()   # as argtca.run sets it up: other plug-ins' nodes left out
        cfg.defrost()
        drop_foreign_nodes(cfg, keep=cls)
        cfg.freeze()
        self.argtca = cls(cfg, dataset=self.test_set, device=self.device)
        # the plug-in files enter the fingerprint as under argtca.run --plugin
        self.argtca.plugin_files = loaded_plugin_files(plugin_names())
        if hasattr(self.argtca, "val_dataset"):   # temperature scaling: DataManager's val split
            cfg = self.cfg.clone()
            cfg.defrost()
            cfg.TEST.SPLIT = str(cfg.TRAINER.TS.VAL_SPLIT)
            cfg.DATASET.NUM_IMAGES = int(cfg.TRAINER.TS.VAL_IMAGES)
            if str(cfg.TRAINER.TS.FIT) == "val":
                self.argtca.val_set = test_set_from_dassl(cfg, self.dm.dataset)
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
        """CoOp's ``--model-dir``/``--load-epoch``: the learned context of a CoOp run (its
        ``prompt_learner/model.pth.tar-<epoch>``, or ``model-best.pth.tar`` without an epoch)
        starts every image's tuning; it becomes ``TTA.CTX_CHECKPOINT``/``_EPOCH`` of the run (so
        its fingerprint and summary name it). Only the generic context ``ctx`` is read."""
        self._model_dir_applied = True
        if not directory:
            return
        from argtca.models.coop_ckpt import CoopCheckpointError
        cfg = self.argtca.cfg.clone()
        cfg.defrost()
        cfg.TTA.CTX_CHECKPOINT = str(directory)
        cfg.TTA.CTX_CHECKPOINT_EPOCH = int(epoch or 0)
        cfg.freeze()
        self.argtca.cfg = cfg
        try:
            self.argtca.load_initial_context()
        except CoopCheckpointError as e:
            raise DasslSetupError(f"--model-dir {directory}"
                                  f"{f' --load-epoch {epoch}' if epoch else ''}: {e}") from None
        c = self.argtca.coop_context
        print(f"{type(self).__name__}: initial context from CoOp's {c['file']} "
              f"(epoch {c['epoch']}, {c['ctx'].shape[0]} vectors)")

    def _refuse_ignored_model_dir(self) -> None:
        # CoOp's train.py calls load_model only with --eval-only; without it --model-dir would be
        # silently ignored
        if getattr(self, "_model_dir_applied", False):
            return
        argv = list(sys.argv)
        for i, a in enumerate(argv):
            if a == "--model-dir" and i + 1 < len(argv) and argv[i + 1].strip():
                raise DasslSetupError(
                    f"--model-dir {argv[i + 1]}: CoOp's train.py reads it only with --eval-only; "
                    f"add --eval-only (or set TTA.CTX_CHECKPOINT {argv[i + 1]})")

    def train(self, *args, **kwargs):
        self._refuse_ignored_model_dir()
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
