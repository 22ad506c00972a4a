"""Chat completions from a hosted or served model: ``make_client(backend, model, ...)``.

    client = make_client("openai", "my-sft-model", base_url="http://localhost:8000/v1")
    replies = client.complete([{"role": "system", ...}, {"role": "user", ...}], n=4)

* ``openai``: the ``openai`` SDK; ``base_url`` points it at any OpenAI-compatible server (vLLM,
  SGLang, llama.cpp, TGI). The key comes from ``OPENAI_API_KEY`` (a local server needs none:
  ``"EMPTY"`` is sent).
* ``anthropic``: the ``anthropic`` SDK; the system turn becomes the cached ``system`` block; the
  key comes from ``ANTHROPIC_API_KEY``. Beside chat turns, :meth:`AnthropicChat.message` sends a
  full Messages request (tools, forced tool choice) and :meth:`AnthropicChat.batch` runs many
  through the Message Batches API: the CoT writer's calls, cached and metered here as well.

Both SDKs retry 408/409/429/5xx with exponential backoff that honours ``retry-after``
(``max_retries``); every call is metered (tokens, cost when a price is known), cached on disk
(``cache_dir``) and its errors are re-raised as :class:`LLMError` with the key scrubbed and no
chained SDK exception (which holds the request). ``http_client`` is injectable: tests drive the
SDKs' real HTTP layer with an ``httpx2`` transport or a loopback server.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

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
                 prices: Any = None, sleep: Callable[[float], None] = time.sleep):
        self.model = model
        self.max_tokens = int(max_tokens)
        self.temperature = temperature
        self.seed = seed
        self.max_retries = int(max_retries)
        self.timeout_s = float(timeout_s)
        self.cache = ResponseCache(cache_dir)
        self.meter = Meter()
        self.prices = prices
        self._sleep = sleep
        self._limiter = RateLimiter(requests_per_minute, sleep)
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
        choices, usage = self._guarded(lambda: self._call(msgs, int(n)))
        self.meter.add(usage, self.prices)
        if choices:  # an empty answer is a server's hiccup, not a draw: asked again, not replayed
            self.cache.put(key, {"choices": [{"text": t, "finish_reason": f} for t, f in choices],
                                 "usage": usage})
        return [Reply(t, usage, False, f) for t, f in choices]

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, its failure re-raised as :class:`LLMError` (key scrubbed) OUTSIDE the except
        block, so no chained SDK exception (which holds the request) travels with it."""
        failure: Optional[LLMError] = None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - translated below
            failure = self._fail(e)
        log.warning("%s", failure)
        raise failure

    def _fail(self, e: Exception) -> LLMError:
        if isinstance(e, LLMError):
            return LLMError(scrub(str(e), self._secrets), e.kind)
        name = type(e).__name__
        status = getattr(e, "status_code", None)
        body = getattr(e, "body", None)
        etype = (body.get("error") or {}).get("type") if isinstance(body, dict) else None
        kind = "timeout" if "Timeout" in name else ("http" if status else "error")
        what = (f"HTTP {status}" + (f" {etype}" if etype else "")) if status else name
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

    @staticmethod
    def sdk_kwargs(req: dict[str, Any]) -> dict[str, Any]:
        """``messages.create`` keyword arguments of a request: sampling parameters SDK 2.x has no
        argument for travel in ``extra_body``."""
        kw = dict(req)
        extra = {k: kw.pop(k) for k in ("temperature", "top_p", "top_k") if k in kw}
        if extra:
            kw["extra_body"] = {**kw.get("extra_body", {}), **extra}
        return kw

    def _create(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.client.messages.create(**self.sdk_kwargs(req)).model_dump(mode="json", exclude_none=True)

    def message(self, req: dict[str, Any], key: str) -> tuple[dict[str, Any], bool]:
        """One Messages API call with the full request ``req`` (tools, cached system blocks...),
        cached on disk under ``key`` (``cache_key(...)`` of the caller's version and prompt):
        (the API's message as JSON, whether it came from the cache). Metered, rate-capped."""
        hit = self.cache.get(key)
        if hit is not None:
            self.meter.hit()
            return hit, True
        self._limiter.wait()
        msg = self._guarded(lambda: self._create(req))
        self.meter.add(msg.get("usage") or {}, self.prices)
        self.cache.put(key, msg)
        return msg, False

    def batch(self, items: Sequence[tuple[str, str, dict[str, Any]]], *, poll_s: float = 30.0,
              timeout_s: float = 26 * 3600.0, discount: float = 0.5
              ) -> dict[str, dict[str, Any] | LLMError]:
        """Many requests through the Message Batches API. ``items``: (custom_id, cache key,
        request); custom ids match ``[A-Za-z0-9_-]{1,64}``. Cached requests are not resubmitted;
        the batch is created, polled (``retrieve``) every ``poll_s`` until it ended, its results
        streamed, each billed at ``discount``. Returns custom_id -> message JSON, or the
        :class:`LLMError` of that request; a failure of the batch itself raises LLMError."""
        out: dict[str, Any] = {}
        pending: dict[str, tuple[str, dict[str, Any]]] = {}
        for cid, key, req in items:
            hit = self.cache.get(key)
            if hit is not None:
                self.meter.hit()
                out[cid] = hit
            else:
                pending[cid] = (key, req)
        if pending:
            out.update(self._guarded(lambda: self._run_batch(pending, poll_s, timeout_s, discount)))
        for cid in pending:
            out.setdefault(cid, LLMError(f"batch request {cid}: no result returned"))
        return out

    def _run_batch(self, pending: dict[str, tuple[str, dict[str, Any]]], poll_s: float,
                   timeout_s: float, discount: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        batches = self.client.messages.batches
        batch = batches.create(requests=[{"custom_id": cid, "params": req} for cid, (_, req) in pending.items()])
        self.meter.batches += 1
        log.info("submitted message batch %s with %d requests", batch.id, len(pending))
        start = time.monotonic()
        while batch.processing_status != "ended":
            if time.monotonic() - start > timeout_s:
                raise LLMError(f"message batch {batch.id} did not end within {timeout_s:.0f} s", "timeout")
            self._sleep(poll_s)
            batch = batches.retrieve(batch.id)
        for line in batches.results(batch.id):
            cid, res = line.custom_id, line.result
            if cid not in pending:
                continue
            if res.type == "succeeded":
                msg = res.message.model_dump(mode="json", exclude_none=True)
                self.meter.add(msg.get("usage") or {}, self.prices, discount)
                self.cache.put(pending[cid][0], msg)
                out[cid] = msg
            else:
                detail = ""
                if res.type == "errored":
                    err = res.error.model_dump(mode="json") if hasattr(res.error, "model_dump") else res.error
                    detail = ": " + json.dumps(err)
                out[cid] = LLMError(scrub(f"batch request {cid} {res.type}{detail}", self._secrets), "http")
        return out

    def _call(self, messages, n):
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [m for m in messages if m["role"] != "system"]
        kw: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": turns}
        if system:
            kw["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        if self.temperature is not None:
            kw["temperature"] = self.temperature
        choices: list[tuple[str, str]] = []
        usage: dict[str, int] = {}
        for _ in range(n):  # the Messages API returns one completion per call
            msg = self._create(kw)
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
