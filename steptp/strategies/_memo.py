"""A small memo keyed on the identity of a (immutable) program.

The search asks the same question of one program many times: every ordering the registry and
the search offer for one loop band, and ``check`` / ``exactness_for`` / ``rewrite`` of each
candidate, re-derive the band's dependence vectors, which dominated search time (seconds per
state on a conv2d). Programs are frozen, so an answer stays valid while the object lives; the
memo keeps a strong reference to each program it answers for, so an ``id`` cannot be reused by
another object while its entry exists.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable


class IdentityMemo:
    """LRU of ``(program, key) -> value`` with at most ``size`` entries."""

    def __init__(self, size: int = 256):
        self.size = size
        self._d: OrderedDict[tuple[int, Hashable], tuple[Any, Any]] = OrderedDict()

    def get(self, program: Any, key: Hashable, compute: Callable[[], Any]) -> Any:
        k = (id(program), key)
        hit = self._d.get(k)
        if hit is not None and hit[0] is program:
            self._d.move_to_end(k)
            return hit[1]
        value = compute()
        self._d[k] = (program, value)
        if len(self._d) > self.size:
            self._d.popitem(last=False)
        return value

    def clear(self) -> None:
        self._d.clear()
