"""Every default of argtca lives here (yacs). Per-method nodes are ``TRAINER.<NAME>``; the range of
each value is checked in ``checks.py``.

``configs/trainers/<method>.yaml`` restates the papers' ViT-B/16 values for each method and
``configs/datasets/<name>.yaml`` names the dataset; both are merged on top of these defaults.
Unknown keys in a YAML file or on the command line are errors (yacs behaviour, kept on purpose).
"""
from __future__ import annotations

from ast import literal_eval

from yacs.config import CfgNode as CN

from argtca.config.keys import Key, Range, declare


# keys that take "auto", "on" or "off": YAML reads a bare on/off as a bool (and older configs wrote
# ``TTA.COMPILE True``), so a bool given for one of them is read as "on"/"off"
SWITCH_KEYS = ("TTA.COMPILE", "TTA.FAST.COMPILE_IMAGE", "TTA.FAST.COMPILE_TEXT",
               "TTA.FAST.COMPILE_TEXT_GRAD", "TTA.FAST.CUDA_GRAPH")


def _as_switch(value):
    """A bool (or "True"/"False") -> "on"/"off"; anything else unchanged."""
    if isinstance(value, str) and value.strip() in ("True", "False"):
        value = value.strip() == "True"
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


def _as_size_pair(value):
    """An int (old configs: ``INPUT.SIZE 224``) -> ``(224, 224)``; anything else unchanged."""
    if isinstance(value, str):
        try:
            value = literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    return value


class _Config(CN):
    """argtca's root node: ``INPUT.SIZE`` is a pair (Dassl's type); an int given in a YAML file or
    on the command line, as older argtca configs did, is read as a square size."""

    @classmethod
    def _decode_cfg_value(cls, value):
        return CN._decode_cfg_value(value)   # child nodes stay plain, like the defaults' children

    def merge_from_other_cfg(self, cfg_other):
        inp = cfg_other.get("INPUT") if hasattr(cfg_other, "get") else None
        if hasattr(inp, "get") and "SIZE" in inp:
            inp["SIZE"] = _as_size_pair(inp["SIZE"])
        for key in SWITCH_KEYS:
            *path, last = key.split(".")
            node = cfg_other
            for part in path:
                node = node.get(part) if hasattr(node, "get") else None
            if hasattr(node, "get") and last in node:
                node[last] = _as_switch(node[last])
        return super().merge_from_other_cfg(cfg_other)

    def merge_from_list(self, cfg_list):
        cfg_list = list(cfg_list)
        for i in range(0, len(cfg_list) - 1, 2):
            if cfg_list[i] == "INPUT.SIZE":
                cfg_list[i + 1] = _as_size_pair(cfg_list[i + 1])
            elif cfg_list[i] in SWITCH_KEYS:
                cfg_list[i + 1] = _as_switch(cfg_list[i + 1])
        return super().merge_from_list(cfg_list)


_C = _Config()


def _key(path: str, default, doc: str, **facts) -> None:
    """Declare one key of argtca's defaults with its facts (argtca/config/keys.py ``Key``)."""
    declare(_C, path, Key(default, doc, **facts))


_INT_GE1 = Range(lambda v: v >= 1, ">= 1", True)

# ----------------------------------------------------------------------------- the run
_key("OUTPUT_DIR", "./output", "the run folder as given (--output-dir); by default a run goes to "
     "<OUTPUT_ROOT>/<method>/<dataset>/<hash8>/seed<N>", numbers=False)
_key("OUTPUT_ROOT", "output", "the root of the hash-keyed run folders", numbers=False)
_key("SEED", 1, "draws the views and, with TTA.STREAM.SEED -1, the online stream's order; the "
     "axis a report averages over", short="seed")
_key("USE_CUDA", True, "compute on CUDA when there is one (the device type the run uses is "
     "recorded instead: RUN.DEVICE_TYPE)", numbers=False)
_key("VERBOSE", True, "progress and notes on the console", numbers=False)
_key("RUN.REQUIRE_CUDA", False, "True: no CUDA is an error (default: a warning with the time)",
     numbers=False)
_key("RUN.CODE_CHANGE", "refuse", "records made by other code (another argtca or plug-in "
     "version) are refused on resume; \"allow\": resume them anyway, the switch recorded in "
     "config.json (CODE.RESUMED_UNDER)", choices=("refuse", "allow"), numbers=False)

# ----------------------------------------------------------------------------- dataset
_key("DATASET.ROOT", "", "CoOp data root ($DATA); the demo dataset ignores it. The test set is "
     "identified by content (TEST_SET.*), so where it is mounted changes no number",
     numbers=False, dataset=True, short="data root")
_key("DATASET.NAME", "", "registered dataset name (Caltech101, OxfordPets, ..., Demo)",
     dataset=True)
_key("DATASET.SPLIT", "test", "split of the CoOp split file used for evaluation",
     protocol=True, short="split")
_key("DATASET.NUM_IMAGES", -1, ">0: evaluate only the first N images of the split (quick runs)",
     check=Range(lambda v: v == -1 or v >= 1, "-1 for all, or N >= 1", True), protocol=True,
     short="images")
