"""ArgTCA = TCA's test-time tuning with attributes chosen by a selector plug-in over the Symbolic
Attribute Graph (Phase 1). Nothing else changes."""
from __future__ import annotations

import os

from argtca.registry import SELECTOR_REGISTRY, TRAINER_REGISTRY
from argtca.engine.records import write_json
from argtca.trainers.methods import TCA


@TRAINER_REGISTRY.register()
class ArgTCA(TCA):
    method, label, objective_name = "argtca", "ArgTCA", "tca"

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        import argtca.selectors  # noqa: F401  (registration)
        SELECTOR_REGISTRY.get(self.node.SELECTOR)  # unknown selector → error listing the names
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

    def choose_attributes(self):
        # validated now (file, classes, M distinct candidates); chosen in prepare() once CLIP is up
        # (Phase 1 takes the first NUM_CANDIDATES distinct attributes of each list)
        self.candidates = self.load_attribute_lists(int(self.node.NUM_CANDIDATES), dedupe=True)
        return None

    def prepare(self) -> None:
        from argtca.attributes import attribute_file_hash
        from argtca.graph.phase1 import run_phase1
        from argtca.models.clip import encode_eos_hidden, resolve_builtin

        def text_fn(texts):
            return encode_eos_hidden(self.model, self.tokenizer, texts, self.device).cpu()

        key = {
            "dataset": self.dataset.name,
            "classes": len(self.classnames),
            "attribute_file_sha256": attribute_file_hash(resolve_builtin(self.cfg.DATASET.ATTRIBUTE_FILE)),
            "backbone": self.cfg.MODEL.BACKBONE.NAME,
            "pretrained": str(self.cfg.MODEL.PRETRAINED),
        }
        out_dir = self.output_dir()
        result = run_phase1(self.classnames, self.candidates, text_fn, self.node,
                            cache_dir=out_dir, cache_key=key, device=str(self.device))
        self.phase1 = result
        # the selection this run used, under a fixed name (the hashed file is phase 1's cache)
        write_json(os.path.join(out_dir, "phase1.json"), result, default=str)
        self.attributes = {c: list(result["selected"][c]) for c in self.classnames}
        if self.cfg.VERBOSE:
            for c in self.classnames[:5]:
                print(f"[phase 1] {self.selector}: {c}: {', '.join(self.attributes[c])}")
