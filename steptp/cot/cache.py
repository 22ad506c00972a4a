"""The response cache of the CoT writers: the LLM layer's (``steptp.llm.cache``)."""

from ..llm.cache import ResponseCache, cache_key

__all__ = ["cache_key", "ResponseCache"]
