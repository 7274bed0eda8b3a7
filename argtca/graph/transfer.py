"""One graph for every dataset (the paper's future work: "cross-dataset graph transfer to remove the
per-dataset offline build requirement").

``TRAINER.ARGTCA.GAT.TRAIN_ON`` names attribute vocabularies; the GAT is trained once on the graph
of their union (SupCon over their classes, the same training as per-dataset Phase 1) and stored in
the Phase-1 store (``<store>/gat-...pt``: the GAT's weights). A dataset then gets its node
embeddings from that frozen GAT applied to its own graph — no training — stored under its own key
(``<dataset>-transfer-...``). The GAT is inductive (GATConv weights do not depend on the nodes), so
this is a forward pass.

Entries of TRAIN_ON:

* ``target``: the evaluated dataset's own attribute file;
* ``tca:all-but-target``: every TCA attribute file (argtca.fetch) except the target dataset's;
* a dataset name with a TCA file (``Caltech101``, ``OxfordPets``, ...): that file, fetched on
  first use;
* a path (``builtin:`` allowed) to a TCA-format JSON.

The union takes each class's attributes from every vocabulary that has the class (same name up to
case and ``_``), the target's classes first in the dataset's order, then the others in file order.
So ``TRAIN_ON [target]`` (or the target's own file) builds exactly the per-dataset graph and selects
exactly what per-dataset training selects.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from argtca.graph.gat import AttributeGAT, incoming_attention, source_attention
from argtca.graph.nodes import (AttributeNodes, GraphInputError, build_graph, make_nodes,
                                node_text)

ALL_BUT_TARGET = "tca:all-but-target"


def _norm(name: str) -> str:
    return " ".join(str(name).replace("_", " ").lower().split())


def resolve_sources(train_on: Sequence[str], target_file: str, target_dataset: str
                    ) -> List[Tuple[str, str]]:
    """TRAIN_ON entries -> [(label, path)] (files fetched on first use; errors name the entry)."""
    from argtca.fetch import TCA_ATTRIBUTE_FILES, fetch
    from argtca.utils.paths import resolve_builtin
    out: List[Tuple[str, str]] = []
    for entry in train_on:
        e = str(entry).strip()
        if e == "target":
            out.append(("target", target_file))
        elif e == ALL_BUT_TARGET:
            own = TCA_ATTRIBUTE_FILES.get(target_dataset)
            for ds, fname in sorted(TCA_ATTRIBUTE_FILES.items()):
                if fname != own:
                    out.append((ds, str(fetch(fname))))
        elif e in TCA_ATTRIBUTE_FILES:
            out.append((e, str(fetch(TCA_ATTRIBUTE_FILES[e]))))
        else:
            path = os.path.expanduser(resolve_builtin(e))
            if not os.path.isfile(path):
                raise GraphInputError(
                    f"TRAINER.ARGTCA.GAT.TRAIN_ON entry {e!r} is not a file, a dataset with a TCA "
                    f"attribute file ({', '.join(sorted(TCA_ATTRIBUTE_FILES))}), 'target' or "
                    f"'{ALL_BUT_TARGET}'; fix the entry")
            out.append((os.path.basename(path), path))
    if not out:
        raise GraphInputError("TRAINER.ARGTCA.GAT.TRAIN_ON is empty after resolving its entries")
    for label, path in out:   # at load time: a bad vocabulary fails before any model is built
        read_vocabulary(label, path)
    return out


def read_vocabulary(label: str, path: str) -> Dict[str, List[str]]:
    """``{class: [attributes]}`` of one TRAIN_ON vocabulary (TCA format: class -> one string of
    space-separated attributes; a list of attribute strings is read too). GraphInputError, one
    line naming the file, the classes and their values, for anything else."""
    where = f"TRAINER.ARGTCA.GAT.TRAIN_ON {label}: {path}"
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:   # UnicodeDecodeError is a ValueError
        raise GraphInputError(f"{where}: cannot be read as JSON ({e}); fix the file or the "
                              f"entry") from None
    if not isinstance(data, dict) or not data:
        raise GraphInputError(f"{where} is not a TCA attribute file: expected a non-empty JSON "
                              f"object (class -> 'attr1 attr2 ...'), got "
                              f"{json.dumps(data)[:60]}; fix the file or the entry")
    out: Dict[str, List[str]] = {}
    bad = []
    for cls, value in data.items():
        if isinstance(value, str):
            attrs = value.split()
        elif isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value):
            attrs = [v.strip() for v in value]
        else:
            attrs = None
        if not attrs:
            bad.append(f"{cls!r}: {json.dumps(value)[:40]}")
        else:
            out[cls] = attrs
    if bad:
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        raise GraphInputError(f"{where}: every class needs a string of space-separated "
                              f"attributes (TCA format), but {', '.join(bad[:5])}{more}; fix "
                              f"these values in the file")
    return out


def union_vocabulary(sources: Sequence[Tuple[str, str]], target_classes: Sequence[str],
                     target_attrs: Mapping[str, Sequence[str]]
                     ) -> Tuple[List[str], Dict[str, List[str]]]:
    """(class names, class -> attributes) of the union; target classes first, spelled as the
    dataset spells them; a target class takes the target's own list where the source is the
    target's file."""
    from argtca.attributes import attribute_file_hash
    by_norm: Dict[str, str] = {_norm(c): c for c in target_classes}
    target_hash = None
    lists: Dict[str, List[str]] = {}
    order: List[str] = []
    for label, path in sources:
        data = read_vocabulary(label, path)
        if label == "target":
            target_hash = attribute_file_hash(path)
        same_as_target = label == "target" or (
            target_hash is not None and attribute_file_hash(path) == target_hash)
        for cls, value in data.items():
            name = by_norm.get(_norm(cls), cls)
            if same_as_target and name in target_attrs:
                attrs = list(target_attrs[name])
            else:
                attrs = list(value)
            if name not in lists:
                lists[name] = []
                order.append(name)
            lists[name].extend(attrs)
    first = [c for c in target_classes if c in lists]
    rest = [c for c in order if c not in set(first)]
    return first + rest, {c: lists[c] for c in first + rest}


