"""The first JSON object in a model's free text (decoded with ``json``, never evaluated)."""

from __future__ import annotations

import json
from typing import Any


def first_json_object(text: str) -> dict[str, Any]:
    """The first ``{...}`` in ``text`` that decodes as a JSON object (Markdown fences and words
    around it are ignored). Raises ValueError saying what was wrong."""
    dec = json.JSONDecoder()
    i = text.find("{")
    last_error = "no JSON object"
    while i >= 0:
        try:
            obj, _ = dec.raw_decode(text, i)
            if isinstance(obj, dict):
                return obj
        except ValueError as e:
            last_error = f"invalid JSON at character {i}: {e}"
        i = text.find("{", i + 1)
    raise ValueError(last_error)


__all__ = ["first_json_object"]
