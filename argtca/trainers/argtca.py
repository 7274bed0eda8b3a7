"""ArgTCA = TCA's test-time tuning with attributes chosen by a selector plug-in over the Symbolic
Attribute Graph (Phase 1, argtca/trainers/attributes.py). Nothing else changes."""
from __future__ import annotations

from argtca.config.checks import Range
from argtca.registry import TRAINER_REGISTRY
from argtca.trainers.attributes import GraphAttributes
from argtca.trainers.methods import TCA


def _hidden_ok(v, node) -> bool:
    heads = node.GAT.HEADS
    return not (isinstance(heads, int) and heads >= 1) or (v >= 1 and v % heads == 0)


# Phase 1's keys (the graph, its GAT and the selector), beside TCA's
GRAPH_RANGES = {
    "EMBEDDINGS": ("gat", "raw"), "EDGES": ("full", "intra", "inter", "none"),
    "GAT.LOSS_ON": ("h", "z"), "NODE_ATTENTION": ("source", "incoming"),
    "NUM_CANDIDATES": Range(lambda v: v >= 1, ">= 1", True),
    "SELECTOR_SEED": Range(lambda v: v >= 0, ">= 0", True),
    "JOINT_WEIGHT": Range(lambda v: 0 <= v <= 1, "[0, 1]"),
    "GAT.HEADS": Range(lambda v: v >= 1, ">= 1", True),
    "GAT.HIDDEN": Range(_hidden_ok, lambda node, path: f">= 1 and divisible by "
                        f"{path}.GAT.HEADS={node.GAT.HEADS}", True, uses_node=True),
    "GAT.DROPOUT": Range(lambda v: 0 <= v < 1, "[0, 1)"),
    "GAT.EPOCHS": Range(lambda v: v >= 0, ">= 0", True),
    "GAT.LR": Range(lambda v: v > 0, "> 0"),
    "GAT.TAU": Range(lambda v: v > 0, "> 0"),
}


@TRAINER_REGISTRY.register()
class ArgTCA(TCA):
    method, label, objective_name = "argtca", "ArgTCA", "tca"
    family, rows = "argtca", ("argtca-div", "argtca-disc")   # the paper's two selectors
    cfg_ranges = {**TCA.cfg_ranges, **GRAPH_RANGES}
    shared_build = True   # Phase 1's graph cache: rank 0 trains it, the others read it

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        self.graph = GraphAttributes(self)   # resolves the selector, once

    @property
    def selector_impl(self):
        return self.graph.selector_impl

    @property
    def selector(self) -> str:
        return self.graph.selector

    @property
    def display_label(self) -> str:
        return f"ArgTCA ({self.selector})"

    def summary_extra(self) -> dict:
        # a plug-in may replace a built-in name (override=True): say which code chose
        return {"selector_provider": self.selector_impl.describe()}

    def input_files(self):
        return dict(super().input_files(), **self.graph.input_files())

    def choose_attributes(self):
        self.candidates = self.graph.candidates()
        return None

    def prepare(self) -> None:
        self.attributes = self.graph.select(self.candidates)
