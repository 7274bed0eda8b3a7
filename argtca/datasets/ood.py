"""An OOD-detection test set: another dataset's images classified among this dataset's classes.

MCM (Ming et al., NeurIPS 2022) and TTA-VLM score each image by the maximum softmax probability
of the (adapted) model over the *in-distribution* classes; an OOD image is one of none of them.
So an OOD run is a normal run (``DATASET.NAME`` and every other setting the in-distribution run's)
whose test images are ``DATASET.OOD.NAME``'s, built with its own root, split and size
(``DATASET.OOD.ROOT``/``SPLIT``/``NUM_IMAGES``), each with label -1: its records hold each image's
maximum probability (``conf``), which is the OOD score, and accuracy is 0 by construction
(``p_label`` 0 and the Brier score against the zero vector, trainers/base.py). An ImageFolder OOD
set is read without the in-distribution dataset's ``DATASET.IMAGEFOLDER`` files (its own images,
every one a test image). The views (AugMix or not) are the in-distribution dataset's, as the
adapted model is the in-distribution run's method.
"""
from __future__ import annotations

from .base import DataError, DatasetBase, Datum

__all__ = ["OOD_LABEL", "OODSet", "ood_dataset"]

OOD_LABEL = -1


class OODSet(DatasetBase):
    """``ood``'s test images over ``base``'s classes, each labelled :data:`OOD_LABEL`."""

    def __init__(self, base: DatasetBase, ood: DatasetBase):
        self.base, self.ood = base, ood
        self.fine_grained = base.fine_grained
        # the split file the test images come from (an input file of the run: trainers/base.py)
        self.split_path = getattr(ood, "split_path", "")
        self.key = f"{base.key or base.name.lower()}-ood-{ood.key or ood.name.lower()}"
        items = [Datum(d.impath, OOD_LABEL, "") for d in ood.test]
        super().__init__(items, base.classnames, root=getattr(ood, "root", "") or "")

    @property
    def name(self) -> str:
        return f"{self.ood.name} (OOD for {self.base.name})"


def ood_dataset(cfg, base: DatasetBase, resolve_dataset_class) -> OODSet:
    """``DATASET.OOD.NAME``'s images (built like any dataset from a copy of ``cfg`` with the OOD
    node's name, root, split and size, its class found by ``resolve_dataset_class``, the
    package's own lookup) over ``base``'s classes."""
    node = cfg.DATASET.OOD
    ocfg = cfg.clone()
    ocfg.defrost()
    ocfg.DATASET.NAME = str(node.NAME)
    ocfg.DATASET.ROOT = str(node.ROOT or cfg.DATASET.ROOT)
    ocfg.DATASET.SPLIT = str(node.SPLIT)
    ocfg.DATASET.NUM_IMAGES = int(node.NUM_IMAGES)
    ocfg.DATASET.IMAGEFOLDER.CLASSNAMES = ""
    ocfg.DATASET.IMAGEFOLDER.SPLIT_FILE = ""
    ocfg.DATASET.OOD.NAME = ""
    ocfg.freeze()
    try:
        ood = resolve_dataset_class(ocfg.DATASET.NAME)(ocfg)
    except KeyError as e:
        raise DataError(f"DATASET.OOD.NAME={node.NAME!r}: {e.args[0] if e.args else e}") from None
    except DataError as e:
        raise DataError(f"the OOD set (DATASET.OOD.NAME={node.NAME!r}): {e}") from None
    if not ood.test:
        raise DataError(f"the OOD set (DATASET.OOD.NAME={node.NAME!r}, root "
                        f"{ocfg.DATASET.ROOT!r}) holds no test image; check DATASET.OOD.ROOT")
    return OODSet(base, ood)
