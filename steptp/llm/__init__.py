"""THE LLM client layer: one place that talks to hosted or served language models.

Both the CoT stage (``steptp.cot.anthropic_writer``) and the closed loop (``steptp.eval``) go
through it, so retries/backoff (the SDKs' own loops), the disk cache of responses, token and cost
accounting and key redaction are written once.

* :mod:`.redact` — scrubbing keys from messages and log records;
* :mod:`.meter` — tokens, cost, a client-side request-rate cap;
* :mod:`.cache` — responses cached on disk by SHA-256 of (version, model, params, prompt);
* :mod:`.chat` — ``ChatClient``: ``complete(messages, n=...)`` over the ``anthropic`` SDK or the
  ``openai`` SDK (any OpenAI-compatible server through ``base_url``: vLLM, SGLang, llama.cpp, TGI).
"""

from .cache import ResponseCache, cache_key
from .meter import Meter, RateLimiter
from .redact import RedactingFilter, install_redaction, scrub

__all__ = ["ResponseCache", "cache_key", "Meter", "RateLimiter", "RedactingFilter",
           "install_redaction", "scrub"]
