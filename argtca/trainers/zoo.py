"""The trainers of the training-free and online methods: a method declared with
``argtca.plugins.method`` on its adapter (argtca/adapters/<method>.py: its key, label, family and
config node ``TRAINER.<NODE>``) is one of these two classes with its adapter's name; the views,
records, resume and metrics are the shared loop's.

:class:`FeatureTrainer` runs an episodic adapter on the features engine. :class:`StreamTrainer`
runs an online one over a fixed, seeded order of the test set (``TTA.STREAM``): the order is
stored in the run folder (``stream.json``) and its sha256 is in the fingerprint, every record
carries its stream position, and the adapter's state is checkpointed with the records
(``stream_state.pt``, every ``TTA.STREAM.CHECKPOINT_IMAGES`` images, at a batch boundary). A resumed
run drops the records made after the last checkpoint, restores the state and runs on from there in
the same batches, so its records equal an uninterrupted run's.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, List

import numpy as np
import torch

from argtca.config import ConfigError
from argtca.run_folder import STREAM_ORDER_KEY, RunFolderError, write_records
from argtca.config.methods import node_of
from argtca.registry import ADAPTER_REGISTRY, load_builtin_methods
from argtca.trainers.attributes import GRAPH_NODE, AttributePrompts, ClassPrompts
from argtca.trainers.base import TestTimeTrainer
from argtca.trainers.stream_state import (STATE_FIX, STATE_FORMAT, read_stream_state,
                                          state_structure_problem)
from argtca.utils.io import write_json

STATE_FILE = "stream_state.pt"
ORDER_FILE = "stream.json"


class FeatureTrainer(TestTimeTrainer):
    """A method that tunes no prompt: the features engine and the adapter ``adapter_name``.

    Its prompts come from ``self.prompts`` (argtca/trainers/attributes.py), chosen once by
    ``TTA.PROMPTS``: "class" the class names, "attributes" each class's feature is the mean
    (re-normalised) of its M' attribute prompts "a photo of a {attribute} {class}." chosen by
    ArgTCA's Phase 1 with the selector and graph settings of ``TRAINER.ARGTCA``."""

    adapter_name = ""
    engine_name = "features"   # its engine, and the only one it runs on (argtca/config/settle.py)
    objective_name = "none"
    tunes = False        # no prompt step (TPS tunes its shifts inside its adapter)
    online = False
    family = "training-free"

    @classmethod
    def cfg_ranges(cls):
        """The value checks of this trainer's node: its adapter's table (a method declared with
        argtca.plugins.method has them from its node's Keys instead)."""
        return cls.adapter_class().cfg_ranges if cls.adapter_name else {}

    @classmethod
    def adapter_class(cls):
        load_builtin_methods()   # registration
        return ADAPTER_REGISTRY.get(cls.adapter_name)

    @classmethod
    def config_nodes(cls, cfg):
        """Its own node, and ArgTCA's (Phase 1's settings) where its prompts are attributes."""
        nodes = super().config_nodes(cfg)
        return nodes + (GRAPH_NODE,) if cls._attribute_prompts(cfg) else nodes

    def check_cfg(self, cfg) -> None:
        # the attribute machinery (and its selector lookup) exists only where it is used
        self.prompts = AttributePrompts(self) if self._attribute_prompts(cfg) else ClassPrompts()

    @staticmethod
    def _attribute_prompts(cfg) -> bool:
        return str(cfg.TTA.get("PROMPTS", "class")) == "attributes"

    @property
    def attribute_file(self):
        return self.prompts.attribute_file

    @property
    def selector(self):
        return self.prompts.selector

    @property
    def selector_impl(self):
        return self.prompts.selector_impl

    @property
    def display_label(self) -> str:
        return self.prompts.label(self.label)

    def build_data_loader(self) -> None:
        super().build_data_loader()
        self.prompts.load()   # checked at load time, before any model is built

    def input_files(self) -> Dict[str, str]:
        return dict(super().input_files(), **self.prompts.input_files())

    def prepare(self) -> None:
        self.prompts.prepare()

    def prompt_suffixes(self, classnames: List[str]) -> List[str]:
        return self.prompts.suffixes(classnames)

    @property
    def run_cfg(self):
        """The configuration the loader and engine see: every view goes to the adapter, or one
        view an image where the adapter reads view 0 alone (``Adapter.needs_views``: the same
        numbers; TTA.N_VIEWS stays in the fingerprint as configured, as for zero-shot CLIP)."""
        if self.adapter_cls.needs_views(self.node, self.cfg) or int(self.cfg.TTA.N_VIEWS) == 1:
            return self.cfg
        cfg = self.cfg.clone()
        cfg.defrost()
        cfg.TTA.N_VIEWS = 1
        cfg.freeze()
        return cfg

    @property
    def adapter_cls(self):
        return self.adapter_class()

    def engine_kwargs(self) -> Dict[str, object]:
        """The features engine builds the adapter once the class text features exist; an
        adapter that tunes through the engine's text tower (``needs_engine``, DynaPrompt) gets
        the engine."""
        cls, scale = self.adapter_cls, float(self.model.logit_scale.exp())

        def make(text):
            more = {"engine": self.engine} if getattr(cls, "needs_engine", False) else {}
            return cls(self.node, self.cfg, text, scale, **more)

        return {"adapter": make, "n_classes": len(self.classnames)}

    def summary_extra(self) -> Dict[str, object]:
        """The keys left at -1 and the official per-dataset values the adapter used; for an
        episodic adapter that changed itself during a batch (undone before the next one, engine/
        features.py EpisodicState), which attributes, said once."""
        node = f"TRAINER.{node_of(type(self))}"
        used = self.adapter_cls.resolved_presets(self.node, self.cfg)
        out = {"official_values": {f"{node}.{k}": v for k, v in used.items()}} if used else {}
        state = getattr(getattr(self, "engine", None), "pristine", None)
        changed = state.changed() if state is not None else []
        if changed:
            cls = self.adapter_cls
            print(f"argtca: {self.label}'s adapter {cls.__module__}.{cls.__qualname__} changed "
                  f"{', '.join(changed)} during a batch; each batch saw it as built (an episodic "
                  f"adapter keeps nothing between batches: state that should carry belongs to an "
                  f"OnlineAdapter, docs/own-method.md)", flush=True)
            out["adapter_state_undone"] = changed
        return out


