"""Where a trainer's attribute prompts come from, shared by TCA, ArgTCA and the training-free and
online methods run with ``TTA.PROMPTS attributes``.

:class:`AttributeFile`: the attribute file (``DATASET.ATTRIBUTE_FILE``, else the TCA authors' file
of the dataset, fetched on first use) and its per-class lists, checked at load time.
:class:`GraphAttributes`: ArgTCA's Phase 1 — the Symbolic Attribute Graph of the first M attributes
per class, the GAT, and the selector ``TRAINER.ARGTCA.SELECTOR`` choosing M′ per class — configured
by the ``TRAINER.ARGTCA`` node whoever runs it. Both are mixins over
:class:`~argtca.trainers.base.TestTimeTrainer`.
"""
from __future__ import annotations

import os
from typing import Dict, List

from argtca.utils.io import write_json


class AttributeFile:
    @property
    def attribute_file(self) -> str:
        """DATASET.ATTRIBUTE_FILE, or else the TCA authors' file of the dataset, fetched on first
        use into the cache (argtca.fetch)."""
        if getattr(self, "_attribute_file", None) is None:
            from argtca.attributes.files import attribute_file_for
            self._attribute_file = attribute_file_for(self.cfg)
        return self._attribute_file

    def load_attribute_lists(self, num_required: int, dedupe: bool = False):
        from argtca.attributes import load_attributes
        return load_attributes(self.attribute_file, self.classnames, num_required, dedupe=dedupe)


class GraphAttributes(AttributeFile):
    """ArgTCA's Phase 1 as a trainer's attribute source (settings: ``TRAINER.ARGTCA``)."""

    @property
    def graph_node(self):
        return self.cfg.TRAINER.ARGTCA

    def check_graph_cfg(self) -> None:
        from argtca.selectors import resolve_selector
        node = self.graph_node
        # the one lookup of the name: Phase 1 gets this object (function, needs_graph, provider);
        # an unknown name is an error listing the registered ones
        self.selector_impl = resolve_selector(node.SELECTOR)
        m, mp = int(node.NUM_CANDIDATES), int(node.NUM_ATTRIBUTES)
        if mp > m:
            raise ValueError(f"TRAINER.ARGTCA.NUM_ATTRIBUTES={mp} (M') exceeds "
                             f"TRAINER.ARGTCA.NUM_CANDIDATES={m} (M); choose M' <= M")

    @property
    def selector(self):
        return str(self.graph_node.SELECTOR).lower()

    def graph_candidates(self) -> Dict[str, List[str]]:
        """The attribute lists as the file gives them, validated now (file, classes, M' per
        class); Phase 1 builds the graph from the first M_k = min(M, distinct) distinct ones once
        CLIP is up (:meth:`select_attributes`)."""
        from argtca.graph.nodes import make_nodes
        m_prime = int(self.graph_node.NUM_ATTRIBUTES)
        candidates = self.load_attribute_lists(m_prime)
        # fail at load time where a class has fewer than M' distinct attributes (one warning
        # names the classes with fewer than M: they get fewer nodes)
        make_nodes(self.classnames, candidates, int(self.graph_node.NUM_CANDIDATES),
                   min_per_class=m_prime, source=self.attribute_file)
        return candidates

    def graph_input_files(self) -> Dict[str, str]:
        """The vocabularies the GAT is trained on (GAT.TRAIN_ON): they change the graph."""
        node = self.graph_node
        train_on = list(node.GAT.get("TRAIN_ON", []))
        files = {}
        if train_on and str(node.EMBEDDINGS) == "gat":
            from argtca.graph.transfer import resolve_sources
            for label, path in resolve_sources(train_on, self.attribute_file, self.dataset.name):
                files[f"TRAINER.ARGTCA.GAT.TRAIN_ON.{label}"] = str(path)
        return files

    def graph_identity(self) -> dict:
        """What, besides TRAINER.ARGTCA's graph settings, determines the stored graph."""
        from argtca.graph.phase1 import graph_identity
        return graph_identity(self.dataset.name, self.attribute_file,
                              self.cfg.MODEL.BACKBONE.NAME, self.model)

    def select_attributes(self, candidates: Dict[str, List[str]]) -> Dict[str, List[str]]:
        """Run Phase 1 (or read its stored graph) and return the M' chosen attributes per class;
        writes ``phase1.json`` (the selection and the stored graph's key) into the run folder."""
        from argtca.graph.phase1 import run_phase1
        from argtca.graph.store import default_store_dir
        from argtca.models.text import encode_eos_hidden

        def text_fn(texts):
            return encode_eos_hidden(self.model, self.tokenizer, texts, self.device).cpu()

        node = self.graph_node
        needs_graph = self.selector_impl.needs_graph
        embed = None
        if needs_graph and list(node.GAT.get("TRAIN_ON", [])):
            from argtca.graph.transfer import make_transfer_embed, resolve_sources
            embed = make_transfer_embed(
                resolve_sources(node.GAT.TRAIN_ON, self.attribute_file, self.dataset.name),
                self.classnames, candidates)
        result = run_phase1(self.classnames, candidates, text_fn, node,
                            store_dir=default_store_dir() if needs_graph else None,
                            identity=self.graph_identity() if needs_graph else None,
                            device=str(self.device), log=lambda msg: print(msg, flush=True),
                            source=self.attribute_file, embed=embed, selector=self.selector_impl)
        result["weights"] = str(self.cfg.MODEL.PRETRAINED)
        self.phase1 = result
        write_json(os.path.join(self.output_dir(), "phase1.json"), result, default=str)
        chosen = {c: list(result["selected"][c]) for c in self.classnames}
        if self.cfg.VERBOSE:
            for c in self.classnames[:5]:
                print(f"[phase 1] {self.selector}: {c}: {', '.join(chosen[c])}")
            if len(self.classnames) > 5:
                print(f"[phase 1] {self.selector}: ({len(self.classnames) - 5} more in "
                      f"phase1.json)")
        return chosen