_key("DATASET.ATTRIBUTE_FILE", "", "TCA-format attribute JSON (class -> \"attr1 attr2 ...\")",
     dataset=True, short="attributes")
_key("DATASET.CHECK_IMAGES", "header", "load-time check of every evaluated image: \"header\" "
     "(open each file's header, in threads), \"decode\" (decode each one too: catches truncated "
     "files), \"off\"", choices=("header", "decode", "off"), numbers=False)
# DATASET.NAME ImageFolder (configs/datasets/imagefolder.yaml): DATASET.ROOT is the folder holding
# one sub-folder per class (class names from folder names, "_" read as a space)
_key("DATASET.IMAGEFOLDER.CLASSNAMES", "", "optional file: \"<folder> <class name>\" per line (or "
     "a JSON object folder -> name); its order is label order", dataset=True)
_key("DATASET.IMAGEFOLDER.SPLIT_FILE", "", "optional split file in CoOp's format (paths relative "
     "to DATASET.ROOT); without it every image is a test image", dataset=True)
# OOD detection (python -m argtca.experiments ood; argtca/datasets/ood.py): with OOD.NAME set, the
# run's test images are that dataset's, each classified among DATASET.NAME's classes with label
# -1 (none of them); the report pairs it with the in-distribution run of the same settings. Its
# root is a setting: the images of one's own folders are only told apart by where they are
_key("DATASET.OOD.NAME", "", "the OOD images' dataset (a registered name or key); \"\" = no OOD",
     dataset=True)
_key("DATASET.OOD.ROOT", "", "its data root (\"\" = DATASET.ROOT)", dataset=True)
_key("DATASET.OOD.SPLIT", "test", "its split", dataset=True)
_key("DATASET.OOD.NUM_IMAGES", -1, ">0: its first N images only", dataset=True)

# ----------------------------------------------------------------------------- input / views
_key("INPUT.SIZE", (224, 224), "(height, width) as in Dassl; views are square")
_key("INPUT.INTERPOLATION", "bicubic", "the resize's interpolation",
     choices=("bicubic", "bilinear", "nearest"))
_key("INPUT.PIXEL_MEAN", [0.48145466, 0.4578275, 0.40821073], "CLIP's normalisation mean "
     "(3 finite numbers; checks.py)")
_key("INPUT.PIXEL_STD", [0.26862954, 0.26130258, 0.27577711], "CLIP's normalisation std "
     "(3 finite numbers > 0; checks.py)")

# the ranges of N_VIEWS, SELECTION_P, STEPS, LR, AUGMIX and its severity depend on whether the
# method tunes prompts or uses AugMix: checked in checks.py check_cfg_values
_key("TTA.N_VIEWS", 64, "view 0 = resize + center crop, then N_VIEWS-1 augmented views",
     short="views")
_key("TTA.AUGMIX", "auto", "\"auto\" (the dataset decides: fine-grained -> on), \"on\", \"off\"")
_key("TTA.AUGMIX_SEVERITY", 1, "AugMix levels are drawn from U(0.1, severity)")
_key("TTA.VIEWS_DEVICE", "cpu", "\"cpu\" (TPT's PIL pipeline, exact), \"cpu-fast\" (the same "
     "random parameters, tensor arithmetic in the loader workers: statistical) or \"gpu\" "
     "(batched on the device, statistical)", choices=("cpu", "cpu-fast", "gpu"))
_key("TTA.VIEWS_FLOAT", "auto", "VIEWS_DEVICE cpu: where ToTensor + Normalize and the AugMix mix "
     "run: \"workers\" (with the views), \"engine\" (on the engine's device, from the exact uint8 "
     "images the workers ship; the same views bit for bit) or \"auto\" (engine on CUDA, else "
     "workers)", choices=("auto", "workers", "engine"), numbers=False)
_key("TTA.VIEWS_OPS", "auto", "VIEWS_DEVICE cpu with AugMix: where TPT's AugMix ops (PIL's "
     "shears, rotations, colour tables) run: \"workers\" (PIL), \"engine\" (PIL's arithmetic on "
     "the engine's device; the same views bit for bit; needs the float stage there) or \"auto\" "
     "(where the float stage runs)", choices=("auto", "workers", "engine"), numbers=False)
_key("TTA.SELECTION_P", 0.1, "keep the 10% lowest-entropy views")
_key("TTA.STEPS", 1, "prompt-tuning steps per image", tuning=True)
_key("TTA.LR", 5e-3, "AdamW learning rate of the prompt step", tuning=True)
_key("TTA.WEIGHT_DECAY", 0.01, "AdamW weight decay", check=Range(lambda v: v >= 0, ">= 0"),
     tuning=True)
