"""ArgTCA Phase 1: Symbolic Attribute Graph, AttributeGAT, SupCon training, node attention."""
from argtca.graph.gat import (AttributeGAT, GATOutput, SparseGATConv, incoming_attention,
                              source_attention)
from argtca.graph.nodes import (EDGE_MODES, AttributeNodes, GraphInputError, ShortClassWarning,
                                build_graph, make_nodes, node_text)
from argtca.graph.phase1 import (NodeEmbeddings, embed_nodes, phase1_settings, picked_texts,
                                 run_phase1, select_nodes, train_gat)
from argtca.graph.store import Phase1Store, StoreError, default_store_dir
from argtca.graph.supcon import supcon_loss

__all__ = ["AttributeGAT", "GATOutput", "SparseGATConv", "incoming_attention", "source_attention",
           "EDGE_MODES", "AttributeNodes", "GraphInputError", "ShortClassWarning", "build_graph",
           "make_nodes", "node_text", "NodeEmbeddings", "embed_nodes", "phase1_settings",
           "picked_texts", "run_phase1", "select_nodes", "train_gat", "supcon_loss",
           "Phase1Store", "StoreError", "default_store_dir"]
