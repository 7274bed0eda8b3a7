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

An OOD set that is the in-distribution dataset itself (the same reader; for an ImageFolder, the
same folder), or holds any of its test images, is refused: its images are of the ID classes, so
AUROC is about 50 by construction. An OOD set whose class names are ID class names (in part) is
built, and names them (:attr:`OODSet.shared_classes`): the run writes them to its summary and
log, ``python -m argtca.experiments ood`` refuses it unless ``--allow-shared-classes``, and
``ood.md`` names them.
"""
from __future__ import annotations

import os

from .base import DataError, DatasetBase, Datum

__all__ = ["OOD_LABEL", "OODSet", "ood_dataset", "shared_classnames", "same_dataset"]

OOD_LABEL = -1
# readers whose data is the folder the user names (not a published set): two roots are two sets
_LOCATED = ("ImageFolder",)


def _norm(name: str) -> str:
    """A class name as compared across datasets: case, "_"/"-" and spacing aside."""
    return " ".join(str(name).replace("_", " ").replace("-", " ").lower().split())


def shared_classnames(id_names, ood_names) -> list:
    """The ID class names (as the ID set spells them, in its label order) that are also class
    names of the OOD set."""
    ood = {_norm(c) for c in ood_names}
    return [str(c).replace("_", " ") for c in id_names if _norm(c) in ood]


def same_dataset(base: DatasetBase, ood: DatasetBase) -> str:
    """Why ``ood`` is ``base``'s own data ("" when it is not): the same reader (for an own
    folder, the same folder), or a test image of ``base`` among its images."""
    if type(base) is type(ood):
        if type(base).__name__ not in _LOCATED:
            return f"the in-distribution dataset itself ({base.name})"
        a, b = (os.path.realpath(str(getattr(d, "root", "") or "")) for d in (base, ood))
        if a == b:
            return f"the in-distribution folder itself ({a})"
    mine = {os.path.realpath(d.impath) for d in base.test}
    both = [d.impath for d in ood.test if os.path.realpath(d.impath) in mine]
    if both:
        return (f"{len(both)} of its {len(ood.test)} images in-distribution test images "
                f"(e.g. {both[0]})")
    return ""


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
        # the ID class names the OOD set names too: its images are (in part) not OOD
        self.shared_classes = shared_classnames(base.classnames, ood.classnames)
        self.n_ood_classes = len(ood.classnames)

    def shared_line(self) -> str:
        """One line naming the shared class names ("" when there is none)."""
        if not self.shared_classes:
            return ""
        names = ", ".join(self.shared_classes[:5]) + (
            f", and {len(self.shared_classes) - 5} more" if len(self.shared_classes) > 5 else "")
        return (f"{len(self.shared_classes)} of the {self.n_ood_classes} class names of the OOD "
                f"set {self.ood.name} are class names of {self.base.name} ({names}): those "
                f"images are not out of distribution")

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
    why = same_dataset(base, ood)
    if why:
        where = (f"root {ocfg.DATASET.ROOT!r}, " if str(ocfg.DATASET.ROOT) else "") + (
            f"split {ocfg.DATASET.SPLIT!r}")
        raise DataError(f"DATASET.OOD.NAME={node.NAME!r} ({where}) is {why}: its images are of the "
                        f"in-distribution classes, so AUROC would be about 50 by construction; "
                        f"give an OOD set of other classes (e.g. dtd, or imagefolder with its "
                        f"own root)")
    return OODSet(base, ood)
