"""The proposer interface: ``propose(state, n) -> [Proposal]``, replies in the chat format."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ...format.cot_schema import answer_json
from ..judge import State


@dataclass
class Proposal:
    """One reply. ``error`` (``timeout`` | ``http`` | ``error`` | ``empty``) when the proposer
    produced none, ``error_reason`` says why; ``meta`` carries what the proposer knows about it
    (replay: the recorded speedup)."""

    reply: str = ""
    tokens: int = 0
    cached: bool = False
    error: Optional[str] = None
    error_reason: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Before:
    """What ``steptp.format.chat.user_turn`` reads of a step: the program before it, the target."""

    before_leir: str
    target: str


def prompt_messages(state: State) -> list[dict[str, str]]:
    """System + user turns exactly as the release's chat examples have them (one module writes
    both, so training and inference prompts cannot drift)."""
    from ...format import chat

    return [{"role": "system", "content": chat.SYSTEM_PROMPT},
            {"role": "user", "content": chat.user_turn(_Before(state.program, state.target),  # type: ignore[arg-type]
                                                       state.hardware)}]


def candidate_reply(c, why: str) -> str:
    """A reply in the chat format for a registry candidate."""
    from ...leir import format_program

    site = c.site.to_json() if hasattr(c.site, "to_json") else dict(c.site)
    return f"<think>\n{why}\n</think>\n" + answer_json(c.strategy, site, dict(c.params),
                                                        format_program(c.program))


class Proposer:
    name = ""

    def propose(self, state: State, n: int = 1, *, offset: int = 0) -> list[Proposal]:
        """Up to ``n`` proposals at ``state``; ``offset`` numbers them (draw ``offset + k``), so
        repeated calls at one state give new draws and seeded policies stay deterministic."""
        raise NotImplementedError

    def usage(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


__all__ = ["Proposer", "Proposal", "prompt_messages", "candidate_reply"]
