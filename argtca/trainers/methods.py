"""The baseline methods: each is its objective, its prompts and its config node — nothing else.
Each is declared with ``argtca.plugins.method`` above its class: its key, label, family and its
node's keys with their facts (``Key``: default, doc, check)."""
from __future__ import annotations

import os
from typing import Dict, List, Tuple

from argtca.config.keys import Key, Range
from argtca.engine.objectives import alpha_beta_for
from argtca.plugins import method
from argtca.utils.io import write_json
from argtca.trainers.attributes import AttributeFile
from argtca.trainers.base import TestTimeTrainer
from argtca.engine import lora as _lora  # noqa: F401  (registration: TTL's engine)


@method("zeroshot", label="Zero-shot CLIP", family="zero-shot", paper=True,
        aliases=("ArgtcaZeroshotCLIP",),   # its name under Dassl (CoOp owns ZeroshotCLIP)
        defaults={"TEMPLATE": Key("a photo of a {}.", "the class prompt; it starts with "
                                  "TTA.CTX_INIT and a space")})
class ZeroshotCLIP(TestTimeTrainer):
    """Zero-shot CLIP with "a photo of a {class}." (the reference row; nothing is tuned)."""
    objective_name, tunes = "none", False

    def prompt_suffixes(self, classnames: List[str]) -> List[str]:
        template = self.node.TEMPLATE
        ctx = self.cfg.TTA.CTX_INIT
        if not template.startswith(ctx + " "):
            raise ValueError(f"TRAINER.ZEROSHOTCLIP.TEMPLATE={template!r} must start with "
                             f"TTA.CTX_INIT={ctx!r} followed by a space")
        return [template[len(ctx) + 1:].format(c) for c in classnames]


@method("tpt", label="TPT", family="tpt-family", paper=True,
        defaults={"ENABLED": Key(True, "placeholder: TPT has no method-specific knob")})
class TPT(TestTimeTrainer):
    objective_name = "tpt"


LAMBDA = Range(lambda v: v >= 0, ">= 0 (the sign is part of the objective)")


@method("ctpt", label="C-TPT", family="tpt-family", paper=True,
        defaults={"LAMBDA": Key(50.0, "weight of C-TPT's dispersion term (its fine-grained "
                                "script)", check=LAMBDA)})
class CTPT(TestTimeTrainer):
    objective_name = "ctpt"


@method("otpt", label="O-TPT", family="tpt-family", paper=True,
        defaults={"LAMBDA": Key(18.0, "weight of O-TPT's orthogonality term (its fine-grained "
                                "script)", check=LAMBDA)})
class OTPT(TestTimeTrainer):
    objective_name = "otpt"


@method("atpt", label="A-TPT", family="tpt-family", paper=True, defaults={
    "LAMBDA": Key(80.0, "weight of A-TPT's angular diversity term (its fine-grained script; the "
                  "paper's sign: -lambda*AD)", check=LAMBDA),
    "TAU": Key(0.99999, "the cosine clamp of the angular diversity",
               check=Range(lambda v: 0 < v <= 1, "(0, 1], the cosine clamp of A-TPT"))})
class ATPT(TestTimeTrainer):
    objective_name = "atpt"


@method("rtpt", label="R-TPT", family="tpt-family", defaults={
    "TOP_K": Key(20, "neighbours a view's reliability averages over (R-TPT rtpt.py get_top_sim: "
                 "k = 20; capped at N_VIEWS - 1)",
                 check=Range(lambda v: v >= 1, ">= 1 (R-TPT: 20)", True)),
    "TEMPERATURE": Key(0.01, "softmax temperature of the reliability (rtpt.py: /0.01)",
                       check=Range(lambda v: v > 0, "> 0 (R-TPT: 0.01)"))})
class RTPT(TestTimeTrainer):
    """R-TPT: TPT's prompt step on the pointwise entropy, then the reliability-weighted ensemble
    of all views (argtca/engine/objectives.py ``rtpt``)."""
    objective_name = "rtpt"


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


# TRAINER.TCA's keys (ArgTCA's node starts with them too)
TCA_DEFAULTS = {
    "NUM_ATTRIBUTES": Key(2, "M': the attributes per class, each one prompt",
                          check=Range(lambda v: v >= 1, ">= 1", True)),
    "ALPHA": Key(10.0, "TCA's weight for M'=2; with AUTO_ALPHA_BETA a value left at this default "
                 "follows M' as TCA's official script sets it (M'=1: 1; M'>=2: 10)",
                 check=Range(lambda v: v >= 0, ">= 0")),
    "BETA": Key(35.0, "TCA's weight for M'=2; with AUTO_ALPHA_BETA a value left at this default "
                "follows M' (M'=1: 10; M'>=2: 35)", check=Range(lambda v: v >= 0, ">= 0")),
    "AUTO_ALPHA_BETA": Key(True, "ALPHA/BETA left at their defaults follow M' (any other value "
                           "wins); False: ALPHA/BETA as given. The run records the resolved "
                           "values"),
    "ENTROPY_INPUT": Key("prob", "\"prob\": the official code (softmax of probabilities); "
                         "\"logprob\": the paper's equations (log p)",
                         choices=("prob", "logprob")),
}


