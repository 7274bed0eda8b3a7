"""ArgTCA Phase 1: attribute graph -> trained node embeddings (stored once) -> selected attributes.

``run_phase1`` is the entry point; ``embed_nodes`` (graph + GAT, or the store) and
``select_nodes`` (a selector on those embeddings) are its two halves.

Store (:mod:`argtca.graph.store`): with ``store_dir`` the embeddings are read from, or trained into,
``<store_dir>/<key>.pt``; the key covers what determines the graph (the caller's ``identity``:
dataset, attribute-file hash, backbone, text-weights hash; plus the class names, the nodes, M,
EMBEDDINGS, EDGES, every GAT setting incl. its seed, and a hash of the Phase-1 code) and nothing
that only selects (selector, M', selector seed, joint weight, alpha/beta, output folder). So div,
disc, joint, random and every alpha/beta point select from the same stored tensors. Training is
seeded by GAT.SEED and bit-for-bit repeatable on the CPU; on CUDA, GATConv's scatter-based softmax
and aggregation use atomics, so two trainings may differ in the last bits (the store makes every
run after the first read the same bytes anyway).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from argtca.graph.gat import AttributeGAT, incoming_attention, source_attention
from argtca.graph.nodes import (AttributeNodes, GraphInputError, build_graph, make_nodes,
                                node_text)
from argtca.graph.store import Phase1Store
from argtca.graph.supcon import supcon_loss

__all__ = ["NodeEmbeddings", "train_gat", "embed_nodes", "select_nodes", "run_phase1",
           "phase1_settings", "graph_settings", "graph_identity", "store_payload", "picked_texts",
           "STORE_VERSION"]

STORE_VERSION = 2
H0_KIND = "CLIP text tower EOS hidden state (after ln_final, before the projection), l2-normalised"
TextFn = Callable[[List[str]], Tensor]


@dataclass
class NodeEmbeddings:
    emb: Tensor                        # [N, D] the embeddings selectors see (h^L or h0)
    h0: Tensor                         # [N, width] l2-normalised text features
    attention: Optional[Tensor] = None  # [N] source attention (None without a GAT)
    attention_incoming: Optional[Tensor] = None  # [N] the appendix's incoming-edge mean
    loss_curve: List[float] = field(default_factory=list)
    seconds: float = 0.0               # GAT training time (when it was trained)
    store_key: Optional[str] = None
    store_file: Optional[str] = None
    reused: bool = False               # read from the store instead of trained


def graph_settings(cfg_node) -> Dict[str, Any]:
    """The TRAINER.ARGTCA keys that determine the embeddings (raw embeddings: no edges, no GAT)."""
    g = cfg_node.GAT
    s: Dict[str, Any] = {"NUM_CANDIDATES": int(cfg_node.NUM_CANDIDATES),
                         "EMBEDDINGS": str(cfg_node.EMBEDDINGS).lower()}
    if s["EMBEDDINGS"] == "gat":
        s["EDGES"] = str(cfg_node.EDGES).lower()
        s["GAT"] = {"HEADS": int(g.HEADS), "HIDDEN": int(g.HIDDEN), "DROPOUT": float(g.DROPOUT),
                    "EPOCHS": int(g.EPOCHS), "LR": float(g.LR), "TAU": float(g.TAU),
                    "LOSS_ON": str(g.LOSS_ON).lower(), "SEED": int(g.SEED),
                    "SELF_LOOPS": bool(g.get("SELF_LOOPS", True)),
                    "BIAS": bool(g.get("BIAS", False))}
    return s


def phase1_settings(cfg_node, selector: Optional[str] = None) -> Dict[str, Any]:
    """Every TRAINER.ARGTCA key that changes Phase 1's output (a plain dict). ``selector``: the
    resolved selector's name (:class:`argtca.selectors.Selector` ``name``); read from
    ``cfg_node.SELECTOR`` only when not given."""
    g = cfg_node.GAT
    extra = {"TRAIN_ON": [str(x) for x in g.get("TRAIN_ON", [])]} if g.get("TRAIN_ON") else {}
    return {
        **extra,
        "NUM_ATTRIBUTES": int(cfg_node.NUM_ATTRIBUTES),
        "NUM_CANDIDATES": int(cfg_node.NUM_CANDIDATES),
        "SELECTOR": str(cfg_node.SELECTOR if selector is None else selector).lower(),
        "SELECTOR_SEED": int(cfg_node.SELECTOR_SEED),
        "JOINT_WEIGHT": float(cfg_node.JOINT_WEIGHT),
        "EMBEDDINGS": str(cfg_node.EMBEDDINGS).lower(),
        "EDGES": str(cfg_node.EDGES).lower(),
        "NODE_ATTENTION": str(cfg_node.get("NODE_ATTENTION", "source")).lower(),
        "GAT": {"HEADS": int(g.HEADS), "HIDDEN": int(g.HIDDEN), "DROPOUT": float(g.DROPOUT),
                "EPOCHS": int(g.EPOCHS), "LR": float(g.LR), "TAU": float(g.TAU),
                "LOSS_ON": str(g.LOSS_ON).lower(), "SEED": int(g.SEED),
                "SELF_LOOPS": bool(g.get("SELF_LOOPS", True)), "BIAS": bool(g.get("BIAS", False))},
    }


def _check_settings(s: Dict[str, Any]) -> None:
    if s["EMBEDDINGS"] not in ("gat", "raw"):
        raise GraphInputError(f"TRAINER.ARGTCA.EMBEDDINGS={s['EMBEDDINGS']!r}: use gat or raw")
    if s["NODE_ATTENTION"] not in ("source", "incoming"):
        raise GraphInputError(f"TRAINER.ARGTCA.NODE_ATTENTION={s['NODE_ATTENTION']!r}: use "
                              f"source or incoming")
    if s["GAT"]["LOSS_ON"] not in ("z", "h"):
        raise GraphInputError(f"TRAINER.ARGTCA.GAT.LOSS_ON={s['GAT']['LOSS_ON']!r}: use h or z")
    if not 1 <= s["NUM_ATTRIBUTES"] <= s["NUM_CANDIDATES"]:
        raise GraphInputError(
            f"TRAINER.ARGTCA.NUM_ATTRIBUTES (M'={s['NUM_ATTRIBUTES']}) must be between 1 and "
            f"NUM_CANDIDATES (M={s['NUM_CANDIDATES']}); lower NUM_ATTRIBUTES or raise "
            f"NUM_CANDIDATES.")


def train_gat(h0: Tensor, edge_index: Tensor, node_class: Tensor, gat_cfg,
              device: str = "cpu") -> Tuple[AttributeGAT, List[float]]:
    """Full-graph SupCon training with Adam; seeded by GAT.SEED without touching the global RNG.
    LOSS_ON h (default): the loss sees h^L/||h^L|| (Eq. 7); z: the projection head's output.
    Returns the model in eval mode and the per-epoch loss."""
    dev = torch.device(device)
    devices = [dev.index if dev.index is not None else torch.cuda.current_device()] \
        if dev.type == "cuda" else []
    x, ei, y = h0.to(dev), edge_index.to(dev), node_class.to(dev)
    curve: List[float] = []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(gat_cfg.SEED))
        model = AttributeGAT(x.shape[1], hidden=int(gat_cfg.HIDDEN), heads=int(gat_cfg.HEADS),
                             dropout=float(gat_cfg.DROPOUT),
                             self_loops=bool(gat_cfg.get("SELF_LOOPS", True)),
                             bias=bool(gat_cfg.get("BIAS", False))).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=float(gat_cfg.LR))
        on_z = str(gat_cfg.LOSS_ON).lower() == "z"
        model.train()
        for _ in range(int(gat_cfg.EPOCHS)):
            out = model(x, ei)
            loss = supcon_loss(out.z if on_z else out.h, y, tau=float(gat_cfg.TAU))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            curve.append(float(loss.detach()))
    model.eval()
    return model, curve


def _compute_embeddings(nodes: AttributeNodes, text_fn: TextFn, cfg_node, device: str
                        ) -> Dict[str, Any]:
    """h0 = normalize(text_fn(node texts)); EMBEDDINGS=raw stops there, gat trains the GAT on
    the EDGES graph and adds h^L and the source attention of an eval-mode forward."""
    feats = text_fn(nodes.texts)
    if not isinstance(feats, Tensor) or feats.dim() != 2 or feats.shape[0] != nodes.num_nodes:
        raise GraphInputError(f"text_fn must return a [N={nodes.num_nodes}, width] tensor, got "
                              f"{getattr(feats, 'shape', type(feats))}")
    h0 = F.normalize(feats.detach().float().cpu(), dim=1)
    out: Dict[str, Any] = {"h0": h0, "h": None, "attention": None,
                           "attention_incoming": None, "loss_curve": [],
                           "seconds": 0.0, "meta": {"device": str(device)}}
    if str(cfg_node.EMBEDDINGS).lower() == "raw":
        return out
    ei = build_graph(nodes.node_class, nodes.attrs, cfg_node.EDGES)
    t0 = time.perf_counter()
    model, curve = train_gat(h0, ei, nodes.node_class, cfg_node.GAT, device=device)
    secs = time.perf_counter() - t0
    with torch.no_grad():
        o = model(h0.to(device), ei.to(device))
    out.update(h=o.h.float().cpu().contiguous(),
               attention=source_attention(o.attention, nodes.num_nodes),
               attention_incoming=incoming_attention(o.attention, nodes.num_nodes),
               loss_curve=curve, seconds=secs)
    out["meta"]["edges"] = int(ei.shape[1])
    return out


def code_sha256() -> str:
    """sha256 of the code that computes the embeddings (graph, GAT, SupCon, training): a change to
    it gives new store keys instead of stale graphs."""
    from argtca.graph import gat, nodes, supcon
    h = hashlib.sha256()
    for part in (gat, nodes, supcon, train_gat, _compute_embeddings):
        h.update(inspect.getsource(part).encode("utf-8"))
    return h.hexdigest()


def graph_identity(dataset: str, attribute_file: str, backbone: str, model) -> Dict[str, str]:
    """What, besides the class names and TRAINER.ARGTCA's graph settings, determines a stored
    graph: the dataset, the attribute file's content, the backbone and its text weights."""
    from argtca.attributes import attribute_file_hash
    from argtca.graph.store import text_weights_sha256
    return {"dataset": str(dataset), "attribute_file_sha256": attribute_file_hash(attribute_file),
            "backbone": str(backbone), "text_weights_sha256": text_weights_sha256(model)}


