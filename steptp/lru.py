"""A small bounded least-recently-used memo, safe to share between threads.

The search thread, verify-ahead threads and ``search.jobs`` searches in one process read and
fill the same memos (canonical statement text, cost-model estimates); an unlocked
``OrderedDict`` could lose a key between ``get`` and ``move_to_end`` and raise in a search."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Generic, Hashable, Optional, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    def __init__(self, maxsize: int):
        self.maxsize = int(maxsize)
        self._d: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Optional[V]:
        """The value kept for ``key`` (now the most recent), else ``default`` (a sentinel
        tells a miss from a kept ``None``)."""
        with self._lock:
            if key not in self._d:
                return default
            self._d.move_to_end(key)
            return self._d[key]

    def put(self, key: Hashable, value: V) -> V:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d
