"""``python -m argtca.data check``: for each dataset under a data root, present / missing / broken,
what is wrong (layout, split file, missing or unreadable images — counted and named up to a
limit) and the exact fix. It only reads: nothing is written into the data root, and nothing is
downloaded (missing split files and class-name files are looked up in argtca's cache only)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from ..datasets.base import DataError
from .sources import how_to_get

__all__ = ["Report", "check_dataset", "check_root", "evaluated_datasets"]

PRESENT, MISSING, BROKEN = "present", "missing", "broken"


@dataclass
class Report:
    name: str                     # registered class name
    key: str
    status: str = PRESENT
    n_images: int = 0
    notes: List[str] = field(default_factory=list)   # what was found
    fixes: List[str] = field(default_factory=list)   # what to do

    def lines(self) -> List[str]:
        head = f"{self.key:<16} {self.status.upper():<8}"
        if self.status == PRESENT:
            head += f" {self.n_images} test images"
        out = [head]
        out += [f"    {n}" for n in self.notes]
        out += [f"    fix: {f}" for f in self.fixes]
        return out


def evaluated_datasets() -> List[type]:
    """Every registered dataset read from a data root (the generated demo set is not)."""
    from ..datasets import DATASET_REGISTRY
    from ..datasets.base import DatasetBase
    out = []
    for name in DATASET_REGISTRY.registered_names():
        cls = DATASET_REGISTRY.get(name)
        if isinstance(cls, type) and issubclass(cls, DatasetBase) and cls.__name__ != "Demo":
            out.append(cls)
    return out


# fetch's words for a file that is not cached while offline; the doctor sets ARGTCA_OFFLINE
# itself (it never downloads), so where the user did not, its notes say what is true instead
_FETCH_OFFLINE = "is not cached and ARGTCA_OFFLINE is set"
_DOCTOR_OFFLINE = ("is not in argtca's cache (python -m argtca.data check never downloads; "
                   "any run on this dataset fetches it)")


def _user_offline() -> bool:
    from ..fetch import is_offline
    return is_offline()


@contextmanager
def _offline():
    old = os.environ.get("ARGTCA_OFFLINE")
    os.environ["ARGTCA_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("ARGTCA_OFFLINE", None)
        else:
            os.environ["ARGTCA_OFFLINE"] = old


def _dataset_folder_present(cls, root: str) -> bool:
    find = getattr(cls, "find_layout", None)
    if find is not None:
        return find(root) is not None
    return os.path.isdir(os.path.join(root, cls.dataset_dir))


def _shown(paths: Sequence[str], root: str, limit: int) -> str:
    rel = [os.path.relpath(p, root) for p in paths[:limit]]
    more = f" (and {len(paths) - limit} more)" if len(paths) > limit else ""
    return ", ".join(rel) + more


def check_dataset(cls, root: str, split: str = "test", limit: int = 10,
                  open_images: bool = True, workers: int = 8) -> Report:
    from ..config import get_cfg_default
    rep = Report(cls.__name__, getattr(cls, "key", "") or cls.__name__.lower())
    if not _dataset_folder_present(cls, root):
        rep.status = MISSING
        rep.fixes.append(how_to_get(cls, root))
        return rep
    cfg = get_cfg_default()
    cfg.DATASET.ROOT = root
    cfg.DATASET.NAME = cls.__name__
    cfg.DATASET.SPLIT = split
    user_offline = _user_offline()
    try:
        with _offline():   # the doctor never downloads
            ds = cls(cfg, check_files=False)
    except DataError as e:
        rep.status = BROKEN
        msg = str(e).replace("\n", " ")
        rep.notes.append(msg if user_offline else msg.replace(_FETCH_OFFLINE, _DOCTOR_OFFLINE))
        rep.fixes.append(_fix_for(msg, cls, root, user_offline))
        return rep
    split_file = getattr(cls, "split_file", "")
    if split_file and not os.path.isfile(os.path.join(ds.dataset_path, split_file)):
        rep.notes.append(f"{split_file} is not in {ds.dataset_path}; argtca's cached copy is used")
    items = ds.test
    rep.n_images = len(items)
    missing = [d.impath for d in items if not os.path.isfile(d.impath)]
    if missing:
        rep.status = BROKEN
        rep.notes.append(f"{len(missing)} of {len(items)} images listed by the split are missing: "
                         f"{_shown(missing, root, limit)}")
        rep.fixes.append(f"re-extract the images into {ds.image_path} (layout: "
                         f"{how_to_get(cls, root, short=True)})")
    if open_images:
        from ..datasets.images import image_problem
        gone = set(missing)
        present = [d.impath for d in items if d.impath not in gone]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            problems = list(pool.map(image_problem, present))
        bad = [(p, why) for p, why in zip(present, problems) if why]
        if bad:
            rep.status = BROKEN
            shown = "; ".join(f"{os.path.relpath(p, root)} ({why})" for p, why in bad[:limit])
            more = f" (and {len(bad) - limit} more)" if len(bad) > limit else ""
            rep.notes.append(f"{len(bad)} of {len(present)} images cannot be read: {shown}{more}")
            rep.fixes.append("replace or re-download these files (or re-extract the dataset)")
    return rep


def _fix_for(msg: str, cls, root: str, user_offline: bool = False) -> str:
    if _FETCH_OFFLINE in msg:   # a split/class-name file that is neither in the root nor cached
        where = ("unset ARGTCA_OFFLINE (it is set here) and run" if user_offline else "run")
        return (f"{where} any argtca command on this dataset once with network access (the file "
                f"is fetched into argtca's cache), or copy the file as the message says")
    return how_to_get(cls, root, short=True)


def check_root(root: str, names: Optional[Sequence[str]] = None, **kw) -> List[Report]:
    from ..datasets import resolve_dataset_class
    # ImageFolder reads the root itself as the dataset: checked only when named
    classes = ([resolve_dataset_class(n) for n in names] if names else
               [c for c in evaluated_datasets() if not getattr(c, "root_is_dataset", False)])
    return [check_dataset(c, root, **kw) for c in classes]
