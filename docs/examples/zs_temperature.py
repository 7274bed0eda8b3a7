"""Zero-shot CLIP at temperature T: a training-free method in one file (docs/own-method.md).

    python -m argtca.run --plugin zs_temperature.py --trainer zs_temp \
        --dataset-config-file configs/datasets/demo.yaml TRAINER.ZS_TEMP.TEMPERATURE 2.0
"""
from argtca.adapters import Adapter
from argtca.config.keys import Key, Range
from argtca.plugins import method


@method("zs_temp", label="Zero-shot CLIP, T=2", family="training-free", defaults={
    "TEMPERATURE": Key(2.0, "the softmax temperature T", check=Range(lambda v: v > 0, "> 0"))})
class ZeroShotTemperature(Adapter):
    """softmax(CLIP logits / T) of each image's plain view; T = TRAINER.ZS_TEMP.TEMPERATURE."""

    @classmethod
    def needs_views(cls, node, cfg):
        return False   # view 0 alone: the loader makes one view per image

    def __call__(self, img):   # img [B, V, E] (unit rows; view 0 the plain crop) -> [B, K]
        logits = self.clip_logits(img[:, 0])
        return (logits / float(self.node.TEMPERATURE)).softmax(-1)
