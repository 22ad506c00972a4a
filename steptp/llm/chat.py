"""Chat completions from a hosted or served model: ``make_client(backend, model, ...)``.

    client = make_client("openai", "my-sft-model", base_url="http://localhost:8000/v1")
    replies = client.complete([{"role": "system", ...}, {"role": "user", ...}], n=4)

* ``openai``: the ``openai`` SDK; ``base_url`` points it at any OpenAI-compatible server (vLLM,
  SGLang, llama.cpp, TGI). The key comes from ``OPENAI_API_KEY`` (a local server needs none:
  ``"EMPTY"`` is sent).
* ``anthropic``: the ``anthropic`` SDK; the system turn becomes the cached ``system`` block; the
  key comes from ``ANTHROPIC_API_KEY``.

Both SDKs retry 408/409/429/5xx with exponential backoff that honours ``retry-after``
(``max_retries``); every call is metered (tokens, cost when a price is known), cached on disk
(``cache_dir``) and its errors are re-raised as :class:`LLMError` with the key scrubbed and no
chained SDK exception (which holds the request). ``http_client`` is injectable: tests drive the
SDKs' real HTTP layer with an ``httpx2`` transport or a loopback server.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .cache import ResponseCache, cache_key
from .meter import Meter, RateLimiter
from .redact import install_redaction, scrub

log = logging.getLogger("steptp.llm")
CLIENT_VERSION = "steptp-llm-chat-1"


class LLMError(RuntimeError):
    """An API call failed for good (after the SDK's retries). ``kind``: timeout | http | error.
    The message never holds the key."""

    def __init__(self, message: str, kind: str = "error"):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Reply:
    """One completion: its text, the call's usage (shared by the n choices of one call) and
    whether it came from the disk cache."""

    text: str
    usage: dict[str, Any]
    cached: bool = False
    finish_reason: str = ""


class ChatClient:
    """The common part: cache, meter, rate cap, error translation. Backends implement
    ``_call(messages, n, params) -> (list of (text, finish_reason), usage)``."""

    backend = ""

    def __init__(self, model: str, *, max_tokens: int = 4096, temperature: Optional[float] = None,
                 seed: Optional[int] = None, max_retries: int = 4, timeout_s: float = 120.0,
                 requests_per_minute: Optional[float] = None, cache_dir: Optional[str] = None,
                 prices: Any = None):
        self.model = model
        self.max_tokens = int(max_tokens)
        self.temperature = temperature
        self.seed = seed
        self.max_retries = int(max_retries)
        self.timeout_s = float(timeout_s)
        self.cache = ResponseCache(cache_dir)
        self.meter = Meter()
        self.prices = prices
        self._limiter = RateLimiter(requests_per_minute)
        self._secrets: tuple[str, ...] = ()

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.temperature is not None:
            p["temperature"] = self.temperature
        if self.seed is not None:
            p["seed"] = self.seed
        return p

    def complete(self, messages: Sequence[dict[str, str]], n: int = 1, *,
                 sample: int = 0) -> list[Reply]:
        """``n`` completions of the chat ``messages``. ``sample`` distinguishes repeated draws of
        the same prompt in the cache (draw k of a prompt is cached as itself)."""
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        params = {**self.params(), "n": int(n), "sample": int(sample)}
        key = cache_key(f"{CLIENT_VERSION}/{self.backend}", self.model, params, msgs)
        hit = self.cache.get(key)
        if hit is not None:
            self.meter.hit()
            return [Reply(c["text"], hit.get("usage") or {}, True, c.get("finish_reason", ""))
                    for c in hit["choices"]]
        self._limiter.wait()
        failure: Optional[LLMError] = None
        try:
            choices, usage = self._call(msgs, int(n))
        except Exception as e:  # noqa: BLE001 - translated below, outside the except block
            failure = self._fail(e)
        if failure is not None:  # raised outside the except block: no chained SDK exception
            log.warning("%s", failure)
            raise failure
        self.meter.add(usage, self.prices)
        self.cache.put(key, {"choices": [{"text": t, "finish_reason": f} for t, f in choices],
                             "usage": usage})
        return [Reply(t, usage, False, f) for t, f in choices]

    def _fail(self, e: Exception) -> LLMError:
        name = type(e).__name__
        status = getattr(e, "status_code", None)
        kind = "timeout" if "Timeout" in name else ("http" if status else "error")
        what = f"HTTP {status}" if status else name
        return LLMError(scrub(f"{self.backend} API call failed ({what}): {e}", self._secrets), kind)

    def _call(self, messages: list[dict[str, str]], n: int) -> tuple[list[tuple[str, str]], dict]:
        raise NotImplementedError


class OpenAIChat(ChatClient):
    backend = "openai"

    def __init__(self, model: str, *, base_url: Optional[str] = None, http_client: Any = None,
                 **kw: Any):
        super().__init__(model, **kw)
        import openai

        key = os.environ.get("OPENAI_API_KEY", "")
        if not key and not base_url:
            raise LLMError("OPENAI_API_KEY is not set and no --base-url was given; the openai "
                           "backend reads the key from the environment only")
        self._secrets = (key,) if key else ()
        install_redaction(key)
        self.base_url = base_url
        self.client = openai.OpenAI(api_key=key or "EMPTY", base_url=base_url,
                                    http_client=http_client, max_retries=self.max_retries,
                                    timeout=self.timeout_s)

    def _call(self, messages, n):
        kw: dict[str, Any] = {"model": self.model, "messages": messages, "n": n,
                              "max_tokens": self.max_tokens}
        if self.temperature is not None:
            kw["temperature"] = self.temperature
        if self.seed is not None:
            kw["seed"] = self.seed
        r = self.client.chat.completions.create(**kw)
        choices = [((c.message.content or ""), str(c.finish_reason or "")) for c in r.choices]
        usage = r.usage.model_dump(mode="json", exclude_none=True) if r.usage is not None else {}
        return choices, usage


class AnthropicChat(ChatClient):
    backend = "anthropic"

    def __init__(self, model: str, *, http_client: Any = None, **kw: Any):
        super().__init__(model, **kw)
        import anthropic

        key = os.environ.get("ANTHROPIC_API_KEY", "")
        if not key:
            raise LLMError("ANTHROPIC_API_KEY is not set; the anthropic backend reads the key "
                           "from the environment only")
        self._secrets = (key,)
        install_redaction(key)
        self.client = anthropic.Anthropic(api_key=key, http_client=http_client,
                                          max_retries=self.max_retries, timeout=self.timeout_s)

    def _call(self, messages, n):
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [m for m in messages if m["role"] != "system"]
        kw: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": turns}
        if system:
            kw["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        if self.temperature is not None:  # SDK 2.x has no sampling arguments
            kw["extra_body"] = {"temperature": self.temperature}
        choices: list[tuple[str, str]] = []
        usage: dict[str, int] = {}
        for _ in range(n):  # the Messages API returns one completion per call
            msg = self.client.messages.create(**kw).model_dump(mode="json", exclude_none=True)
            text = "".join(b.get("text", "") for b in msg.get("content") or [] if b.get("type") == "text")
            choices.append((text, str(msg.get("stop_reason") or "")))
            for k, v in (msg.get("usage") or {}).items():
                if isinstance(v, int):
                    usage[k] = usage.get(k, 0) + v
        return choices, usage


def make_client(backend: str, model: str, **kw: Any) -> ChatClient:
    if backend == "openai":
        return OpenAIChat(model, **kw)
    if backend == "anthropic":
        kw.pop("base_url", None)
        return AnthropicChat(model, **kw)
    raise ValueError(f"unknown LLM backend {backend!r}; known: openai, anthropic")


__all__ = ["ChatClient", "OpenAIChat", "AnthropicChat", "LLMError", "Reply", "make_client",
           "CLIENT_VERSION"]
