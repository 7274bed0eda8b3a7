"""The baseline methods: each is its objective, its prompts and its config node — nothing else."""
from __future__ import annotations

import os
from typing import Dict, List, Tuple

from argtca.config.checks import Range
from argtca.engine.objectives import alpha_beta_for
from argtca.utils.io import write_json
from argtca.registry import TRAINER_REGISTRY
from argtca.trainers.attributes import AttributeFile
from argtca.trainers.base import TestTimeTrainer
from argtca.engine import lora as _lora  # noqa: F401  (registration: TTL's engine)


@TRAINER_REGISTRY.register()
class ZeroshotCLIP(TestTimeTrainer):
    """Zero-shot CLIP with "a photo of a {class}." (the reference row; nothing is tuned)."""
    method, label, objective_name, tunes = "zeroshot", "Zero-shot CLIP", "none", False
    family, paper = "zero-shot", True
    aliases = ("ArgtcaZeroshotCLIP",)   # its name under Dassl (CoOp owns ZeroshotCLIP)

    def prompt_suffixes(self, classnames: List[str]) -> List[str]:
        template = self.node.TEMPLATE
        ctx = self.cfg.TTA.CTX_INIT
        if not template.startswith(ctx + " "):
            raise ValueError(f"TRAINER.ZEROSHOTCLIP.TEMPLATE={template!r} must start with "
                             f"TTA.CTX_INIT={ctx!r} followed by a space")
        return [template[len(ctx) + 1:].format(c) for c in classnames]


@TRAINER_REGISTRY.register()
class TPT(TestTimeTrainer):
    method, label, objective_name, paper = "tpt", "TPT", "tpt", True


LAMBDA = Range(lambda v: v >= 0, ">= 0 (the sign is part of the objective)")


@TRAINER_REGISTRY.register()
class CTPT(TestTimeTrainer):
    method, label, objective_name, paper = "ctpt", "C-TPT", "ctpt", True
    cfg_ranges = {"LAMBDA": LAMBDA}


@TRAINER_REGISTRY.register()
class OTPT(TestTimeTrainer):
    method, label, objective_name, paper = "otpt", "O-TPT", "otpt", True
    cfg_ranges = {"LAMBDA": LAMBDA}


@TRAINER_REGISTRY.register()
class ATPT(TestTimeTrainer):
    method, label, objective_name, paper = "atpt", "A-TPT", "atpt", True
    cfg_ranges = {"LAMBDA": LAMBDA,
                  "TAU": Range(lambda v: 0 < v <= 1, "(0, 1], the cosine clamp of A-TPT")}


@TRAINER_REGISTRY.register()
class RTPT(TestTimeTrainer):
    """R-TPT: TPT's prompt step on the pointwise entropy, then the reliability-weighted ensemble
    of all views (argtca/engine/objectives.py ``rtpt``)."""
    method, label, objective_name = "rtpt", "R-TPT", "rtpt"
    cfg_ranges = {"TOP_K": Range(lambda v: v >= 1, ">= 1 (R-TPT: 20)", True),
                  "TEMPERATURE": Range(lambda v: v > 0, "> 0 (R-TPT: 0.01)")}


def auto_alpha_beta(cfg, node_name: str) -> Tuple[Dict[Tuple[str, ...], float], List[str]]:
    """With ``TRAINER.<node>.AUTO_ALPHA_BETA``, ``ALPHA``/``BETA`` left at their defaults (TCA's
    M'=2 values) -> TCA's values for NUM_ATTRIBUTES; any other value wins. Returns ({key path:
    the value the run uses}, its log line) for :meth:`TestTimeTrainer.auto_values`."""
    from argtca.config import get_cfg_default
    node = cfg.TRAINER[node_name]
    if not bool(node.get("AUTO_ALPHA_BETA", False)):
        return {}, []
    m = int(node.NUM_ATTRIBUTES)
    values = dict(zip(("ALPHA", "BETA"), alpha_beta_for(m)))
    default = get_cfg_default().TRAINER[node_name]
    auto = [k for k in ("ALPHA", "BETA")
            if float(node[k]) == float(default[k]) and float(node[k]) != values[k]]
    if not auto:
        return {}, []
    more = " (TCA's script defines M'=1, 2; larger M' keep M'=2's values)" if m > 2 else ""
    return ({("TRAINER", node_name, k): values[k] for k in auto},
            [f"TRAINER.{node_name}." + ", ".join(f"{k}={values[k]:g}" for k in auto)
             + f" by NUM_ATTRIBUTES={m} (auto){more}"])