# ------------------------------------------------------------------------------------ streams
def stream_seed(cfg) -> int:
    s = int(cfg.TTA.STREAM.SEED)
    return int(cfg.SEED) if s < 0 else s


def stream_order(n: int, order: str, seed: int) -> List[int]:
    """The test indices in stream order: "shuffle" a permutation drawn from ``seed`` (numpy's
    PCG64, stable across versions), "index" the split file's order."""
    if order == "index":
        return list(range(n))
    return [int(i) for i in np.random.default_rng(int(seed)).permutation(n)]


def order_sha256(order: List[int]) -> str:
    return hashlib.sha256(json.dumps(order).encode()).hexdigest()[:16]


class StreamTrainer(FeatureTrainer):
    """An online method: one stream over the test set in a seeded order, state carried."""

    online = True
    family = "online"

    @property
    def display_label(self) -> str:
        # the report's marker: this row's numbers are a stream's
        return f"{super().display_label} (online)"

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        from argtca.engine.distributed import world_size
        if world_size() > 1:
            raise ConfigError(
                f"{self.label} is an online method: its state carries from image to image in one "
                f"stream, which torchrun's ranks cannot share; run it with one process "
                f"(python -m argtca.run), and spread datasets or seeds over GPUs instead")

    @property
    def order(self) -> List[int]:
        if getattr(self, "_order", None) is None:
            self._order = stream_order(len(self.dataset.test), str(self.cfg.TTA.STREAM.ORDER),
                                       stream_seed(self.cfg))
            self._position = {i: p for p, i in enumerate(self._order)}
        return self._order

    def stream_info(self) -> Dict[str, object]:
        return {"order": str(self.cfg.TTA.STREAM.ORDER), "seed": stream_seed(self.cfg),
                "sha256": order_sha256(self.order), "n": len(self.order)}

    def fingerprint(self) -> Dict[str, object]:
        fp = super().fingerprint()
        # in config.json (a resume refuses another order); with the default TTA.STREAM.SEED the
        # order follows the seed and stays out of the experiment's hash (run_folder.seed_axis_keys)
        if STREAM_ORDER_KEY not in fp:
            fp[STREAM_ORDER_KEY] = order_sha256(self.order)
            self._fingerprint = dict(sorted(fp.items()))
        return self._fingerprint

    @property
    def checkpoint_every(self) -> int:
        """Images between state checkpoints, a whole number of batches (so that a resumed run
        makes the same batches, and the same floating-point sums, as an uninterrupted one)."""
        b = max(1, self.batch_images)
        return max(1, -(-int(self.cfg.TTA.STREAM.CHECKPOINT_IMAGES) // b)) * b

    def resume_records(self, out_dir: str, records: List[dict]) -> List[dict]:
        self._out_dir = out_dir
        info = self.stream_info()
        order_path = os.path.join(out_dir, ORDER_FILE)
        if not os.path.isfile(order_path):
            write_json(order_path, dict(info, indices=self.order))
        state_path = os.path.join(out_dir, STATE_FILE)
        self._resume_state = None
        position = 0
        if os.path.isfile(state_path):
            position, self._resume_state = read_stream_state(
                state_path, self.fingerprint(), self.adapter_name, len(self.order), out_dir,
                info["sha256"])
        pos = self._position
        kept = [r for r in records if pos[r["index"]] < position]
        if len(kept) != position:
            raise RunFolderError(
                f"{os.path.join(out_dir, 'records.jsonl')}: {len(kept)} records before the "
                f"stream state's position {position}; the records and {STATE_FILE} disagree: "
                f"delete {out_dir} to start the stream over")
        # the records after the checkpoint are dropped from the file once the state is restored
        # (before_loop): a state refused there leaves records.jsonl as it was
        self._drop = len(records) - len(kept)
        kept.sort(key=lambda r: pos[r["index"]])
        self._kept = kept
        self._saved_position = position
        return kept

    def pending_indices(self, records: List[dict], n_total: int) -> List[int]:
        return self.order[len(records):]

    def before_loop(self, out_dir: str) -> None:
        self.engine.prepare()
        adapter = self.engine.adapter
        if not getattr(adapter, "online", False):
            raise TypeError(f"{type(self).__name__}: adapter {self.adapter_name!r} is not online")
        if self._resume_state is not None:
            path = os.path.join(self._out_dir, STATE_FILE)
            # every buffer against the adapter's own and the lengths it declares for the saved
            # position: a wrong one is refused here, not in the next image's torch.cat
            problem = state_structure_problem(self._resume_state, adapter.state_dict(),
                                              declared=adapter.state_shapes(
                                                  self._saved_position))
            if problem:
                raise RunFolderError(
                    f"{path}: not a state of {self.label}'s adapter at image "
                    f"{self._saved_position} of the stream ({problem}); "
                    f"{STATE_FIX.format(out_dir=self._out_dir)}")
            adapter.load_state_dict(self._resume_state)
            print(f"argtca: stream resumed at image {self._saved_position} of "
                  f"{len(self.order)} from {STATE_FILE}", flush=True)
        if self._drop:
            print(f"argtca: {self._drop} records after the last stream checkpoint "
                  f"(image {self._saved_position} of the stream) are made again, from the saved "
                  f"state", flush=True)
            write_records(os.path.join(self._out_dir, "records.jsonl"), self._kept)
            self._drop = 0
        begin = getattr(adapter, "begin_stream", None)
        if begin is not None:   # e.g. OnZeta's schedule sqrt(t / n) needs the stream's length
            begin(len(self.order))

    def make_records(self, batch, probs) -> List[dict]:
        recs = super().make_records(batch, probs)
        for r in recs:
            r["stream_pos"] = self._position[r["index"]]
        return recs

    def after_batch(self, records: List[dict]) -> None:
        n = len(records)
        if n - self._saved_position >= self.checkpoint_every or n == len(self.order):
            self.save_state(n)

    def save_state(self, position: int) -> None:
        path = os.path.join(self._out_dir, STATE_FILE)
        tmp = path + ".tmp"
        fp = json.dumps(self.fingerprint(), sort_keys=True, default=str)
        # plain values and tensors only: read back with weights_only=True
        torch.save({"format": STATE_FORMAT, "position": int(position),
                    "order_sha256": order_sha256(self.order), "adapter": self.adapter_name,
                    "fingerprint": fp, "state": self.engine.adapter.state_dict()}, tmp)
        os.replace(tmp, path)
        self._saved_position = position

    def summary_extra(self) -> Dict[str, object]:
        return dict(super().summary_extra(), stream=self.stream_info())
