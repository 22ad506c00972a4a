"""Requests, tokens and cost of one client, and a client-side request-rate cap."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class Meter:
    """Requests, tokens and cost of one client (thread-safe). ``usage`` is either API's usage
    object as JSON (Anthropic: input/output/cache tokens; OpenAI: prompt/completion tokens)."""

    requests: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    batches: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, usage: dict[str, Any], prices, factor: float = 1.0) -> float:
        i = int(usage.get("input_tokens") or usage.get("prompt_tokens") or 0)
        o = int(usage.get("output_tokens") or usage.get("completion_tokens") or 0)
        cr = int(usage.get("cache_read_input_tokens") or 0)
        cw = int(usage.get("cache_creation_input_tokens") or 0)
        cost = 0.0
        if prices is not None:
            cost = factor * (i * prices.input + o * prices.output + cr * prices.cache_read
                             + cw * prices.cache_write) / 1e6
        with self._lock:
            self.requests += 1
            self.input_tokens += i
            self.output_tokens += o
            self.cache_read_tokens += cr
            self.cache_write_tokens += cw
            self.cost_usd += cost
        return cost

    def hit(self) -> None:
        with self._lock:
            self.cache_hits += 1

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "cache_hits": self.cache_hits, "batches": self.batches,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens, "cost_usd": round(self.cost_usd, 8)}


class RateLimiter:
    def __init__(self, per_minute: Optional[float], sleep: Callable[[float], None] = time.sleep):
        self.interval = 60.0 / per_minute if per_minute else 0.0
        self.next = 0.0
        self.lock = threading.Lock()
        self.sleep = sleep

    def wait(self) -> None:
        if not self.interval:
            return
        with self.lock:
            now = time.monotonic()
            delay = self.next - now
            self.next = max(now, self.next) + self.interval
        if delay > 0:
            self.sleep(delay)


__all__ = ["Meter", "RateLimiter"]