_key("TTA.N_CTX", 4, "context tokens tuned", check=Range(lambda v: v >= 1, ">= 1", True))
_key("TTA.CTX_INIT", "a photo of a", "the context's initial words")
# CTX_CHECKPOINT: CoOp's output folder (holding prompt_learner/) or a
# prompt_learner/model.pth.tar-<epoch> file; its n_ctx must equal TTA.N_CTX (CTX_INIT's words are
# then only placeholders). Under Dassl: CoOp's --model-dir. Generic contexts only (CSC refused)
_key("TTA.CTX_CHECKPOINT", "", "CoOp checkpoint whose learned context starts the tuning (TPT's "
     "\"+CoOp\" rows)")
_key("TTA.CTX_CHECKPOINT_EPOCH", 0, "CoOp's --load-epoch; 0: model-best.pth.tar, else the last "
     "saved", check=Range(lambda v: v >= 0, ">= 0 (0: model-best, else the last saved)", True))
_key("TTA.PREC", "amp", "\"amp\": fp16 autocast on CUDA, fp32 params; \"fp32\"; CPU is fp32",
     choices=("amp", "fp32"))
_key("TTA.LOSS_SCALE", 1000.0, "static loss scale under fp16 autocast (TPT's GradScaler init)",
     check=Range(lambda v: v > 0, "> 0"), tuning=True)
# "auto" (fast on CUDA, reference on CPU), "reference" (one image at a time) or "fast" (batched;
# equals the reference on CPU to 1e-5); the training-free and online methods run on "features",
# TTL on "lora", which "auto" picks for them. Its values are the registered engines (checks.py)
_key("TTA.ENGINE", "auto", "the test-time engine (\"auto\" or a registered one)")
_key("TTA.BATCH_IMAGES", 16, "images tuned together by the fast engine", check=_INT_GE1)
_key("TTA.COMPILE", "auto", "fast engine on CUDA: torch.compile the towers (\"on\"/\"off\"); "
     "\"auto\": on when the run is long enough to pay compiling back (argtca/engine/auto.py; "
     "the choice is logged). True/False = on/off", choices=("auto", "on", "off"))
# The fast engine's speed knobs (argtca/engine/fast.py says what each does and why; what each buys:
# benchmarks/README.md#fast-engine-knobs). None changes the maths; all but VIEWS_OVERLAP change
# floating-point rounding, so they are in the run's fingerprint. "auto": the engine chooses.
_SWITCH = ("auto", "on", "off")
_key("TTA.FAST.GRAD_MODE", "auto", "step-1 gradient: jacobian, vjp, loop, recompute",
     choices=("auto", "vjp", "loop", "recompute", "jacobian"), tuning=True)
_key("TTA.FAST.TEXT_ATTENTION", "auto", "text tower: split, efficient, math, flash, cudnn, default",
     choices=("auto", "split", "efficient", "default", "math", "flash", "cudnn"))
_key("TTA.FAST.PREFIX_SHARE", True, "SOS + context computed once per image for all prompts")
_key("TTA.FAST.HALF_IMAGE", True, "fp16 autocast: the image tower from an fp16 copy")
_key("TTA.FAST.LEAN_IMAGE", True, "... with lean SDPA blocks (argtca/engine/towers.py)")
_key("TTA.FAST.FOLD_QUICKGELU", True, "... QuickGELU as one SiLU pass, 1.702 folded in weights")
_key("TTA.FAST.COMPILE_IMAGE", "auto", "torch.compile the image tower; \"auto\": as TTA.COMPILE",
     choices=_SWITCH)
_key("TTA.FAST.COMPILE_TEXT", "auto", "... the text tower's no-grad pass; \"auto\": as "
     "TTA.COMPILE", choices=_SWITCH)
_key("TTA.FAST.COMPILE_TEXT_GRAD", "auto", "... its passes with gradient; \"auto\": as "
     "TTA.COMPILE", choices=_SWITCH, tuning=True)
_key("TTA.FAST.COMPILE_JACOBIAN", False, "... the tangent pass building J^T (once per dataset)",
     tuning=True)
_key("TTA.FAST.COMPILE_MODE", "", "torch.compile mode of the image tower (\"\": default)")
_key("TTA.FAST.JACOBIAN_TF32", True, "grad mode jacobian: cot @ J^T on TF32 tensor cores",
     tuning=True)
_key("TTA.FAST.IMAGE_CHUNK", -1, "views per image-tower call; -1: BATCH_IMAGES x N_VIEWS",
     check=Range(lambda v: v == -1 or v >= 1, ">= 1 views, or -1 for BATCH_IMAGES x N_VIEWS (at "
                 "most 2048)", True))
_key("TTA.FAST.TEXT_TOKENS", 65536, "prompt tokens per text-tower call with gradient",
     check=_INT_GE1, tuning=True)
_key("TTA.FAST.CUDA_GRAPH", "auto", "a batch's work captured/replayed as one CUDA graph; \"auto\" "
     "= off (GPU-bound loop: < 1 %; engine/graphs.py)", choices=_SWITCH)
_key("TTA.FAST.VIEWS_OVERLAP", False, "GPU views of batch n+1 made while batch n tunes (the same "
     "kernels on another stream: bit-identical views)", numbers=False)

