"""Data doctor and downloader.

    python -m argtca.data check [DATASET ...] --root $DATA  # present / missing / broken + fix
    python -m argtca.data download DATASET --root $DATA     # torchvision's downloader, CoOp layout
    python -m argtca.data list                              # datasets, layouts, downloadable?

``check`` never writes into the data root and never downloads; exit status 0 when every dataset
checked is present and sound, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..datasets.base import DataError
from ..errors import print_bad_input


def _root(value: str) -> str:
    value = value or os.environ.get("DATA", "")
    if not value:
        raise SystemExit("error: no data root: pass --root /path/to/data or set $DATA")
    return os.path.abspath(os.path.expanduser(value))


def list_table(classes, sources) -> str:
    """``list``: a line per dataset, the embedded demo first; the columns as wide as their
    longest entry, the layout (of any length) last so that it never shifts the others."""
    rows = [("demo", "embedded", "none: generated into $ARGTCA_CACHE on first use")]
    for cls in classes:
        src = sources.get(cls.__name__)
        how = ("yours" if cls.key == "imagefolder" else
               f"download (torchvision {src.torchvision})" if src and src.torchvision
               else "manual")
        rows.append((cls.key, how, src.layout if src else "?"))
    head = ("dataset", "source", "layout under the data root (--root or $DATA)")
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(2)]
    lines = [f"{a:<{w[0]}}  {b:<{w[1]}}  {c}".rstrip() for a, b, c in [head, *rows]]
    return "\n".join(lines + [
        "download: python -m argtca.data download DATASET --root DATA; manual: python -m "
        "argtca.data check DATASET --root DATA says where to get it"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m argtca.data", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="check datasets under the data root (read-only)")
    c.add_argument("datasets", nargs="*", help="keys or class names (default: all)")
    c.add_argument("--root", default="", help="data root (default $DATA)")
    c.add_argument("--split", default="test")
    c.add_argument("--limit", type=int, default=10, help="files named per problem")
    c.add_argument("--no-open", action="store_true", help="do not open the images (faster)")
    c.add_argument("--present-only", action="store_true",
                   help="with no DATASET given, report only datasets whose folder exists")
    d = sub.add_parser("download", help="download a dataset with torchvision into CoOp's layout")
    d.add_argument("dataset")
    d.add_argument("--root", default="", help="data root (default $DATA)")
    sub.add_parser("list", help="datasets, their layout and whether they can be downloaded")
    args = p.parse_args(argv)

    from ..datasets import resolve_dataset_class
    from .doctor import MISSING, PRESENT, check_root, evaluated_datasets
    from .sources import SOURCES
    try:
        if args.cmd == "list":
            print(list_table(evaluated_datasets(), SOURCES))
            return 0
        root = _root(args.root)
        if args.cmd == "download":
            from .download import download
            cls = resolve_dataset_class(args.dataset)
            layout = download(cls, root)
            print(f"{cls.key}: laid out as {os.path.join(root, '')}{layout}")
            print(f"check it with: python -m argtca.data check {cls.key} --root {root}")
            return 0
        if not os.path.isdir(root):
            raise DataError(f"data root {root} does not exist; create it and download or copy the "
                            f"datasets into it (python -m argtca.data list)")
        reports = check_root(root, args.datasets or None, split=args.split, limit=args.limit,
                             open_images=not args.no_open)
        if args.present_only and not args.datasets:
            reports = [r for r in reports if r.status != MISSING]
        print(f"data root: {root}")
        for r in reports:
            print("\n".join(r.lines()))
        return 0 if all(r.status == PRESENT for r in reports) else 1
    except (DataError, KeyError) as e:
        return print_bad_input(e)


if __name__ == "__main__":
    sys.exit(main())