@TRAINER_REGISTRY.register()
class TCA(AttributeFile, TestTimeTrainer):
    """TCA: one prompt "a photo of a {attribute} {class}." per chosen attribute (M' per class),
    the first M' of the attribute file in file order (the TCA ranking)."""
    method, label, objective_name, paper = "tca", "TCA", "tca", True
    cfg_ranges = {"NUM_ATTRIBUTES": Range(lambda v: v >= 1, ">= 1", True),
                  "ALPHA": Range(lambda v: v >= 0, ">= 0"),
                  "BETA": Range(lambda v: v >= 0, ">= 0"),
                  "ENTROPY_INPUT": ("prob", "logprob")}

    def auto_values(self, cfg):
        # NUM_ATTRIBUTES >= 1 is in cfg_ranges, checked before the config is settled
        return auto_alpha_beta(cfg, type(self).__name__.upper())

    def build_data_loader(self) -> None:
        super().build_data_loader()
        # fail at load time, before any model is built or image tuned
        self.attributes = self.choose_attributes()

    def choose_attributes(self):
        m = int(self.node.NUM_ATTRIBUTES)
        lists = self.load_attribute_lists(m)
        return {c: lists[c][:m] for c in self.classnames}

    def prepare(self) -> None:
        # the attributes this run used, in the same place/format as ArgTCA's Phase-1 result, so
        # that reports can put TCA's picks beside the graph selectors'
        write_json(os.path.join(self.output_dir(), "phase1.json"),
                   {"selector": "tca", "selected": self.attributes,
                    "note": "TCA: the first M' attributes of each class in file order; no graph"},
                   default=str)

    def prompt_suffixes(self, classnames: List[str]) -> List[str]:
        return [f"{a} {c}." for c in classnames for a in self.attributes[c]]


def _ttl_blocks(cfg):
    """The adapted blocks of TRAINER.TTL.LAYERS on the backbone's image tower, from its open_clip
    config (before any weight is read); ConfigError naming the value."""
    from argtca.config import ConfigError
    from argtca.models.backbones import open_clip_name
    from argtca.models.lean import open_clip
    from argtca.models.lora import resolve_layers
    backbone = str(cfg.MODEL.BACKBONE.NAME)
    vision = (open_clip.get_model_config(open_clip_name(backbone)) or {}).get("vision_cfg") or {}
    n = vision.get("layers")
    if not isinstance(n, int) or vision.get("timm_model_name"):
        raise ConfigError(f"TTL adapts the attention of a ViT image tower; MODEL.BACKBONE.NAME="
                          f"{backbone} has none (use a ViT backbone, e.g. ViT-B/16)")
    layers = list(cfg.TRAINER.TTL.LAYERS)
    from argtca.config import get_cfg_default
    default = list(get_cfg_default().TRAINER.TTL.LAYERS)
    if layers == default and n < len(default):
        # the default, "the last three blocks", on a shallower tower: every block it has (a
        # value the user gave is taken as given)
        layers = [i for i in layers if -n <= i < n]
    try:
        return resolve_layers(layers, n)
    except ValueError as e:
        raise ConfigError(f"TRAINER.TTL.LAYERS={list(cfg.TRAINER.TTL.LAYERS)}: {e} of "
                          f"{backbone}") from None