_key("TTA.PROMPTS", "class", "class prompts of the training-free and online methods: \"class\" "
     "(\"a photo of a {class}.\") or \"attributes\" (the mean of each class's M' attribute prompts "
     "chosen by ArgTCA's Phase 1 with the TRAINER.ARGTCA settings; argtca/trainers/zoo.py)",
     choices=("class", "attributes"))
# Online methods (argtca/trainers/zoo.py) see the test set as one stream; its order changes their
# numbers, so it is part of the run's fingerprint
_key("TTA.STREAM.ORDER", "shuffle", "\"shuffle\": a permutation drawn from STREAM.SEED (the "
     "official TDA/DPE loaders shuffle); \"index\": split order", choices=("shuffle", "index"))
_key("TTA.STREAM.SEED", -1, "-1: the run's SEED",
     check=Range(lambda v: v >= -1, ">= 0, or -1 for the run's SEED", True))
_key("TTA.STREAM.CHECKPOINT_IMAGES", 256, "the adapter's state is saved with the records this "
     "often (rounded up to whole batches): a resume redoes at most this many images, and makes "
     "the same batches, so never a different number", check=_INT_GE1, numbers=False)

_key("DATALOADER.NUM_WORKERS", -1, "-1: what the machine has (usable cores - 1, at most 16)",
     check=Range(lambda v: v >= -1, ">= 0 (0 loads in the main process), or -1 for what the "
                 "machine has", True), numbers=False)
_key("DATALOADER.PREFETCH", 4, "batches each loader worker prepares ahead", check=_INT_GE1,
     numbers=False)
# -1 = 1 on CUDA with loader workers (the main process only drives the device; idle OpenMP threads
# spinning against the workers halved the loop's speed), torch's default otherwise
_key("DATALOADER.MAIN_THREADS", -1, "torch's CPU threads in the main process during the test "
     "loop; 0 = torch's default",
     check=Range(lambda v: v >= -1, ">= 1 threads, 0 for torch's default, or -1 for 1 on CUDA "
                 "with loader workers", True), numbers=False)

# ----------------------------------------------------------------------------- model
_key("MODEL.BACKBONE.NAME", "ViT-B/16", "CoOp spelling; mapped to open_clip (QuickGELU for "
     "OpenAI)", protocol=True, short="backbone")
_key("MODEL.PRETRAINED", "openai", "pretrained tag, a local checkpoint path, or \"random\"",
     protocol=True, short="weights")

# ----------------------------------------------------------------------------- trainers
_key("TRAINER.NAME", "", "the trainer: a registered method (its key, e.g. tda, or its trainer "
     "name, e.g. TDA)")

_C.TRAINER.ZEROSHOTCLIP = CN()
_C.TRAINER.ZEROSHOTCLIP.TEMPLATE = "a photo of a {}."

_C.TRAINER.TPT = CN()
_C.TRAINER.TPT.ENABLED = True          # placeholder node: TPT has no method-specific knob

# temperature scaling of the final prediction (zeroshot_ts, tpt_ts; argtca/trainers/ts.py)
_C.TRAINER.TS = CN()
_C.TRAINER.TS.FIT = "val"              # "val": T minimises the NLL of the validation split;
                                       # "fixed": T = TRAINER.TS.T
_C.TRAINER.TS.T = 1.16                 # the fixed temperature (C-TPT's tpt_ts: 1.16 ViT, 1.15 RN)
_C.TRAINER.TS.FIT_ON = "method"        # "method": the method's own outputs on val (TPT tunes each
                                       # val image); "zeroshot": zero-shot CLIP's (one cheap pass)
_C.TRAINER.TS.VAL_SPLIT = "val"        # split of the split file T is fitted on
_C.TRAINER.TS.VAL_IMAGES = -1          # >0: only the first N validation images

_C.TRAINER.CTPT = CN()
_C.TRAINER.CTPT.LAMBDA = 50.0          # C-TPT fine-grained script

_C.TRAINER.OTPT = CN()
_C.TRAINER.OTPT.LAMBDA = 18.0          # O-TPT fine-grained script

_C.TRAINER.ATPT = CN()
_C.TRAINER.ATPT.LAMBDA = 80.0          # A-TPT fine-grained script (paper's sign: -lambda*AD)
_C.TRAINER.ATPT.TAU = 0.99999

_C.TRAINER.TCA = CN()
_C.TRAINER.TCA.NUM_ATTRIBUTES = 2      # M'
_C.TRAINER.TCA.ALPHA = 10.0            # TCA's values for M'=2; with AUTO_ALPHA_BETA a value left
_C.TRAINER.TCA.BETA = 35.0             # at this default follows M' as TCA's official script sets
_C.TRAINER.TCA.AUTO_ALPHA_BETA = True  # them (M'=1: 1 / 10; M'>=2: 10 / 35); any other value wins;
                                       # False: ALPHA/BETA as given. The run records the resolved
                                       # values (argtca/trainers/methods.py)
_C.TRAINER.TCA.ENTROPY_INPUT = "prob"  # "prob": official code (softmax of probabilities);
                                       # "logprob": the paper's equations (log p)

