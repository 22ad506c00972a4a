"""The structured reasoning of one Step-TP step, and the text a model is trained on.

A :class:`Cot` has six parts, in the order a person would think them through:

* ``observation`` — what the kernel computes, its shapes, where the work and the memory traffic are;
* ``bottleneck`` — what limits it now (a kind, and the loop / tensor it is about);
* ``candidates`` — at least two strategies considered, each with a one-line reason for or against;
  the applied one is marked ``chosen``;
* ``decision`` — strategy, site and params exactly as applied;
* ``expected_effect`` — faster / slower / neutral / preparatory (then: what it enables);
* ``check`` — what must stay equal (the exactness class and the compared outputs).

Conventions every writer follows (the validator enforces them): program names — loop variables,
tensors, strategy names, code — are written in backticks; every number cited is one of the facts
:func:`steptp.cot.facts.facts` lists (within rounding).

:func:`render` gives ``<think>…</think>`` followed by the answer JSON ``{strategy, site, params,
program}``. The record stores ``cot_record(cot)`` (the fields plus ``schema_version``).
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "steptp-cot-1"

BottleneckKind = Literal["compute", "memory", "locality", "parallelism", "vectorization",
                         "loop_overhead", "dependence", "structure"]
Direction = Literal["faster", "slower", "neutral", "preparatory"]
Exactness = Literal["exact", "reassociation", "algebraic"]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Observation(_Part):
    computes: str = Field(description="what the kernel computes and the shapes involved, one or two "
                                      "sentences; program names in backticks")
    work: str = Field(description="where the arithmetic and the memory traffic are (FLOPs, bytes, "
                                  "arithmetic intensity, loop extents, strides), citing only given facts")


class Bottleneck(_Part):
    kind: BottleneckKind = Field(description="the main limiter now")
    loop: Optional[str] = Field(default=None, description="the loop variable it is about, if any "
                                                          "(must exist in the program before the step)")
    tensor: Optional[str] = Field(default=None, description="the tensor it is about, if any")
    text: str = Field(description="one or two sentences, citing facts")


class Candidate(_Part):
    strategy: str = Field(description="a strategy name from the registry")
    site: Optional[dict[str, Any]] = Field(default=None, description="where (path, loops), if specific")
    params: Optional[dict[str, Any]] = Field(default=None, description="parameters, if specific")
    verdict: Literal["chosen", "rejected"]
    reason: str = Field(description="one line: why (not)")


class Decision(_Part):
    strategy: str
    site: dict[str, Any] = Field(description="exactly the applied site, e.g. {\"path\": [0], \"loops\": [\"i\"]}")
    params: dict[str, Any] = Field(description="exactly the applied parameters ({} when none)")


class ExpectedEffect(_Part):
    direction: Direction = Field(description="expected runtime change of this step alone; "
                                             "'preparatory' when the step only enables a later one")
    enables: Optional[str] = Field(default=None, description="for a preparatory step: the strategy it "
                                                             "prepares for")
    text: str


class Check(_Part):
    exactness: Exactness = Field(description="exact (bit-identical), reassociation (sums regrouped: "
                                             "equal up to rounding) or algebraic")
    outputs: list[str] = Field(description="the output tensors that must stay equal")
    text: str = Field(description="what must stay equal and why the rewrite keeps it")


class Cot(_Part):
    """One step's reasoning. ``Cot.model_json_schema()`` is the tool input schema the LLM fills."""

    observation: Observation
    bottleneck: Bottleneck
    candidates: list[Candidate] = Field(min_length=2)
    decision: Decision
    expected_effect: ExpectedEffect
    check: Check


def cot_record(cot: Cot) -> dict[str, Any]:
    """The dict stored in ``StepRecord.cot``: the fields plus ``schema_version``."""
    return {"schema_version": SCHEMA_VERSION, **cot.model_dump(mode="json")}


def cot_from_record(d: dict[str, Any]) -> Cot:
    d = dict(d)
    version = d.pop("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ValueError(f"CoT schema version {version!r}; this code reads {SCHEMA_VERSION!r}")
    return Cot.model_validate(d)


def _site_text(site: Optional[dict[str, Any]], params: Optional[dict[str, Any]]) -> str:
    bits = []
    if site:
        bits.append("at " + json.dumps(site, separators=(", ", ": ")))
    if params:
        bits.append("with " + json.dumps(params, separators=(", ", ": ")))
    return (" " + " ".join(bits)) if bits else ""


def think_text(cot: Cot) -> str:
    """The reasoning as prose (the inside of ``<think>``), deterministic given ``cot``."""
    lines = [cot.observation.computes.strip(), cot.observation.work.strip(), "",
             f"Bottleneck ({cot.bottleneck.kind.replace('_', ' ')}): {cot.bottleneck.text.strip()}", "",
             "Candidates:"]
    for c in cot.candidates:
        mark = "+" if c.verdict == "chosen" else "-"
        lines.append(f"{mark} `{c.strategy}`{_site_text(c.site, c.params)}: {c.reason.strip()}")
    d = cot.decision
    lines += ["", f"Decision: `{d.strategy}`{_site_text(d.site, d.params) or ' (no parameters)'}.",
              f"Expected effect ({cot.expected_effect.direction}"
              + (f", enables `{cot.expected_effect.enables}`" if cot.expected_effect.enables else "")
              + f"): {cot.expected_effect.text.strip()}",
              f"Check ({cot.check.exactness}; " + ", ".join(f"`{o}`" for o in cot.check.outputs)
              + f"): {cot.check.text.strip()}"]
    return "\n".join(lines)


def answer_json(strategy: str, site: dict[str, Any], params: dict[str, Any], program: str) -> str:
    return json.dumps({"strategy": strategy, "site": site, "params": params, "program": program},
                      ensure_ascii=False, indent=1)


def render(cot: Cot, answer: dict[str, Any] | str) -> str:
    """``<think>…</think>`` then the answer. ``answer`` is the JSON text, or a dict with
    ``strategy, site, params, program``."""
    if isinstance(answer, dict):
        answer = answer_json(answer["strategy"], answer["site"], answer["params"], answer["program"])
    return f"<think>\n{think_text(cot)}\n</think>\n{answer}"


__all__ = ["SCHEMA_VERSION", "Cot", "Observation", "Bottleneck", "Candidate", "Decision",
           "ExpectedEffect", "Check", "cot_record", "cot_from_record", "think_text", "render",
           "answer_json"]
