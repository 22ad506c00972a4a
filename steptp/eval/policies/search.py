"""``search``: steptp's own search ranking — the legal actions ordered by the analytic cost
model the trajectory search uses — at the same number of proposals as any other policy."""

from __future__ import annotations

from ...leir import parse
from ..judge import State
from .base import Proposer, Proposal, candidate_reply


class CostModelProposer(Proposer):
    name = "search"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._ranked: dict[str, list] = {}

    def _ranking(self, state: State) -> list:
        key = state.state_id
        if key not in self._ranked:
            from ...analysis.cost_model import score
            from ...search.space import actions

            cands = actions(parse(state.program), state.target, seed=self.seed)
            scored = sorted(((score(c.program), i) for i, c in enumerate(cands)))
            self._ranked[key] = [cands[i] for _, i in scored]
        return self._ranked[key]

    def propose(self, state: State, n: int = 1, *, offset: int = 0) -> list[Proposal]:
        ranked = self._ranking(state)
        return [Proposal(candidate_reply(c, f"Cost-model rank {k + 1} of {len(ranked)}."))
                for k, c in enumerate(ranked[offset:offset + n], start=offset)]
