"""Every default of argtca lives here (yacs). Per-method nodes are ``TRAINER.<NAME>``.

``configs/trainers/<method>.yaml`` restates the papers' ViT-B/16 values for each method and
``configs/datasets/<name>.yaml`` names the dataset; both are merged on top of these defaults.
Unknown keys in a YAML file or on the command line are errors (yacs behaviour, kept on purpose).
"""
from __future__ import annotations

from yacs.config import CfgNode as CN

_C = CN()
_C.OUTPUT_DIR = "./output"
_C.SEED = 1
_C.USE_CUDA = True
_C.VERBOSE = True

# ----------------------------------------------------------------------------- dataset
_C.DATASET = CN()
_C.DATASET.ROOT = ""            # CoOp data root ($DATA); the demo dataset ignores it
_C.DATASET.NAME = ""            # registered dataset name (Caltech101, OxfordPets, ..., Demo)
_C.DATASET.SPLIT = "test"       # split of the CoOp split file used for evaluation
_C.DATASET.NUM_IMAGES = -1      # >0: evaluate only the first N images of the split (quick runs)
_C.DATASET.ATTRIBUTE_FILE = ""  # TCA-format attribute JSON (class -> "attr1 attr2 ...")

# ----------------------------------------------------------------------------- input / views
_C.INPUT = CN()
_C.INPUT.SIZE = 224
_C.INPUT.INTERPOLATION = "bicubic"
_C.INPUT.PIXEL_MEAN = [0.48145466, 0.4578275, 0.40821073]
_C.INPUT.PIXEL_STD = [0.26862954, 0.26130258, 0.27577711]

_C.TTA = CN()
_C.TTA.N_VIEWS = 64             # view 0 = resize + center crop, then N_VIEWS-1 augmented views
_C.TTA.AUGMIX = "auto"          # "auto" (the dataset decides: fine-grained -> on), "on", "off"
_C.TTA.AUGMIX_SEVERITY = 1
_C.TTA.VIEWS_DEVICE = "cpu"     # "cpu" (TPT's PIL pipeline, exact) or "gpu" (batched, statistical)
_C.TTA.SELECTION_P = 0.1        # keep the 10% lowest-entropy views
_C.TTA.STEPS = 1
_C.TTA.LR = 5e-3
_C.TTA.WEIGHT_DECAY = 0.01
_C.TTA.N_CTX = 4
_C.TTA.CTX_INIT = "a photo of a"
_C.TTA.PREC = "amp"             # "amp": fp16 autocast on CUDA, fp32 params; "fp32"; CPU is fp32
_C.TTA.LOSS_SCALE = 1000.0      # static loss scale under fp16 autocast (TPT's GradScaler init)
_C.TTA.ENGINE = "reference"     # "reference" (one image at a time) or "fast" (batched)
_C.TTA.BATCH_IMAGES = 16        # images tuned together by the fast engine
_C.TTA.COMPILE = False          # fast engine: torch.compile the towers (CUDA; ~50 s to compile)

_C.DATALOADER = CN()
_C.DATALOADER.NUM_WORKERS = 2
_C.DATALOADER.PREFETCH = 4

# ----------------------------------------------------------------------------- model
_C.MODEL = CN()
_C.MODEL.BACKBONE = CN()
_C.MODEL.BACKBONE.NAME = "ViT-B/16"   # CoOp spelling; mapped to open_clip (QuickGELU for OpenAI)
_C.MODEL.PRETRAINED = "openai"        # pretrained tag, a local checkpoint path, or "random"

# ----------------------------------------------------------------------------- trainers
_C.TRAINER = CN()
_C.TRAINER.NAME = ""

_C.TRAINER.ZEROSHOTCLIP = CN()
_C.TRAINER.ZEROSHOTCLIP.TEMPLATE = "a photo of a {}."

_C.TRAINER.TPT = CN()
_C.TRAINER.TPT.ENABLED = True          # placeholder node: TPT has no method-specific knob

_C.TRAINER.CTPT = CN()
_C.TRAINER.CTPT.LAMBDA = 50.0          # C-TPT fine-grained script

_C.TRAINER.OTPT = CN()
_C.TRAINER.OTPT.LAMBDA = 18.0          # O-TPT fine-grained script

_C.TRAINER.ATPT = CN()
_C.TRAINER.ATPT.LAMBDA = 80.0          # A-TPT fine-grained script (paper's sign: -lambda*AD)
_C.TRAINER.ATPT.TAU = 0.99999

_C.TRAINER.TCA = CN()
_C.TRAINER.TCA.NUM_ATTRIBUTES = 2      # M'
_C.TRAINER.TCA.ALPHA = 10.0
_C.TRAINER.TCA.BETA = 35.0
_C.TRAINER.TCA.ENTROPY_INPUT = "prob"  # "prob": official code (softmax of probabilities);
                                       # "logprob": the paper's equations (log p)

_C.TRAINER.ARGTCA = CN()
_C.TRAINER.ARGTCA.NUM_ATTRIBUTES = 2   # M'
_C.TRAINER.ARGTCA.ALPHA = 10.0
_C.TRAINER.ARGTCA.BETA = 35.0
_C.TRAINER.ARGTCA.ENTROPY_INPUT = "prob"
_C.TRAINER.ARGTCA.SELECTOR = "div"     # tca | div | disc | random | joint | any registered one
_C.TRAINER.ARGTCA.NUM_CANDIDATES = 10  # M: attributes per class that become graph nodes
_C.TRAINER.ARGTCA.SELECTOR_SEED = 42   # seed of the random selector
_C.TRAINER.ARGTCA.JOINT_WEIGHT = 0.5   # joint selector: w*Div + (1-w)*Disc
_C.TRAINER.ARGTCA.EMBEDDINGS = "gat"   # "gat" (trained graph) or "raw" (select on h0)
_C.TRAINER.ARGTCA.EDGES = "full"       # full | intra | inter | none
_C.TRAINER.ARGTCA.GAT = CN()
_C.TRAINER.ARGTCA.GAT.HEADS = 4
_C.TRAINER.ARGTCA.GAT.HIDDEN = 512     # concatenated width (heads x per-head channels)
_C.TRAINER.ARGTCA.GAT.DROPOUT = 0.1    # attention dropout
_C.TRAINER.ARGTCA.GAT.EPOCHS = 100
_C.TRAINER.ARGTCA.GAT.LR = 1e-3
_C.TRAINER.ARGTCA.GAT.TAU = 0.07
_C.TRAINER.ARGTCA.GAT.LOSS_ON = "z"    # "z" (projection head) or "h" (h^L, as the paper writes)
_C.TRAINER.ARGTCA.GAT.SEED = 0


def get_cfg_default() -> CN:
    return _C.clone()


METHOD_TO_TRAINER = {
    "zeroshot": "ZeroshotCLIP", "tpt": "TPT", "ctpt": "CTPT", "otpt": "OTPT",
    "atpt": "ATPT", "tca": "TCA", "argtca": "ArgTCA",
}