def store_payload(nodes: AttributeNodes, cfg_node, identity: Optional[Mapping] = None
                  ) -> Dict[str, Any]:
    """What determines the embeddings, as stored and hashed into the key."""
    return json.loads(json.dumps({
        "version": STORE_VERSION,
        "code_sha256": code_sha256(),
        "identity": dict(identity or {}),
        "classnames": list(nodes.classnames),
        "nodes": list(nodes.attrs),
        "node_text": node_text("{attribute}", "{classname}"),
        "h0": H0_KIND,
        "graph": graph_settings(cfg_node),
    }, sort_keys=True))


def embed_nodes(nodes: AttributeNodes, text_fn: TextFn, cfg_node, device: str = "cpu",
                store_dir: Optional[str] = None, identity: Optional[Mapping] = None,
                log: Optional[Callable[[str], None]] = None) -> NodeEmbeddings:
    """The node embeddings of ``cfg_node``'s graph: trained here (no ``store_dir``), or read from
    the store / trained into it (see the module docstring). ``log`` gets one line saying which."""
    log = log or (lambda msg: None)
    if store_dir is None:
        d = _compute_embeddings(nodes, text_fn, cfg_node, device)
        reused, key, path = False, None, None
    else:
        from argtca.graph.store import store_key
        payload = store_payload(nodes, cfg_node, identity)
        key = store_key(payload, (identity or {}).get("dataset") or "graph")
        store = Phase1Store(store_dir)
        path = store.path(key)
        d, reused = store.get_or_compute(
            key, payload, lambda: _compute_embeddings(nodes, text_fn, cfg_node, device), log=log)
    what = "EOS embeddings" if d["h"] is None else "graph"
    if reused:
        log(f"[phase 1] reused stored {what} {key} ({path})")
    else:
        log(f"[phase 1] trained {what} ({nodes.num_nodes} nodes"
            + (f", {d['meta'].get('edges', 0)} edges, {len(d['loss_curve'])} epochs, SupCon "
               f"{d['loss_curve'][0]:.3f} -> {d['loss_curve'][-1]:.3f}, {d['seconds']:.1f} s"
               if d["loss_curve"] else "") + ")"
            + (f"; stored as {key} ({path})" if key else ""))
    emb = d["h0"] if d["h"] is None else d["h"]
    return NodeEmbeddings(emb=emb, h0=d["h0"], attention=d["attention"],
                          attention_incoming=d.get("attention_incoming"),
                          loss_curve=list(d["loss_curve"]), seconds=float(d["seconds"]),
                          store_key=key, store_file=path, reused=reused)


