"""Training captions of the demo CLIP, built from each image's true attributes and styles.

Design (see docs/DEMO.md): the 4 token positions after SOS must carry information, because
test-time prompt tuning tunes exactly those 4 context embeddings (initialised from
"a photo of a").  So most captions have a 4-token prefix whose words vary with the image *style*
("a noisy photo of", "dark picture of the", "a photo of a", ...), and prefixes are sometimes
dropped or replaced.  Attributes are grounded by attribute+class captions, attribute-only captions
(class-name dropout) and by drawing attributes only from those true for the instance.

Captions are lists of words; :class:`CaptionTokenizer` turns them into BPE ids by concatenating
per-word ids cached from open_clip's tokenizer, which equals tokenizing the joined string.
"""
from __future__ import annotations

import random
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from .render import CLASSNAMES, SYNONYM_GROUPS

SOT_ID, EOT_ID = 49406, 49407

MEDIA = ("photo", "picture", "image", "rendering", "snapshot")
DETS = ("a", "the")
STYLE_WORDS: Dict[str, Tuple[str, ...]] = {
    "noisy": ("noisy", "grainy"),
    "dark": ("dark", "dim"),
    "blurry": ("blurry", "blurred"),
    "faded": ("faded", "pale"),
    "textured": ("patterned", "busy"),
    "cluttered": ("cluttered", "messy"),
    "clean": ("clean", "sharp", "clear", "plain"),
}
BACKGROUND_SUFFIX: Dict[str, Tuple[Tuple[str, ...], ...]] = {
    "textured": (("on", "a", "patterned", "background"), ("on", "a", "busy", "background")),
    "cluttered": (("with", "clutter"), ("among", "clutter")),
    "clean": (("on", "a", "plain", "background"),),
}
OTHER_PREFIXES: Tuple[Tuple[str, ...], ...] = (
    ("there", "is", "a"), ("this", "is", "a"), ("a", "close-up", "of", "a"),
    ("a", "cropped", "photo", "of", "the"), ("a", "low-resolution", "photo", "of", "a"),
    ("an", "example", "of", "a"), ("look", "at", "the"),
)
OBJECT_WORDS = ("object", "thing", "item")
CONNECTORS = ("that", "is", "and", "with")
# context initialisations of the TPT family (TCA's ensemble uses the last three)
CTX_INITS = ("a photo of a", "a photo of the", "a picture of a", "a picture of the")


def caption_vocabulary() -> List[str]:
    """Every word a demo caption, prompt, class name, attribute or context init can contain."""
    from .attributes import all_attribute_words  # local import: avoids a cycle at import time
    words = set(DETS) | set(MEDIA) | set(OBJECT_WORDS) | set(CONNECTORS) | {".", "{}", "an"}
    for v in STYLE_WORDS.values():
        words.update(v)
    for v in BACKGROUND_SUFFIX.values():
        for phrase in v:
            words.update(phrase)
    for phrase in OTHER_PREFIXES:
        words.update(phrase)
    for c in CLASSNAMES:
        words.update(c.split())
    for g in SYNONYM_GROUPS:
        words.update(g)
    for p in CTX_INITS:
        words.update(p.split())
    words.update(all_attribute_words())
    words.discard("{}")
    return sorted(words)


MixSpec = Tuple[List[str], float]   # (neutral 4-word prefix, strength t)
P_MIX = 0.35