_C.TRAINER.ARGTCA = CN()
_C.TRAINER.ARGTCA.NUM_ATTRIBUTES = 2   # M'
_C.TRAINER.ARGTCA.ALPHA = 10.0         # as TRAINER.TCA.ALPHA/BETA/AUTO_ALPHA_BETA
_C.TRAINER.ARGTCA.BETA = 35.0
_C.TRAINER.ARGTCA.AUTO_ALPHA_BETA = True
_C.TRAINER.ARGTCA.ENTROPY_INPUT = "prob"
_C.TRAINER.ARGTCA.SELECTOR = "div"     # tca | div | disc | random | joint | any registered one
# M: the first M distinct attributes of a class become nodes (fewer where a class has fewer:
# M_k = min(M, distinct))
_C.TRAINER.ARGTCA.NUM_CANDIDATES = 10
_C.TRAINER.ARGTCA.SELECTOR_SEED = 42   # seed of the random selector
_C.TRAINER.ARGTCA.JOINT_WEIGHT = 0.5   # joint selector: w*Div + (1-w)*Disc
_C.TRAINER.ARGTCA.EMBEDDINGS = "gat"   # "gat" (trained graph) or "raw" (select on h0)
_C.TRAINER.ARGTCA.EDGES = "full"       # full | intra | inter | none
_C.TRAINER.ARGTCA.NODE_ATTENTION = "source"  # score reported per node (phase1.json): "source" =
                                       # mean attention a node receives from its neighbours;
                                       # "incoming" = the appendix's literal mean over incoming
                                       # edges (= 1/degree under GAT's softmax). Not used to select.
_C.TRAINER.ARGTCA.GAT = CN()
_C.TRAINER.ARGTCA.GAT.HEADS = 4
_C.TRAINER.ARGTCA.GAT.HIDDEN = 512     # concatenated width (heads x per-head channels: 4 x 128)
_C.TRAINER.ARGTCA.GAT.DROPOUT = 0.1    # attention dropout
_C.TRAINER.ARGTCA.GAT.SELF_LOOPS = True  # GATConv add_self_loops (standard GAT; paper silent)
_C.TRAINER.ARGTCA.GAT.BIAS = False     # a trained bias per GAT layer: Eq. 6 / App. B have none
_C.TRAINER.ARGTCA.GAT.EPOCHS = 100
_C.TRAINER.ARGTCA.GAT.LR = 1e-3
_C.TRAINER.ARGTCA.GAT.TAU = 0.07
_C.TRAINER.ARGTCA.GAT.LOSS_ON = "h"    # "h": SupCon on h^L/||h^L|| (the paper's Eq. 7);
                                       # "z": on the projection head (a deviation, SupCon-style)
_C.TRAINER.ARGTCA.GAT.SEED = 0
_C.TRAINER.ARGTCA.GAT.TRAIN_ON = []    # vocabularies the GAT is trained on once (argtca/graph/
                                       # transfer.py): "target", "tca:all-but-target", a dataset
                                       # with a TCA file, or a file; the dataset's nodes are then
                                       # embedded by that frozen GAT. []: per-dataset (the paper)


# ------------------------------------------------ training-free methods (argtca/adapters)
_C.TRAINER.ZERO = CN()
# ZERO (github.com/FarinaMatteo/zero ttas/zero.py): the confident fraction is TTA.SELECTION_P
# (official gamma = 0.3, configs/trainers/zero.yaml)
_C.TRAINER.ZERO.OUTPUT = "vote"        # the recorded probabilities: "vote" = the official output
                                       # p_bar (the confident views' vote counts + the tie-break
                                       # vote) normalised; "onehot" = the prediction alone
_C.TRAINER.ZERO.TEMPERATURE = 0.0      # the votes' temperature on cosine similarities: 0 = one-
                                       # hot votes (the paper); the official fp16 code divides by
                                       # finfo(fp16).eps, i.e. 0.0009765625

_C.TRAINER.MTA = CN()
# MTA (github.com/MaxZanella/MTA mta.py solve_mta and main.py's arguments)
_C.TRAINER.MTA.LAMBDA_Y = 0.2          # inlierness entropic weight (main.py --lambda_y)
_C.TRAINER.MTA.LAMBDA_Q = 4.0          # inlierness affinity (quadratic) weight (--lambda_q)
_C.TRAINER.MTA.MAX_ITER = 5            # rounds, and steps of each inner loop (mta.py max_iter)
_C.TRAINER.MTA.TOL = 1e-6              # an inner loop stops when its step's L2 norm is below it
_C.TRAINER.MTA.BANDWIDTH_P = 0.3       # a view's bandwidth: its int(P * (V - 1)) nearest views

_C.TRAINER.RTPT = CN()
_C.TRAINER.RTPT.TOP_K = 20            # neighbours a view's reliability averages over (R-TPT
                                       # rtpt.py get_top_sim: k = 20; capped at N_VIEWS - 1)
_C.TRAINER.RTPT.TEMPERATURE = 0.01     # softmax temperature of the reliability (rtpt.py: /0.01)

