"""Chat-completion requests through the official ``openai`` client (any OpenAI-compatible server:
OpenAI, vLLM, Ollama, LM Studio), with JSON mode where the server has it, retries, a cache of
accepted answers, and the API key kept out of every message and every file.

Retries: transport failures (rate limits, HTTP 429, with the server's ``Retry-After``; 408/409;
server errors, 5xx; timeouts and lost connections) are retried by the openai client itself
(``max_retries`` per request, its own backoff); what it still cannot get fails that class, which the
summary reports. This module retries only answers the client cannot judge: bad answers (not the
JSON asked for), ``max_retries`` per class, waiting ``backoff * 2**k`` seconds capped at
``max_wait``. Every HTTP request and the status it got is counted (for the summary) through the
HTTP client's event hooks. A 400 that names ``response_format``/JSON mode turns JSON mode off for
the rest of the run and asks again at once. Authentication, permission and unknown-model errors
stop the run.

The key: every answer is redacted (the key, in any letter case, becomes ``***``) the moment it
arrives, before it is parsed, cached or written, so a server or proxy that reflects the key in its
answer cannot put it into a cache file or the attribute file; messages are redacted too.

Cache: ``$ARGTCA_CACHE/llm-attributes/<sha256(model, prompt hash, class)>.json`` (default
``~/.cache/argtca``) holds the accepted raw answer with the model name, the prompt hash and the
class — never the key or the server address. Written atomically.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .prompt import AnswerError, parse_answer

__all__ = ["GenerationError", "LLMConfig", "ChatClient", "cache_dir", "cache_path", "redact",
           "redact_answer"]


class GenerationError(RuntimeError):
    """Attribute generation cannot go on (the message names the cause and the fix; no key)."""


def redact(text: str, secret: Optional[str]) -> str:
    """``text`` with every occurrence of ``secret`` (in any letter case) replaced by ``***``."""
    text = str(text)
    if secret:
        text = re.sub(re.escape(secret), "***", text, flags=re.IGNORECASE)
    return text


def redact_answer(raw: str, secret: Optional[str]) -> str:
    """``raw`` without ``secret``, also where the JSON it holds spells the key with escapes
    (``\\u0073k-...``): such an answer is re-serialised from its decoded, redacted form."""
    raw = redact(raw, secret)
    if not secret:
        return raw
    try:
        decoded = json.dumps(json.loads(raw), ensure_ascii=False)
    except (TypeError, ValueError):
        return raw
    return redact(decoded, secret) if secret.lower() in decoded.lower() else raw


def cache_dir() -> Path:
    root = os.environ.get("ARGTCA_CACHE") or "~/.cache/argtca"
    return Path(os.path.expanduser(root)) / "llm-attributes"


def cache_path(model: str, phash: str, classname: str) -> Path:
    key = hashlib.sha256("\0".join((model, phash, classname)).encode("utf-8")).hexdigest()
    return cache_dir() / f"{key}.json"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@dataclass
class LLMConfig:
    model: str
    base_url: Optional[str] = None
    api_key: Optional[str] = None
    temperature: float = 0.0
    max_tokens: int = 600
    timeout: float = 60.0
    max_retries: int = 5
    backoff: float = 1.0
    max_wait: float = 60.0
    json_mode: bool = True


@dataclass
class Stats:
    requests: int = 0
    cached: int = 0
    retries: Dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def retried(self, why: str) -> None:
        self.retries[why] = self.retries.get(why, 0) + 1


def _import_openai():
    try:
        import openai  # noqa: F401
    except ImportError as e:
        raise GenerationError("attribute generation needs the official openai client: "
                              "pip install 'argtca[llm]' (or pip install openai)") from e
    return openai


class ChatClient:
    """One OpenAI-compatible endpoint; ``ask(messages, classname, phash) -> (raw, attributes,
    from_cache)``."""

    def __init__(self, cfg: LLMConfig, sleep: Callable[[float], None] = time.sleep,
                 log: Callable[[str], None] = print):
        if not cfg.model:
            raise GenerationError("no model: pass --model NAME or set OPENAI_MODEL (e.g. "
                                  "gpt-4o-mini, or the name your vLLM/Ollama server serves)")
        self.cfg = cfg
        self.sleep = sleep
        self._log = log
        self.stats = Stats()
        self.json_mode = cfg.json_mode
        self.openai = _import_openai()
        self._attempts: List[Optional[int]] = []     # HTTP status per request of one call
        self.tries = 0                                # requests the last call took
        extra = {}
        if hasattr(self.openai, "DefaultHttpxClient"):   # openai >= 1.17: count every request
            extra["http_client"] = self.openai.DefaultHttpxClient(event_hooks={
                "request": [lambda request: self._attempts.append(None)],
                "response": [self._on_response]})
        self.client = self.openai.OpenAI(
            base_url=cfg.base_url or None, api_key=cfg.api_key or "not-needed",
            timeout=cfg.timeout, max_retries=int(cfg.max_retries), **extra)

    def _on_response(self, response) -> None:
        if self._attempts:
            self._attempts[-1] = response.status_code

    def _count_attempts(self) -> int:
        """Count the requests of the last call and why the client retried them; their number."""
        attempts, self._attempts = self._attempts or [None], []
        self.stats.requests += len(attempts)
        for status in attempts[:-1]:
            self.stats.retried("timeout or lost connection" if status is None
                               else "rate limit (429)" if status == 429
                               else "server error" if status >= 500 else f"HTTP {status}")
        return len(attempts)

    def log(self, msg: str) -> None:
        self._log(redact(msg, self.cfg.api_key))

    def _fail(self, msg: str) -> GenerationError:
        return GenerationError(redact(msg, self.cfg.api_key))

    def _request(self, messages: List[Dict[str, str]]) -> str:
        kw = dict(model=self.cfg.model, messages=messages, temperature=self.cfg.temperature,
                  max_tokens=self.cfg.max_tokens)
        if self.json_mode:
            kw["response_format"] = {"type": "json_object"}
        self._attempts = []
        try:
            resp = self.client.chat.completions.create(**kw)
        finally:
            self.tries = self._count_attempts()
        usage = getattr(resp, "usage", None)
        if usage is not None:
            self.stats.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            self.stats.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        if not resp.choices:
            raise AnswerError("the answer has no choices")
        return redact_answer(resp.choices[0].message.content or "", self.cfg.api_key)

    def _wait(self, attempt: int) -> float:
        w = min(max(0.0, self.cfg.backoff * (2 ** attempt)), self.cfg.max_wait)
        self.sleep(w)
        return w

    def ask(self, messages: List[Dict[str, str]], classname: str, phash: str):
        path = cache_path(self.cfg.model, phash, classname)
        if path.is_file():
            try:
                rec = json.loads(path.read_text(encoding="utf-8"))
                raw = redact_answer(rec["answer"], self.cfg.api_key)
                attrs = parse_answer(raw)
                self.stats.cached += 1
                return raw, attrs, True
            except (OSError, ValueError, KeyError, TypeError):
                self.log(f"[attributes] cached answer {path} is unreadable; asking again")
        o = self.openai
        last = ""
        attempt = 0
        while True:
            try:
                raw = self._request(messages)
                attrs = parse_answer(raw)
                rec = {"model": self.cfg.model, "prompt_sha256": phash, "class": classname,
                       "answer": raw, "json_mode": self.json_mode}
                _write_atomic(path, json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
                return raw, attrs, False
            except AnswerError as e:
                last = f"bad answer ({e})"
            except (o.RateLimitError, o.APITimeoutError, o.APIConnectionError,
                    o.InternalServerError) as e:
                what = {o.RateLimitError: "rate limited (HTTP 429)",
                        o.APITimeoutError: f"no answer within {self.cfg.timeout:g} s",
                        o.APIConnectionError: f"cannot reach the server ({type(e).__name__})"
                        }.get(type(e), f"server error (HTTP {getattr(e, 'status_code', '?')})")
                raise AnswerError(f"{what}; the openai client gave up after {self.tries} "
                                  f"tries") from None
            except o.BadRequestError as e:
                text = str(getattr(e, "message", "") or e)
                if self.json_mode and ("response_format" in text or "json" in text.lower()):
                    self.json_mode = False
                    self.log("[attributes] the server refused JSON mode (response_format); asking "
                             "without it for the rest of the run")
                    continue
                raise self._fail(f"the server refused the request for {classname!r} "
                                 f"(HTTP 400: {text[:200]})") from None
            except o.AuthenticationError:
                raise self._fail("the server refused the API key (HTTP 401): pass --api-key or set "
                                 "OPENAI_API_KEY (a local server may need none)") from None
            except o.PermissionDeniedError:
                raise self._fail("the server denied access (HTTP 403): check the key's "
                                 "permissions for this model") from None
            except o.NotFoundError:
                raise self._fail(f"model {self.cfg.model!r} or the chat-completions endpoint was "
                                 f"not found (HTTP 404): check --model and --base-url (it ends in "
                                 f"/v1 for most servers)") from None
            except o.APIStatusError as e:
                if e.status_code in (408, 409):     # retried by the client already
                    raise AnswerError(f"HTTP {e.status_code}; the openai client gave up after "
                                      f"{self.tries} tries") from None
                raise self._fail(f"the server answered HTTP {e.status_code} for "
                                 f"{classname!r}") from None
            if attempt >= self.cfg.max_retries:
                raise AnswerError(f"{last}; gave up after {attempt + 1} tries")
            self.stats.retried("bad answer")
            w = self._wait(attempt)
            self.log(f"[attributes] {classname!r}: {last}; retry {attempt + 1}/"
                     f"{self.cfg.max_retries} in {w:.1f} s")
            attempt += 1