def sample_caption(rng: random.Random, classname: str, attributes: Sequence[str],
                   styles: Sequence[Tuple[str, float]], p_mix: float = P_MIX
                   ) -> Tuple[List[str], Optional[MixSpec]]:
    """One random caption for an image: ``(words, mix)`` ('.' is its own word).

    ``styles`` are the image's ``(style, strength)`` pairs.  The stronger a style, the more likely
    the prefix names it.  ``mix`` is not None for "soft style" captions: their 4-word prefix names
    the style, and training replaces its 4 token embeddings by ``(1-t)*E[neutral] + t*E[styled]``
    with ``t`` the style's strength, so the text tower answers smoothly (not as an on/off switch)
    when the context moves from a neutral prefix toward a style word, which is what a prompt
    tuning step does.
    """
    attrs = list(attributes)
    styled = [(s, t) for s, t in styles if s in STYLE_WORDS]
    style, strength = rng.choice(styled) if styled else ("clean", 0.0)
    mix: Optional[MixSpec] = None

    r = rng.random()
    if r < 0.08:
        prefix: List[str] = []
    elif r < 0.16:
        prefix = [rng.choice(DETS)]
    elif r < 0.24:
        prefix = list(rng.choice(OTHER_PREFIXES))
    else:
        neutral = [rng.choice(DETS), rng.choice(MEDIA), "of", rng.choice(DETS)]
        soft = bool(styled) and rng.random() < p_mix
        name_style = soft or rng.random() < (0.2 + 0.7 * strength if styled else 0.35)
        if name_style:
            sw = rng.choice(STYLE_WORDS[style])
            med = rng.choice(MEDIA)
            f = rng.random()
            if f < 0.45:
                prefix = [rng.choice(DETS), sw, med, "of"]
            elif f < 0.85 or soft:
                prefix = [sw, med, "of", rng.choice(DETS)]
            else:
                prefix = [rng.choice(DETS), sw, med, "of", rng.choice(DETS)]
            if soft:
                mix = (neutral, strength)
        else:
            prefix = neutral

    cname = classname.split()
    r = rng.random()
    if r < 0.30 or not attrs:
        content = cname
    elif r < 0.52:
        content = [rng.choice(attrs)] + cname
    elif r < 0.65:
        a = rng.sample(attrs, min(2, len(attrs)))
        content = a + cname
    elif r < 0.70:
        a = rng.sample(attrs, min(2, len(attrs)))
        content = cname + ["that", "is", a[0]] + (["and", a[1]] if len(a) > 1 else [])
    elif r < 0.75:
        content = cname + ["with", rng.choice(attrs)]
    else:                                              # class-name dropout: attributes only
        k = min(len(attrs), rng.choice((2, 2, 3)))
        content = rng.sample(attrs, k) + [rng.choice(OBJECT_WORDS)]

    suffix: List[str] = []
    for s, t in styled:
        if s in BACKGROUND_SUFFIX and rng.random() < 0.4 * t:
            suffix = list(rng.choice(BACKGROUND_SUFFIX[s]))
    if not styled and rng.random() < 0.05:
        suffix = list(BACKGROUND_SUFFIX["clean"][0])
    words = prefix + content + suffix
    if rng.random() < 0.6:
        words.append(".")
    return words, mix


def caption_text(words: Sequence[str]) -> str:
    return " ".join(words).replace(" .", ".")


class CaptionTokenizer:
    """Word-list -> padded BPE ids, by concatenating cached per-word ids of open_clip's
    tokenizer."""

    def __init__(self, tokenizer=None, context_length: int = 77):
        if tokenizer is None:
            from open_clip.tokenizer import SimpleTokenizer
            tokenizer = SimpleTokenizer()
        self.tok = tokenizer
        self.context_length = context_length
        self._cache: Dict[str, List[int]] = {}

    def word_ids(self, word: str) -> List[int]:
        ids = self._cache.get(word)
        if ids is None:
            ids = self._cache[word] = list(self.tok.encode(word))
        return ids

    def ids(self, words: Sequence[str]) -> List[int]:
        out = [SOT_ID]
        for w in words:
            out.extend(self.word_ids(w))
        out.append(EOT_ID)
        return out[: self.context_length]

    def batch(self, captions: Iterable[Sequence[str]],
              pad_to: Optional[int] = None) -> torch.Tensor:
        seqs = [self.ids(c) for c in captions]
        n = pad_to or max(len(s) for s in seqs)
        out = torch.zeros(len(seqs), n, dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = torch.tensor(s)
        return out


def demo_vocab_ids(tokenizer=None) -> torch.Tensor:
    """Sorted unique BPE ids used by the demo (every caption word, SOT, EOT)."""
    ct = CaptionTokenizer(tokenizer)
    ids = {SOT_ID, EOT_ID}
    for w in caption_vocabulary():
        ids.update(ct.word_ids(w))
    return torch.tensor(sorted(ids), dtype=torch.long)