_C.TRAINER.RLCF = CN()
# RLCF (Zhao et al., ICLR'24), official mzhaoshuai/RLCF TPT/scripts/rlcf-prompt.sh (ImageNet family)
# and rlcf-prompt-fine.sh (fine-grained sets), ViT-B/16 policy; argtca/trainers/methods.py RLCF
_C.TRAINER.RLCF.REWARD_BACKBONE = "ViT-L/14"  # the reward CLIP (--reward_arch); "": the policy's
                                              # MODEL.BACKBONE.NAME (TTA-VLM: the policy itself)
_C.TRAINER.RLCF.REWARD_PRETRAINED = "openai"  # its weights, as MODEL.PRETRAINED takes them (a
                                              # tag, a file, hf-hub:); "": MODEL.PRETRAINED
_C.TRAINER.RLCF.SAMPLE_K = 3            # sampled classes per view: its top-k (--sample_k 3)
_C.TRAINER.RLCF.CLIPSCORE_WEIGHT = 2.5  # reward = w * max(cos, 0) (CLIPRewards clipscore_weight)
_C.TRAINER.RLCF.REWARD_PROCESS = True   # subtract the mean reward (--reward_process 1)
_C.TRAINER.RLCF.PROCESS_BATCH = False   # mean over all views' samples, not a view's k
                                        # (--process_batch 0)
_C.TRAINER.RLCF.REWARD_AMPLIFY = False  # also divide by the std + 1e-5 (--reward_amplify 0)
_C.TRAINER.RLCF.AUTO_STEPS = True       # TTA.STEPS left at its default (1) -> the official
                                        # scripts' steps for DATASET.NAME: 5 on the fine-grained
                                        # sets, 3 on the ImageNet family and any other dataset;
                                        # another TTA.STEPS wins; False: TTA.STEPS as given

_C.TRAINER.TPS = CN()
_C.TRAINER.TPS.LR = 5e-3               # AdamW lr on the shifts (TPS README / args.py default;
                                       # TTA-VLM uses 1e-3 on the fine-grained sets)
_C.TRAINER.TPS.STEPS = 1               # shift steps per image (TPS scripts: --tta_steps 1)
_C.TRAINER.TPS.WEIGHT_DECAY = 0.01     # torch AdamW's default (TPS sets none)
_C.TRAINER.TPS.PER_CLASS = True        # one shift per class prototype (TPS scripts: --per_label);
                                       # False: one shift shared by every class

# TTL (Imam et al., WACV'25; Razaimam45/TTL-Test-Time-Low-Rank-Adaptation scripts/test_ttl.sh):
# LoRA in the image tower's attention, tuned per image (TTA.STEPS / LR / WEIGHT_DECAY: AdamW) on
# every view's confidence-weighted entropy, reset after each image (argtca/engine/lora.py)
_C.TRAINER.TTL = CN()
_C.TRAINER.TTL.LAYERS = [-3, -2, -1]   # adapted blocks; negative: from the end (--layer_range 9,11:
                                       # the last 3 of ViT-B/16's 12 blocks)
_C.TRAINER.TTL.TARGETS = ["q", "v"]    # projections with an adapter, of q, k, v, out (LoraConfig
                                       # target_modules q_proj, v_proj)
_C.TRAINER.TTL.RANK = 16               # r (--rank 16)
_C.TRAINER.TTL.ALPHA = 32.0            # lora_alpha: the LoRA term is scaled by ALPHA / RANK
_C.TRAINER.TTL.MARGIN = 0.4            # a view's weight exp(-(H - MARGIN)) (--deyo_margin_e0 0.4);
                                       # a factor on the whole loss: AdamW ignores it but for eps

# ------------------------------------------------ online methods (one stream, TTA.STREAM)
_C.TRAINER.TDA = CN()
# TDA (Karmanov et al., CVPR 2024), official kdiAAA/TDA configs/<dataset>.yaml, ViT-B/16. Only the
# positive cache's alpha/beta differ per dataset; -1: the official value for DATASET.NAME (table
# PRESETS in argtca/adapters/tda.py; other datasets, e.g. the demo, take ImageNet's 2 / 5, which
# is also the median of the ten fine-grained sets' values)
_C.TRAINER.TDA.POS_ENABLED = True       # positive cache on (all configs)
_C.TRAINER.TDA.POS_SHOT_CAPACITY = 3    # entries per class (all configs)
_C.TRAINER.TDA.POS_ALPHA = -1.0         # weight of the positive cache logits (e.g. Caltech 5)
_C.TRAINER.TDA.POS_BETA = -1.0          # sharpness of exp(-beta (1 - affinity)) (e.g. Caltech 5)
_C.TRAINER.TDA.NEG_ENABLED = True       # negative cache on (all configs)
_C.TRAINER.TDA.NEG_SHOT_CAPACITY = 2    # entries per class (all configs)
_C.TRAINER.TDA.NEG_ALPHA = 0.117        # weight of the subtracted negative logits (all configs)
_C.TRAINER.TDA.NEG_BETA = 1.0           # (all configs)
_C.TRAINER.TDA.NEG_ENTROPY_LOWER = 0.2  # an image enters the negative cache when lower < H/log2 K
_C.TRAINER.TDA.NEG_ENTROPY_UPPER = 0.5  # < upper (H in nats, as get_entropy; all configs)
_C.TRAINER.TDA.NEG_MASK_LOWER = 0.03    # its negative mask: the classes with lower < p < upper
_C.TRAINER.TDA.NEG_MASK_UPPER = 1.0     # (all configs)
_C.TRAINER.TDA.VIEWS = "auto"           # the image's feature and logits: "original" (view 0: the
                                        # official runner on the cross-domain sets and ImageNet),
                                        # "confident" (the confident views' mean: its ImageNet-A/
                                        # V2/R/Sketch runs), "auto": confident for DATASET.NAME
                                        # ImageNetA, ImageNetV2, ImageNetR, ImageNetSketch

