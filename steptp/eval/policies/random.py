"""``random``: a uniformly random legal action from the registry (the floor)."""

from __future__ import annotations

import hashlib
import random as _random

from ...leir import parse
from ..judge import State
from .base import Proposer, Proposal, candidate_reply


class RandomProposer(Proposer):
    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def propose(self, state: State, n: int = 1, *, offset: int = 0) -> list[Proposal]:
        from ...search.space import actions

        cands = actions(parse(state.program), state.target, seed=self.seed)
        out = []
        for k in range(offset, offset + n):
            if not cands:
                break
            # the draw depends on (seed, state, k) only: reruns and resumed runs agree
            h = hashlib.sha256(f"{self.seed}|{state.state_id}|{k}".encode()).digest()
            c = cands[_random.Random(h).randrange(len(cands))]
            out.append(Proposal(candidate_reply(c, f"A random legal action ({len(cands)} legal).")))
        return out