@method("tca", label="TCA", family="tpt-family", paper=True, defaults=TCA_DEFAULTS)
class TCA(AttributeFile, TestTimeTrainer):
    """TCA: one prompt "a photo of a {attribute} {class}." per chosen attribute (M' per class),
    the first M' of the attribute file in file order (the TCA ranking)."""
    objective_name = "tca"

    def auto_values(self, cfg):
        # NUM_ATTRIBUTES >= 1 is checked (its Key) before the config is settled
        from argtca.config.methods import node_of
        return auto_alpha_beta(cfg, node_of(type(self)))

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


# TRAINER.TTL (Imam et al., WACV'25; Razaimam45/TTL-Test-Time-Low-Rank-Adaptation
# scripts/test_ttl.sh): LoRA in the image tower's attention, tuned per image (TTA.STEPS / LR /
# WEIGHT_DECAY: AdamW) on every view's confidence-weighted entropy, reset after each image
TTL_DEFAULTS = {
    "LAYERS": Key([-3, -2, -1], "adapted blocks; negative: from the end (--layer_range 9,11: "
                  "the last 3 of ViT-B/16's 12 blocks); checked against the backbone (check_cfg)"),
    "TARGETS": Key(["q", "v"], "projections with an adapter, of q, k, v, out (LoraConfig "
                   "target_modules q_proj, v_proj); checked in check_cfg"),
    "RANK": Key(16, "r (--rank 16)", check=Range(lambda v: v >= 1, ">= 1 (TTL: 16)", True)),
    "ALPHA": Key(32.0, "lora_alpha: the LoRA term is scaled by ALPHA / RANK",
                 check=Range(lambda v: v > 0, "> 0 (TTL: 32)")),
    "MARGIN": Key(0.4, "a view's weight exp(-(H - MARGIN)) (--deyo_margin_e0 0.4); a factor on "
                  "the whole loss: AdamW ignores it but for eps",
                  check=Range(lambda v: True, "a number (TTL: 0.4)")),
}


@method("ttl", label="TTL", family="tpt-family", defaults=TTL_DEFAULTS)
class TTL(TestTimeTrainer):
    """TTL: low-rank adapters in the image tower's attention, tuned per image on the views'
    confidence-weighted entropy and reset after it (argtca/engine/lora.py; the objective:
    argtca/engine/objectives.py ``ttl``); class prompts, frozen."""
    objective_name = "ttl"
    engine_name = "lora"

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


# TRAINER.RLCF: the official mzhaoshuai/RLCF TPT/scripts/rlcf-prompt.sh (ImageNet family) and
# rlcf-prompt-fine.sh (fine-grained sets), ViT-B/16 policy
RLCF_DEFAULTS = {
    "REWARD_BACKBONE": Key("ViT-L/14", "the reward CLIP (--reward_arch); \"\": the policy's "
                           "MODEL.BACKBONE.NAME (TTA-VLM: the policy itself)"),
    "REWARD_PRETRAINED": Key("openai", "its weights, as MODEL.PRETRAINED takes them (a tag, a "
                             "file, hf-hub:); \"\": MODEL.PRETRAINED"),
    "SAMPLE_K": Key(3, "sampled classes per view: its top-k (--sample_k 3)",
                    check=Range(lambda v: v >= 1, ">= 1 (RLCF: 3), at most the classes", True)),
    "CLIPSCORE_WEIGHT": Key(2.5, "reward = w * max(cos, 0) (CLIPRewards clipscore_weight)",
                            check=Range(lambda v: v > 0, "> 0 (RLCF: 2.5)")),
    "REWARD_PROCESS": Key(True, "subtract the mean reward (--reward_process 1)"),
    "PROCESS_BATCH": Key(False, "mean over all views' samples, not a view's k (--process_batch "
                         "0)"),
    "REWARD_AMPLIFY": Key(False, "also divide by the std + 1e-5 (--reward_amplify 0)"),
    "AUTO_STEPS": Key(True, "TTA.STEPS left at its default (1) -> the official scripts' steps "
                      "for DATASET.NAME: 5 on the fine-grained sets, 3 on the ImageNet family "
                      "and any other dataset; another TTA.STEPS wins; False: TTA.STEPS as given"),
}


@method("rlcf", label="RLCF", family="tpt-family", defaults=RLCF_DEFAULTS)
class RLCF(TestTimeTrainer):
    """RLCF (Zhao et al., ICLR'24; mzhaoshuai/RLCF ``TPT/tpt_cls_rl.py``): TPT's prompt tuning on
    a REINFORCE loss rewarded by a second, frozen CLIP (``TRAINER.RLCF.REWARD_*``;
    argtca/models/reward.py, argtca/engine/objectives.py ``rlcf_loss``)."""
    objective_name = "rlcf"

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
