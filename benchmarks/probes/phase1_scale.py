"""Phase-1 cost on a large attribute graph (default: ImageNet, 1000 classes x 10 attributes) with
random node features, so no CLIP weights are needed:

    python benchmarks/probes/phase1_scale.py [--attributes ImageNet_2_V.json] [--device cpu|cuda]
                                   [--epochs 100] [--threads N]

The attribute file defaults to the TCA authors' ImageNet file (fetched/cached by argtca.fetch).
Prints nodes, edges, and the GAT training time (the dominant part of Phase 1) per epoch and in
total, with TRAINER.ARGTCA's defaults (GAT 4 heads x 512, SupCon over all node pairs).
"""
import argparse
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main() -> None:
    from argtca.attributes import load_attributes
    from argtca.config import get_cfg_default
    from argtca.fetch import fetch
    from argtca.graph.nodes import build_graph, make_nodes
    from argtca.graph.phase1 import train_gat

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--attributes", default="")
    p.add_argument("--device", default="cpu")
    p.add_argument("--epochs", type=int, default=None, help="default: TRAINER.ARGTCA.GAT.EPOCHS")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    node = get_cfg_default().TRAINER.ARGTCA
    gat = node.GAT.clone()
    if args.epochs is not None:
        gat.EPOCHS = args.epochs
    path = args.attributes or str(fetch("ImageNet_2_V.json"))
    with open(path, encoding="utf-8") as f:
        classes = list(json.load(f))
    warnings.simplefilter("ignore")   # a few ImageNet classes have < 10 distinct attributes
    nodes = make_nodes(classes, load_attributes(path, classes, 2), int(node.NUM_CANDIDATES),
                       min_per_class=int(node.NUM_ATTRIBUTES))
    ei = build_graph(nodes.node_class, nodes.attrs, node.EDGES)
    x = torch.randn(len(nodes.attrs), 512, generator=torch.Generator().manual_seed(0))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    sync()
    t = time.perf_counter()
    _, curve = train_gat(x, ei, nodes.node_class, gat, device=args.device)
    sync()
    dt = time.perf_counter() - t
    print(f"classes={len(classes)} nodes={len(nodes.attrs)} edges={ei.shape[1]} "
          f"device={args.device} threads={torch.get_num_threads()} epochs={gat.EPOCHS} "
          f"gat_train_s={dt:.1f} per_epoch_s={dt / max(1, gat.EPOCHS):.2f} "
          f"final_loss={curve[-1]:.3f}")


if __name__ == "__main__":
    main()
