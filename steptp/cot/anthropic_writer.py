"""The Anthropic writer: an LLM fills the CoT schema from the facts, through the shared LLM
client layer (:class:`steptp.llm.chat.AnthropicChat`, the ``anthropic`` SDK).

* Model, sampling parameters, limits and prices come from :class:`~steptp.cot.config.AnthropicConfig`.
* The static instructions are a system prompt block marked ``cache_control: ephemeral`` (prompt
  caching); the tool definition (whose ``input_schema`` is ``Cot.model_json_schema()``) precedes it
  in the cached prefix, and ``tool_choice`` forces the answer into the schema.
* What the layer does for every caller (``steptp.eval`` too): 408/409/429/5xx/529 retried by the
  SDK's own loop with exponential backoff that honours ``retry-after`` (``http_max_retries``), a
  client-side ``requests_per_minute`` cap, responses cached on disk by SHA-256 of (writer version,
  prompt, model, params), tokens and cost metered (:attr:`AnthropicWriter.meter`, the layer's;
  batch calls at the batch discount), the key read from ``ANTHROPIC_API_KEY`` only and scrubbed
  from errors and log records, errors raised as :class:`CotWriterError` (the layer's ``LLMError``)
  with no chained SDK exception (which holds the request).
* Large runs use the Message Batches API (:meth:`AnthropicWriter.propose_batch`, the layer's
  ``batch``): create, poll ``retrieve`` until ``processing_status == "ended"``, stream ``results``.

The HTTP client is injectable (``http_client=``): tests pass an ``httpx2.Client`` (the HTTP
library SDK 2.x is built on) whose ``MockTransport`` serves recorded API responses, so the SDK's
real request, retry and parsing code runs without a network.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Optional

# one error type for every LLM call: the client layer's
from ..format.cot_schema import SCHEMA_VERSION, Cot
from ..llm.cache import cache_key
from ..llm.chat import AnthropicChat, LLMError as CotWriterError
from ..records import StepRecord
from .config import AnthropicConfig
from .facts import Facts

WRITER_VERSION = f"anthropic-2/{SCHEMA_VERSION}"
TOOL_NAME = "write_step_reasoning"

SYSTEM_PROMPT = f"""You write the reasoning of one step of a tensor-program optimization dataset \
(Step-TP). Each step applies one atomic rewrite (a strategy at a site with parameters) to a kernel \
written in LEIR, a Python-shaped loop language: `for i in 16, j in 32:` nests loops, `X[i,j] += e` \
is a reduction over the enclosing loop variables absent from the left-hand side. You are given the \
program before the step, the step that was applied (strategy, site, params), the program after it, \
and FACTS: the hardware (cache sizes, vector width, cores), the site's own loop nest, every access \
(reads and writes) with its stride along the innermost loop before and after the step, reuse \
distances, working sets per cache level, the limits found at the step's site (FACTS.findings: \
which of them the applied step answers, or the move it prepares) and the refusals that teach \
something. No measurement of the step is given, and no model's predicted time may be cited: \
reason only from what a reader can compute from the program and the hardware line, known before \
acting.

