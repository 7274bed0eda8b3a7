"""The test-time trainer: one loop for every method (Dassl-style hooks).

A method is a subclass that names its objective, its prompts and its config node; the loop —
views, episodic tuning, records, resume, metrics — is shared. ``TestTimeTrainer(cfg).test()`` runs a
whole evaluation and returns the summary dict.
"""
from __future__ import annotations

import os
import time
from typing import Dict, List, Optional, Tuple

import torch

from argtca.config import check_cfg_values, get_cfg_default
from argtca.engine.objectives import Objective
from argtca.run_folder import RecordWriter, config_hash, experiment_hash, flatten_cfg
from argtca.utils.io import write_json
from argtca.engine import fast as _fast, features as _features  # noqa: F401  (registration)
from argtca.engine import reference as _reference  # noqa: F401  (registration)
from argtca.registry import ENGINE_REGISTRY, OBJECTIVE_REGISTRY
from argtca.utils.seed import set_random_seed
from argtca.trainers.identity import RunIdentity, input_hashes


def timing_line(timing: Dict[str, object], n: int) -> str:
    """One line of a loop's ``timing`` (:meth:`TestTimeTrainer.finish`) over ``n`` images."""
    loop = float(timing.get("loop_s", 0.0))
    parts = [f"{n} images in {loop:.1f} s, {n / loop:.1f} img/s" if loop > 0 else f"{n} images"]
    labels = (("prepare_s", "prepare {:.1f} s"), ("first_batch_s", "first batch done at {:.1f} s"),
              ("steady_img_per_s", "then {:.1f} img/s"))
    inner = [text.format(float(timing[key])) for key, text in labels if key in timing]
    if inner:
        parts.append("(" + ", ".join(inner) + ")")
    if timing.get("ranks"):
        parts.append(f"over {len(timing['ranks'])} ranks")
    return " ".join(parts)


def zeroshot_cfg(cfg):
    """``cfg`` as a zero-shot pass sees it: one view (view 0) and no tuning step."""
    c = cfg.clone()
    c.defrost()
    c.TTA.STEPS = 0
    c.TTA.N_VIEWS = 1
    c.freeze()
    return c


