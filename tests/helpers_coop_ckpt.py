"""Writes CoOp checkpoints with CoOp's and Dassl's own code (run in a subprocess: CoOp's ``clip``
and ``trainers`` are top-level packages of its folder).

    python tests/helpers_coop_ckpt.py OUT_DIR CLASSNAMES_JSON

A tiny OpenAI-format CLIP (CoOp's ``clip.model.CLIP`` with argtca-tiny-test's sizes) is built with a
fixed seed and saved as ``OUT_DIR/tiny_openai.pt`` (an OpenAI state dict argtca loads as
MODEL.PRETRAINED). CoOp's ``PromptLearner`` (generic context, 4 random vectors as CoOp initialises
them, scaled up so they differ clearly from any word) is registered with Dassl's SGD + cosine/warmup
scheduler in a Dassl ``TrainerBase`` whose ``save_model`` writes
``OUT_DIR/coop/prompt_learner/model.pth.tar-2``. CoOp's ``TextEncoder`` then gives the text
features of CoOp's prompts for CLASSNAMES (``OUT_DIR/coop_text.pt``, plain tensors). A CSC run
(class-specific contexts) is saved to ``OUT_DIR/coop_csc`` and a 16-token one to ``OUT_DIR/coop16``.
"""
import json
import sys

import torch
from yacs.config import CfgNode as CN


def coop_cfg(n_ctx, csc):
    cfg = CN()
    cfg.INPUT = CN()
    cfg.INPUT.SIZE = (32, 32)
    cfg.TRAINER = CN()
    cfg.TRAINER.COOP = CN()
    cfg.TRAINER.COOP.N_CTX = n_ctx
    cfg.TRAINER.COOP.CTX_INIT = ""
    cfg.TRAINER.COOP.CSC = csc
    cfg.TRAINER.COOP.CLASS_TOKEN_POSITION = "end"
    return cfg


def _accept_dassl_verbose_arg():
    """Dassl's warmup schedulers pass ``verbose`` positionally to ``LRScheduler.__init__``, which
    PyTorch >= 2.7 no longer takes; CoOp's real checkpoints come from older PyTorch. Accept and drop
    it, so Dassl's own ConstantWarmupScheduler (whose state_dict pickles its successor scheduler
    object, the reason weights_only=True refuses CoOp's files) is what gets saved."""
    import inspect
    from torch.optim.lr_scheduler import LRScheduler
    if "verbose" in inspect.signature(LRScheduler.__init__).parameters:
        return
    init = LRScheduler.__init__

    def patched(self, optimizer, last_epoch=-1, verbose=None):
        init(self, optimizer, last_epoch)
    LRScheduler.__init__ = patched


def save(learner, directory, epoch):
    _accept_dassl_verbose_arg()
    from dassl.config import get_cfg_default
    from dassl.engine.trainer import TrainerBase
    from dassl.optim import build_lr_scheduler, build_optimizer
    optim = get_cfg_default().OPTIM   # CoOp's configs/trainers/CoOp/*.yaml values
    optim.NAME, optim.LR, optim.MAX_EPOCH = "sgd", 0.002, 50
    optim.LR_SCHEDULER, optim.WARMUP_EPOCH = "cosine", 1
    optim.WARMUP_TYPE, optim.WARMUP_CONS_LR = "constant", 1e-5
    opt = build_optimizer(learner, optim)
    sched = build_lr_scheduler(opt, optim)
    tb = TrainerBase()
    tb.register_model("prompt_learner", learner, opt, sched)
    tb.save_model(epoch - 1, directory)   # Dassl writes epoch + 1


def main(out, names_json):
    from clip.model import CLIP
    from trainers.coop import PromptLearner, TextEncoder
    classnames = json.loads(open(names_json).read())
    torch.manual_seed(0)
    clip_model = CLIP(embed_dim=32, image_resolution=32, vision_layers=1, vision_width=64,
                      vision_patch_size=16, context_length=77, vocab_size=49408,
                      transformer_width=32, transformer_heads=2,
                      transformer_layers=2).float().eval()
    torch.save(clip_model.state_dict(), f"{out}/tiny_openai.pt")

    learner = PromptLearner(coop_cfg(4, False), classnames, clip_model)
    with torch.no_grad():
        learner.ctx.mul_(25.0)   # CoOp's N(0, 0.02) init, made large enough to matter
    save(learner, f"{out}/coop", epoch=2)
    with torch.no_grad():
        text = TextEncoder(clip_model)(learner(), learner.tokenized_prompts)
    torch.save({"ctx": learner.ctx.detach().clone(),
                "text": text / text.norm(dim=-1, keepdim=True)}, f"{out}/coop_text.pt")

    save(PromptLearner(coop_cfg(4, True), classnames, clip_model), f"{out}/coop_csc", epoch=1)
    save(PromptLearner(coop_cfg(16, False), classnames, clip_model), f"{out}/coop16", epoch=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