Explain the decision as an expert would think it through before acting, by calling the tool \
`{TOOL_NAME}` exactly once. Rules — the answer is checked automatically and rejected if it \
breaks one:
1. decision: strategy, site and params exactly as applied (same keys, same values).
2. candidates: at least two different strategies; exactly one has verdict "chosen" and it is the \
applied strategy; the others come from FACTS.alternatives (copy strategy, site, params) or \
FACTS.refusals (set refused=true); each has a one-line reason. Never present an alternative as \
better than the chosen step unless the reason says why it is not taken now.
3. Write every program name (loop variable, tensor, access, strategy) in backticks, e.g. `k`, \
`B[k,j]`, `loop_split`. Name only loop variables and tensors that exist in the program before the \
step; only the chosen candidate, expected_effect and check may also name what the step introduces.
4. Every number you write must be one of the FACTS (rounded or truncated is fine; units s, ms, \
us, ns, bytes, KiB, MiB, FLOP, %, x are understood), computable from the program and the \
hardware line: no predicted times. Small counts 0-4 are fine. Use L1 and L2 per core for cache \
reasoning.
5. bottleneck: kind, loop and tensor of FACTS.findings.answered (the limit at the step's own \
site that it answers); when that is null and FACTS.findings.prepares is set, the limit the \
prepared move answers, with expected_effect.direction "preparatory", `enables` its strategy, and \
a text that names it in backticks and says why it needs this step first. Otherwise direction \
"faster", with what the step can gain by a rule over the program's figures (cores, lanes, line \
elements, reuse distance).
6. claims: every claim your text makes about the program, in structured form — loop_nest, \
innermost_loop, stride (before; side "after" for the strides after the step), reduction_writes, \
reorder_innermost, reuse / no_reuse, fits_in_cache, staged_in_cache, loop_extent, parallel_safe. \
Each is checked against the program; write "`X` then stride N" for a stride after \
the step. Never claim reuse where FACTS show none, "short" for a loop over 16 iterations, or a new \
innermost loop a reorder does not produce.
7. check: the step's exactness class and all kernel outputs, and why they stay equal.
Be concrete and brief: one or two sentences per text field."""


# ============================================================================ prompt
def tool_definition() -> dict[str, Any]:
    return {"name": TOOL_NAME,
            "description": "Record the structured reasoning of this optimization step.",
            "input_schema": Cot.model_json_schema()}


def user_prompt(step: StepRecord, f: Facts) -> str:
    from .. import strategies as S

    reg = [{"name": s.name, "family": s.family, "exactness": s.exactness} for s in S.all()]
    parts = [
        "PROGRAM BEFORE:\n" + step.before_leir.rstrip(),
        "APPLIED STEP:\n" + json.dumps({"strategy": step.strategy, "family": step.family,
                                        "exactness": step.exactness, "site": step.site,
                                        "params": step.params}, sort_keys=True),
        "PROGRAM AFTER:\n" + step.after_leir.rstrip(),
        "FACTS:\n" + json.dumps(f.prompt(), sort_keys=True),
        "REGISTERED STRATEGIES:\n" + json.dumps(reg),
    ]
    return "\n\n".join(parts)


def tool_input(message: dict[str, Any]) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """The forced tool call's input, and its id (None, None when the answer has none)."""
    for block in message.get("content") or []:
        if block.get("type") == "tool_use" and block.get("name") == TOOL_NAME:
            return block.get("input"), block.get("id")
    return None, None


# ============================================================================ the writer
class AnthropicWriter:
    name = "anthropic"
    tool_name = TOOL_NAME
    version = WRITER_VERSION

    def __init__(self, config: Optional[AnthropicConfig] = None, *, http_client: Any = None,
                 cache_dir: Optional[str] = None, sleep: Callable[[float], None] = time.sleep):
        self.config = c = config or AnthropicConfig()
        self.client = AnthropicChat(c.model, http_client=http_client, max_tokens=c.max_tokens,
                                    temperature=c.temperature, max_retries=c.http_max_retries,
                                    timeout_s=c.timeout_s, requests_per_minute=c.requests_per_minute,
                                    cache_dir=cache_dir, prices=c.price(), sleep=sleep)
        self.meter = self.client.meter
        self._tool = tool_definition()

    def __repr__(self) -> str:
        return f"AnthropicWriter(model={self.config.model!r})"

    # ------------------------------------------------------------------ requests
    def _params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"max_tokens": self.config.max_tokens}
        if self.config.temperature is not None:
            p["temperature"] = self.config.temperature
        return p

    def request(self, step: StepRecord, f: Facts,
                history: list[tuple[dict[str, Any], str]] = ()) -> dict[str, Any]:
        """The ``messages.create`` arguments: the cached system prompt, the forced tool, the
        user prompt, then for each failed attempt the assistant's answer and the validator's
        error as an error ``tool_result``."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": user_prompt(step, f)}]
        for msg, error in history:
            _, tool_id = tool_input(msg)
            messages.append({"role": "assistant", "content": msg.get("content") or []})
            feedback = (f"Your answer was rejected by the validator:\n{error}\n"
                        f"Call `{TOOL_NAME}` again with a corrected answer.")
            if tool_id:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": tool_id, "is_error": True, "content": feedback}]})
            else:
                messages.append({"role": "user", "content": feedback})
        return {"model": self.config.model, **self._params(),
                "system": [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}],
                "tools": [self._tool], "tool_choice": {"type": "tool", "name": TOOL_NAME},
                "messages": messages}

    def request_key(self, req: dict[str, Any]) -> str:
        """The disk-cache key of a request (the layer caches under it)."""
        prompt = {k: req[k] for k in ("system", "tools", "tool_choice", "messages")}
        return cache_key(self.version, req["model"], self._params(), prompt)

    def call(self, req: dict[str, Any]) -> dict[str, Any]:
        """One ``messages.create`` (or its cached response) as the API's JSON message."""
        return self.client.message(req, self.request_key(req))[0]

    def propose(self, step: StepRecord, f: Facts,
                history: list[tuple[dict[str, Any], str]] = ()) -> tuple[Optional[dict], dict]:
        """(the tool input, the message) for one attempt; history holds failed attempts."""
        msg = self.call(self.request(step, f, history))
        return tool_input(msg)[0], msg

    # ------------------------------------------------------------------ batches
    def propose_batch(self, items: list[tuple[str, StepRecord, Facts]]
                      ) -> dict[str, tuple[Optional[dict], dict] | CotWriterError]:
        """First attempts of many steps through the Message Batches API. ``items`` are
        (custom_id, step, facts); custom ids must match ``[A-Za-z0-9_-]{1,64}``. Cached requests
        are not resubmitted. Returns custom_id -> (tool input, message) or the error."""
        reqs = [(cid, self.request(step, f)) for cid, step, f in items]
        res = self.client.batch([(cid, self.request_key(req), req) for cid, req in reqs],
                                poll_s=self.config.batch_poll_s, timeout_s=self.config.batch_timeout_s,
                                discount=self.config.batch_discount)
        return {cid: (r if isinstance(r, CotWriterError) else (tool_input(r)[0], r)) for cid, r in res.items()}


__all__ = ["AnthropicWriter", "CotWriterError", "SYSTEM_PROMPT", "TOOL_NAME", "WRITER_VERSION",
           "tool_definition", "tool_input", "user_prompt"]
