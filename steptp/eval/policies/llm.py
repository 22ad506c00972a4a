"""``openai`` / ``anthropic``: a language model through the shared client layer
(``steptp.llm.chat``), prompted exactly as the release's chat examples."""

from __future__ import annotations

from typing import Any, Optional

from ...llm.chat import LLMError, make_client
from ..judge import State
from .base import Policy, Proposal, prompt_messages


class LLMPolicy(Policy):
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
                r = self.client.complete(msgs, 1, sample=k)[0]
            except LLMError as e:  # the run goes on: this draw has no reply
                out.append(Proposal(error=e.kind, error_reason=str(e)))
                continue
            tok = int(r.usage.get("completion_tokens") or r.usage.get("output_tokens") or 0) \
                + int(r.usage.get("prompt_tokens") or r.usage.get("input_tokens") or 0)
            out.append(Proposal(r.text, tokens=0 if r.cached else tok, cached=r.cached,
                                meta={"finish_reason": r.finish_reason}))
        return out

    def usage(self) -> dict[str, Any]:
        return self.client.meter.as_dict()
