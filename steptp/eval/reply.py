"""Reading a model's reply: ``<think>…</think>`` then the answer JSON.

The reply is untrusted text: the JSON is decoded with ``json`` (never evaluated) and checked
for its shape; the program inside it is parsed later by the LEIR grammar (``steptp.eval.judge``).
A reply may wrap the JSON in a Markdown fence or put text around it; the first JSON object after
``</think>`` (or in the whole reply when there is no think block) is the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..llm.jsontext import first_json_object

ANSWER_KEYS = ("strategy", "site", "params", "program")
#: a reply longer than this is not read (nor kept whole in the report): the release's longest
#: answers are a few thousand characters, and a server can send anything
MAX_REPLY_CHARS = 200_000


class ReplyError(ValueError):
    """The reply has no usable answer; the message says what was wrong."""


@dataclass(frozen=True)
class Answer:
    think: str
    strategy: str
    site: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    program: str = ""


def _first_object(text: str) -> dict[str, Any]:
    try:
        return first_json_object(text)
    except ValueError as e:
        raise ReplyError(str(e)) from None


def parse_reply(text: str) -> Answer:
    if not isinstance(text, str) or not text.strip():
        raise ReplyError("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise ReplyError(f"reply of {len(text)} characters, over the {MAX_REPLY_CHARS} read")
    think, body = "", text
    if "<think>" in text:
        start = text.index("<think>") + len("<think>")
        if "</think>" not in text[start:]:
            raise ReplyError("<think> is never closed (no </think>)")
        end = text.index("</think>", start)
        think, body = text[start:end].strip(), text[end + len("</think>"):]
    obj = _first_object(body)
    missing = [k for k in ANSWER_KEYS if k not in obj]
    if missing:
        raise ReplyError(f"answer JSON lacks {', '.join(missing)} (has {', '.join(sorted(obj))})")
    if not isinstance(obj["strategy"], str) or not obj["strategy"]:
        raise ReplyError("answer 'strategy' must be a non-empty string")
    if not isinstance(obj["site"], dict):
        raise ReplyError("answer 'site' must be an object")
    if not isinstance(obj["params"], dict):
        raise ReplyError("answer 'params' must be an object")
    if not isinstance(obj["program"], str) or not obj["program"].strip():
        raise ReplyError("answer 'program' must be LEIR text")
    return Answer(think, obj["strategy"], obj["site"], obj["params"], obj["program"])


__all__ = ["Answer", "ReplyError", "parse_reply", "ANSWER_KEYS", "MAX_REPLY_CHARS"]