def _train_payload(nodes: AttributeNodes, cfg_node, identity: Mapping, sources) -> Dict[str, Any]:
    from argtca.attributes import attribute_file_hash
    from argtca.graph.phase1 import H0_KIND, STORE_VERSION, code_sha256, graph_settings
    return json.loads(json.dumps({
        "kind": "transfer-gat", "version": STORE_VERSION, "code_sha256": code_sha256(),
        "backbone": identity.get("backbone"),
        "text_weights_sha256": identity.get("text_weights_sha256"),
        "sources": [{"name": lab, "sha256": attribute_file_hash(p)} for lab, p in sources],
        "classnames": list(nodes.classnames), "nodes": list(nodes.attrs),
        "node_text": node_text("{attribute}", "{classname}"), "h0": H0_KIND,
        "graph": graph_settings(cfg_node)}, sort_keys=True))


def _h0(nodes: AttributeNodes, text_fn) -> torch.Tensor:
    feats = text_fn(nodes.texts)
    if not isinstance(feats, torch.Tensor) or feats.dim() != 2 or feats.shape[0] != nodes.num_nodes:
        raise GraphInputError(f"text_fn must return a [N={nodes.num_nodes}, width] tensor")
    return F.normalize(feats.detach().float().cpu(), dim=1)


def trained_gat(train_nodes: AttributeNodes, text_fn, cfg_node, device: str, store, identity,
                sources, log) -> Tuple[AttributeGAT, Dict[str, Any], Optional[str], bool]:
    """The GAT trained on the union graph: from the store, or trained (and stored)."""
    from argtca.graph.phase1 import train_gat
    from argtca.graph.store import store_key

    def compute():
        h0 = _h0(train_nodes, text_fn)
        ei = build_graph(train_nodes.node_class, train_nodes.attrs, cfg_node.EDGES)
        t0 = time.perf_counter()
        model, curve = train_gat(h0, ei, train_nodes.node_class, cfg_node.GAT, device=device)
        return {"state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "in_dim": int(h0.shape[1]), "loss_curve": curve,
                "seconds": time.perf_counter() - t0,
                "meta": {"device": str(device), "edges": int(ei.shape[1]),
                         "nodes": train_nodes.num_nodes, "classes": len(train_nodes.classnames)}}

    payload = _train_payload(train_nodes, cfg_node, identity, sources)
    key = store_key(payload, "gat-" + "+".join(lab for lab, _ in sources)[:60])
    if store is None:
        d, reused = compute(), False
    else:
        d, reused = store.get_or_compute(key, payload, compute, log=log)
    g = cfg_node.GAT
    model = AttributeGAT(int(d["in_dim"]), hidden=int(g.HIDDEN), heads=int(g.HEADS),
                         dropout=float(g.DROPOUT), self_loops=bool(g.get("SELF_LOOPS", True)),
                         bias=bool(g.get("BIAS", False)))
    model.load_state_dict(d["state"])
    model.to(device).eval()
    if reused:
        log(f"[phase 1] reused the transferred GAT {key}")
    else:
        log(f"[phase 1] trained the transferred GAT on {train_nodes.num_nodes} nodes of "
            f"{len(train_nodes.classnames)} classes ({', '.join(l for l, _ in sources)}), "
            f"{len(d['loss_curve'])} epochs, {float(d['seconds']):.1f} s"
            + (f"; stored as {key}" if store is not None else ""))
    return model, d, (None if store is None else key), reused