def _resolve(selector: Any) -> Any:
    """A :class:`argtca.selectors.Selector` as given, or the one registered under a name."""
    if isinstance(selector, str):
        from argtca.selectors import resolve_selector  # imports every selector module
        return resolve_selector(selector)
    return selector


def select_nodes(nodes: AttributeNodes, emb: Optional[Tensor], selector: Any, m_prime: int,
                 seed: int = 42, weight: float = 0.5) -> Dict[int, list]:
    """Apply ``selector`` (an :class:`argtca.selectors.Selector`, or a registered name) and return
    its answer checked against the selector contract. ``emb`` may be None for a selector
    registered with ``needs_graph=False``. The selector also gets ``raw`` (each class's list as
    given) for rules that follow the file's order."""
    return _resolve(selector)(emb, nodes.node_class, nodes.attrs, m_prime,
                              classnames=nodes.classnames, seed=seed, weight=weight,
                              raw=nodes.raw or None)


def picked_texts(nodes: AttributeNodes, sel: Mapping[int, Sequence]) -> List[List[str]]:
    """Per class index, the attribute texts of the picks (an entry's third element when given,
    else its node's attribute)."""
    return [[e[2] if len(e) > 2 else nodes.attrs[e[0]] for e in sel[k]]
            for k in range(len(nodes.classnames))]


