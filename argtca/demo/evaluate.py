"""Zero-shot evaluation and probes of the demo CLIP on the demo dataset.

``python -m argtca.demo.evaluate [--weights W] [--split test] [--probe] [--write-reference F]``

* zero-shot: prompts ``"a photo of a {class}."``, images read from the CoOp split file, resized
  (bicubic, short side 64) + centre-cropped to 64, CLIP normalisation; accuracy and ECE (20
  equal-width confidence bins: :func:`argtca.metrics.expected_calibration_error`, the runs' own
  ECE), both in percent.
* context probe: the same prompts with the 4 context embeddings (positions 1..4, "a photo of a")
  replaced by zeros / random vectors / other style words; shows how much the context TPT tunes
  can move the classifier.
* TPT probe: a minimal TPT (64 views: original + 63 random resized crops with flip, keep the 10%
  lowest-entropy views, one AdamW step lr 5e-3 on the 4 context vectors, predict the original).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from argtca.metrics import expected_calibration_error

from .augment import normalize, random_resized_crop
from .captions import CaptionTokenizer
from .generator import DEFAULT_SEED, GENERATOR_VERSION, IMAGE_DIR, SPLIT_FILE, ensure_dataset
from .model import encode_text_ids
from .render import CLASSNAMES

TEMPLATE = "a photo of a {}."
N_BINS = 20


def load_split_images(root: Path, split: str = "test", n: Optional[int] = None
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Images of a split as un-normalised float ``[N,3,64,64]`` in [0,1], and labels."""
    from PIL import Image
    from torchvision import transforms as T
    tf = T.Compose([T.Resize(64, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(64),
                    T.ToTensor()])
    with open(Path(root) / SPLIT_FILE) as f:
        items = json.load(f)[split]
    if n is not None and n > 0:
        items = items[:n]
    imgs = [tf(Image.open(Path(root) / IMAGE_DIR / rel).convert("RGB")) for rel, _, _ in items]
    return torch.stack(imgs), torch.tensor([int(l) for _, l, _ in items])


def metrics(probs: torch.Tensor, labels: torch.Tensor) -> Dict[str, float]:
    conf, pred = probs.max(1)
    correct = pred.eq(labels)
    return {"accuracy": 100.0 * correct.double().mean().item(),
            "ece": 100.0 * expected_calibration_error(conf, correct, N_BINS),
            "n": int(labels.numel())}


def prompt_ids(classnames: Sequence[str], template: str = TEMPLATE) -> torch.Tensor:
    import open_clip
    return open_clip.get_tokenizer("argtca-demo-clip")([template.format(c) for c in classnames])


@torch.no_grad()
def image_features(model, images01: torch.Tensor, batch: int = 256) -> torch.Tensor:
    dev = next(model.parameters()).device
    out = [model.encode_image(normalize(images01[i:i + batch].to(dev)), normalize=True).float()
           for i in range(0, images01.shape[0], batch)]
    return torch.cat(out)


def text_features(model, ids: torch.Tensor, ctx: Optional[torch.Tensor] = None) -> torch.Tensor:
    dev = next(model.parameters()).device
    return encode_text_ids(model, ids.to(dev), ctx=ctx, normalize=True).float()


@torch.no_grad()
def zero_shot(model, images01: torch.Tensor, labels: torch.Tensor,
              classnames: Sequence[str] = CLASSNAMES, template: str = TEMPLATE,
              img_feats: Optional[torch.Tensor] = None) -> Dict[str, float]:
    """Zero-shot accuracy/ECE (percent) with ``model.encode_text`` on ``template`` prompts."""
    dev = next(model.parameters()).device
    f_img = image_features(model, images01) if img_feats is None else img_feats
    f_txt = model.encode_text(prompt_ids(classnames, template).to(dev), normalize=True).float()
    probs = (model.logit_scale.exp().float() * f_img @ f_txt.T).softmax(-1).cpu()
    return metrics(probs, labels)


@torch.no_grad()
def context_probe(model, images01: torch.Tensor, labels: torch.Tensor,
                  classnames: Sequence[str] = CLASSNAMES, seed: int = 0) -> Dict[str, dict]:
    """Zero-shot with the 4 context embeddings of "a photo of a {c}." replaced."""
    dev = next(model.parameters()).device
    f_img = image_features(model, images01)
    ids = prompt_ids(classnames).to(dev)
    emb = model.token_embedding(ids[:1, 1:5])[0]                    # "a photo of a"
    scale = model.logit_scale.exp().float()
    base = text_features(model, ids)
    g = torch.Generator().manual_seed(seed)
    used = model.token_embedding.weight.abs().sum(1) > 0
    rnd = (torch.randn(4, emb.shape[1], generator=g).to(dev)
           * model.token_embedding.weight[used].std())
    out: Dict[str, dict] = {}
    variants = {"a photo of a": emb, "zeros": torch.zeros_like(emb), "random": rnd}
    ct = CaptionTokenizer()
    for words in ("a noisy photo of", "a dark photo of", "a blurry photo of",
                  "a patterned photo of", "a messy photo of", "a clean photo of",
                  "a faded photo of"):
        wid = torch.tensor(ct.ids(words.split())[1:-1], device=dev)
        assert wid.numel() == 4, words
        variants[words] = model.token_embedding(wid)
    for words in ("a noisy photo of", "a dark photo of", "a patterned photo of"):
        variants[f"25% toward '{words}'"] = 0.75 * emb + 0.25 * variants[words]
    for name, ctx in variants.items():
        t = text_features(model, ids, ctx=ctx)
        r = metrics((scale * f_img @ t.T).softmax(-1).cpu(), labels)
        r["text_cos_to_plain"] = (t * base).sum(-1).mean().item()
        out[name] = r
    return out


@torch.no_grad()
def attribute_probe(model, images01: torch.Tensor, labels: torch.Tensor,
                    attributes: Dict[str, List[str]], classnames: Sequence[str] = CLASSNAMES
                    ) -> Dict[str, dict]:
    """Zero-shot with TCA-style attribute prompts, bag aggregation p(c) ~ sum_k exp(s cos(x, t_ck)):
    "a photo of a {attr} {class}." (first 2 / all attributes of the file) and attribute-only
    "a photo of a {attr} object." (no class name)."""
    dev = next(model.parameters()).device
    f_img = image_features(model, images01)
    scale = model.logit_scale.exp().float()
    out: Dict[str, dict] = {}
    for name, k, tmpl in (("class+attr first 2", 2, "a photo of a {a} {c}."),
                          ("class+attr all", None, "a photo of a {a} {c}."),
                          ("attr only first 2", 2, "a photo of a {a} object."),
                          ("attr only all", None, "a photo of a {a} object.")):
        texts, owner = [], []
        for ci, c in enumerate(classnames):
            for a in attributes[c][:k]:
                texts.append(tmpl.format(a=a, c=c))
                owner.append(ci)
        ids = prompt_ids(texts, "{}")
        t = model.encode_text(ids.to(dev), normalize=True).float()
        logit = scale * f_img @ t.T
        owner_t = torch.tensor(owner, device=logit.device)
        lse = torch.stack([torch.logsumexp(logit[:, owner_t == ci], 1)
                           for ci in range(len(classnames))], 1)
        out[name] = metrics(lse.softmax(-1).cpu(), labels)
    return out


def tpt_probe(model, images01: torch.Tensor, labels: torch.Tensor,
              classnames: Sequence[str] = CLASSNAMES, n_views: int = 64, selection_p: float = 0.1,
              steps: int = 1, lr: float = 5e-3, seed: int = 0) -> Dict[str, dict]:
    """Minimal TPT (crop+flip views, no AugMix) to check that tuning the context has leverage."""
    dev = next(model.parameters()).device
    for p in model.parameters():
        p.requires_grad_(False)
    g = torch.Generator(device=dev).manual_seed(seed)
    ids = prompt_ids(classnames).to(dev)
    with torch.no_grad():
        ctx0 = model.token_embedding(ids[:1, 1:5])[0].clone()
    scale = model.logit_scale.exp().float().detach()
    n_sel = max(1, int(n_views * selection_p))
    p_zs, p_tpt, p_avg, cos, rel = [], [], [], [], []
    for i in range(images01.shape[0]):
        x = images01[i:i + 1].to(dev)
        views = torch.cat([x, random_resized_crop(x.expand(n_views - 1, -1, -1, -1), generator=g)])
        with torch.no_grad():
            fv = model.encode_image(normalize(views), normalize=True).float()
            t0 = text_features(model, ids, ctx0)
            lv = scale * fv @ t0.T
            ent = -(lv.softmax(-1) * lv.log_softmax(-1)).sum(-1)
            sel = ent.argsort()[:n_sel]
        p_zs.append(lv[0].softmax(-1))
        p_avg.append(lv[sel].softmax(-1).mean(0))
        ctx = ctx0.clone().requires_grad_(True)
        opt = torch.optim.AdamW([ctx], lr=lr)
        for _ in range(steps):
            lo = scale * fv[sel] @ text_features(model, ids, ctx).T
            avg = torch.logsumexp(lo.log_softmax(-1), 0) - torch.log(torch.tensor(float(n_sel)))
            loss = -(avg.exp() * avg).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            t1 = text_features(model, ids, ctx)
            p_tpt.append((scale * fv[:1] @ t1.T)[0].softmax(-1))
            cos.append((t1 * t0).sum(-1).mean().item())
            rel.append(((ctx - ctx0).norm() / ctx0.norm()).item())
    P = {k: torch.stack(v).cpu() for k, v in (("zero_shot", p_zs), ("tpt", p_tpt),
                                                ("view_avg", p_avg))}
    out = {k: metrics(v, labels) for k, v in P.items()}
    a, b = P["zero_shot"].argmax(1).eq(labels), P["tpt"].argmax(1).eq(labels)
    out["tpt"]["fixed"] = int((~a & b).sum())
    out["tpt"]["broken"] = int((a & ~b).sum())
    out["tpt"]["text_cos_before_after"] = sum(cos) / len(cos)
    out["tpt"]["ctx_relative_change"] = sum(rel) / len(rel)
    return out


def evaluate_weights(weights: Optional[str] = None, split: str = "test", n: Optional[int] = None,
                     probe: bool = False, tpt: bool = False, device: str = "cpu",
                     seed: int = DEFAULT_SEED) -> Dict[str, object]:
    from .checkpoint import load_demo_model
    model = load_demo_model(weights, device=device)
    root = ensure_dataset(seed)
    imgs, labels = load_split_images(root, split, n)
    res: Dict[str, object] = {"generator_version": GENERATOR_VERSION, "dataset_seed": seed,
                              "split": split, "template": TEMPLATE,
                              "preprocess": "resize 64 bicubic + center crop 64, CLIP mean/std",
                              "ece_bins": N_BINS, "zero_shot": zero_shot(model, imgs, labels)}
    if split == "test":
        vi, vl = load_split_images(root, "val")
        res["zero_shot_val_in_distribution"] = zero_shot(model, vi, vl)
    if probe:
        from .attributes import load_attributes
        res["context_probe"] = context_probe(model, imgs, labels)
        res["attribute_probe"] = attribute_probe(model, imgs, labels, load_attributes())
    if tpt:
        t = time.time()
        res["tpt_probe"] = tpt_probe(model, imgs, labels)
        res["tpt_probe"]["seconds"] = time.time() - t
    return res


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default=None, help="argtca-clip-v1 file (default: shipped)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=None, help="first N images only")
    ap.add_argument("--probe", action="store_true", help="context probe")
    ap.add_argument("--tpt", action="store_true", help="minimal TPT probe (slow on CPU)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--write-reference", default=None, help="write the result as JSON here")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    res = evaluate_weights(a.weights, a.split, a.n, a.probe, a.tpt, a.device)
    print(json.dumps(res, indent=1))
    if a.write_reference:
        with open(a.write_reference, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
