"""ECALP, efficient and context-aware label propagation (Li et al., "Efficient and Context-Aware
Label Propagation for Zero-/Few-Shot Training-Free Adaptation of Vision-Language Model", ICLR
2025; official code Yushu-Li/ECALP, ``main.py`` and ``utils/iterative_label_propagation.py``,
commit 96ddf0b, zero-shot mode ``--mode ZS``).

The graph grows with the stream: its nodes are the K class text features, every image seen so
far (view 0) and the current image once more as the query (the official ``main.py`` passes
``cat(features[:i+1], features[i])``). Per image, ``dynamic_graph_expansion`` updates the edges
incrementally:

- image -> image: the ``K_IMAGE`` nearest nodes by a reweighted cosine, the dimensions of the
  row's feature weighted by the ℓ2-normalised per-dimension variance of the text features
  (``edge_reweighting(..., force_1=True)``); old rows keep a short store of candidates (up to
  ``K_IMAGE + 2``) and meet the two new nodes; a neighbour that was the previous query is dropped;
- image -> text: the ``K_TEXT`` nearest classes by plain cosine.

Every edge weight is raised to the power ``GAMMA`` (negative similarities too, as the code
does), the graph is symmetrised (``W + Wᵀ``, duplicate edges summed) and normalised
``D^-½ W D^-½`` with ``D`` its row sums (+1e-6 after the root). The labels ``Y`` start from the
one-hot class nodes and, for the images, from the previous image's propagated labels kept as
their top-1 value / 5 (the two new rows zero); ``ITERATIONS`` times
``Y_img ← α W̃_img Y + (1 - α) Y0``. The query row's scores ``y`` give the prediction; the official
function returns ``softmax(10000 · y)`` and the recorded probability is
``softmax(OUTPUT_SCALE · y)`` (10000: the official near one-hot output).

The state is the official module's globals plus the features seen: the image features
``feats [n, E]``, the kNN lists and scores of every image row (``knn_im``/``sim_im``, the
candidate store, ``knn_text``/``sim_text``) and the kept labels (``y0_val``/``y0_idx``, the one
non-zero of each row of the official ``Y_0``). The graph is all of the stream so far by
definition, so these tensors grow by a row an image (they start with 0 rows); a step costs
O(n) and a stream O(n²), as the official code.
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch
import torch.nn.functional as F

from argtca.adapters.base import OnlineAdapter, Range
from argtca.config.keys import Key
from argtca.plugins import method

__all__ = ["ECALPAdapter", "DEFAULTS"]

# TRAINER.ECALP: ECALP (Li et al., ICLR 2025), official Yushu-Li/ECALP main.py defaults
# (zero-shot; one set of values for every dataset and backbone)
DEFAULTS = {
    "K_TEXT": Key(3, "class neighbours of an image (--k_text 3)",
                  check=Range(lambda v: v >= 1, ">= 1 (ECALP: 3)", True)),
    "K_IMAGE": Key(8, "image neighbours of an image (--k_image 8)",
                   check=Range(lambda v: v >= 1, ">= 1 (ECALP: 8)", True)),
    "GAMMA": Key(10.0, "edge weight = similarity ** gamma (--gamma 10)",
                 check=Range(lambda v: v > 0, "> 0 (ECALP: 10)")),
    "ALPHA": Key(1.0, "Y <- alpha W Y + (1 - alpha) Y0 (--alpha 1)",
                 check=Range(lambda v: 0 <= v <= 1, "in [0, 1] (ECALP: 1)")),
    "ITERATIONS": Key(3, "propagation steps an image (--num_iterations 3)",
                      check=Range(lambda v: v >= 1, ">= 1 (ECALP: 3)", True)),
    "OUTPUT_SCALE": Key(10000.0, "recorded p = softmax(scale * scores) (official 10000)",
                        check=Range(lambda v: v > 0, "> 0 (ECALP: 10000)")),
}


@method("ecalp", label="ECALP", family="online", defaults=DEFAULTS)
class ECALPAdapter(OnlineAdapter):
    """ECALP's label propagation over the stream's graph (``TRAINER.ECALP``)."""

    @classmethod
    def needs_views(cls, node, cfg) -> bool:
        return False          # one feature an image (the official pre-extracted features)

    @classmethod
    def inactive_reason(cls, node, cfg, n_classes: int) -> str:
        if float(node.ALPHA) == 0:
            return ("ALPHA 0: no label propagates over the graph, so the query's scores are 0 "
                    "and every prediction is uniform")
        return ""

    def __init__(self, node, cfg, text, logit_scale):
        self.k_text, self.k_image = int(node.K_TEXT), int(node.K_IMAGE)
        self.gamma, self.alpha = float(node.GAMMA), float(node.ALPHA)
        self.iterations = int(node.ITERATIONS)
        self.output_scale = float(node.OUTPUT_SCALE)
        super().__init__(node, cfg, text, logit_scale)
        # edge_reweighting's dimension weights: the text features' variance, unit norm
        self.dim_weight = F.normalize(self.text.var(dim=0), p=2, dim=0)

    def reset(self) -> None:
        K, E = self.text.shape
        dev = self.device

        def empty(*shape, dtype=torch.float32):
            return torch.zeros(*shape, dtype=dtype, device=dev)

        self.state = {"feats": empty(0, E),
                      "sim_im": empty(0, 0), "knn_im": empty(0, 0, dtype=torch.long),
                      "sim_store": empty(0, 0), "knn_store": empty(0, 0, dtype=torch.long),
                      "sim_text": empty(0, 0), "knn_text": empty(0, 0, dtype=torch.long),
                      "y0_val": empty(0), "y0_idx": empty(0, dtype=torch.long)}

    def state_shapes(self, position: int) -> Dict[str, Tuple[int, ...]]:
        """After ``position`` images: a row of ``feats`` an image, a row of the others a node of
        the last graph (the images and the query); ``k`` image neighbours a row, the store as
        wide as :meth:`expand` keeps it (k, then k + 1 once, then k + 2)."""
        if not position:
            return {}
        K, E = self.text.shape
        n = position + 1
        k, kt, rows = min(self.k_image, n), min(self.k_text, K), n - 2
        store = k + 1 if n > 2 and rows == k + 1 else (k + 2 if n > 2 and rows > k else k)
        return {"feats": (position, E), "sim_im": (n, k), "knn_im": (n, k),
                "sim_store": (n, store), "knn_store": (n, store), "sim_text": (n, kt),
                "knn_text": (n, kt), "y0_val": (n,), "y0_idx": (n,)}

    # ------------------------------------------------------------------ the official pieces
    def reweighted(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """``edge_reweighting(X=cols, Q=rows, return_full=True, force_1=True)``: [R, C]."""
        q = F.normalize(rows * self.dim_weight, p=2, dim=1)
        return q @ F.normalize(cols, p=2, dim=1).t()

    def expand(self, nodes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``dynamic_graph_expansion`` without few-shot images: the kNN lists of the ``n`` image
        nodes (the last one the query) updated in the state; returns (knn, sim) of all K + n
        rows, the class rows empty (-1, 0)."""
        st = self.state
        n, K = nodes.shape[0], self.text.shape[0]
        k = min(self.k_image, n)
        if n == 2:                                     # the stream's first image
            sim_im, knn_im = self.reweighted(nodes, nodes).topk(k, dim=1)
            store_s, store_k = sim_im.clone(), knn_im.clone()
        else:
            cr = self.reweighted(nodes, nodes[-2:]).t()                    # [2, n]
            sim_new, knn_new = cr.topk(k, dim=1)
            idx = torch.full((n - 2, 1), n - 1, dtype=knn_new.dtype, device=nodes.device)
            store_s, store_k = st["sim_store"].clone(), st["knn_store"]
            store_s[store_k == n - 2] = -1.0          # the previous query's node is replaced
            ext_s = torch.cat([store_s[:-1], cr[:, :n - 2].t()], dim=1)
            ext_k = torch.cat([store_k[:-1], idx - 1, idx], dim=1)
            rows = ext_s.shape[0]
            k_new = k + 1 if rows == k + 1 else (k + 2 if rows > k else k)
            store_s, ht = ext_s.topk(k_new, dim=1)
            store_k = ext_k.gather(1, ht)
            sim_im, knn_im = store_s[:, :k], store_k[:, :k]
            more_s, more_k = cr.topk(k_new, dim=1) if rows > k else (sim_new, knn_new)
            store_s, store_k = torch.cat([store_s, more_s]), torch.cat([store_k, more_k])
            sim_im, knn_im = torch.cat([sim_im, sim_new]), torch.cat([knn_im, knn_new])
        kt = min(self.k_text, K)
        if n == 2:
            sim_t, knn_t = (nodes @ self.text.t()).topk(kt, dim=1)
        else:
            s, i = (nodes[-1:] @ self.text.t()).topk(kt, dim=1)
            sim_t = torch.cat([st["sim_text"][:-1], s, s])
            knn_t = torch.cat([st["knn_text"][:-1], i, i])
        st.update(sim_im=sim_im, knn_im=knn_im, sim_store=store_s, knn_store=store_k,
                  sim_text=sim_t, knn_text=knn_t)
        knn = torch.cat([knn_im + K, knn_t], dim=1)
        sim = torch.cat([sim_im, sim_t], dim=1)
        knn = torch.cat([torch.full((K, knn.shape[1]), -1, dtype=knn.dtype,
                                    device=knn.device), knn])
        sim = torch.cat([sim.new_zeros(K, sim.shape[1]), sim])
        return knn, sim

    def propagate(self, knn: torch.Tensor, sim: torch.Tensor) -> torch.Tensor:
        """``iterative_label_propagation``'s zero-shot branch on the expanded graph: the image
        rows' labels [n, K] after the iterations (the last row the query's); the kept labels
        ``Y_0`` of the state are read and renewed."""
        st = self.state
        K = self.text.shape[0]
        N, width = knn.shape
        n = N - K
        w = sim ** self.gamma
        rows = torch.arange(N, device=knn.device).repeat_interleave(width)
        cols = knn.flatten().clamp(min=0)             # the class rows' -1 (weight 0, dropped)
        vals = w.flatten()
        keep = vals != 0
        # indices in range by construction: the invariant checks are opted out of explicitly
        W = torch.sparse_coo_tensor(torch.stack([rows[keep], cols[keep]]), vals[keep], (N, N),
                                    check_invariants=False)
        W = (W.t() + W).coalesce()                    # symmetrised, duplicate edges summed
        deg = torch.sparse.sum(W, dim=1).to_dense()
        d = 1 / (torch.sqrt(deg) + 1e-6)
        i, v = W.indices(), W.values()
        img = i[0] >= K                               # the image rows propagate
        W0 = torch.sparse_coo_tensor(torch.stack([i[0, img] - K, i[1, img]]),
                                     d[i[0, img]] * (v[img] * d[i[1, img]]), (n, N),
                                     check_invariants=False)
        y0 = torch.zeros(n, K, device=knn.device)
        if st["y0_val"].shape[0]:                     # the previous image's labels, the previous
            prev = st["y0_val"].shape[0] - 1          # query's row replaced by two zero rows
            y0[:prev].scatter_(1, st["y0_idx"][:prev, None], st["y0_val"][:prev, None])
        y = torch.cat([torch.eye(K, device=knn.device), y0])
        for _ in range(self.iterations):
            y_img = self.alpha * torch.sparse.mm(W0, y) + (1 - self.alpha) * y0
            y = torch.cat([y[:K], y_img])
        top, arg = y[K:, :K].topk(1, dim=1)
        st["y0_val"], st["y0_idx"] = top[:, 0] / 5, arg[:, 0]
        return y[K:]

    def step(self, img: torch.Tensor) -> torch.Tensor:
        st = self.state
        f = img[0].float()
        st["feats"] = torch.cat([st["feats"], f[None]])
        nodes = torch.cat([st["feats"], f[None]])     # the query: the image once more
        labels = self.propagate(*self.expand(nodes))
        return (labels[-1] * self.output_scale).softmax(-1)