def run_phase1(classnames: Sequence[str], attributes: Mapping[str, Sequence[str]],
               text_fn: TextFn, cfg_node, store_dir: Optional[str] = None,
               identity: Optional[Mapping] = None, device: str = "cpu",
               log: Optional[Callable[[str], None]] = None, source: Optional[str] = None,
               embed: Optional[Callable[..., NodeEmbeddings]] = None,
               selector: Any = None) -> Dict[str, Any]:
    """Select M' attributes per class with TRAINER.ARGTCA settings ``cfg_node``.

    ``attributes``: class -> its attribute list as given (the graph takes the first M_k = min(M,
    distinct) distinct ones; ``tca`` takes the first M' as given). ``text_fn``: texts -> [N, width]
    features (CLIP's EOS hidden state); not called for a selector registered with
    ``needs_graph=False`` (``tca``, ``random``), for which no graph is built or trained.
    ``selector``: the :class:`argtca.selectors.Selector` the caller resolved from
    ``cfg_node.SELECTOR`` (looked up here when None). ``source``: the attribute file, named in
    errors. Returns a dict: ``selected`` {class: [attr]},
    ``selected_by_index`` [[attr]] (robust to repeated class names), ``scores``, ``attention``
    {class: {attr: score}} ({} without a GAT), ``loss_curve``, ``classnames``, ``candidates``,
    ``short_classes`` {class: M_k}, ``settings``, ``identity``, ``store_key``, ``store_file``,
    ``reused`` (bool; None without a graph), ``seconds`` {"gat_train", "total"}, ``selector``
    (name, module and file that provided it, built-in or plug-in). ``embed``:
    replaces :func:`embed_nodes` (same signature), e.g. the frozen transferred GAT of
    :mod:`argtca.graph.transfer`.
    """
    t_start = time.perf_counter()
    # the name is looked up here only for a caller that passed none (a library call)
    selector = _resolve(str(cfg_node.SELECTOR) if selector is None else selector)
    settings = phase1_settings(cfg_node, selector.name)
    _check_settings(settings)
    nodes = make_nodes(classnames, attributes, settings["NUM_CANDIDATES"],
                       min_per_class=settings["NUM_ATTRIBUTES"], source=source)
    ne = None
    if selector.needs_graph:
        ne = (embed or embed_nodes)(nodes, text_fn, cfg_node, device=device, store_dir=store_dir,
                                    identity=identity, log=log)
    sel = select_nodes(nodes, None if ne is None else ne.emb, selector,
                       settings["NUM_ATTRIBUTES"], seed=settings["SELECTOR_SEED"],
                       weight=settings["JOINT_WEIGHT"])
    selected_by_index = picked_texts(nodes, sel)
    att = None if ne is None else (ne.attention_incoming if settings["NODE_ATTENTION"] ==
                                   "incoming" else ne.attention)
    return {
        "classnames": list(classnames),
        "selected": {c: selected_by_index[k] for k, c in enumerate(classnames)},
        "selected_by_index": selected_by_index,
        "scores": {c: [float(e[1]) for e in sel[k]] for k, c in enumerate(classnames)},
        "attention": ({} if att is None else
                      {c: {nodes.attrs[i]: float(att[i]) for i in nodes.nodes_of(k)}
                       for k, c in enumerate(classnames)}),
        "node_attention": settings["NODE_ATTENTION"],
        "loss_curve": [] if ne is None else ne.loss_curve,
        "candidates": {c: [nodes.attrs[i] for i in nodes.nodes_of(k)]
                       for k, c in enumerate(classnames)},
        "short_classes": dict(nodes.short),
        "settings": settings,
        "selector": selector.describe(),
        "identity": json.loads(json.dumps(dict(identity or {}), sort_keys=True)),
        "store_key": None if ne is None else ne.store_key,
        "store_file": None if ne is None else ne.store_file,
        "reused": None if ne is None else ne.reused,
        "seconds": {"gat_train": 0.0 if ne is None or ne.reused else ne.seconds,
                    "total": time.perf_counter() - t_start},
    }
