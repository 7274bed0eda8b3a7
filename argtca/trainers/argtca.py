"""ArgTCA = TCA's test-time tuning with attributes chosen by a selector plug-in over the Symbolic
Attribute Graph (Phase 1, argtca/trainers/attributes.py). Nothing else changes."""
from __future__ import annotations

from argtca.config.keys import Key, Range
from argtca.plugins import method
from argtca.trainers.attributes import GraphAttributes
from argtca.trainers.methods import TCA, TCA_DEFAULTS


def _hidden_ok(v, node) -> bool:
    heads = node.GAT.HEADS
    return not (isinstance(heads, int) and heads >= 1) or (v >= 1 and v % heads == 0)


# TRAINER.ARGTCA.GAT: the graph attention network of Phase 1
GAT_DEFAULTS = {
    "HEADS": Key(4, "attention heads", check=Range(lambda v: v >= 1, ">= 1", True)),
    "HIDDEN": Key(512, "concatenated width (heads x per-head channels: 4 x 128)",
                  check=Range(_hidden_ok, lambda node, path: f">= 1 and divisible by "
                              f"{path}.GAT.HEADS={node.GAT.HEADS}", True, uses_node=True)),
    "DROPOUT": Key(0.1, "attention dropout", check=Range(lambda v: 0 <= v < 1, "[0, 1)")),
    "SELF_LOOPS": Key(True, "GATConv add_self_loops (standard GAT; paper silent)"),
    "BIAS": Key(False, "a trained bias per GAT layer: Eq. 6 / App. B have none"),
    "EPOCHS": Key(100, "training epochs of the GAT on one vocabulary",
                  check=Range(lambda v: v >= 0, ">= 0", True)),
    "LR": Key(1e-3, "the GAT's learning rate", check=Range(lambda v: v > 0, "> 0")),
    "TAU": Key(0.07, "the SupCon loss's temperature", check=Range(lambda v: v > 0, "> 0")),
    "LOSS_ON": Key("h", "\"h\": SupCon on h^L/||h^L|| (the paper's Eq. 7); \"z\": on the "
                   "projection head (a deviation, SupCon-style)", choices=("h", "z")),
    "SEED": Key(0, "seed of the GAT's initialisation and training"),
    "TRAIN_ON": Key([], "vocabularies the GAT is trained on once (argtca/graph/transfer.py): "
                    "\"target\", \"tca:all-but-target\", a dataset with a TCA file, or a file; "
                    "the dataset's nodes are then embedded by that frozen GAT. []: per-dataset "
                    "(the paper)"),
}

# TRAINER.ARGTCA: TCA's keys (as TRAINER.TCA's), then Phase 1's (the graph, its GAT, the selector)
DEFAULTS = {
    **TCA_DEFAULTS,
    "SELECTOR": Key("div", "tca | div | disc | random | joint | any registered one (resolved "
                    "at load time, argtca/trainers/attributes.py)"),
    "NUM_CANDIDATES": Key(10, "M: the first M distinct attributes of a class become nodes "
                          "(fewer where a class has fewer: M_k = min(M, distinct))",
                          check=Range(lambda v: v >= 1, ">= 1", True)),
    "SELECTOR_SEED": Key(42, "seed of the random selector",
                         check=Range(lambda v: v >= 0, ">= 0", True)),
    "JOINT_WEIGHT": Key(0.5, "joint selector: w*Div + (1-w)*Disc",
                        check=Range(lambda v: 0 <= v <= 1, "[0, 1]")),
    "EMBEDDINGS": Key("gat", "\"gat\" (trained graph) or \"raw\" (select on h0)",
                      choices=("gat", "raw")),
    "EDGES": Key("full", "the graph's edges: full | intra | inter | none",
                 choices=("full", "intra", "inter", "none")),
    "NODE_ATTENTION": Key("source", "score reported per node (phase1.json): \"source\" = mean "
                          "attention a node receives from its neighbours; \"incoming\" = the "
                          "appendix's literal mean over incoming edges (= 1/degree under GAT's "
                          "softmax). Not used to select", choices=("source", "incoming")),
    "GAT": GAT_DEFAULTS,
}


@method("argtca", label="ArgTCA", family="argtca", paper=True, defaults=DEFAULTS,
        rows=("argtca-div", "argtca-disc"))   # the paper's two selectors
class ArgTCA(TCA):
    objective_name = "tca"
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
