"""Does the reasoning argue for its answer? Checks on a step's CoT beside the fact checks.

    problems = coherence_problems(cot, step, f)      # ["coherence site: ...", ...]

A fact check asks whether each sentence is true; these ask whether the sentences, read in
order as a model learns them, lead to the decision (each problem line starts with
``coherence <category>:``):

* ``site`` — the bottleneck is about the statement and loops the step acts on (a statement the
  bottleneck quotes is one at the step's site; its loop is a loop of the site's nest), and the
  step answers that kind of limit (:data:`steptp.cot.argument.ANSWERS`) — for a strided walk,
  it ends it or keeps its lines in L1 until their next element is read — or the step is
  preparatory and the move it enables answers it;
* ``ranking`` — no rejected alternative is presented as better than the chosen step ("ranks it
  ahead", "faster by itself than the chosen step", a lower predicted time) unless its reason
  says why it is not taken now;
* ``preparatory`` — a preparatory step names the strategy it enables (in the structured field
  and in backticks in the text) and says why that strategy needs it;
* ``effect`` — the expected effect supports the decision: a chosen step expected "slower" or
  "neutral" (and not preparatory) is not argued for, and the text does not contradict the
  stated direction;
* ``derivable`` — every number in the text is computable from the prompt alone (the program,
  the hardware line and the decision's own site and parameters): the cost model's absolute
  times, the before-program's measured time and anything else opaque are not;
* ``cache`` — cache reasoning uses levels that can decide the step: no last-level figure the
  hardware cannot plausibly give these cores (:attr:`steptp.cot.facts.Hardware.l3_plausible`).

``site`` and ``effect`` depend on whether the step was a good one to argue for, not only on how
the reasoning is written: the template writer cannot fix them, so its steps that fail them are
kept (marked in ``cot["coherence"]``) and curation holds them out of the SFT set. The other
categories are about the writing and are part of validation for every writer.
"""

from __future__ import annotations

import re
from typing import Iterable

from ..format.cot_schema import Cot
from ..records import StepRecord
from .argument import answers, ends_strided_walk, site_findings
from .facts import Facts

CATEGORIES: dict[str, str] = {
    "site": "the bottleneck is not where the step acts, or the step does not answer it",
    "ranking": "an alternative is presented as better than the chosen step with no reason it is "
               "not taken now",
    "preparatory": "a preparatory step does not name the step it enables and why that step needs it",
    "effect": "the expected effect does not support choosing the step",
    "derivable": "a number that cannot be computed from the prompt",
    "cache": "a cache level that cannot decide the step (an implausible last-level figure)",
}
#: the categories a writer can always satisfy (validation); the others are about the step
WRITING = ("ranking", "preparatory", "derivable", "cache")
ARGUMENT = ("site", "effect")

#: labels of ``Facts.numbers`` that no rule computes from the prompt: model outputs and timings
_OPAQUE = re.compile(r"^(pred\.|alt\d+\.(predicted_s|potential_s)$|follow_up\.predicted_s$|"
                     r"diag\.predicted_s$|before\.(median|min)_s$)")
_BETTER = re.compile(r"\b(ranks? (?:it |them )?(?:ahead|higher|above|first)|better than|"
                     r"faster (?:by itself )?than the chosen|faster by itself|ahead of (?:this|the chosen)|"
                     r"cost model (?:prefers|ranks) it|more promising|outperforms?)\b", re.I)
_NOT_NOW = re.compile(r"\b(because|since|not (?:yet )?legal|only after|needs? .{0,40} first|"
                      r"cannot|can't|requires|would (?:break|undo|lose))\b", re.I)
_WHY_PREP = re.compile(r"\b(needs?|requires?|no legal|not legal|creates?|only after|exists only|"
                       r"cannot|could not|did not have|before this step)\b", re.I)
_STMT = re.compile(r"`([^`]*?(?:\+=|-=|\*=|max=|min=|[^=!<>]=[^=])[^`]*)`")
_CONTRA = {"faster": re.compile(r"\b(slower|no real change|about the same|no gain)\b", re.I),
           "slower": re.compile(r"\b(faster|speeds? up)\b", re.I)}
_L3 = re.compile(r"\bL3\b")


def derivable_numbers(f: Facts) -> dict[str, float]:
    """``f.numbers`` less what the prompt does not give (model outputs, timings)."""
    return {k: v for k, v in f.numbers.items() if not _OPAQUE.match(k)}


def _texts(cot: Cot) -> list[tuple[str, str]]:
    from .validate import _texts as texts

    return texts(cot)


def _site(cot: Cot, step: StepRecord, f: Facts) -> list[str]:
    out: list[str] = []
    sf = f.at_site
    if sf is None:
        return out
    b, e = cot.bottleneck, cot.expected_effect
    here = {" ".join(s.text.split()) for s in sf.statements}
    for m in _STMT.finditer(b.text):
        q = " ".join(m.group(1).split())
        if q not in here and not any(q in h for h in here):
            out.append(f"coherence site: the bottleneck is about `{q}`, but the step acts on "
                       f"{', '.join(f'`{h}`' for h in sorted(here))}; diagnose the statement the "
                       f"step changes (or say why it acts elsewhere)")
            break
    if b.loop is not None and b.loop not in sf.main.loops and b.kind != "structure":
        out.append(f"coherence site: the bottleneck is about loop `{b.loop}`, which is not a loop of "
                   f"the site's nest ({', '.join(f'`{v}`' for v in sf.main.loops) or 'none'})")
    mover = e.enables if e.direction == "preparatory" else step.strategy
    if mover and not answers(mover, b.kind):
        out.append(f"coherence site: `{mover}` does not answer a {b.kind.replace('_', ' ')} limit; "
                   f"the bottleneck named is not the one the "
                   f"{'enabled move' if e.direction == 'preparatory' else 'step'} acts on")
    elif b.kind == "locality" and e.direction != "preparatory":
        strided = [x for x in site_findings(f) if x.kind == "locality" and "stride" in x.detail]
        if strided and not ends_strided_walk(f, strided[0]):
            out.append(f"coherence site: the bottleneck is the strided walk of "
                       f"`{strided[0].detail['access']}`, and the step leaves a strided walk in place")
    return out


