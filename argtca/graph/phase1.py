"""ArgTCA Phase 1: attribute graph -> (trained) node embeddings -> selected attributes.

``run_phase1`` is the entry point; ``embed_nodes`` and ``select_nodes`` are its two halves (use
them to apply several selectors to one trained graph, as ``argtca.select_attributes`` does).

Cache: the result is written to ``<cache_dir>/phase1-<fingerprint>.json`` where the fingerprint is
the sha256 (first 16 hex digits) of the caller's ``cache_key`` (dataset, attribute-file hash,
backbone, ...), every phase-1 setting of TRAINER.ARGTCA, the class names and the candidate
attributes. A file whose stored key does not match exactly (or that cannot be read) is recomputed
and overwritten: it is a cache, nothing else is kept in it. Different settings get different
files, so switching selectors or seeds does not discard earlier results.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from argtca.engine.records import write_json
from argtca.graph.gat import AttributeGAT, source_attention
from argtca.graph.nodes import AttributeNodes, GraphInputError, build_graph, make_nodes
from argtca.graph.supcon import supcon_loss

__all__ = ["NodeEmbeddings", "train_gat", "embed_nodes", "select_nodes", "run_phase1",
           "phase1_settings", "CACHE_VERSION"]

CACHE_VERSION = 1
NO_EMBEDDING_SELECTORS = ("tca", "random")  # need neither text features nor a trained graph
TextFn = Callable[[List[str]], Tensor]


@dataclass
class NodeEmbeddings:
    emb: Tensor                        # [N, D] the embeddings selectors see (h^L or h0)
    h0: Tensor                         # [N, width] l2-normalised text features
    attention: Optional[Tensor] = None  # [N] source attention (None without a GAT)
    loss_curve: List[float] = field(default_factory=list)
    seconds: float = 0.0               # GAT training time


def phase1_settings(cfg_node) -> Dict[str, Any]:
    """Every TRAINER.ARGTCA key that changes Phase 1's output (a plain dict)."""
    g = cfg_node.GAT
    return {
        "NUM_ATTRIBUTES": int(cfg_node.NUM_ATTRIBUTES),
        "NUM_CANDIDATES": int(cfg_node.NUM_CANDIDATES),
        "SELECTOR": str(cfg_node.SELECTOR).lower(),
        "SELECTOR_SEED": int(cfg_node.SELECTOR_SEED),
        "JOINT_WEIGHT": float(cfg_node.JOINT_WEIGHT),
        "EMBEDDINGS": str(cfg_node.EMBEDDINGS).lower(),
        "EDGES": str(cfg_node.EDGES).lower(),
        "GAT": {"HEADS": int(g.HEADS), "HIDDEN": int(g.HIDDEN), "DROPOUT": float(g.DROPOUT),
                "EPOCHS": int(g.EPOCHS), "LR": float(g.LR), "TAU": float(g.TAU),
                "LOSS_ON": str(g.LOSS_ON).lower(), "SEED": int(g.SEED)},
    }


def _check_settings(s: Dict[str, Any]) -> None:
    if s["EMBEDDINGS"] not in ("gat", "raw"):
        raise GraphInputError(f"TRAINER.ARGTCA.EMBEDDINGS={s['EMBEDDINGS']!r}: use gat or raw")
    if s["GAT"]["LOSS_ON"] not in ("z", "h"):
        raise GraphInputError(f"TRAINER.ARGTCA.GAT.LOSS_ON={s['GAT']['LOSS_ON']!r}: use z or h")
    if not 1 <= s["NUM_ATTRIBUTES"] <= s["NUM_CANDIDATES"]:
        raise GraphInputError(
            f"TRAINER.ARGTCA.NUM_ATTRIBUTES (M'={s['NUM_ATTRIBUTES']}) must be between 1 and "
            f"NUM_CANDIDATES (M={s['NUM_CANDIDATES']}); lower NUM_ATTRIBUTES or raise "
            f"NUM_CANDIDATES.")


def train_gat(h0: Tensor, edge_index: Tensor, node_class: Tensor, gat_cfg,
              device: str = "cpu") -> Tuple[AttributeGAT, List[float]]:
    """Full-graph SupCon training with Adam; seeded by GAT.SEED without touching the global RNG.
    Returns the model in eval mode and the per-epoch loss."""
    dev = torch.device(device)
    devices = [dev.index if dev.index is not None else torch.cuda.current_device()] \
        if dev.type == "cuda" else []
    x, ei, y = h0.to(dev), edge_index.to(dev), node_class.to(dev)
    curve: List[float] = []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(gat_cfg.SEED))
        model = AttributeGAT(x.shape[1], hidden=int(gat_cfg.HIDDEN), heads=int(gat_cfg.HEADS),
                             dropout=float(gat_cfg.DROPOUT)).to(dev)
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