_C.TRAINER.DMN = CN()
# DMN-ZS (Zhang et al., CVPR 2024), official YBZh/DMN scripts/run.sh (zero-shot, ViT-B/16)
_C.TRAINER.DMN.MEMORY_SIZE = 50         # dynamic memory entries per class (--memory_size 50)
_C.TRAINER.DMN.BETA = 5.5               # read-out sharpness exp(-beta (1 - sim)) (--beta 5.5)
# weight w of the memory prediction: p = (p_text + w p_mem) / (1 + w). The official script picks
# w per dataset by test accuracy (a grid 0.001 .. 1000); -1: its logged choice for DATASET.NAME
# (camera_ready_dmn_tf_*_vit_0.txt; table PRESETS in argtca/adapters/dmn.py, e.g. ImageNet 1,
# DTD 10, Caltech101 0.3); other datasets take ImageNet's 1
_C.TRAINER.DMN.MEMORY_WEIGHT = -1.0

_C.TRAINER.DMNWEAK = CN()
# TTA-VLM's dmn_weak (TomSheng21/tta-vlm online_method/dmn_weak.py): DMN-ZS's memory fed by view 0
# alone, no labelled image (argtca/adapters/dmn_weak.py)
_C.TRAINER.DMNWEAK.MEMORY_SIZE = 50     # dynamic memory entries per class (max_len 50)
_C.TRAINER.DMNWEAK.BETA = 5.5           # read-out sharpness exp(-beta (1 - sim)) (beta 5.5)
_C.TRAINER.DMNWEAK.MEMORY_WEIGHT = 1.0  # p = (p_text + w p_mem) / (1 + w) (alpha 1.0)

_C.TRAINER.ECALP = CN()
# ECALP (Li et al., ICLR 2025), official Yushu-Li/ECALP main.py defaults (zero-shot; one set of
# values for every dataset and backbone)
_C.TRAINER.ECALP.K_TEXT = 3             # class neighbours of an image (--k_text 3)
_C.TRAINER.ECALP.K_IMAGE = 8            # image neighbours of an image (--k_image 8)
_C.TRAINER.ECALP.GAMMA = 10.0           # edge weight = similarity ** gamma (--gamma 10)
_C.TRAINER.ECALP.ALPHA = 1.0            # Y <- alpha W Y + (1 - alpha) Y0 (--alpha 1)
_C.TRAINER.ECALP.ITERATIONS = 3         # propagation steps an image (--num_iterations 3)
_C.TRAINER.ECALP.OUTPUT_SCALE = 10000.0  # recorded p = softmax(scale * scores) (official 10000)

_C.TRAINER.ONZETA = CN()
# OnZeta (Qian & Hu, ECCV 2024), official idstcv/OnZeta main_online.py defaults. -1: the official
# value on the ImageNet family, TTA-VLM's elsewhere (table PRESETS in argtca/adapters/onzeta.py:
# beta 0.4 on the fine-grained sets, alpha 0 on Caltech101); other datasets take ImageNet's
_C.TRAINER.ONZETA.TAU_T = 0.01          # temperature of the text label (--tau_t)
_C.TRAINER.ONZETA.TAU_I = 0.04          # temperature of the vision proxies (--tau_i)
_C.TRAINER.ONZETA.CW = 0.5              # proxy learning rate cw / sqrt(t) (--cw)
_C.TRAINER.ONZETA.CR = 20.0             # dual (rho) learning rate cr / sqrt(t) (--cr)
_C.TRAINER.ONZETA.ALPHA = -1.0          # OnLab's class-proportion bound alpha / K (--alpha 1)
_C.TRAINER.ONZETA.BETA = -1.0           # proxy weight beta sqrt(t / n) (--beta 0.8)

_C.TRAINER.DYNAPROMPT = CN()
# DynaPrompt (Xiao et al., ICLR 2025), official zzzx1224/DynaPrompt run_dynap.sh defaults: a buffer
# of prompts tuned by TPT's step (TTA.STEPS, TTA.LR, TTA.WEIGHT_DECAY, TTA.SELECTION_P, TTA.N_VIEWS,
# TTA.CTX_INIT, the GradScaler's TTA.LOSS_SCALE) over one stream (argtca/adapters/dynaprompt.py)
_C.TRAINER.DYNAPROMPT.NUM_PROMPTS = 12  # prompts in the buffer (num_p=12; TTA-VLM: 10)
_C.TRAINER.DYNAPROMPT.APPEND = True     # reset the least recently picked prompt once all are used
                                        # (False: the official 'noapp' ablation)