def make_transfer_embed(sources: Sequence[Tuple[str, str]], target_classes: Sequence[str],
                        target_attrs: Mapping[str, Sequence[str]]) -> Callable:
    """An ``embed`` for :func:`argtca.graph.phase1.run_phase1`: the target's node embeddings from
    the GAT trained on ``sources`` (frozen; a forward pass on the target's graph)."""

    def embed(nodes: AttributeNodes, text_fn, cfg_node, device: str = "cpu",
              store_dir: Optional[str] = None, identity: Optional[Mapping] = None,
              log: Optional[Callable[[str], None]] = None):
        from argtca.graph.phase1 import H0_KIND, NodeEmbeddings, STORE_VERSION, graph_settings
        from argtca.graph.store import Phase1Store, store_key
        log = log or (lambda msg: None)
        if str(cfg_node.EMBEDDINGS).lower() != "gat":
            raise GraphInputError("TRAINER.ARGTCA.GAT.TRAIN_ON needs TRAINER.ARGTCA.EMBEDDINGS gat "
                                  "(raw embeddings have no graph to transfer)")
        identity = dict(identity or {})
        classes, attrs = union_vocabulary(sources, target_classes, target_attrs)
        train_nodes = make_nodes(classes, attrs, int(cfg_node.NUM_CANDIDATES), min_per_class=1)
        store = Phase1Store(store_dir) if store_dir is not None else None
        model, trained, train_key, _ = trained_gat(train_nodes, text_fn, cfg_node, device, store,
                                                   identity, sources, log)

        def compute():
            h0 = _h0(nodes, text_fn)
            ei = build_graph(nodes.node_class, nodes.attrs, cfg_node.EDGES)
            with torch.no_grad():
                o = model(h0.to(device), ei.to(device))
            return {"h0": h0, "h": o.h.float().cpu().contiguous(),
                    "attention": source_attention(o.attention, nodes.num_nodes),
                    "attention_incoming": incoming_attention(o.attention, nodes.num_nodes),
                    "loss_curve": list(trained["loss_curve"]), "seconds": 0.0,
                    "meta": {"device": str(device), "edges": int(ei.shape[1]),
                             "transferred_from": train_key}}

        payload = json.loads(json.dumps({
            "kind": "transfer-embed", "version": STORE_VERSION, "trained": train_key,
            "trained_payload": _train_payload(train_nodes, cfg_node, identity, sources),
            "identity": identity, "classnames": list(nodes.classnames), "nodes": list(nodes.attrs),
            "node_text": node_text("{attribute}", "{classname}"), "h0": H0_KIND,
            "graph": graph_settings(cfg_node)}, sort_keys=True))
        key = path = None
        if store is None:
            d, reused = compute(), False
        else:
            key = store_key(payload, f"{identity.get('dataset') or 'graph'}-transfer")
            path = store.path(key)
            d, reused = store.get_or_compute(key, payload, compute, log=log)
        log(f"[phase 1] {'reused' if reused else 'embedded'} {nodes.num_nodes} nodes with the "
            f"frozen transferred GAT (no training)" + (f"; stored as {key}" if key else ""))
        return NodeEmbeddings(emb=d["h"], h0=d["h0"], attention=d["attention"],
                              attention_incoming=d.get("attention_incoming"),
                              loss_curve=list(d["loss_curve"]), seconds=0.0,
                              store_key=key, store_file=path, reused=reused)

    return embed
