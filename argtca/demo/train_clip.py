"""Train the demo CLIP contrastively on procedurally generated images and attribute captions.

``python -m argtca.demo.train_clip --out argtca/demo/assets/demo_clip.pt [--steps N]
[--device cuda]``

1. renders ``--n-per-class`` training images per class (domain ``train``, with styles) in
   ``--workers`` processes and keeps them as one uint8 tensor on the device;
2. each step samples a batch, augments it on the device (random resized crop 0.25-1 with flip and
   +-15 deg rotation on 80% of the images, mild colour jitter) and draws one fresh caption per image
   (:func:`argtca.demo.captions.sample_caption`); ``--soft-style`` of the styled images get a
   "soft style" caption whose 4 prefix embeddings are interpolated between a neutral prefix
   ("a photo of a") and a style prefix ("a noisy photo of") by the style's strength, so that
   the 4 context positions that TPT tunes respond smoothly to small moves;
3. symmetric CLIP loss in which captions with identical tokens count as positives of each other;
   AdamW (betas 0.9/0.98, eps 1e-6, weight decay on weight matrices only), linear warm-up then
   cosine decay, bf16 autocast on CUDA;
4. writes the ``argtca-clip-v1`` file (pruned vocabulary, fp16) with the command and metadata,
   reloads it and evaluates zero-shot accuracy/ECE on the demo dataset's val and test splits plus
   the context probe (``--report`` JSON).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
import torch.nn.functional as F

from .augment import color_jitter, normalize, random_resized_crop
from .captions import CaptionTokenizer, demo_vocab_ids, sample_caption
from .checkpoint import load_argtca_checkpoint, save_demo_checkpoint
from .generator import GENERATOR_VERSION, render_pool
from .model import MODEL_NAME, build_demo_model, encode_text_embeds
from .render import CLASSNAMES


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Train the argtca demo CLIP.")
    ap.add_argument("--out", required=True, help="output weight file (argtca-clip-v1)")
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--n-per-class", type=int, default=4000,
                    help="pre-rendered training images per class")
    ap.add_argument("--soft-style", type=float, default=0.35,
                    help="probability that a styled image gets a soft-style caption")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1),
                    help="render processes")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--report", default=None, help="evaluation JSON (default: <out>.report.json)")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--tpt-probe", action="store_true", help="also run the minimal TPT probe")
    return ap.parse_args(argv)


def param_groups(model, weight_decay: float):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if p.ndim >= 2 and "embedding" not in n and "class_embedding" not in n:
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def soft_style_embeddings(model, tokens: torch.Tensor, rows: torch.Tensor, neutral: torch.Tensor,
                          ts: torch.Tensor) -> torch.Tensor:
    """Token embeddings of ``tokens``; in ``rows`` positions 1..4 become
    ``(1-t) * E[neutral] + t * E[tokens[:, 1:5]]``."""
    emb = model.token_embedding(tokens)
    if rows.numel() == 0:
        return emb
    B = tokens.shape[0]
    w = torch.ones(B, device=tokens.device, dtype=emb.dtype)
    w[rows] = ts.to(emb.dtype)
    nid = tokens[:, 1:5].clone()
    nid[rows] = neutral
    w = w.view(B, 1, 1)
    ctx = emb[:, 1:5] * w + model.token_embedding(nid) * (1 - w)
    return torch.cat([emb[:, :1], ctx, emb[:, 5:]], dim=1)


def clip_loss(logits: torch.Tensor, tokens: torch.Tensor,
              unique_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Symmetric InfoNCE; rows whose captions are token-identical are positives of each other
    (except ``unique_rows``, the soft-style captions, which are only their own positives)."""
    same = (tokens[:, None, :] == tokens[None, :, :]).all(-1).float()
    if unique_rows is not None and unique_rows.numel():
        same[unique_rows] = 0
        same[:, unique_rows] = 0
        same[unique_rows, unique_rows] = 1
    target = same / same.sum(1, keepdim=True)
    li = -(target * logits.log_softmax(1)).sum(1).mean()
    lt = -(target * logits.T.log_softmax(1)).sum(1).mean()
    return 0.5 * (li + lt)


def lr_at(step: int, base: float, warmup: int, total: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * t))


def prefetch(it, depth: int):
    """Run the generator ``it`` in a background thread, ``depth`` items ahead."""
    q: "queue.Queue" = queue.Queue(maxsize=depth)
    done = object()

    def work():
        try:
            for item in it:
                q.put(item)
        finally:
            q.put(done)

    threading.Thread(target=work, daemon=True).start()
    while True:
        item = q.get()
        if item is done:
            return
        yield item


