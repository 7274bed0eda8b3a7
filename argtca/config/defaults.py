"""Every global default of argtca lives here (yacs), declared with its facts (``Key``,
argtca/config/keys.py); the range of each value is checked in ``checks.py``. A method's own node
``TRAINER.<NODE>`` lives beside the method, declared the same way with ``argtca.plugins.method``
(``defaults={...}``: argtca/adapters/<method>.py, argtca/trainers/methods.py, ts.py, argtca.py, a
plug-in's file); :func:`get_cfg_default` adds every registered method's node.

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
               "TTA.FAST.COMPILE_TEXT_GRAD", "TTA.FAST.CUDA_GRAPH", "TTA.FAST.TEXT_GRAPH")


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
     "\"auto\": on when the run is long enough to pay compiling back (argtca/config/settle.py; "
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
_key("TTA.FAST.HALF_IMAGE", True,
     "fp16 autocast: the image tower (TTL: its frozen blocks) from an fp16 copy")
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
_key("TTA.FAST.AUTO_IMAGES", 0, "the test images the size-dependent \"auto\" choices plan for "
     "(TTA.FAST.GRAD_MODE's Jacobian, TTA.COMPILE); 0: the run's own test set. The whole-table "
     "benchmark sets each dataset's published size, so that its short runs take the full runs' "
     "modes", check=Range(lambda v: v >= 0, ">= 0 (0: the run's test set)", True))
_key("TTA.FAST.IMAGE_CHUNK", -1, "views per image-tower call; -1: BATCH_IMAGES x N_VIEWS",
     check=Range(lambda v: v == -1 or v >= 1, ">= 1 views, or -1 for BATCH_IMAGES x N_VIEWS (at "
                 "most 2048)", True))
_key("TTA.FAST.TEXT_TOKENS", 65536, "prompt tokens per text-tower call with gradient",
     check=_INT_GE1, tuning=True)
_key("TTA.FAST.CUDA_GRAPH", "auto", "a batch's work captured/replayed as one CUDA graph; \"auto\" "
     "= off (GPU-bound loop: < 1 %; engine/graphs.py)", choices=_SWITCH)
_key("TTA.FAST.TEXT_GRAPH", "auto", "the text tower's passes replayed as CUDA graphs, one per "
     "shape (the same kernels; engine/text_graph.py): a prompt-tuning online method's "
     "(DynaPrompt: records identical, 1.29x on an H100) and the fast engine's steps after the "
     "first (RLCF) and final prediction; \"auto\" = on on CUDA for the online methods and for "
     "TTA.STEPS > 1, off for one step (engine/fast.py text_graph_auto)", choices=_SWITCH,
     tuning=True)
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

# Each method's node TRAINER.<NODE> is declared beside the method, with its keys' facts
# (``@method(..., defaults={KEY: Key(default, doc, check=...)})``: argtca/adapters/<method>.py,
# argtca/trainers/methods.py, ts.py, argtca.py); get_cfg_default adds every registered one.


def get_cfg_default() -> CN:
    """argtca's defaults, with the node of every registered method (argtca's own are
    registered first, by name: argtca/registry.py ``load_builtin_methods``; a plug-in's once it is
    imported; argtca/config/methods.py ``add_declared_nodes``)."""
    from argtca.config.methods import add_declared_nodes
    from argtca.registry import load_builtin_methods
    load_builtin_methods()
    cfg = _C.clone()
    add_declared_nodes(cfg)
    return cfg

