"""ArgTCA = TCA's test-time tuning with attributes chosen by a selector plug-in over the Symbolic
Attribute Graph (Phase 1). Nothing else changes."""
from __future__ import annotations

import os

from argtca.registry import TRAINER_REGISTRY
from argtca.utils.io import write_json
from argtca.trainers.methods import TCA


@TRAINER_REGISTRY.register()
class ArgTCA(TCA):
    method, label, objective_name = "argtca", "ArgTCA", "tca"
    shared_build = True   # Phase 1's graph cache: rank 0 trains it, the others read it

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        from argtca.selectors import resolve_selector
        # the one lookup of the name: Phase 1 gets this object (function, needs_graph, provider);
        # an unknown name is an error listing the registered ones
        self.selector_impl = resolve_selector(self.node.SELECTOR)
        m, mp = int(self.node.NUM_CANDIDATES), int(self.node.NUM_ATTRIBUTES)
        if mp > m:
            raise ValueError(f"TRAINER.ARGTCA.NUM_ATTRIBUTES={mp} (M') exceeds "
                             f"TRAINER.ARGTCA.NUM_CANDIDATES={m} (M); choose M' <= M")

    @property
    def selector(self):
        return str(self.node.SELECTOR).lower()

    @property
    def display_label(self) -> str:
        return f"ArgTCA ({self.selector})"

    def summary_extra(self) -> dict:
        # a plug-in may replace a built-in name (override=True): say which code chose
        return {"selector_provider": self.selector_impl.describe()}

    def input_files(self):
        """Also the vocabularies the GAT is trained on (GAT.TRAIN_ON): they change the graph."""
        files = super().input_files()
        train_on = list(self.node.GAT.get("TRAIN_ON", []))
        if train_on and str(self.node.EMBEDDINGS) == "gat":
            from argtca.graph.transfer import resolve_sources
            for label, path in resolve_sources(train_on, self.attribute_file, self.dataset.name):
                files[f"TRAINER.ARGTCA.GAT.TRAIN_ON.{label}"] = str(path)
        return files

    def choose_attributes(self):
        # validated now (file, classes, M' per class): the lists as the file gives them; Phase 1
        # builds the graph from the first M_k = min(M, distinct) distinct ones and is run in
        # prepare() once CLIP is up
        from argtca.graph.nodes import make_nodes
        m_prime = int(self.node.NUM_ATTRIBUTES)
        self.candidates = self.load_attribute_lists(m_prime)
        source = self.attribute_file
        # fail at load time where a class has fewer than M' distinct attributes (one warning
        # names the classes with fewer than M: they get fewer nodes)
        make_nodes(self.classnames, self.candidates, int(self.node.NUM_CANDIDATES),
                   min_per_class=m_prime, source=source)
        return None

    def graph_identity(self) -> dict:
        """What, besides TRAINER.ARGTCA's graph settings, determines the stored graph."""
        from argtca.graph.phase1 import graph_identity
        return graph_identity(self.dataset.name, self.attribute_file,
                              self.cfg.MODEL.BACKBONE.NAME, self.model)

    def prepare(self) -> None:
        from argtca.graph.phase1 import run_phase1
        from argtca.graph.store import default_store_dir
        from argtca.models.clip import encode_eos_hidden

        def text_fn(texts):
            return encode_eos_hidden(self.model, self.tokenizer, texts, self.device).cpu()

        needs_graph = self.selector_impl.needs_graph
        embed = None
        if needs_graph and list(self.node.GAT.get("TRAIN_ON", [])):
            from argtca.graph.transfer import make_transfer_embed, resolve_sources
            embed = make_transfer_embed(
                resolve_sources(self.node.GAT.TRAIN_ON, self.attribute_file, self.dataset.name),
                self.classnames, self.candidates)
        result = run_phase1(self.classnames, self.candidates, text_fn, self.node,
                            store_dir=default_store_dir() if needs_graph else None,
                            identity=self.graph_identity() if needs_graph else None,
                            device=str(self.device), log=lambda msg: print(msg, flush=True),
                            source=self.attribute_file, embed=embed, selector=self.selector_impl)
        result["weights"] = str(self.cfg.MODEL.PRETRAINED)
        self.phase1 = result
        # this run's selection and the key of the stored graph it selected from
        write_json(os.path.join(self.output_dir(), "phase1.json"), result, default=str)
        self.attributes = {c: list(result["selected"][c]) for c in self.classnames}
        if self.cfg.VERBOSE:
            for c in self.classnames[:5]:
                print(f"[phase 1] {self.selector}: {c}: {', '.join(self.attributes[c])}")
            if len(self.classnames) > 5:
                print(f"[phase 1] {self.selector}: ({len(self.classnames) - 5} more in "
                      f"phase1.json)")
