"""THE chat format of a release: one JSON object per line, ``{"messages": [...], "meta": {...}}``.

* ``system`` — the task, the answer format and the strategy vocabulary (the same for every row);
* ``user`` — the target hardware and the LEIR program before the step;
* ``assistant`` — ``<think>`` + the rendered chain of thought + ``</think>``, then the answer JSON
  ``{"strategy", "site", "params", "program"}`` (``program`` = the LEIR after the step).

``meta`` carries ids for joining back to the parquet tables (step_key, trajectory_id, step_index,
kernel_id, split), the step's ``role`` (improving or preparatory, ``steptp.search.roles``), its
measured ``step_speedup`` (the search's timings), ``log_speedup`` and ``best_descendant_speedup``
(the timings the role was decided on: the interleaved re-timing when there is one), exactness
and token counts (``steptp.format.tokens``).

Curation (the token limit), export (the release files) and eval (the prompts a policy answers)
all read the format here, so training and inference prompts cannot drift.
"""

from __future__ import annotations

import json
from typing import Any

from ..records import StepRecord, step_key as _step_key
from .cot_schema import answer_json, cot_from_record, think_text
from .tokens import n_tokens

FORMAT_VERSION = "steptp-chat-1"


def _vocabulary() -> str:
    """The strategy registry by family, sorted (the same text in every example)."""
    from .. import strategies as S

    fams: dict[str, list[str]] = {}
    for r in S.describe():
        fams.setdefault(r["family"], []).append(r["name"])
    return "\n".join(f"- {f}: {', '.join(sorted(n))}" for f, n in sorted(fams.items()))


SYSTEM_PROMPT = (
    "You optimize tensor programs written in LEIR, one atomic step at a time. Given a kernel and "
    "the target hardware, think about what limits it, choose ONE strategy from the registry, say "
    "where it applies (site: the statement path and loop variables) and with which parameters, "
    "and give the rewritten program. The rewrite must compute the same outputs. Reason inside "
    "<think>...</think>, then answer with one JSON object: "
    '{"strategy": ..., "site": ..., "params": ..., "program": ...}.\n\n'
    "Strategies (family: names):\n" + _vocabulary())


def hardware_text(step: StepRecord, hardware: str = "") -> str:
    return hardware or step.target or "unknown"


def user_text(program: str, hardware: str) -> str:
    prog = program if program.endswith("\n") else program + "\n"
    return (f"Target hardware: {hardware}\n\n"
            f"Kernel (LEIR):\n```leir\n{prog}```\n\n"
            "Propose the next optimization step.")


def user_turn(step: StepRecord, hardware: str = "") -> str:
    return user_text(step.before_leir, hardware_text(step, hardware))


def prompt_messages(program: str, hardware: str) -> list[dict[str, str]]:
    """The system and user turns for any program (a state with no step, e.g. an unscheduled
    kernel): the prompt of an SFT example whose before-program it is."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_text(program, hardware)}]


def answer(step: StepRecord) -> str:
    return answer_json(step.strategy, dict(step.site), dict(step.params), step.after_leir)


def think(step: StepRecord) -> str:
    """The reasoning text: rendered from ``step.cot`` when it parses, else ``step.cot_text``
    (without any ``<think>`` wrapper or answer it may already carry)."""
    if step.cot:
        try:
            return think_text(cot_from_record(step.cot))
        except Exception:  # noqa: BLE001 - fall back to the stored text
            pass
    text = step.cot_text.strip()
    if text.startswith("<think>") and "</think>" in text:
        text = text[len("<think>"):text.index("</think>")]
    return text.strip()


def assistant_turn(step: StepRecord) -> str:
    return f"<think>\n{think(step)}\n</think>\n{answer(step)}"


def messages(step: StepRecord, hardware: str = "") -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_turn(step, hardware)},
            {"role": "assistant", "content": assistant_turn(step)}]


def example(step: StepRecord, hardware: str = "", split: str = "") -> dict[str, Any]:
    msgs = messages(step, hardware)
    toks = {m["role"]: n_tokens(m["content"]) for m in msgs}
    return {"messages": msgs,
            "meta": {"format": FORMAT_VERSION, "step_key": _step_key(step),
                     "trajectory_id": step.trajectory_id,
                     "step_index": step.step_index, "kernel_id": step.kernel_id, "split": split,
                     "strategy": step.strategy, "exactness": step.exactness,
                     "role": step.role, "step_speedup": step.step_speedup,
                     "log_speedup": step.log_speedup,
                     "best_descendant_speedup": step.best_descendant_speedup,
                     "target": step.target,
                     "tokens": {**toks, "total": sum(toks.values())}}}


def example_tokens(step: StepRecord, hardware: str = "") -> int:
    """Total tokens of one chat example (all three turns)."""
    return sum(n_tokens(m["content"]) for m in messages(step, hardware))


def tokens_over(step: StepRecord, hardware: str, limit: int) -> int | None:
    """The example's token count when it is above ``limit``, else None. A token is at least one
    byte of UTF-8, so an example of at most ``limit`` bytes is not tokenized: curation checks
    every step of a release, and tokenizing them all was a large part of its time."""
    msgs = messages(step, hardware)
    if sum(len(m["content"].encode("utf-8")) for m in msgs) <= limit:
        return None
    n = sum(n_tokens(m["content"]) for m in msgs)
    return n if n > limit else None


def check_line(line: str) -> list[str]:
    """Problems with one JSONL line (empty: valid in this format)."""
    try:
        d = json.loads(line)
    except ValueError as e:
        return [f"not JSON: {e}"]
    msgs = d.get("messages")
    if not isinstance(msgs, list) or [m.get("role") for m in msgs] != ["system", "user", "assistant"]:
        return ["messages must be system, user, assistant"]
    out = []
    if any(not isinstance(m.get("content"), str) or not m["content"].strip() for m in msgs):
        out.append("empty message")
    a = msgs[2]["content"]
    if not a.startswith("<think>\n") or "\n</think>\n" not in a:
        out.append("assistant turn must start with <think>...</think>")
    else:
        body = a.split("\n</think>\n", 1)[1]
        try:
            ans = json.loads(body)
            if set(ans) != {"strategy", "site", "params", "program"}:
                out.append(f"answer keys {sorted(ans)}")
        except ValueError as e:
            out.append(f"answer is not JSON: {e}")
        if not a.split("\n</think>\n", 1)[0][len("<think>\n"):].strip():
            out.append("empty reasoning")
    if "```leir" not in msgs[1]["content"] or "Target hardware:" not in msgs[1]["content"]:
        out.append("user turn must hold the hardware and the LEIR program")
    return out
