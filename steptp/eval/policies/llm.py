"""``openai`` / ``anthropic``: a language model through the shared client layer
(``steptp.llm.chat``), prompted exactly as the release's chat examples."""

from __future__ import annotations

from typing import Any, Optional

from ...llm.chat import LLMError, make_client
from ..judge import State
from .base import Proposer, Proposal, prompt_messages


class LLMProposer(Proposer):
    def __init__(self, backend: str, model: Optional[str] = None, **kw: Any):
        self.name = backend
        if not model:
            raise ValueError(f"the {backend} policy needs --model")
        kw = {k: v for k, v in kw.items() if v is not None and k not in ("steps", "seed")}
        if backend == "anthropic" and "prices" not in kw:
            from ...cot.config import DEFAULT_PRICES

            kw["prices"] = DEFAULT_PRICES.get(model)
        self.client = make_client(backend, model, **kw)

    def propose(self, state: State, n: int = 1, *, offset: int = 0) -> list[Proposal]:
        msgs = prompt_messages(state)
        out = []
        for k in range(offset, offset + n):  # one call per draw: not every server supports n > 1
            try:
                rs = self.client.complete(msgs, 1, sample=k)
            except LLMError as e:  # the run goes on: this draw has no reply
                out.append(Proposal(error=e.kind, error_reason=str(e)))
                continue
            # a server may answer 200 with no choices, or a content that is not text: the draw
            # has no reply, and says so (never an IndexError that ends the run)
            if not rs:
                out.append(Proposal(error="empty", error_reason="the server answered no choices"))
                continue
            r = rs[0]
            if not isinstance(r.text, str) or not r.text:
                what = "no content" if not r.text else f"a {type(r.text).__name__} content"
                out.append(Proposal(error="empty", error_reason=f"the server answered {what} "
                                    f"(finish_reason {str(r.finish_reason)[:40]!r})"))
                continue
            tok = _count(r.usage, "completion_tokens", "output_tokens") \
                + _count(r.usage, "prompt_tokens", "input_tokens")
            out.append(Proposal(r.text, tokens=0 if r.cached else tok, cached=r.cached,
                                meta={"finish_reason": str(r.finish_reason)[:40]}))
        return out

    def usage(self) -> dict[str, Any]:
        return self.client.meter.as_dict()


def _count(usage, *keys: str) -> int:
    """A token count from a server's usage object, 0 where it is missing or not a count."""
    for k in keys:
        v = usage.get(k) if isinstance(usage, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12:
            return int(v)
    return 0
