"""A disk cache of LLM responses keyed by SHA-256 of (writer version, prompt, model, params).

One JSON file per response under ``root/ab/abcdef....json``, written atomically (temp file, then
rename), so a rebuild never pays twice for the same request and a crash never leaves half a file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from ..records import canonical_json, write_text_atomic


def cache_key(writer_version: str, model: str, params: dict[str, Any], prompt: Any) -> str:
    return hashlib.sha256(canonical_json({"writer": writer_version, "model": model, "params": params,
                                          "prompt": prompt}).encode()).hexdigest()


class ResponseCache:
    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root is not None else None

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        if self.root is None:
            return None
        p = self._path(key)
        try:
            return json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        if self.root is None:
            return
        write_text_atomic(self._path(key), json.dumps(value, sort_keys=True))


__all__ = ["cache_key", "ResponseCache"]
