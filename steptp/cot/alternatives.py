"""The other actions of a step's state, ranked by the cost model: what the reasoning may weigh.

``alternatives(before, target, cores)`` enumerates the registry's legal applications on the
before-program (one per site, seed 0: deterministic), predicts each result with the analytic cost
model and ranks them by the search's own score (a blend of the estimate and its potential), so a
reasoning can say "`loop_parallelization` of `i` is predicted 3.1 µs" for any step, including a
rejected one, without ever looking at a measurement. Refusals are kept only when their reason is
about this program's dependences or reduction axes (what they teach), never for "nothing to
rewrite" or a bad parameter.

``follow_up(after, ...)`` is the best finishing move (vectorize, parallelize, unroll) on the
after-program: what a preparatory step prepares, with the cost model's figure.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from .. import strategies as S
from ..leir.parser import parse

# refusal reasons that say something about the program's dependences or reduction structure
TEACHING = re.compile(r"reduction axis|carries a \w+ dependence|write the same|would reverse|"
                      r"reduces \w+ over|reads the tensor it reduces into|is read outside loop")
FINISHING = ("loop_vectorization", "loop_parallelization", "loop_unrolling")


@dataclass(frozen=True)
class Alternative:
    strategy: str
    site: dict[str, Any]
    params: dict[str, Any]
    predicted_s: float
    potential_s: float
    score: float


@dataclass(frozen=True)
class Refusal:
    strategy: str
    site: dict[str, Any]
    params: dict[str, Any]
    reason: str


def _key(strategy: str, site: dict, params: dict) -> str:
    from ..records import canonical_json

    return canonical_json([strategy, site, params])


@functools.lru_cache(maxsize=256)
def _ranked(text: str, target: str, cores: int,
            only: Optional[tuple[str, ...]] = None) -> tuple[tuple[Alternative, ...], tuple[Refusal, ...]]:
    from ..analysis import cost_model as CM

    try:
        prog = parse(text)
        cands, rejected = S.candidates(prog, strategy=list(only) if only else None, target=target,
                                       seed=0, max_per_site=1, with_rejected=True)
    except Exception:  # noqa: BLE001 - a program the registry cannot enumerate has no alternatives
        return (), ()
    alts = []
    for c in cands:
        try:
            pred = CM.predict(c.program, cores=cores)
            pot = CM.potential(c.program, cores=cores, predicted=pred)
        except Exception:  # noqa: BLE001 - an estimate failure drops that candidate only
            continue
        alts.append(Alternative(c.strategy, c.site.to_json(), dict(c.params), pred, pot,
                                CM.blend(math.log(pred), math.log(pot))))
    alts.sort(key=lambda a: (a.score, a.strategy, _key(a.strategy, a.site, a.params)))
    refs = []
    seen = set()
    for r in rejected:
        if TEACHING.search(r.reason) and (r.strategy, r.reason) not in seen:
            seen.add((r.strategy, r.reason))
            refs.append(Refusal(r.strategy, r.site.to_json(), dict(r.params), r.reason))
    return tuple(alts), tuple(refs)


def alternatives(before: str, target: str, cores: int) -> tuple[tuple[Alternative, ...], tuple[Refusal, ...]]:
    """Every legal action of the state (ranked, best first) and the teaching refusals."""
    return _ranked(before, target, cores)


def follow_up(after: str, target: str, cores: int) -> Optional[Alternative]:
    """The best finishing move on the after-program by the cost model's estimate."""
    if not after.strip():
        return None
    alts, _ = _ranked(after, target, cores, FINISHING)
    return min(alts, key=lambda a: (a.predicted_s, a.strategy, _key(a.strategy, a.site, a.params)),
               default=None)


def same_action(a: Alternative | Refusal, strategy: str, site: dict, params: dict) -> bool:
    return _key(a.strategy, a.site, a.params) == _key(strategy, site, params)


__all__ = ["Alternative", "Refusal", "alternatives", "follow_up", "same_action", "TEACHING",
           "FINISHING"]
