"""Token counts of the chat format: ``o200k_base`` (``bpe-openai``, offline)."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _encoding():
    import bpe_openai

    return bpe_openai.get_encoding("o200k_base")


def n_tokens(text: str) -> int:
    return len(_encoding().encode(text))
