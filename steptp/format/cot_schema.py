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

from ..exactness import Exactness

SCHEMA_VERSION = "steptp-cot-2"
READABLE_VERSIONS = ("steptp-cot-1", SCHEMA_VERSION)   # cot-1 records read with no claims

BottleneckKind = Literal["compute", "memory", "locality", "parallelism", "vectorization",
                         "loop_overhead", "dependence", "structure"]
Direction = Literal["faster", "slower", "neutral", "preparatory"]
ClaimKind = Literal["loop_nest", "innermost_loop", "stride", "reduction_writes", "reorder_innermost",
                    "reuse", "no_reuse", "fits_in_cache", "staged_in_cache", "loop_extent",
                    "parallel_safe", "predicted_time", "ranks_below", "line_return"]
Level = Literal["L1", "L2", "L3", "DRAM"]


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
    predicted_s: Optional[float] = Field(default=None, description="the cost model's estimate of the "
                                         "program after this action (seconds), as given in the facts")
    refused: bool = Field(default=False, description="the registry refuses this action here (the "
                                                     "reason says which dependence or reduction forbids it)")


class Claim(_Part):
    """One checkable statement about the program, the hardware or the cost model. Unless
    ``side`` is "after", it is about the program before the step; statements are the site's main
    statement (the heaviest assignment at or below the site)."""

    kind: ClaimKind = Field(description="loop_nest (loops, extents), innermost_loop (loop), stride "
                            "(access, value), reduction_writes (tensor, axes), reorder_innermost "
                            "(loop, accesses made unit-stride), reuse (access, loop, value=bytes "
                            "between reuses, level), no_reuse (access), fits_in_cache (loop, "
                            "value=bytes of one run of it, level), staged_in_cache (tensor, loop, "
                            "value=bytes per iteration, level; after the step), loop_extent (loop, "
                            "value, short), parallel_safe (loop), predicted_time (value seconds), "
                            "ranks_below (strategy, other), line_return (access that takes a new "
                            "cache line every innermost iteration, loop whose next iteration reads "
                            "the next element of that line, value=bytes of lines touched in "
                            "between, level)")
    side: Literal["before", "after"] = "before"
    path: Optional[list[int]] = Field(default=None, description="the statement's path before the "
                                      "step, when the claim is not about the site's main statement")
    loop: Optional[str] = None
    loops: Optional[list[str]] = None
    extents: Optional[list[int]] = None
    access: Optional[str] = None
    accesses: Optional[list[str]] = None
    tensor: Optional[str] = None
    axes: Optional[list[str]] = None
    value: Optional[float] = None
    level: Optional[Level] = None
    short: Optional[bool] = None
    strategy: Optional[str] = None
    other: Optional[str] = None


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
    predicted_before_s: Optional[float] = Field(default=None, description="the cost model's estimate "
                                                "before the step (seconds)")
    predicted_after_s: Optional[float] = Field(default=None, description="the cost model's estimate "
                                               "after the step (seconds)")


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
    claims: list[Claim] = Field(default_factory=list, description="every checkable claim the text "
                                "makes, in structured form")


# Fields of the stored record that are not reasoning: what was measured, the hardware the facts
# were computed for, and the argument's coherence problems. Never rendered into the <think> text.
SIDE_FIELDS = ("measured", "hardware", "coherence", "writer")


def cot_record(cot: Cot, **side: Any) -> dict[str, Any]:
    """The dict stored in ``StepRecord.cot``: the fields plus ``schema_version``, and beside
    them (``measured=...``, ``hardware=...``, ``writer=...``: the template version that wrote
    it) what the reasoning must not use."""
    out = {"schema_version": SCHEMA_VERSION, **cot.model_dump(mode="json")}
    for k, v in side.items():
        if k not in SIDE_FIELDS:
            raise ValueError(f"cot_record: unknown side field {k!r} (known: {', '.join(SIDE_FIELDS)})")
        if v is not None:
            out[k] = v
    return out


def cot_from_record(d: dict[str, Any]) -> Cot:
    d = {k: v for k, v in d.items() if k not in SIDE_FIELDS}
    version = d.pop("schema_version", SCHEMA_VERSION)
    if version not in READABLE_VERSIONS:
        raise ValueError(f"CoT schema version {version!r}; this code reads "
                         f"{', '.join(map(repr, READABLE_VERSIONS))}")
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
        mark = "+" if c.verdict == "chosen" else "x" if c.refused else "-"
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


__all__ = ["SCHEMA_VERSION", "READABLE_VERSIONS", "SIDE_FIELDS", "Claim", "Cot", "Observation", "Bottleneck", "Candidate", "Decision",
           "ExpectedEffect", "Check", "cot_record", "cot_from_record", "think_text", "render",
           "answer_json"]
