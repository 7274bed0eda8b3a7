"""ArgTCA = TCA's test-time tuning with attributes chosen by a selector plug-in over the Symbolic
Attribute Graph (Phase 1, argtca/trainers/attributes.py). Nothing else changes."""
from __future__ import annotations

from argtca.registry import TRAINER_REGISTRY
from argtca.trainers.attributes import GraphAttributes
from argtca.trainers.methods import TCA


@TRAINER_REGISTRY.register()
class ArgTCA(GraphAttributes, TCA):
    method, label, objective_name = "argtca", "ArgTCA", "tca"
    shared_build = True   # Phase 1's graph cache: rank 0 trains it, the others read it

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        self.check_graph_cfg()

    @property
    def display_label(self) -> str:
        return f"ArgTCA ({self.selector})"

    def summary_extra(self) -> dict:
        # a plug-in may replace a built-in name (override=True): say which code chose
        return {"selector_provider": self.selector_impl.describe()}

    def input_files(self):
        return dict(super().input_files(), **self.graph_input_files())

    def choose_attributes(self):
        self.candidates = self.graph_candidates()
        return None

    def prepare(self) -> None:
        self.attributes = self.select_attributes(self.candidates)
