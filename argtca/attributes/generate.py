"""``python -m argtca.attributes generate``: attribute files in TCA's format for your own classes.

    python -m argtca.attributes generate --classes classes.txt --out attributes.json \\
        --model gpt-4o-mini                                   # key from $OPENAI_API_KEY
    python -m argtca.attributes generate --dataset imagefolder --root /my/images \\
        --out attributes.json --base-url http://localhost:11434/v1 --model llama3.1

For every class a chat model is asked for ``--ask`` visual attributes (prompt:
:mod:`argtca.attributes.prompt`), the answer is read strictly and normalised, the attributes are
ranked by the cosine similarity of CLIP's text embeddings of attribute and class name (the run's
backbone: ``--config-file``/``MODEL.BACKBONE.NAME``/``MODEL.PRETRAINED``; :mod:`.rank`) and the
first ``--num`` (M) are written, space-separated, most relevant first. Requests, retries and the
answer cache: :mod:`argtca.attributes.llm`.

The output file is rewritten atomically after every class (finished classes only), so a crash
loses nothing; ``--resume`` keeps the classes already in it and asks only for the others (asking
again for a class costs nothing anyway: answers are cached). A summary (printed, and in
``<out>.summary.json``) counts requests, cached answers, tokens and retries, and names the classes
that got fewer than M attributes and why; exit status 1 when a class got no usable answer.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Callable, Dict, List, Optional, Sequence

from ..errors import print_bad_input
from .llm import ChatClient, GenerationError, LLMConfig, _write_atomic, redact
from .prompt import (AnswerError, build_messages, few_shot_examples, normalize_attributes,
                     prompt_hash)

__all__ = ["read_class_file", "dataset_classnames", "generate", "main"]


def read_class_file(path: str) -> List[str]:
    """Class names from a text file (one per line; blank lines and ``#`` comments skipped) or a
    JSON list; ``_`` is read as a space. GenerationError for a missing, empty or repeating file."""
    if not os.path.isfile(path):
        raise GenerationError(f"--classes {path}: file not found; give a text file with one class "
                              f"name per line")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as e:
            raise GenerationError(f"--classes {path}: not valid JSON ({e})") from e
        if not all(isinstance(n, str) for n in names):
            raise GenerationError(f"--classes {path}: the JSON list must hold strings")
    else:
        names = [ln.strip() for ln in text.splitlines()
                 if ln.strip() and not ln.strip().startswith("#")]
    names = [" ".join(n.replace("_", " ").split()) for n in names]
    names = [n for n in names if n]
    if not names:
        raise GenerationError(f"--classes {path} names no class; one class name per line")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise GenerationError(f"--classes {path}: {dup[:5]} are listed more than once; keep one")
    return names


def dataset_classnames(cfg) -> List[str]:
    """The class names of ``cfg.DATASET`` (images are not opened)."""
    from ..datasets import resolve_dataset_class
    cls = resolve_dataset_class(cfg.DATASET.NAME)
    try:
        ds = cls(cfg, check_files=False)
    except TypeError:
        ds = cls(cfg)
    return list(ds.classnames)


def _load_existing(path: str) -> Dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise GenerationError(f"--resume: {path} cannot be read as JSON ({e}); delete it or fix "
                              f"it") from e
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise GenerationError(f"--resume: {path} is not a TCA-format attribute file (class -> "
                              f"space-separated attributes); delete it or choose another --out")
    return data


def generate(classnames: Sequence[str], out: str, client: ChatClient, num: int, ask: int,
             ranker=None, domain: str = "", resume: bool = False, force: bool = False,
             say: Callable[[str], None] = print) -> dict:
    """Write ``out`` (TCA format) for ``classnames``; returns the summary (also written to
    ``<out>.summary.json``)."""
    if num < 1 or ask < num:
        raise GenerationError(f"--num must be >= 1 and --ask >= --num (got {num}, {ask})")
    done: Dict[str, str] = {}
    if os.path.exists(out):
        if resume:
            done = {k: v for k, v in _load_existing(out).items() if k in set(classnames)}
        elif not force:
            raise GenerationError(f"{out} exists: pass --resume to keep its classes and add the "
                                  f"missing ones, or --force to write it anew")
    source, examples = few_shot_examples()
    phash = prompt_hash(ask, examples, domain)
    say(f"[attributes] {len(classnames)} classes ({len(done)} already in {out}), model "
        f"{client.cfg.model}, prompt {phash[:12]} (few-shot examples: {source}), M={num} of "
        f"{ask} asked, ranking: {'CLIP text embeddings' if ranker else 'off (model order)'}")
    per_class: Dict[str, dict] = {}
    failed: Dict[str, str] = {}
    for i, name in enumerate(classnames):
        if name in done:
            per_class[name] = {"kept": len(done[name].split()), "resumed": True}
            continue
        messages = build_messages(name, ask, examples, domain)
        try:
            raw, items, cached = client.ask(messages, name, phash)
        except AnswerError as e:
            failed[name] = str(e)
            say(redact(f"[attributes] {name!r}: no usable answer: {e}", client.cfg.api_key))
            continue
        attrs, dropped = normalize_attributes(items, name)
        if ranker is not None and attrs:
            ranked = ranker.rank(name, attrs)
            attrs = [a for a, _ in ranked]
        kept = attrs[:num]
        if not kept:
            failed[name] = "no attribute left after normalisation"
            continue
        done[name] = " ".join(kept)
        per_class[name] = {"kept": len(kept), "given": len(items), "usable": len(attrs),
                           "dropped": dict(dropped), "cached": cached}
        ordered = {c: done[c] for c in classnames if c in done}
        _write_json(out, ordered, client.cfg.api_key)
        if (i + 1) % 25 == 0:
            say(f"[attributes] {i + 1}/{len(classnames)} classes")
    short = {n: d for n, d in per_class.items() if d["kept"] < num}
    st = client.stats
    summary = {"out": out, "classes": len(classnames), "written": len(done), "M": num,
               "asked": ask, "model": client.cfg.model, "prompt_sha256": phash,
               "examples": source, "json_mode": client.json_mode, "requests": st.requests,
               "cached_answers": st.cached, "prompt_tokens": st.prompt_tokens,
               "completion_tokens": st.completion_tokens, "retries": dict(st.retries),
               "short": {n: d for n, d in short.items()}, "failed": failed}
    _write_json(out + ".summary.json", summary, client.cfg.api_key)
    for line in summary_lines(summary):
        say(redact(line, client.cfg.api_key))
    return summary


def _write_json(path: str, obj, secret: Optional[str]) -> None:
    """Atomic JSON write with the key redacted: the answers are redacted already, this also
    covers what the summary quotes of a server's errors."""
    from pathlib import Path
    text = redact(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", secret)
    _write_atomic(Path(os.path.abspath(path)), text)


def summary_lines(s: dict) -> List[str]:
    retries = ", ".join(f"{k} {v}" for k, v in sorted(s["retries"].items())) or "none"
    lines = [f"[attributes] wrote {s['written']} of {s['classes']} classes to {s['out']}: "
             f"{s['requests']} requests, {s['cached_answers']} answers from the cache, tokens "
             f"{s['prompt_tokens']} prompt + {s['completion_tokens']} completion; retries: "
             f"{retries}"]
    if s["short"]:
        why = []
        for n, d in list(s["short"].items())[:10]:
            if d.get("resumed"):
                why.append(f"{n!r} {d['kept']} (kept from the earlier file)")
                continue
            dropped = ", ".join(f"{k} {v}" for k, v in d["dropped"].items())
            why.append(f"{n!r} {d['kept']} (the model gave {d['given']}"
                       + (f"; dropped: {dropped}" if dropped else "") + ")")
        more = f" and {len(s['short']) - 10} more" if len(s["short"]) > 10 else ""
        lines.append(f"[attributes] {len(s['short'])} classes have fewer than M={s['M']} "
                     f"attributes: {'; '.join(why)}{more}; ask for more (--ask) or accept "
                     f"them (ArgTCA needs M' per class, NUM_CANDIDATES at most)")
    else:
        lines.append(f"[attributes] every class has M={s['M']} attributes")
    if s["failed"]:
        shown = "; ".join(f"{n!r}: {w}" for n, w in list(s["failed"].items())[:5])
        lines.append(f"[attributes] {len(s['failed'])} classes got no usable answer ({shown}); "
                     f"they are not in the file: rerun with --resume (answers already given "
                     f"are cached)")
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m argtca.attributes generate",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--classes", help="text file: one class name per line")
    src.add_argument("--dataset", help="a dataset key or class name (imagefolder, caltech101, ...)")
    p.add_argument("--root", default="", help="data root for --dataset (default $DATA)")
    p.add_argument("--out", required=True, help="attribute file to write (TCA format JSON)")
    p.add_argument("--num", "-M", type=int, default=20, help="attributes kept per class (M; "
                   "TCA's files have 20)")
    p.add_argument("--ask", type=int, default=0, help="attributes asked for (default 1.5 M)")
    p.add_argument("--domain", default="", help='hint added to the prompt, e.g. "satellite images"')
    p.add_argument("--model", default="", help="chat model (default $OPENAI_MODEL)")
    p.add_argument("--base-url", default="", help="OpenAI-compatible endpoint, e.g. "
                   "http://localhost:8000/v1 (default $OPENAI_BASE_URL, else OpenAI's)")
    p.add_argument("--api-key", default="", help="API key (default $OPENAI_API_KEY; local servers "
                   "may need none). Never written anywhere.")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, default=600)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    p.add_argument("--max-retries", type=int, default=5, help="retries per request, by the "
                   "openai client (rate limits, timeouts, server errors), and per class for bad "
                   "answers")
    p.add_argument("--backoff", type=float, default=1.0, help="first wait in seconds after a bad "
                   "answer (doubles)")
    p.add_argument("--no-json-mode", action="store_true", help="never send response_format")
    p.add_argument("--no-rank", action="store_true", help="keep the model's order (no CLIP)")
    p.add_argument("--resume", action="store_true", help="keep the classes already in --out")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out")
    p.add_argument("--device", default="cpu", help="device of the ranking CLIP")
    p.add_argument("--config-file", action="append", default=[], help="argtca YAML (backbone, "
                   "weights, dataset keys); repeatable")
    p.add_argument("opts", nargs=argparse.REMAINDER, help="config overrides KEY VALUE ..., e.g. "
                   "MODEL.PRETRAINED /path/ViT-B-16.pt")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    key = args.api_key or os.environ.get("OPENAI_API_KEY", "")
    try:
        from ..config import get_cfg_default
        cfg = get_cfg_default()
        for f in args.config_file:
            cfg.merge_from_file(f)
        if args.dataset:
            cfg.DATASET.NAME = args.dataset
            cfg.DATASET.ROOT = args.root or os.environ.get("DATA", "") or cfg.DATASET.ROOT
        if args.opts:
            cfg.merge_from_list(list(args.opts))
        classnames = (read_class_file(args.classes) if args.classes else dataset_classnames(cfg))
        num = args.num
        ask = args.ask or math.ceil(1.5 * num)
        client = ChatClient(LLMConfig(
            model=args.model or os.environ.get("OPENAI_MODEL", ""),
            base_url=args.base_url or os.environ.get("OPENAI_BASE_URL") or None, api_key=key,
            temperature=args.temperature, max_tokens=args.max_tokens, timeout=args.timeout,
            max_retries=args.max_retries, backoff=args.backoff, json_mode=not args.no_json_mode))
        ranker = None
        if not args.no_rank:
            from ..models.weights import ModelError
            from .rank import AttributeRanker
            try:
                ranker = AttributeRanker.from_cfg(cfg, args.device)
            except ModelError as e:   # ranking is the only use of CLIP here
                raise ModelError(f"{e} (or pass --no-rank: no CLIP weights needed, the "
                                 f"attributes keep the model's order)") from None
        summary = generate(classnames, args.out, client, num, ask, ranker=ranker,
                           domain=args.domain, resume=args.resume, force=args.force)
    except Exception as e:  # one line, key removed, for every error argtca raises on bad input
        from ..datasets.base import DataError
        from ..models.weights import ModelError
        from . import AttributeFileError
        known = (GenerationError, DataError, ModelError, AttributeFileError, KeyError, ValueError)
        if not isinstance(e, known):
            raise
        return print_bad_input(e, lambda msg: redact(msg, key))
    return 1 if summary["failed"] else 0
