"""The OpenAI-compatible CoT writer: a model served by vLLM / SGLang / llama.cpp / TGI (or the
OpenAI API) fills the CoT schema, through the shared LLM client layer (``steptp.llm.chat``).

Same contract as :class:`~steptp.cot.anthropic_writer.AnthropicWriter` for ``write_cot``:
``propose(step, facts, history) -> (answer dict or None, message)``; the validator's error of a
failed attempt is fed back as a user turn, and ``write_cot`` falls back to the template writer
when retries run out or the API fails for good. Servers differ in tool-call support, so the
answer is ONE JSON object following ``Cot.model_json_schema()`` in the reply text (parsed with
``json``, never evaluated). Retries/backoff are the ``openai`` SDK's; responses are cached on
disk; tokens are metered; the key (``OPENAI_API_KEY``, none needed for a local server) is
scrubbed from errors and logs.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, Optional

from ..format.cot_schema import SCHEMA_VERSION, Cot
from ..llm.chat import OpenAIChat
from ..llm.jsontext import first_json_object
from ..records import StepRecord
from .anthropic_writer import SYSTEM_PROMPT as _TOOL_PROMPT, TOOL_NAME, user_prompt
from .facts import Facts

WRITER_VERSION = f"openai-1/{SCHEMA_VERSION}"


def system_prompt() -> str:
    head = _TOOL_PROMPT.replace(f"by calling the tool `{TOOL_NAME}` exactly once",
                                "by answering with ONE JSON object that follows the JSON schema "
                                "below, and nothing else")
    return head + "\n\nJSON schema of the answer:\n" + json.dumps(Cot.model_json_schema(), sort_keys=True)


class OpenAIWriter:
    name = "openai"
    tool_name = "JSON answer"
    version = WRITER_VERSION

    def __init__(self, model: str, base_url: Optional[str] = None, *, http_client: Any = None,
                 cache_dir: Optional[str] = None, max_tokens: int = 2048,
                 temperature: Optional[float] = None, max_retries: int = 6, timeout_s: float = 120.0):
        self.client = OpenAIChat(model, base_url=base_url, http_client=http_client,
                                 cache_dir=cache_dir, max_tokens=max_tokens,
                                 temperature=temperature, max_retries=max_retries,
                                 timeout_s=timeout_s)
        self.meter = self.client.meter
        self.config = SimpleNamespace(model=model, base_url=base_url)
        self._system = system_prompt()

    def __repr__(self) -> str:
        return f"OpenAIWriter(model={self.config.model!r}, base_url={self.config.base_url!r})"

    def messages(self, step: StepRecord, f: Facts,
                 history: list[tuple[dict[str, Any], str]] = ()) -> list[dict[str, str]]:
        out = [{"role": "system", "content": self._system},
               {"role": "user", "content": user_prompt(step, f)}]
        for msg, error in history:
            out.append({"role": "assistant", "content": msg.get("text", "")})
            out.append({"role": "user", "content": f"Your answer was rejected by the validator:\n{error}\n"
                                                   "Answer again with one corrected JSON object."})
        return out

    def propose(self, step: StepRecord, f: Facts,
                history: list[tuple[dict[str, Any], str]] = ()) -> tuple[Optional[dict], dict]:
        r = self.client.complete(self.messages(step, f, history))[0]  # LLMError is CotWriterError
        msg = {"text": r.text, "stop_reason": r.finish_reason}
        try:
            return first_json_object(r.text), msg
        except ValueError:
            return None, msg


__all__ = ["OpenAIWriter", "WRITER_VERSION", "system_prompt"]