def train(args: argparse.Namespace) -> dict:
    t_start = time.time()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)

    t0 = time.time()
    images, labels, attrs, styles = render_pool(args.seed, args.n_per_class, workers=args.workers)
    render_s = time.time() - t0
    n_img = images.shape[0]
    print(f"rendered {n_img} images in {render_s:.1f}s", flush=True)
    pool = torch.from_numpy(images).to(dev).permute(0, 3, 1, 2).contiguous()   # uint8 [N,3,64,64]

    model = build_demo_model().to(dev).train()
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.98),
                            eps=1e-6)
    ct = CaptionTokenizer()
    rng = random.Random(args.seed)
    g = torch.Generator(device=dev).manual_seed(args.seed)
    g_cpu = torch.Generator().manual_seed(args.seed)
    use_amp = dev.type == "cuda"
    max_scale = math.log(100.0)

    def batches():
        """(image indices, caption tokens, soft-style rows, their neutral prefix ids, their t)
        per step; one producer, so the order is fixed."""
        for _ in range(args.steps):
            idx = torch.randint(n_img, (args.batch,), generator=g_cpu)
            caps, rows, neutral, ts = [], [], [], []
            for j, i in enumerate(idx.tolist()):
                words, mix = sample_caption(rng, CLASSNAMES[int(labels[i])], attrs[i], styles[i],
                                           args.soft_style)
                caps.append(words)
                if mix is not None:
                    nid = ct.ids(mix[0])[1:-1]
                    if len(nid) == 4 and len(ct.ids(words[:4])) == 6:   # 4 tokens each
                        rows.append(j)
                        neutral.append(nid)
                        ts.append(mix[1])
            tokens = ct.batch(caps)
            if tokens.shape[1] < 6:
                tokens = F.pad(tokens, (0, 6 - tokens.shape[1]))
            yield (idx, tokens, torch.tensor(rows, dtype=torch.long),
                   torch.tensor(neutral, dtype=torch.long).view(-1, 4),
                   torch.tensor(ts, dtype=torch.float32))

    losses, curve = [], []
    t0 = time.time()
    n_soft = 0
    for step, (idx, tokens, rows, neutral, ts) in enumerate(prefetch(batches(), 8)):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, args.lr, args.warmup, args.steps)
        tokens = tokens.to(dev, non_blocking=True)
        rows, neutral, ts = rows.to(dev), neutral.to(dev), ts.to(dev)
        n_soft += int(rows.numel())
        x = pool[idx.to(dev)].float() / 255.0
        x = random_resized_crop(x, scale=(0.25, 1.0), max_rotation=15.0, p_crop=0.8, generator=g)
        x = normalize(color_jitter(x, generator=g))
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=use_amp):
            fi = model.encode_image(x, normalize=True)
            ft = encode_text_embeds(model, soft_style_embeddings(model, tokens, rows, neutral, ts),
                                    tokens, normalize=True)
            logits = model.logit_scale.exp() * fi.float() @ ft.float().T
        loss = clip_loss(logits.float(), tokens, rows)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, max_scale)
        every = max(1, min(10, args.log_every))
        losses.append(loss.item() if (step + 1) % every == 0 or step + 1 == args.steps
                      else float("nan"))
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            window = [v for v in losses[-args.log_every:] if v == v]
            m = float(np.mean(window))
            curve.append([step + 1, round(m, 4)])
            print(f"step {step + 1}/{args.steps} loss {m:.3f} "
                  f"scale {model.logit_scale.exp().item():.1f} "
                  f"{(time.time() - t0) / (step + 1):.3f}s/step", flush=True)
    train_s = time.time() - t0

    model = model.float().cpu().eval()
    meta = {
        "seed": args.seed, "steps": args.steps, "soft_style": args.soft_style, "batch": args.batch,
        "lr": args.lr,
        "weight_decay": args.weight_decay, "warmup": args.warmup, "n_train_images": n_img,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "precision": "bf16 autocast" if use_amp else "fp32",
        "torch": str(torch.__version__), "generator_version": GENERATOR_VERSION,
        "render_seconds": round(render_s, 1), "train_seconds": round(train_s, 1),
        "seconds_per_step": round(train_s / max(1, args.steps), 4),
        "final_loss": curve[-1][1] if curve else None, "loss_curve": curve,
        "soft_style_fraction": round(n_soft / max(1, args.steps * args.batch), 4),
    }
    try:
        import open_clip
        meta["open_clip"] = str(open_clip.__version__)
    except Exception:  # noqa: BLE001
        pass
    command = "python -m argtca.demo.train_clip " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    meta["wall_seconds"] = round(time.time() - t_start, 1)
    save_demo_checkpoint(model, args.out, demo_vocab_ids(), model_name=MODEL_NAME,
                         train_command=command, train_meta=meta)
    print(f"saved {args.out} ({os.path.getsize(args.out) / 1e6:.2f} MB)", flush=True)

    report = {"train_meta": meta, "train_command": command}
    if not args.no_eval:
        from .evaluate import context_probe, load_split_images, zero_shot
        from .generator import ensure_dataset
        shipped = build_demo_model()
        load_argtca_checkpoint(shipped, args.out)      # evaluate exactly the fp16 file
        shipped = shipped.to(dev).eval()
        root = ensure_dataset()
        for split in ("val", "test"):
            imgs, labs = load_split_images(root, split)
            report[f"zero_shot_{split}"] = zero_shot(shipped, imgs, labs)
            print(split, report[f"zero_shot_{split}"], flush=True)
        report["context_probe_test"] = context_probe(shipped, imgs, labs)
        for k, v in report["context_probe_test"].items():
            print(f"  ctx {k:22s} acc {v['accuracy']:.1f} ece {v['ece']:.1f} "
                  f"cos {v['text_cos_to_plain']:.3f}")
        if args.tpt_probe:
            from .evaluate import tpt_probe
            t0 = time.time()
            report["tpt_probe_test"] = tpt_probe(shipped, imgs, labs)
            report["tpt_probe_test"]["seconds"] = round(time.time() - t0, 1)
            print("tpt probe", report["tpt_probe_test"], flush=True)
    path = args.report or (str(args.out) + ".report.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    return report


def main(argv: Optional[List[str]] = None) -> None:
    train(parse_args(argv))


if __name__ == "__main__":
    main()
