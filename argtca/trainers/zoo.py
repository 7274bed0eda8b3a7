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
the same batches, so its records equal an uninterrupted run's. The stream is one value,
:class:`argtca.trainers.stream.Stream`; the trainer's loop hooks hand it what they have.
"""
from __future__ import annotations

from typing import Dict, List

from argtca.config import ConfigError
from argtca.config.methods import node_of
from argtca.registry import ADAPTER_REGISTRY, load_builtin_methods
from argtca.trainers.attributes import GRAPH_NODE, AttributePrompts, ClassPrompts
from argtca.trainers.base import TestTimeTrainer
from argtca.trainers.stream import Stream


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
        adapter that tunes prompts (``needs_text_tower``, DynaPrompt) gets the engine's text
        tower alone (``tower=``: TunableText), never the engine."""
        cls, scale = self.adapter_cls, float(self.model.logit_scale.exp())
        if getattr(cls, "needs_engine", False):   # the trait's name before TunableText
            raise ConfigError(
                f"method {self.method}: adapter {cls.__module__}.{cls.__qualname__} declares "
                f"needs_engine, which is now needs_text_tower = True: it is built with "
                f"tower= (argtca/engine/reference.py TunableText: tower(ctx), tower.ctx_init, "
                f"tower.amp, tower.autocast()) instead of engine=")

        def make(text):
            more = ({"tower": self.engine.tunable_text()}
                    if getattr(cls, "needs_text_tower", False) else {})
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
class StreamTrainer(FeatureTrainer):
    """An online method: one stream over the test set in a seeded order, state carried. The
    stream (order, position, resume decision, checkpoints) is :attr:`stream`
    (argtca/trainers/stream.py); the hooks below hand it what the loop has."""

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
    def stream(self) -> Stream:
        """This run's stream over the test set (``TTA.STREAM``), made on first use."""
        if getattr(self, "_stream", None) is None:
            self._stream = Stream.of(self.cfg, len(self.dataset.test))
        return self._stream

    def fingerprint_extra(self) -> Dict[str, object]:
        # in config.json (a resume refuses another order); with the default TTA.STREAM.SEED the
        # order follows the seed and stays out of the experiment's hash (run_folder.seed_axis_keys)
        return dict(super().fingerprint_extra(), **self.stream.fingerprint_keys())

    @property
    def checkpoint_every(self) -> int:
        """Images between state checkpoints, a whole number of batches (so that a resumed run
        makes the same batches, and the same floating-point sums, as an uninterrupted one)."""
        b = max(1, self.batch_images)
        return max(1, -(-int(self.cfg.TTA.STREAM.CHECKPOINT_IMAGES) // b)) * b

    def resume_records(self, out_dir: str, records: List[dict]) -> List[dict]:
        return self.stream.resume(out_dir, records, self.fingerprint(), self.adapter_name)

    def pending_indices(self, records: List[dict], n_total: int) -> List[int]:
        return self.stream.pending(records)

    def before_loop(self, out_dir: str) -> None:
        self.engine.prepare()
        adapter = self.engine.adapter
        if not getattr(adapter, "online", False):
            raise TypeError(f"{type(self).__name__}: adapter {self.adapter_name!r} is not online")
        self.stream.restore(adapter, self.label)

    def make_records(self, batch, probs) -> List[dict]:
        recs = super().make_records(batch, probs)
        for r in recs:
            r["stream_pos"] = self.stream.position_of(r["index"])
        return recs

    def after_batch(self, records: List[dict]) -> None:
        if self.stream.due(len(records), self.checkpoint_every):
            self.save_state(len(records))

    def save_state(self, position: int) -> None:
        self.stream.save(position, self.engine.adapter.state_dict(), self.fingerprint(),
                         self.adapter_name)

    def summary_extra(self) -> Dict[str, object]:
        return dict(super().summary_extra(), stream=self.stream.info())