def embed_nodes(nodes: AttributeNodes, text_fn: TextFn, cfg_node, device: str = "cpu"
                ) -> NodeEmbeddings:
    """h0 = normalize(text_fn(node texts)); EMBEDDINGS=raw returns h0, gat trains the GAT on
    the EDGES graph and returns h^L and the source attention of an eval-mode forward."""
    feats = text_fn(nodes.texts)
    if not isinstance(feats, Tensor) or feats.dim() != 2 or feats.shape[0] != nodes.num_nodes:
        raise GraphInputError(f"text_fn must return a [N={nodes.num_nodes}, width] tensor, got "
                              f"{getattr(feats, 'shape', type(feats))}")
    h0 = F.normalize(feats.detach().float().cpu(), dim=1)
    if str(cfg_node.EMBEDDINGS).lower() == "raw":
        return NodeEmbeddings(emb=h0, h0=h0)
    ei = build_graph(nodes.node_class, nodes.attrs, cfg_node.EDGES)
    t0 = time.perf_counter()
    model, curve = train_gat(h0, ei, nodes.node_class, cfg_node.GAT, device=device)
    secs = time.perf_counter() - t0
    with torch.no_grad():
        out = model(h0.to(device), ei.to(device))
    att = source_attention(out.attention, nodes.num_nodes)
    return NodeEmbeddings(emb=out.h.float().cpu(), h0=h0, attention=att, loss_curve=curve,
                          seconds=secs)


def select_nodes(nodes: AttributeNodes, emb: Optional[Tensor], selector: str, m_prime: int,
                 seed: int = 42, weight: float = 0.5) -> Dict[int, List[Tuple[int, float]]]:
    """Apply a registered selector (``emb`` may be None for tca/random)."""
    from argtca.selectors import SELECTOR_REGISTRY  # imports every selector module
    fn = SELECTOR_REGISTRY.get(selector)
    return fn(emb, nodes.node_class, nodes.attrs, m_prime, seed=seed, weight=weight)


def _canonical(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))


def _fingerprint(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def run_phase1(classnames: Sequence[str], attributes: Mapping[str, Sequence[str]],
               text_fn: TextFn, cfg_node, cache_dir: Optional[str] = None,
               cache_key: Optional[dict] = None, device: str = "cpu") -> Dict[str, Any]:
    """Select M' attributes per class with TRAINER.ARGTCA settings ``cfg_node``.

    ``attributes``: class -> candidate list (deduped; the graph takes the first NUM_CANDIDATES
    distinct ones). ``text_fn``: texts -> [N, width] features (e.g. CLIP's EOS hidden state);
    not called for the ``tca`` and ``random`` selectors, which need no graph. Returns (and,
    with ``cache_dir``, writes/reuses, see the module docstring) a dict with keys: ``selected``
    {class: [attr]}, ``scores`` {class: [float]}, ``attention`` {class: {attr: score}} ({}
    without a GAT),
    ``loss_curve`` [float], ``classnames``, ``selected_by_index`` [[attr]] (robust to repeated
    class names), ``candidates`` {class: [attr]}, ``settings``, ``cache_key``, ``fingerprint``,
    ``seconds`` {"gat_train", "total"}, ``cache_file`` and ``cached`` (bool).
    """
    t_start = time.perf_counter()
    settings = phase1_settings(cfg_node)
    _check_settings(settings)
    nodes = make_nodes(classnames, attributes, settings["NUM_CANDIDATES"])
    candidates = {c: nodes.attrs[k * nodes.num_candidates:(k + 1) * nodes.num_candidates]
                  for k, c in enumerate(classnames)}
    key = _canonical(cache_key or {})
    fp = _fingerprint({"version": CACHE_VERSION, "cache_key": key, "settings": settings,
                       "classnames": list(classnames), "candidates": nodes.attrs})
    path = os.path.join(cache_dir, f"phase1-{fp}.json") if cache_dir else None
    if path and os.path.isfile(path):
        try:
            with open(path) as f:
                cached = json.load(f)
            if (cached.get("version") == CACHE_VERSION and cached.get("fingerprint") == fp
                    and cached.get("cache_key") == key and cached.get("settings") == settings
                    and cached.get("classnames") == list(classnames)):
                cached["cached"] = True
                cached["cache_file"] = path
                return cached
        except (OSError, json.JSONDecodeError):
            pass  # unreadable cache: recompute and overwrite

    selector = settings["SELECTOR"]
    if selector in NO_EMBEDDING_SELECTORS:
        ne = None
    else:
        ne = embed_nodes(nodes, text_fn, cfg_node, device=device)
    sel = select_nodes(nodes, None if ne is None else ne.emb, selector,
                       settings["NUM_ATTRIBUTES"], seed=settings["SELECTOR_SEED"],
                       weight=settings["JOINT_WEIGHT"])
    selected_by_index = [[nodes.attrs[i] for i, _ in sel[k]] for k in range(len(classnames))]
    result: Dict[str, Any] = {
        "version": CACHE_VERSION,
        "fingerprint": fp,
        "classnames": list(classnames),
        "selected": {c: selected_by_index[k] for k, c in enumerate(classnames)},
        "selected_by_index": selected_by_index,
        "scores": {c: [s for _, s in sel[k]] for k, c in enumerate(classnames)},
        "attention": ({} if ne is None or ne.attention is None else
                      {c: {nodes.attrs[i]: float(ne.attention[i]) for i in nodes.nodes_of(k)}
                       for k, c in enumerate(classnames)}),
        "loss_curve": [] if ne is None else ne.loss_curve,
        "candidates": candidates,
        "settings": settings,
        "cache_key": key,
        "seconds": {"gat_train": 0.0 if ne is None else ne.seconds,
                    "total": time.perf_counter() - t_start},
    }
    if path:
        write_json(path, result)
    result["cached"] = False
    result["cache_file"] = path
    return result
