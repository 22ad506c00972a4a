"""Rewrite strategies: the registry of atomic optimization decisions a Step-TP record makes.

``candidates(program)`` enumerates every legal, non-trivial application; ``get(name)`` returns
one strategy (``sites``/``params``/``check``/``apply``). Importing this package registers the
loop family (``steptp.strategies.loops``).
"""

from .base import TARGETS, Candidate, IllegalRewrite, Rejected, Site, Strategy, Verdict
from .registry import (all, apply, candidates, canonical, check, describe, for_target, get, names,
                       register)
from . import loops  # noqa: F401  (registers the loop family)
from . import graph  # noqa: F401  (registers the graph family)
from . import memory  # noqa: F401  (registers the memory family)

__all__ = ["TARGETS", "Candidate", "IllegalRewrite", "Rejected", "Site", "Strategy",
           "Verdict", "all", "apply", "candidates", "canonical", "check", "describe",
           "for_target", "get", "names", "register", "worse", "loops"]
from . import algebraic  # noqa: E402,F401  (registers the algebraic family)
from . import algorithmic  # noqa: E402,F401  (registers the algorithmic family)