def _ranking(cot: Cot) -> list[str]:
    out: list[str] = []
    chosen = next((c for c in cot.candidates if c.verdict == "chosen"), None)
    for n, c in enumerate(cot.candidates):
        if c.verdict == "chosen" or c.refused:
            continue
        better = _BETTER.search(c.reason)
        if better is None and chosen is not None and c.predicted_s is not None \
                and chosen.predicted_s is not None and c.predicted_s < chosen.predicted_s:
            better = "a lower predicted time than the chosen step's"
        if better is not None and not _NOT_NOW.search(c.reason):
            what = better.group(0) if isinstance(better, re.Match) else better
            out.append(f"coherence ranking: candidates[{n}] (`{c.strategy}`) is presented as better "
                       f"({what!r}) and the reasoning gives no reason it is not taken now")
    for c in cot.claims:
        if c.kind == "ranks_below" and chosen is not None and c.strategy == chosen.strategy:
            out.append(f"coherence ranking: a claim ranks the chosen `{c.strategy}` below "
                       f"`{c.other}`, and the reasoning chooses it anyway")
    return out


def _preparatory(cot: Cot) -> list[str]:
    e = cot.expected_effect
    if e.direction != "preparatory":
        return []
    if not e.enables:
        return ["coherence preparatory: a preparatory step must name the strategy it enables"]
    out = []
    if f"`{e.enables}`" not in e.text:
        out.append(f"coherence preparatory: the expected effect does not name `{e.enables}`, the "
                   f"step it prepares")
    if not _WHY_PREP.search(e.text):
        out.append(f"coherence preparatory: the expected effect does not say why `{e.enables}` needs "
                   f"this step first")
    return out


def _effect(cot: Cot) -> list[str]:
    e = cot.expected_effect
    if e.direction in ("slower", "neutral"):
        return [f"coherence effect: the chosen step is expected {e.direction!r}: nothing in the "
                f"reasoning supports choosing it"]
    pat = _CONTRA.get(e.direction)
    if pat is not None and (m := pat.search(e.text)):
        return [f"coherence effect: expected_effect.direction is {e.direction!r} but its text says "
                f"{m.group(0)!r}"]
    return []


def _derivable(cot: Cot, step: StepRecord, f: Facts) -> list[str]:
    from .validate import SMALL_COUNTS, cited_numbers, number_matches

    values = list(derivable_numbers(f).values())
    quotes = [step.before_leir, step.after_leir]
    out = []
    for field_, text in _texts(cot):
        for num, unit, ctx in cited_numbers(text, quotes):
            if not unit and float(num.replace(",", "")) in SMALL_COUNTS:
                continue
            if not number_matches(num, unit, values):
                out.append(f"coherence derivable: {field_} cites {num}{(' ' + unit) if unit else ''} "
                           f"(\"…{ctx}…\"), which no rule computes from the prompt (the program and "
                           f"the hardware line): a model cannot derive it")
    return out


def _cache(cot: Cot, f: Facts) -> list[str]:
    hw = f.hardware
    if hw is None or hw.l3_plausible:
        return []
    out = []
    for field_, text in _texts(cot):
        if _L3.search(text):
            out.append(f"coherence cache: {field_} speaks of L3, but {hw.l3_bytes} bytes of L3 for "
                       f"{hw.cores} cores is not a figure these cores can count on; reason with L1 "
                       f"and L2 per core")
    for c in cot.claims:
        if c.level == "L3":
            out.append("coherence cache: a claim places data in L3, which this hardware line does "
                       "not plausibly give these cores")
    return out


def coherence_problems(cot: Cot, step: StepRecord, f: Facts,
                       categories: Iterable[str] = tuple(CATEGORIES)) -> list[str]:
    """Every coherence problem of ``cot`` in ``categories`` (default: all), one line each."""
    cats = set(categories)
    unknown = cats - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown coherence categories {sorted(unknown)} (known: "
                         f"{', '.join(CATEGORIES)})")
    out: list[str] = []
    if "site" in cats:
        out += _site(cot, step, f)
    if "ranking" in cats:
        out += _ranking(cot)
    if "preparatory" in cats:
        out += _preparatory(cot)
    if "effect" in cats:
        out += _effect(cot)
    if "derivable" in cats:
        out += _derivable(cot, step, f)
    if "cache" in cats:
        out += _cache(cot, f)
    return out


def category(problem: str) -> str:
    """The category of one problem line ("site", "ranking", ...)."""
    m = re.match(r"coherence (\w+):", problem)
    return m.group(1) if m else "other"


__all__ = ["CATEGORIES", "WRITING", "ARGUMENT", "coherence_problems", "derivable_numbers",
           "category"]
