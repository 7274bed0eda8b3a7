"""Where each dataset comes from: torchvision's downloader and how its files map onto the layout
argtca's loaders read (CoOp's DATASETS.md), or why it cannot be downloaded automatically."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["Source", "SOURCES", "how_to_get"]

COOP_MD = "https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md"


@dataclass(frozen=True)
class Source:
    layout: str                                  # what the loader reads, relative to the data root
    torchvision: Optional[str] = None            # torchvision.datasets class with a downloader
    moves: Tuple[Tuple[str, str], ...] = ()      # (path in torchvision's folder, path in the root)
    manual: str = ""                             # why not automatic + where to get it


SOURCES = {
    "Caltech101": Source(
        "caltech-101/101_ObjectCategories/", "Caltech101",
        (("caltech101/101_ObjectCategories", "caltech-101/101_ObjectCategories"),)),
    "OxfordPets": Source(
        "oxford_pets/images/", "OxfordIIITPet",
        (("oxford-iiit-pet/images", "oxford_pets/images"),
         ("oxford-iiit-pet/annotations", "oxford_pets/annotations"))),
    "OxfordFlowers": Source(
        "oxford_flowers/jpg/", "Flowers102",
        (("flowers-102/jpg", "oxford_flowers/jpg"),
         ("flowers-102/imagelabels.mat", "oxford_flowers/imagelabels.mat"))),
    "Food101": Source(
        "food-101/images/", "Food101",
        (("food-101/images", "food-101/images"), ("food-101/meta", "food-101/meta"))),
    "FGVCAircraft": Source(
        "fgvc_aircraft/{images/, variants.txt, images_variant_test.txt}", "FGVCAircraft",
        (("fgvc-aircraft-2013b/data", "fgvc_aircraft"),)),
    "DescribableTextures": Source(
        "dtd/images/", "DTD",
        (("dtd/dtd/images", "dtd/images"), ("dtd/dtd/labels", "dtd/labels"),
         ("dtd/dtd/imdb", "dtd/imdb"))),
    "EuroSAT": Source("eurosat/2750/", "EuroSAT", (("eurosat/2750", "eurosat/2750"),)),
    "SUN397": Source("sun397/SUN397/", "SUN397", (("SUN397", "sun397/SUN397"),)),
    "StanfordCars": Source(
        "stanford_cars/{cars_train/, cars_test/}",
        manual="torchvision's StanfordCars downloader is disabled (the original Stanford URL is "
               "gone); get cars_train/ and cars_test/ from a mirror (e.g. Kaggle "
               "'stanford-car-dataset') as CoOp's DATASETS.md describes"),
    "UCF101": Source(
        "ucf101/UCF-101-midframes/",
        manual="CoOp evaluates middle video frames that only CoOp publishes (Google Drive id "
               "10Jqome3vtUA2keJkNanAiFpgbyC9Hc2O, UCF-101-midframes.zip; torchvision's UCF101 "
               "needs the full videos and does not download); unzip it into <root>/ucf101/"),
    "ImageNet": Source(
        "imagenet/images/val/<wnid>/ (+ imagenet/classnames.txt, fetched if absent)",
        manual="ImageNet needs an account at https://image-net.org (licence terms), so it is "
               "never downloaded automatically; extract the validation images into one folder "
               "per WordNet id (or symlink an existing copy)"),
    "ImageNetA": Source(
        "imagenet-adversarial/imagenet-a/<wnid>/",
        manual="no torchvision downloader; download imagenet-a.tar from "
               "https://github.com/hendrycks/natural-adv-examples and extract it into "
               "<root>/imagenet-adversarial/"),
    "ImageNetR": Source(
        "imagenet-rendition/imagenet-r/<wnid>/",
        manual="no torchvision downloader; download imagenet-r.tar from "
               "https://github.com/hendrycks/imagenet-r and extract it into "
               "<root>/imagenet-rendition/"),
    "ImageNetV2": Source(
        "imagenetv2/imagenetv2-matched-frequency-format-val/<0..999>/",
        manual="no torchvision downloader; download https://s3-us-west-2.amazonaws.com/"
               "imagenetv2public/imagenetv2-matched-frequency.tar.gz and extract it into "
               "<root>/imagenetv2/"),
    "ImageNetSketch": Source(
        "imagenet-sketch/images/<wnid>/",
        manual="no torchvision downloader; download ImageNet-Sketch from "
               "https://github.com/HaohanWang/ImageNet-Sketch and extract it into "
               "<root>/imagenet-sketch/ (its sketch/ folder is read as well)"),
    "ImageFolder": Source(
        "<class folder>/<images> (the root is the dataset: check it with --root /path/to/images)",
        manual="your own images: put each class's images in a sub-folder named after the class "
               "(argtca/datasets/imagefolder.py; docs/own-data.md)"),
}


def how_to_get(cls, root: str, short: bool = False) -> str:
    src = SOURCES.get(cls.__name__)
    key = getattr(cls, "key", cls.__name__.lower())
    if src is None:
        return f"see {COOP_MD}"
    where = f"expected {os.path.join(root, '')}{src.layout}"
    if short:
        return where
    if src.torchvision:
        return (f"{where}: run `python -m argtca.data download {key} --root {root}` "
                f"(torchvision's {src.torchvision} downloader), or follow {COOP_MD}")
    return f"{where}: {src.manual.replace('<root>', root)} ({COOP_MD})"