class TestTimeTrainer(RunIdentity):
    """Base trainer. Subclasses set ``method``, ``label``, ``objective_name`` and may override
    ``prompt_suffixes`` (class prompts by default) and ``check_cfg``. A method is declared once,
    by its registered class (argtca/trainers/catalogue.py lists them): also its ``family`` (a key
    of argtca/config/methods.py FAMILIES, written to summary.json for the report), ``paper``
    (a row of the paper's Table 1) and ``cfg_ranges`` (its config node's value checks)."""

    method = "tpt"
    label = "TPT"
    family = "tpt-family"
    objective_name = "tpt"
    tunes = True
    # the engine this method runs on, read when the config is settled (argtca/config/settle.py):
    # "" any prompt-tuning engine (TTA.ENGINE), "features" for an adapter method (zoo.py), an
    # engine of its own (TTL's "lora")
    engine_name = ""
    # build_model writes files other torchrun ranks read (ArgTCA's Phase-1 cache, a fitted
    # temperature): rank 0 builds first, the others after it; else every rank builds at once
    shared_build = False

    def __init__(self, cfg, dataset=None, device=None):
        self.cfg = cfg
        check_cfg_values(cfg, tunes=self.tunes)   # ranges of every key, also for library use
        self.check_cfg(cfg)
        if device is None:
            device = "cuda" if (cfg.USE_CUDA and torch.cuda.is_available()) else "cpu"
        self.device = torch.device(device)
        self.dataset = dataset
        self.build_data_loader()
        self.resolve_auto()
        # INPUT.SIZE; no CUDA: warn or refuse
        from argtca.models.run_checks import check_before_run
        check_before_run(self.run_cfg, self.device, len(self.dataset.test))
        self.load_initial_context()
        self.model = None

    def resolve_auto(self) -> None:
        """Replace the configuration's "auto" values (engine, compilation, loader workers, and the
        method's own: :meth:`auto_values`) by what they resolve to here, before anything is
        fingerprinted (argtca/config/settle.py): the one place the config is settled. It reads
        the method's declared ``engine_name`` and ``label``."""
        from argtca.config.settle import resolve_auto, settle_prompts
        settle_prompts(self.cfg, self.engine_name, self.label)
        own, own_lines = self.auto_values(self.cfg)
        self.cfg, lines = resolve_auto(self.cfg, self.device.type, self.planned_images(),
                                       runs_on=self.engine_name, label=self.label, also=own)
        lines = own_lines + lines
        # the views pipeline (TTA.VIEWS_DEVICE x VIEWS_FLOAT x VIEWS_OPS), settled here with the
        # rest of the configuration: recorded in summary.json and log.txt
        from argtca.config import ConfigError
        from argtca.views.loader import settle_views
        try:
            self.views_pipeline = settle_views(self.run_cfg, self.device)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if lines and self.cfg.get("VERBOSE", True):
            print("\n".join(f"argtca: {line}" for line in lines), flush=True)

    # ---------------------------------------------------------------- Dassl-style hooks
    @property
    def node(self):
        """Its config node ``TRAINER.<NODE>`` (declared with argtca.plugins.method)."""
        from argtca.config.methods import node_of
        return self.cfg.TRAINER.get(node_of(type(self)))

    def check_cfg(self, cfg) -> None:
        pass

    def auto_values(self, cfg) -> Tuple[Dict[Tuple[str, ...], object], List[str]]:
        """The method's own "auto" values ({key path: value}, a log line each; TCA: ALPHA/BETA
        by M'), settled with the engine's by :meth:`resolve_auto` in the one clone of the
        config, before anything is fingerprinted."""
        return {}, []

    def build_data_loader(self) -> None:
        if self.dataset is None:
            from argtca.datasets import build_dataset
            self.dataset = build_dataset(self.cfg)
        self.classnames = [c.replace("_", " ") for c in self.dataset.classnames]
        self.lab2cname = dict(enumerate(self.classnames))

    def build_objective(self) -> Objective:
        return OBJECTIVE_REGISTRY.get(self.objective_name)(self.node)

    def prompt_suffixes(self, classnames: List[str]) -> List[str]:
        return [f"{c}." for c in classnames]

    def load_initial_context(self) -> None:
        """TTA.CTX_CHECKPOINT: CoOp's learned context, read and checked (n_ctx) at load time; the
        backbone width is checked once CLIP is built (argtca/models/coop_ckpt.py)."""
        self.coop_context = None
        path = str(self.cfg.TTA.get("CTX_CHECKPOINT", "") or "").strip()
        if path:
            from argtca.models.coop_ckpt import check_context, load_coop_context
            self.coop_context = load_coop_context(path, int(self.cfg.TTA.CTX_CHECKPOINT_EPOCH))
            ctx = self.coop_context["ctx"]
            check_context(ctx, int(self.cfg.TTA.N_CTX), ctx.shape[1],
                          self.cfg.MODEL.BACKBONE.NAME, self.coop_context["file"])

    def prepare(self) -> None:
        """Everything that must happen before tuning starts (e.g. ArgTCA's Phase 1)."""

    def build_model(self) -> None:
        from argtca.utils.hashing import expected_inputs
        # the weights read are the weights the fingerprint names (hashed and deserialized from
        # one read: a file rewritten since the run hashed it is refused, argtca/utils/hashing.py)
        fp = self.fingerprint()
        with expected_inputs(self.input_paths, input_hashes(fp)):
            self._build_model()

    def _build_model(self) -> None:
        from argtca.models.clip import load_clip
        from argtca.models.text import PromptTextEncoder
        self.model, self.tokenizer = load_clip(self.cfg, self.device)
        self.objective = self.build_objective()
        self.prepare()
        suffixes = self.prompt_suffixes(self.classnames)
        coop = getattr(self, "coop_context", None)
        if coop is not None:   # CoOp's placeholders "X X .. X", then its learned vectors
            from argtca.models.coop_ckpt import check_context, placeholder_init
            check_context(coop["ctx"], int(self.cfg.TTA.N_CTX),
                          int(self.model.token_embedding.weight.shape[1]),
                          self.cfg.MODEL.BACKBONE.NAME, coop["file"])
        init_words = (placeholder_init(self.cfg.TTA.N_CTX) if coop is not None
                      else self.cfg.TTA.CTX_INIT)
        self.text_encoder = PromptTextEncoder(self.model, self.tokenizer, suffixes,
                                              ctx_init=init_words,
                                              n_ctx=int(self.cfg.TTA.N_CTX)).to(self.device)
        if coop is not None:
            self.text_encoder.set_context(coop["ctx"])
        self.engine = self.build_engine()

    def planned_images(self) -> int:
        """The test images the size-dependent auto choices plan for: ``TTA.FAST.AUTO_IMAGES``
        (the whole-table benchmark's short runs: the published size), else the test set's."""
        return int(self.cfg.TTA.FAST.get("AUTO_IMAGES", 0)) or len(self.dataset.test)

    def build_engine(self):
        """The registered engine ``TTA.ENGINE`` (resolved by :meth:`resolve_auto`), built on the
        configuration the engine sees; its settings come from that configuration."""
        from argtca.engine.distributed import world_size
        world = max(1, world_size())
        eng = ENGINE_REGISTRY.get(self.cfg.TTA.ENGINE)(
            self.model, self.text_encoder, self.objective, self.run_cfg, self.device,
            n_images=-(-self.planned_images() // world),                   # images of this rank
            **self.engine_kwargs())
        why = getattr(eng, "grad_mode_why", "")
        if why and self.cfg.get("VERBOSE", True):
            print(f"argtca: {why}", flush=True)
        return eng

    def engine_kwargs(self) -> Dict[str, object]:
        """Keyword arguments of the engine beyond the registry's common ones (the features
        engine: the method's adapter)."""
        return {}

    @property
    def run_cfg(self):
        """The configuration the engine sees (zero-shot runs one view and no step)."""
        return self.cfg if self.tunes else zeroshot_cfg(self.cfg)

    # ---------------------------------------------------------------- identity of a run
    @property
    def selector(self) -> Optional[str]:
        return None

    @property
    def display_label(self) -> str:
        return self.label

    def summary_extra(self) -> Dict[str, object]:
        """Method-specific entries of summary.json (ArgTCA: the selector that ran, and its file)."""
        return {}

    # ---------------------------------------------------------------- the loop
    def test(self) -> Dict[str, object]:
        cfg = self.cfg
        set_random_seed(int(cfg.SEED))
        out_dir = self.output_dir()
        print(f"argtca: run folder {os.path.abspath(out_dir)}", flush=True)
        from argtca.trainers.notes import note_lines
        for line in note_lines(self):   # once, before the first image (and in the result block)
            print(f"argtca: note: {line}", flush=True)
        # the folder, its lock, config.json and the records checked; what a run that fails
        # before its first record made is removed (argtca/run_folder/session.py)
        with self.run_session(out_dir) as session:
            return self._test_in(session)

    def _test_in(self, session) -> Dict[str, object]:
        from argtca.metrics import RunningCalibration
        from argtca.utils.console import progress

        cfg = self.cfg
        out_dir, fp, records = session.out_dir, session.fingerprint, session.records
        rec_path = session.records_path
        records = self.resume_records(out_dir, records)
        n_total = len(self.dataset.test)
        todo = self.pending_indices(records, n_total)
        if records:   # the same words whichever command runs it (table1's say it too)
            print(f"argtca: {'resumed at' if todo else 'already finished (re-read):'} "
                  f"{len(records)} of {n_total} images (records.jsonl)", flush=True)

        running = RunningCalibration(n_bins=20)
        for r in sorted(records, key=lambda r: r["index"]):
            running.update([r["conf"]], [r["pred"] == r["label"]])
        if todo:
            # the loader's workers start first: they fork from a process without the model or a
            # CUDA context and make their first batches while the model is built
            loader = self.views_loader(todo).start()
            if self.model is None:
                self.build_model()
            self.before_loop(out_dir)
            writer = RecordWriter(rec_path)
            bar = progress(n_total, len(records), f"{self.display_label} {self.dataset.name}",
                           enabled=bool(cfg.VERBOSE))   # stderr; lines per 10 % in a log
            t0 = time.time()
            from argtca.utils.host import loop_threads
            from argtca.engine.pipeline import loop_timing, predictions
            clock = {}
            try:
                # one batch in flight on the device while the last one's records are written
                with loop_threads(cfg):
                    self._loop(predictions(self.engine, loader, clock), writer, records, running,
                               bar)
            finally:
                writer.close()
                bar.close()
            elapsed = time.time() - t0
            timing = dict(loop_timing(clock, getattr(loader, "seconds", None)),
                          loop_s=round(elapsed, 2))
        else:
            elapsed, timing = 0.0, None
        return self.finish(out_dir, records, fp, elapsed, len(todo), timing)

    # ---------------------------------------------------------------- loop hooks
    def resume_records(self, out_dir: str, records: List[dict]) -> List[dict]:
        """The records a resumed run keeps (all of them; the stream trainer drops those made
        after its last state checkpoint)."""
        return records

    def pending_indices(self, records: List[dict], n_total: int) -> List[int]:
        """The test indices still to run, in the order they run (index order here)."""
        done = {r["index"] for r in records}
        return [i for i in range(n_total) if i not in done]

    def before_loop(self, out_dir: str) -> None:
        """Called once the model is built, before the first batch (the stream trainer restores
        its adapter's state here)."""

    def after_batch(self, records: List[dict]) -> None:
        """Called after each batch's records are written (the stream trainer checkpoints)."""

    def views_loader(self, indices: List[int]):
        """The test loop's loader over ``indices`` of the test set. ``TTA.VIEWS_DEVICE`` "cpu":
        TPT's exact PIL views; "cpu-fast": the same draws, faster ops; "gpu": the same transforms
        on the device (argtca/views/gpu.py)."""
        from argtca.views.loader import build_views_loader
        cfg = self.cfg
        return build_views_loader(self.run_cfg, self.dataset, int(cfg.SEED), indices,
                                  self.batch_images, self.device, int(cfg.DATALOADER.NUM_WORKERS),
                                  int(cfg.DATALOADER.PREFETCH))

    def _loop(self, results, writer, records, running, bar) -> None:
        """Record every (batch, probabilities) of the test loop as it comes."""
        from argtca.engine.reference import raise_if_non_finite_probs
        from argtca.trainers.contract import checked_predictions
        # a plug-in method's answers are checked before they are recorded (one line naming it)
        for batch, probs in checked_predictions(self, results):
            # never write a non-finite prediction (the engines check it too)
            raise_if_non_finite_probs(probs, batch["path"], getattr(self.engine, "hint", ""))
            recs = self.make_records(batch, probs)
            writer.write(recs)
            records.extend(recs)
            self.after_batch(records)
            running.update([r["conf"] for r in recs], [r["pred"] == r["label"] for r in recs])
            bar.update(len(recs))
            bar.set_postfix(acc=f"{running.accuracy:.2f}", ece=f"{running.ece:.2f}")

    @property
    def batch_images(self) -> int:
        """Images per loader batch: ``TTA.BATCH_IMAGES`` for an engine that tunes them together
        (its registered class's ``batched``), else 1."""
        batched = ENGINE_REGISTRY.get(self.cfg.TTA.ENGINE).batched
        return int(self.cfg.TTA.BATCH_IMAGES) if batched else 1

    def make_records(self, batch, probs: torch.Tensor) -> List[dict]:
        conf, pred = probs.max(-1)
        out = []
        for j in range(probs.shape[0]):
            y = int(batch["label"][j])
            onehot = torch.zeros_like(probs[j])
            if y >= 0:   # -1: an OOD image (argtca/datasets/ood.py), no class is its own
                onehot[y] = 1.0
            out.append({"index": int(batch["index"][j]), "path": batch["path"][j], "label": y,
                        "pred": int(pred[j]), "conf": float(conf[j]),
                        "p_label": float(probs[j, y]) if y >= 0 else 0.0,
                        "brier": float(((probs[j] - onehot) ** 2).sum())})
        return out

    def finish(self, out_dir, records, fp, elapsed, n_new,
               timing: Optional[Dict[str, object]] = None) -> Dict[str, object]:
        """Metrics of ``records``, ``summary.json`` and the result block. ``timing``: this
        session's loop timeline (:func:`argtca.engine.pipeline.loop_timing` plus ``loop_s``; a
        torchrun job adds ``ranks``, one per rank), stored as ``summary["timing"]``."""
        from argtca.metrics import compute_metrics
        records = sorted(records, key=lambda r: r["index"])
        m = compute_metrics([r["conf"] for r in records], [r["pred"] for r in records],
                            [r["label"] for r in records], p_label=[r["p_label"] for r in records],
                            brier=[r["brier"] for r in records], n_bins=20)
        flat = flatten_cfg(self.cfg)
        summary = {
            "method": self.method, "selector": self.selector, "label": self.display_label,
            "family": self.family,
            "trainer": type(self).__name__, "dataset": self.dataset.name,
            "dataset_key": self.dataset.key or self.dataset.name.lower(),
            "seed": int(self.cfg.SEED),
            "n": len(records), "accuracy": m["accuracy"], "ece": m["ece"], "adaece": m["adaece"],
            "mce": m["mce"], "nll": m["nll"], "brier": m["brier"],
            "backbone": self.cfg.MODEL.BACKBONE.NAME, "pretrained": self.cfg.MODEL.PRETRAINED,
            "config_hash": config_hash(fp), "experiment": experiment_hash(fp),
            "inputs": {role: {"path": getattr(self, "input_paths", {}).get(role, ""),
                              "sha256": digest} for role, digest in input_hashes(fp).items()},
            "overrides": self.overrides(),
            "trainer_cfg": {k: v for k, v in flat.items()
                            if k.startswith(f"TRAINER.{type(self).__name__.upper()}.")},
            "engine": str(self.cfg.TTA.ENGINE), "device": str(self.device),
            "views_pipeline": getattr(self, "views_pipeline", ""),
            "seconds_this_session": round(elapsed, 2), "images_this_session": n_new,
        }
        if timing:
            summary["timing"] = timing
        summary.update(self.summary_extra())
        from argtca.trainers.notes import note_lines, run_notes
        summary.update(run_notes(self))   # an inactive mechanism, OOD images of ID classes
        write_json(os.path.join(out_dir, "summary.json"), summary)
        lines = ["=> result", f"* total: {len(records)}", f"* accuracy: {m['accuracy']:.2f}%",
                 f"* ece: {m['ece']:.2f}%", f"* adaece: {m['adaece']:.2f}%",
                 f"* mce: {m['mce']:.2f}%",
                 f"* views: {getattr(self, 'views_pipeline', '')}"] + [
            f"* note: {x}" for x in note_lines(self)]
        if timing and n_new:
            lines.append(f"* time: {timing_line(timing, n_new)}")
        header = f"{self.display_label} on {self.dataset.name}, seed {self.cfg.SEED}"
        self.log_result(out_dir, header, lines)
        return summary

    def overrides(self) -> Dict[str, object]:
        """The keys of this run's configuration that differ from argtca's defaults (summary.json
        ``overrides``; the output folder aside)."""
        default = flatten_cfg(get_cfg_default())
        return {k: v for k, v in flatten_cfg(self.cfg).items()
                if default.get(k) != v and k != "OUTPUT_DIR"}

    def log_result(self, out_dir: str, header: str, lines: List[str]) -> None:
        """The one writer of the result block. Here: a short block on the console and the full
        block appended to ``<out_dir>/log.txt``, where CoOp's ``parse_test_res.py --test-log``
        looks for it. Under Dassl (argtca.dassl_plugin) Dassl's logger owns log.txt and this is
        replaced by a print through it."""
        print("\n".join(lines[:4] + [ln for ln in lines if ln.startswith("* time:")]
                        + [f"* output: {os.path.abspath(out_dir)}"]))
        with open(os.path.join(out_dir, "log.txt"), "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {header}\n" + "\n".join(lines) + "\n")