_C.TRAINER.BOOSTADAPTER = CN()
# Official code: github.com/taolinzhang/BoostAdapter (runner.py, configs/<dataset>.yaml). -1: the
# official per-dataset value for DATASET.NAME (table PRESETS in argtca/adapters/boostadapter.py;
# other datasets take ImageNet's). The boosting samples are the int(V * TTA.SELECTION_P) most
# confident views (official: 10 %).
_C.TRAINER.BOOSTADAPTER.SHOT_CAPACITY = 3       # historical cache entries per class (all configs)
_C.TRAINER.BOOSTADAPTER.ALPHA = -1.0            # positive cache weight (e.g. Caltech 5, DTD 2)
_C.TRAINER.BOOSTADAPTER.BETA = -1.0             # positive cache sharpness (e.g. Caltech 5, DTD 3)
_C.TRAINER.BOOSTADAPTER.DELTA = -1              # extra entries per class for boosting samples
                                                # (configs' delta: 0-3; ImageNet has none: 1)
_C.TRAINER.BOOSTADAPTER.NEG_SHOT_CAPACITY = 2   # negative cache entries per class (FIFO)
_C.TRAINER.BOOSTADAPTER.NEG_ALPHA = 0.117       # negative cache weight (all configs)
_C.TRAINER.BOOSTADAPTER.NEG_BETA = 1.0          # negative cache sharpness (all configs)
_C.TRAINER.BOOSTADAPTER.NEG_ENTROPY_LOWER = 0.2  # an image enters the negative cache when
_C.TRAINER.BOOSTADAPTER.NEG_ENTROPY_UPPER = 0.5  # lower < H(nats) / log2 K < upper (official)
_C.TRAINER.BOOSTADAPTER.NEG_MASK_LOWER = 0.03   # negative values: lower < p < upper (official)
_C.TRAINER.BOOSTADAPTER.NEG_MASK_UPPER = 1.0
_C.TRAINER.BOOSTADAPTER.HISTORY_VIEWS = "auto"  # the image's feature for the caches and its CLIP
                                                # logits: "original" (view 0: the official
                                                # cross-domain sets), "confident" (mean of the
                                                # confident views: its ImageNet variants), "auto":
                                                # confident for DATASET.NAME ImageNet*, else view 0

_C.TRAINER.DPE = CN()
# Official code: github.com/zhangce01/DPE-CLIP (main_dpe.py, configs/<dataset>.yaml). -1: the
# official per-dataset value for DATASET.NAME (table PRESETS in argtca/adapters/dpe.py; other
# datasets take ImageNet's).
_C.TRAINER.DPE.SHOT_CAPACITY = 3        # priority queue entries per class (all configs)
_C.TRAINER.DPE.ALPHA = -1.0             # cache weight (e.g. Caltech 15, DTD 6, ImageNet 6)
_C.TRAINER.DPE.BETA = -1.0              # cache sharpness (e.g. Caltech 5, DTD 3, ImageNet 5)
_C.TRAINER.DPE.LR_TEXT = -1.0           # AdamW lr of the textual residual (5e-5 .. 6e-4)
_C.TRAINER.DPE.LR_IMAGE = -1.0          # AdamW lr of the visual residual (= LR_TEXT everywhere)
_C.TRAINER.DPE.ALIGN = -1.0             # weight of the alignment (InfoNCE) loss (0 .. 2.5)
_C.TRAINER.DPE.STEPS = 1                # residual steps per image (main_dpe.py: steps = 1)
_C.TRAINER.DPE.ADAM_EPS = 1e-3          # AdamW eps (main_dpe.py)
_C.TRAINER.DPE.WEIGHT_DECAY = 0.1       # AdamW weight decay (main_dpe.py)
_C.TRAINER.DPE.INFONCE_T = 0.01         # InfoNCE temperature (main_dpe.py)
_C.TRAINER.DPE.EVOLVE_ENTROPY = 0.1     # textual prototypes evolve when the prediction's
                                        # entropy H(nats) / log2 K is below this (main_dpe.py)
_C.TRAINER.DPE.VIEWS = "auto"           # the feature that is cached and tuned on: "original"
                                        # (view 0: the official cross-domain sets, one view),
                                        # "confident" (mean of the confident views: ImageNet and
                                        # its variants); "auto": confident for ImageNet*
_C.TRAINER.DPE.PREDICT_VIEWS = "auto"   # the final prediction's feature: "original" (view 0),
                                        # "confident" (re-selected with the tuned text: official
                                        # for ImageNet-A only); "auto": confident for ImageNetA


def get_cfg_default() -> CN:
    """argtca's defaults, with the nodes of the registered methods that declare their own
    (a plug-in's ``defaults``: argtca/config/methods.py)."""
    from argtca.config.methods import add_declared_nodes
    cfg = _C.clone()
    add_declared_nodes(cfg)
    return cfg

