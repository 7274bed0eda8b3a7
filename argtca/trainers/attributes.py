"""Where a trainer's attribute prompts come from, shared by TCA, ArgTCA and the training-free and
online methods run with ``TTA.PROMPTS attributes``.

:class:`AttributeFile`: the attribute file (``DATASET.ATTRIBUTE_FILE``, else the TCA authors' file
of the dataset, fetched on first use) and its per-class lists, checked at load time; a mixin over
:class:`~argtca.trainers.base.TestTimeTrainer`.
:class:`GraphAttributes`: ArgTCA's Phase 1 — the Symbolic Attribute Graph of the first M attributes
per class, the GAT, and the selector ``TRAINER.ARGTCA.SELECTOR`` choosing M′ per class — configured
by the ``TRAINER.ARGTCA`` node whoever runs it. An object a trainer holds where it uses it (ArgTCA
always; a training-free or online method under ``TTA.PROMPTS attributes``,
argtca/trainers/zoo.py).
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


# the method node of Phase 1's settings, read by whoever runs Phase 1 (its config_nodes)
GRAPH_NODE = "ARGTCA"


class GraphAttributes:
    """ArgTCA's Phase 1 as the attribute source of ``trainer`` (settings: ``TRAINER.ARGTCA``).
    ``files``: the :class:`AttributeFile` it reads (the trainer's own by default). Made when the
    trainer checks its config: the selector is resolved here, once."""

    def __init__(self, trainer, files: AttributeFile = None):
        from argtca.selectors import resolve_selector
        self.trainer = trainer
        self.files = trainer if files is None else files
        node = self.node
        # the one lookup of the name: Phase 1 gets this object (function, needs_graph, provider);
        # an unknown name is an error listing the registered ones
        self.selector_impl = resolve_selector(node.SELECTOR)
        m, mp = int(node.NUM_CANDIDATES), int(node.NUM_ATTRIBUTES)
        if mp > m:
            raise ValueError(f"TRAINER.ARGTCA.NUM_ATTRIBUTES={mp} (M') exceeds "
                             f"TRAINER.ARGTCA.NUM_CANDIDATES={m} (M); choose M' <= M")

    @property
    def node(self):
        return self.trainer.cfg.TRAINER[GRAPH_NODE]

    @property
    def selector(self) -> str:
        return self.selector_impl.name

    def candidates(self) -> Dict[str, List[str]]:
        """The attribute lists as the file gives them, validated now (file, classes, M' per
        class); Phase 1 builds the graph from the first M_k = min(M, distinct) distinct ones once
        CLIP is up (:meth:`select`)."""
        from argtca.graph.nodes import make_nodes
        m_prime = int(self.node.NUM_ATTRIBUTES)
        candidates = self.files.load_attribute_lists(m_prime)
        # fail at load time where a class has fewer than M' distinct attributes (one warning
        # names the classes with fewer than M: they get fewer nodes)
        make_nodes(self.trainer.classnames, candidates, int(self.node.NUM_CANDIDATES),
                   min_per_class=m_prime, source=self.files.attribute_file)
        return candidates

    def input_files(self) -> Dict[str, str]:
        """The vocabularies the GAT is trained on (GAT.TRAIN_ON): they change the graph."""
        node = self.node
        train_on = list(node.GAT.get("TRAIN_ON", []))
        files = {}
        if train_on and str(node.EMBEDDINGS) == "gat":
            from argtca.graph.transfer import resolve_sources
            for label, path in resolve_sources(train_on, self.files.attribute_file,
                                               self.trainer.dataset.name):
                files[f"TRAINER.ARGTCA.GAT.TRAIN_ON.{label}"] = str(path)
        return files

    def identity(self) -> dict:
        """What, besides TRAINER.ARGTCA's graph settings, determines the stored graph."""
        from argtca.graph.phase1 import graph_identity
        t = self.trainer
        return graph_identity(t.dataset.name, self.files.attribute_file,
                              t.cfg.MODEL.BACKBONE.NAME, t.model)

    def select(self, candidates: Dict[str, List[str]]) -> Dict[str, List[str]]:
        """Run Phase 1 (or read its stored graph) and return the M' chosen attributes per class;
        writes ``phase1.json`` (the selection and the stored graph's key) into the run folder."""
        from argtca.graph.phase1 import run_phase1
        from argtca.graph.store import default_store_dir
        from argtca.models.text import encode_eos_hidden
        t = self.trainer

        def text_fn(texts):
            return encode_eos_hidden(t.model, t.tokenizer, texts, t.device).cpu()

        node = self.node
        needs_graph = self.selector_impl.needs_graph
        embed = None
        if needs_graph and list(node.GAT.get("TRAIN_ON", [])):
            from argtca.graph.transfer import make_transfer_embed, resolve_sources
            embed = make_transfer_embed(
                resolve_sources(node.GAT.TRAIN_ON, self.files.attribute_file, t.dataset.name),
                t.classnames, candidates)
        result = run_phase1(t.classnames, candidates, text_fn, node,
                            store_dir=default_store_dir() if needs_graph else None,
                            identity=self.identity() if needs_graph else None,
                            device=str(t.device), log=lambda msg: print(msg, flush=True),
                            source=self.files.attribute_file, embed=embed,
                            selector=self.selector_impl)
        result["weights"] = str(t.cfg.MODEL.PRETRAINED)
        t.phase1 = result
        write_json(os.path.join(t.output_dir(), "phase1.json"), result, default=str)
        chosen = {c: list(result["selected"][c]) for c in t.classnames}
        if t.cfg.VERBOSE:
            for c in t.classnames[:5]:
                print(f"[phase 1] {self.selector}: {c}: {', '.join(chosen[c])}")
            if len(t.classnames) > 5:
                print(f"[phase 1] {self.selector}: ({len(t.classnames) - 5} more in "
                      f"phase1.json)")
        return chosen


# ------------------------------------------------------------------ a method's prompt source
class ClassPrompts:
    """The prompts of a method that builds none of its own: "a photo of a {class}." (what
    ``TTA.PROMPTS class`` asks for). No attribute file, no selector."""
    attribute_file = selector = selector_impl = None

    def label(self, label: str) -> str:
        return label

    def load(self) -> None:
        """Check what the prompts need at load time (nothing here)."""

    def input_files(self) -> Dict[str, str]:
        return {}

    def prepare(self) -> None:
        """Choose the prompts once CLIP is up (nothing to choose here)."""

    def suffixes(self, classnames: List[str]) -> List[str]:
        return [f"{c}." for c in classnames]


class AttributePrompts(AttributeFile):
    """``TTA.PROMPTS attributes``: each class's prompts "a photo of a {attribute} {class}." for
    the M' attributes ArgTCA's Phase 1 (:class:`GraphAttributes`, settings ``TRAINER.ARGTCA``)
    chooses from the attribute file; class-major, as the features engine averages them per
    class."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.graph = GraphAttributes(trainer, files=self)
        self.selector_impl = self.graph.selector_impl
        self.selector = self.graph.selector

    @property
    def cfg(self):
        return self.trainer.cfg

    @property
    def classnames(self) -> List[str]:
        return self.trainer.classnames

    def label(self, label: str) -> str:
        return f"{label} + attributes ({self.selector})"

    def load(self) -> None:
        self.candidates = self.graph.candidates()   # checked at load time, before any model

    def input_files(self) -> Dict[str, str]:
        """The GAT's vocabularies (the attribute file is the trainer's ``attribute_file``)."""
        return self.graph.input_files()

    def prepare(self) -> None:
        self.attributes = self.graph.select(self.candidates)

    def suffixes(self, classnames: List[str]) -> List[str]:
        return [f"{a} {c}." for c in classnames for a in self.attributes[c]]
