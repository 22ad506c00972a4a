"""``replay``: the release's own SFT answers for a state (matched by canonical program hash).

It proves the loop: judged by the same verifier and timer, the recorded steps must verify (100%)
and reproduce their recorded step speedups within the measured spread."""

from __future__ import annotations

from typing import Iterable

from ...leir import parse
from ...leir.canon import canonical_hash
from ...records import StepRecord
from ..judge import State
from .base import Proposer, Proposal


class ReplayProposer(Proposer):
    name = "replay"

    def __init__(self, steps: Iterable[StepRecord]):
        self.by_state: dict[str, list[StepRecord]] = {}
        for s in steps:
            self.by_state.setdefault(canonical_hash(parse(s.before_leir)), []).append(s)
        for rows in self.by_state.values():  # a deterministic order: best recorded first
            rows.sort(key=lambda s: (-(s.step_speedup or 0.0), s.trajectory_id, s.step_index))

    def propose(self, state: State, n: int = 1, *, offset: int = 0) -> list[Proposal]:
        from ...format import chat

        rows = self.by_state.get(canonical_hash(parse(state.program)), [])
        out = []
        for s in rows[offset:offset + n]:
            meta = {"recorded_step_speedup": s.step_speedup, "recorded_kernel_id": s.kernel_id,
                    "recorded_before_spread": s.before.spread if s.before else None,
                    "recorded_after_spread": s.after.spread if s.after else None}
            if s.paired_before is not None and s.paired_after is not None and s.paired_after.median_s > 0:
                meta["recorded_paired_step_speedup"] = s.paired_before.median_s / s.paired_after.median_s
                meta["recorded_paired_spread"] = max(s.paired_before.spread, s.paired_after.spread)
            out.append(Proposal(chat.assistant_turn(s), meta=meta))
        return out
