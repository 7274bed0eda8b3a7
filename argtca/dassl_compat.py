"""Registration into Dassl.pytorch when it is importable (it is on GitHub, not PyPI).

    import argtca.dassl_compat  # registers trainers, datasets and the ClassificationCalib evaluator

Then CoOp's ``train.py`` flow works: ``extend_cfg(cfg)`` adds argtca's keys to Dassl's config,
``--trainer ArgTCA`` builds the Dassl trainer below, and ``trainer.test()`` runs test-time tuning
(Dassl's ``SimpleTrainer.test`` is decorated with ``@torch.no_grad()``; ours re-enables grad).
Dassl's ``TEST.EVALUATOR ClassificationCalib`` prints ``* accuracy:`` and ``* ece:`` lines that
CoOp's ``parse_test_res.py --keyword ece`` reads.
"""
from __future__ import annotations

import torch

from argtca.config import get_cfg_default

try:  # pragma: no cover - exercised only where dassl is installed
    from dassl.data.datasets import DATASET_REGISTRY as D_DATASETS, DatasetBase as DDatasetBase, Datum as DDatum
    from dassl.engine import TRAINER_REGISTRY as D_TRAINERS, TrainerX
    from dassl.evaluation import EVALUATOR_REGISTRY as D_EVALUATORS, Classification
    HAVE_DASSL = True
except ImportError:  # dassl absent: this module is a no-op
    HAVE_DASSL = False


def extend_cfg(cfg) -> None:
    """Add argtca's nodes/keys that a Dassl config lacks (values from argtca.config)."""
    ours = get_cfg_default()

    def merge(dst, src):
        for k, v in src.items():
            if k not in dst:
                dst[k] = v.clone() if hasattr(v, "clone") else v
            elif hasattr(v, "items") and hasattr(dst[k], "items"):
                merge(dst[k], v)
    was_frozen = cfg.is_frozen()
    cfg.defrost()
    merge(cfg, ours)
    if was_frozen:
        cfg.freeze()


if HAVE_DASSL:  # pragma: no cover
    import argtca.trainers  # noqa: F401
    from argtca.datasets import build_dataset
    from argtca.metrics import compute_metrics
    from argtca.registry import DATASET_REGISTRY, TRAINER_REGISTRY

    @D_EVALUATORS.register()
    class ClassificationCalib(Classification):
        """Dassl's Classification evaluator plus ECE (20 equal-width bins, C-TPT's convention)."""

        def __init__(self, cfg, lab2cname=None, **kwargs):
            super().__init__(cfg, lab2cname=lab2cname, **kwargs)
            self._conf = []

        def reset(self):
            super().reset()
            self._conf = []

        def process(self, mo, gt):
            super().process(mo, gt)
            probs = mo if torch.allclose(mo.sum(1), torch.ones_like(mo[:, 0]), atol=1e-3) else mo.softmax(1)
            self._conf.extend(probs.max(1)[0].tolist())

        def evaluate(self):
            results = super().evaluate()
            m = compute_metrics(self._conf, self._y_pred, self._y_true)
            results["ece"] = m["ece"]
            print(f"* ece: {m['ece']:.2f}%")
            return results

    def _dassl_dataset(name):
        def __init__(self, cfg):
            extend_cfg(cfg)
            ds = build_dataset(cfg)
            items = [DDatum(impath=d.impath, label=d.label, classname=d.classname) for d in ds.test]
            self._argtca_dataset = ds
            DDatasetBase.__init__(self, train_x=items, val=items, test=items)
        return type(name, (DDatasetBase,), {"__init__": __init__})

    for _name in DATASET_REGISTRY.registered_names():
        _cls = DATASET_REGISTRY.get(_name)
        if _cls.__name__ not in D_DATASETS.registered_names():
            D_DATASETS.register(_dassl_dataset(_cls.__name__))

    class DasslTestTimeTrainer(TrainerX):
        """A Dassl TrainerX whose ``test`` is argtca's episodic test-time tuning."""
        argtca_trainer = None

        def __init__(self, cfg):
            extend_cfg(cfg)
            super().__init__(cfg)

        def build_data_loader(self):
            self._ds = build_dataset(self.cfg)
            self.lab2cname = dict(enumerate(self._ds.classnames))
            self.num_classes = len(self._ds.classnames)
            self.train_loader_x = self.val_loader = self.test_loader = None

        def build_model(self):
            self._inner = TRAINER_REGISTRY.get(self.argtca_trainer)(self.cfg, dataset=self._ds,
                                                                     device=self.device)

        def train(self, *args, **kwargs):
            print("Test-time adaptation: nothing to train; run with --eval-only / --no-train")

        def test(self, split=None):
            with torch.enable_grad():
                summary = self._inner.test()
            return summary["accuracy"]

    for _name in TRAINER_REGISTRY.registered_names():
        _cls = TRAINER_REGISTRY.get(_name)
        if _cls.__name__ not in D_TRAINERS.registered_names():
            D_TRAINERS.register(type(_cls.__name__, (DasslTestTimeTrainer,),
                                     {"argtca_trainer": _cls.__name__}))
