"""Side-by-side attribute choices of several selectors (the paper's attribute-comparison table).

    python -m argtca.experiments.select_attributes DATASET [--class NAME ...] [--num-classes 5]
        [--selectors tca,div,disc] [--device cpu|cuda] [--plugin MODULE ...] [KEY VALUE ...]

DATASET is a file of configs/datasets (``caltech101``), a YAML path, or a registered dataset name;
KEY VALUE pairs are config overrides (e.g. ``DATASET.ATTRIBUTE_FILE /path/Caltech101_2_V.json``,
``TRAINER.ARGTCA.EDGES intra``) and come after the flags. Class names are the dataset's (label
order) when the dataset can be read (DATASET.ROOT set, or the demo), otherwise the attribute file's
keys (file order). The embeddings come from the Phase-1 store ($ARGTCA_CACHE/phase1), the same one
``python -m argtca.run`` uses: a graph a run trained is reused here and vice versa (same dataset,
class names, file, weights and graph settings); every selector reads the same embeddings.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from argtca.config.paths import configs_dir
from argtca.errors import print_bad_input

__all__ = ["comparison_table", "build_cfg", "main"]

_CONFIGS = str(configs_dir())


def comparison_table(classes: Sequence[str], selections: Mapping[str, Mapping[str, Sequence[str]]],
                     sep: str = ", ") -> str:
    """Fixed-width text table: one row per class, one column per selector (in the mapping's
    order), each cell the chosen attributes joined by ``sep``. A class a selector lacks shows
    '-'."""
    header = ["class"] + list(selections)
    rows = [[c] + [sep.join(selections[s][c]) if c in selections[s] else "-"
                   for s in selections] for c in classes]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(x.ljust(w) for x, w in zip(cells, widths)).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(header), rule] + [line(r) for r in rows])


def _dataset_yaml(name: str) -> Optional[str]:
    if name.endswith((".yaml", ".yml")) and os.path.isfile(name):
        return name
    folder = os.path.join(_CONFIGS, "datasets")
    if os.path.isdir(folder):
        for f in sorted(os.listdir(folder)):
            if os.path.splitext(f)[0].lower() == name.lower():
                return os.path.join(folder, f)
    return None


def build_cfg(dataset: str, opts: Sequence[str]):
    from argtca.config import get_cfg_default
    cfg = get_cfg_default()
    trainer_yaml = os.path.join(_CONFIGS, "trainers", "argtca.yaml")
    if os.path.isfile(trainer_yaml):
        cfg.merge_from_file(trainer_yaml)
    path = _dataset_yaml(dataset)
    if path:
        cfg.merge_from_file(path)
    else:
        cfg.DATASET.NAME = dataset
    if len(opts) % 2:
        raise SystemExit(f"config overrides come in KEY VALUE pairs, got {list(opts)}")
    cfg.merge_from_list(list(opts))
    cfg.freeze()
    return cfg


def _classnames(cfg, attribute_file: str) -> Tuple[str, List[str]]:
    """(dataset name, class names) as an ArgTCA run sees them (the dataset's, '_' read as space)
    when the dataset can be read (DATASET.ROOT set, or the demo), else the attribute file's keys."""
    name = str(cfg.DATASET.NAME)
    if name:
        from argtca.datasets import resolve_dataset_class
        cls = resolve_dataset_class(name)
        try:
            try:
                ds = cls(cfg, check_files=False)
            except TypeError:
                ds = cls(cfg)
            return ds.name, [c.replace("_", " ") for c in ds.classnames]
        except Exception:  # noqa: BLE001 (no data root: fall back to the file's keys)
            if str(cfg.DATASET.ROOT).strip():
                raise
    from argtca.attributes import load_attributes
    load_attributes(attribute_file, [], 1)  # validates the file (path, JSON, strings)
    with open(attribute_file, encoding="utf-8") as f:
        return name or "attributes", list(json.load(f))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Bad input (unknown dataset, class, selector or key; a broken attribute file or checkpoint)
    is one ``error:`` line and exit 2, as for ``python -m argtca.run``; ARGTCA_DEBUG=1 shows the
    traceback."""
    from argtca.utils.console import quiet_third_party_warnings
    quiet_third_party_warnings()
    try:
        return _main(argv)
    except SystemExit as e:
        if os.environ.get("ARGTCA_DEBUG") or not isinstance(e.code, str):
            raise
        print(e.code if e.code.startswith("error") else f"error: {e.code}", file=sys.stderr)
        return 2
    except (KeyError, ValueError, FileNotFoundError, RuntimeError, OSError) as e:
        if os.environ.get("ARGTCA_DEBUG"):
            raise
        return print_bad_input(e)
    except AssertionError as e:   # yacs asserts on unknown keys given on the command line
        if os.environ.get("ARGTCA_DEBUG"):
            raise
        print(f"error: {e}; every key and its default is in argtca/config/defaults.py",
              file=sys.stderr)
        return 2


def _main(argv: Optional[Sequence[str]] = None) -> int:
    # options only as spelled in full: no shortened word is taken for --plugin
    p = argparse.ArgumentParser(prog="select_attributes", description=__doc__.split("\n")[0],
                                allow_abbrev=False)
    p.add_argument("dataset")
    p.add_argument("--class", dest="classes", action="append", default=[],
                   help="class to show (repeat); default: the first --num-classes")
    p.add_argument("--num-classes", type=int, default=5)
    p.add_argument("--selectors", default="tca,div,disc")
    p.add_argument("--device", default=None, help="default: cuda when USE_CUDA and available")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE (or a .py file) first, e.g. to register your own selector")
    args, opts = p.parse_known_args(argv)  # what is left: KEY VALUE config overrides
    flags = [o for o in opts if o.startswith("--")]
    if flags:
        p.error(f"unknown option(s) {flags}")

    import torch

    from argtca.attributes import load_attributes
    from argtca.graph import embed_nodes, make_nodes, picked_texts, select_nodes
    from argtca.graph.phase1 import graph_identity
    from argtca.graph.store import default_store_dir
    from argtca.attributes.files import attribute_file_for
    from argtca.plugins import load_plugins
    from argtca.selectors import resolve_selector

    load_plugins(args.plugin)
    cfg = build_cfg(args.dataset, opts)
    node = cfg.TRAINER.ARGTCA
    # each name looked up once (unknown -> KeyError listing the names), as a run does
    selectors = {s.strip().lower(): None for s in args.selectors.split(",") if s.strip()}
    selectors = {s: resolve_selector(s) for s in selectors}
    m, m_prime = int(node.NUM_CANDIDATES), int(node.NUM_ATTRIBUTES)
    if m_prime > m:
        raise SystemExit(f"TRAINER.ARGTCA.NUM_ATTRIBUTES={m_prime} (M') exceeds "
                         f"NUM_CANDIDATES={m} (M)")
    attr_file = attribute_file_for(cfg)   # DATASET.ATTRIBUTE_FILE or the dataset's TCA file
    dataset_name, classnames = _classnames(cfg, attr_file)
    attributes = load_attributes(attr_file, classnames, m_prime)   # as the file gives them
    nodes = make_nodes(classnames, attributes, m, min_per_class=m_prime, source=attr_file)
    shown = args.classes or classnames[:args.num_classes]
    unknown = [c for c in shown if c not in classnames]
    if unknown:
        raise SystemExit(f"unknown classes {unknown}; classes are e.g. {classnames[:10]}")

    emb = None
    if any(s.needs_graph for s in selectors.values()):
        from argtca.models.clip import load_clip
        from argtca.models.text import encode_eos_hidden
        device = args.device or ("cuda" if cfg.USE_CUDA and torch.cuda.is_available() else "cpu")
        model, tokenizer = load_clip(cfg, device)

        def text_fn(texts: List[str]):
            with torch.no_grad():
                return encode_eos_hidden(model, tokenizer, texts, device).cpu()

        # the same store (and key) as `python -m argtca.run` with these settings
        identity = graph_identity(dataset_name, attr_file, cfg.MODEL.BACKBONE.NAME, model)
        ne = embed_nodes(nodes, text_fn, node, device=device, store_dir=default_store_dir(),
                         identity=identity, log=lambda msg: print(msg, file=sys.stderr))
        emb = ne.emb
    selections: Dict[str, Dict[str, List[str]]] = {}
    for s, selector in selectors.items():
        sel = select_nodes(nodes, emb if selector.needs_graph else None, selector, m_prime,
                           seed=int(node.SELECTOR_SEED),
                           weight=float(node.JOINT_WEIGHT))
        texts = picked_texts(nodes, sel)
        selections[s] = {c: texts[k] for k, c in enumerate(classnames)}
    print(comparison_table(shown, selections))
    rest = [c for c in classnames if c not in shown]
    if rest and not args.classes:   # the first N by default: what it leaves out, how to see it
        print(f"({len(shown)} of {len(classnames)} classes of {dataset_name} shown; "
              f"--num-classes {len(classnames)} shows every class, --class NAME (repeatable) "
              f"the ones you name; the others: {', '.join(rest[:8])}"
              f"{', ...' if len(rest) > 8 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
