"""The exactness classes: how close a rewrite's results are to its input's, strictest first.

* ``exact`` -- bit-identical results;
* ``reassociation`` -- floating-point sums regrouped: equal up to rounding;
* ``algebraic`` -- a mathematical identity; rounding differs.

A path of steps is as loose as its loosest step (``worse``). No imports: strategies, the
verifier (and its worker processes), the CoT schema, the search and eval all read this module.
"""

from __future__ import annotations

from typing import Literal, get_args

Exactness = Literal["exact", "reassociation", "algebraic"]
EXACTNESS: tuple[str, ...] = get_args(Exactness)


def worse(a: str, b: str) -> str:
    """The looser of two classes: what a path through both steps is. A word outside
    ``EXACTNESS`` raises ``ValueError`` (a typo must not rank as some class)."""
    for c in (a, b):
        if c not in EXACTNESS:
            raise ValueError(f"unknown exactness {c!r}; use one of {', '.join(EXACTNESS)}")
    return a if EXACTNESS.index(a) >= EXACTNESS.index(b) else b


__all__ = ["EXACTNESS", "Exactness", "worse"]