@TRAINER_REGISTRY.register()
class TTL(TestTimeTrainer):
    """TTL: low-rank adapters in the image tower's attention, tuned per image on the views'
    confidence-weighted entropy and reset after it (argtca/engine/lora.py; the objective:
    argtca/engine/objectives.py ``ttl``); class prompts, frozen."""
    method, label, objective_name = "ttl", "TTL", "ttl"
    engine_name = "lora"
    cfg_ranges = {"RANK": Range(lambda v: v >= 1, ">= 1 (TTL: 16)", True),
                  "ALPHA": Range(lambda v: v > 0, "> 0 (TTL: 32)"),
                  "MARGIN": Range(lambda v: True, "a number (TTL: 0.4)")}

    def check_cfg(self, cfg) -> None:
        from argtca.config import ConfigError
        from argtca.models.lora import TARGETS
        targets = list(cfg.TRAINER.TTL.TARGETS)
        if not targets or any(t not in TARGETS for t in targets) \
                or len(set(targets)) != len(targets):
            raise ConfigError(f"TRAINER.TTL.TARGETS={targets} (allowed: distinct names among "
                              f"{', '.join(TARGETS)}; TTL: q, v)")
        self.lora_blocks = _ttl_blocks(cfg)

    def engine_kwargs(self) -> Dict[str, object]:
        node = self.node
        return {"layers": self.lora_blocks, "rank": int(node.RANK), "alpha": float(node.ALPHA),
                "targets": list(node.TARGETS), "seed": int(self.cfg.SEED)}

    def summary_extra(self) -> Dict[str, object]:
        return {"lora_blocks": list(self.lora_blocks)}

# RLCF's official steps: rlcf-prompt-fine.sh (the fine-grained sets) 5, rlcf-prompt.sh (the
# ImageNet family) 3; a dataset's ``fine_grained`` is TPT's rule that also turns AugMix on
RLCF_STEPS = {True: 5, False: 3}


@TRAINER_REGISTRY.register()
class RLCF(TestTimeTrainer):
    """RLCF (Zhao et al., ICLR'24; mzhaoshuai/RLCF ``TPT/tpt_cls_rl.py``): TPT's prompt tuning on
    a REINFORCE loss rewarded by a second, frozen CLIP (``TRAINER.RLCF.REWARD_*``;
    argtca/models/reward.py, argtca/engine/objectives.py ``rlcf_loss``)."""
    method, label, objective_name = "rlcf", "RLCF", "rlcf"
    cfg_ranges = {"SAMPLE_K": Range(lambda v: v >= 1, ">= 1 (RLCF: 3), at most the classes",
                                    True),
                  "CLIPSCORE_WEIGHT": Range(lambda v: v > 0, "> 0 (RLCF: 2.5)")}

    def check_cfg(self, cfg) -> None:
        from argtca.models.reward import check_reward
        check_reward(cfg)   # a backbone open_clip knows, a weights file that exists

    def build_data_loader(self) -> None:
        super().build_data_loader()
        k, n = int(self.node.SAMPLE_K), len(self.classnames)
        if k > n:
            from argtca.config import ConfigError
            raise ConfigError(f"TRAINER.RLCF.SAMPLE_K={k} (allowed: at most the {n} classes of "
                              f"{self.dataset.name}): set TRAINER.RLCF.SAMPLE_K {min(3, n)}")

    def auto_values(self, cfg):
        from argtca.config import get_cfg_default
        if not bool(cfg.TRAINER.RLCF.AUTO_STEPS) or int(cfg.TTA.STEPS) != int(
                get_cfg_default().TTA.STEPS):
            return {}, []
        fine = bool(getattr(self.dataset, "fine_grained", False))
        steps = RLCF_STEPS[fine]
        if steps == int(cfg.TTA.STEPS):
            return {}, []
        return ({("TTA", "STEPS"): steps},
                [f"TTA.STEPS={steps} for {self.dataset.name} (RLCF's "
                 f"{'fine-grained' if fine else 'ImageNet-family'} script; "
                 f"TRAINER.RLCF.AUTO_STEPS False to run TTA.STEPS as given)"])

    def more_weights(self):
        from argtca.models.reward import NODE, is_policy, reward_spec
        return [] if is_policy(self.cfg) else [(f"{NODE}.REWARD", *reward_spec(self.cfg))]

    def input_files(self):
        from argtca.models.reward import reward_weights_file
        files = super().input_files()
        path = reward_weights_file(self.cfg)
        if path:   # another reward model is another experiment
            files["TRAINER.RLCF.REWARD_PRETRAINED"] = path
        return files

    def build_objective(self):
        from argtca.models.reward import load_reward
        obj = super().build_objective()
        # the reward's class text: the policy's initial prompt words, "a photo of a {class}."
        # (the official tokenized_prompts of the prompt learner, CTX_INIT's words also under CoOp)
        prompts = [f"{self.cfg.TTA.CTX_INIT} {s}" for s in self.prompt_suffixes(self.classnames)]
        obj.reward = load_reward(self.cfg, self.device, (self.model, self.tokenizer), prompts)
        return obj
