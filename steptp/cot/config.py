"""Configuration of the CoT writers: the LLM, its parameters, limits and the price table.

Defaults live here; ``CotConfig.load(path)`` reads overrides from a JSON or YAML file (only the
keys given change). The API key is never configuration: it comes from ``ANTHROPIC_API_KEY``.
Prices are USD per million tokens (input, output, cache read, cache write) — list prices when
this was written; override them in the config file when they change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class Prices(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float
    output: float
    cache_read: float
    cache_write: float


DEFAULT_PRICES: dict[str, Prices] = {
    "claude-sonnet-4-6": Prices(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75),
    "claude-sonnet-4-5": Prices(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75),
    "claude-opus-4-6": Prices(input=5.0, output=25.0, cache_read=0.50, cache_write=6.25),
    "claude-haiku-4-5": Prices(input=1.0, output=5.0, cache_read=0.10, cache_write=1.25),
}


class AnthropicConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "claude-sonnet-4-6"
    max_tokens: int = 2048
    temperature: Optional[float] = Field(None, description="sent only when set (as an extra body "
                                                           "field: SDK 2.x has no sampling arguments)")
    http_max_retries: int = Field(6, description="SDK retries on 408/409/429/5xx/529 (backoff, "
                                                 "honouring retry-after)")
    timeout_s: float = 120.0
    concurrency: int = Field(4, description="parallel requests outside batch mode")
    requests_per_minute: Optional[float] = Field(None, description="client-side request rate cap")
    batch_poll_s: float = 30.0
    batch_timeout_s: float = 26 * 3600.0
    batch_discount: float = Field(0.5, description="price factor of Message Batches")
    prices: dict[str, Prices] = Field(default_factory=lambda: dict(DEFAULT_PRICES))

    def price(self) -> Optional[Prices]:
        return self.prices.get(self.model)


class CotConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_retries: int = Field(2, description="validation failures fed back to the LLM before the "
                                            "step falls back to the template writer")
    seed: int = 0
    cache_dir: str = "out/cot-cache"
    batch: bool = False
    anthropic: AnthropicConfig = Field(default_factory=AnthropicConfig)

    @classmethod
    def load(cls, path: Optional[str | Path] = None, **overrides) -> "CotConfig":
        data: dict = {}
        if path is not None:
            text = Path(path).read_text()
            if str(path).endswith((".yaml", ".yml")):
                import yaml  # type: ignore[import-untyped]

                data = yaml.safe_load(text) or {}
            else:
                data = json.loads(text)
            data = data.get("cot", data)
        cfg = cls.model_validate(data)
        upd = {k: v for k, v in overrides.items() if v is not None}
        a_upd = {k: upd.pop(k) for k in list(upd) if k in AnthropicConfig.model_fields}
        if a_upd:
            upd["anthropic"] = cfg.anthropic.model_copy(update=a_upd)
        return cfg.model_copy(update=upd)


__all__ = ["Prices", "DEFAULT_PRICES", "AnthropicConfig", "CotConfig"]
