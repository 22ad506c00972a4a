"""Checks a step's reasoning: the schema first, then the semantics against ``facts(step)``.

``validate(raw, step)`` returns the :class:`~steptp.format.cot_schema.Cot` or raises :class:`CotInvalid`
whose message lists every problem, one per line, each naming the field — the text fed back to an
LLM on a retry. The semantic checks:

* **decision** — strategy, site and params equal the applied ones; exactly one candidate is
  ``chosen`` and it is the applied strategy; at least two distinct strategies are considered,
  all from the registry; ``check.exactness`` is the step's and ``check.outputs`` the kernel's
  outputs;
* **names** — every loop variable and tensor named (in backticks, in structured fields, or after
  words such as "loop"/"tensor") exists in the before-program; the fields about the result
  (``expected_effect``, ``check``) may also name what the step introduces (``k_o``...);
* **numbers** — every number in the text matches some fact within rounding (units s/ms/us/ns,
  B/KB/KiB/MB..., FLOP/MFLOP..., %, x are understood); small counts 0-4 are free, and digits in
  identifiers (``T0``) or inside a verbatim quote of the program do not count;
* **claims** — every structured claim and every claim the prose makes (innermost loop, strides,
  reduction targets, reorders, reuse, cache fits, loop extents, predicted times) holds, the
  bottleneck is the before-program's diagnosis and the expected direction the cost model's
  prediction (:mod:`steptp.cot.claims`): nothing in the reasoning comes from the measurement;
* **SFT** (``sft_problems``, for steps used as SFT examples) — the predicted direction agrees
  with the measurement beyond its spread, or the step is preparatory for a later step on its path
  that applies the strategy it names.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Optional

from pydantic import ValidationError

from .. import strategies as S
from ..format.cot_schema import SIDE_FIELDS, Cot
from ..leir import ast as A
from ..records import StepRecord
from .facts import Facts, facts as compute_facts, measured_numbers
from .claims import check_claims


class CotInvalid(ValueError):
    """The reasoning failed validation; ``problems`` lists each failure with its field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("CoT failed validation:\n" + "\n".join(f"- {p}" for p in self.problems))


# ============================================================================ helpers
SMALL_COUNTS = frozenset({0.0, 1.0, 2.0, 3.0, 4.0})

# words that may appear in code spans besides program names
_LEIR_WORDS = frozenset({"kernel", "for", "in", "if", "and", "or", "not", "true", "false", "inf",
                         "serial", "parallel", "vectorized", "unrolled", "blockIdx", "threadIdx",
                         "x", "y", "z", "global", "shared", "local", "e"}) \
    | frozenset(A.INTRINSICS) | frozenset(A.DTYPES) | frozenset({"max=", "min="})

_CODE = re.compile(r"`([^`]*)`")
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z_0-9]*")
_UNIT = (r"(?:\s?(?P<u1>%|×|x|s|ms|us|µs|μs|ns|B|bytes?|KB|KiB|kB|MB|MiB|GB|GiB|"
         r"FLOPs?|flops?|kFLOPs?|MFLOPs?|GFLOPs?|ops|FLOP/B|FLOP/byte)|(?P<u2>[kKMG]))?")
_NUM = re.compile(r"(?<![A-Za-z_0-9.])(?P<num>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)"
                  + _UNIT + r"(?![A-Za-z_0-9])")
_BY = re.compile(r"(\d)\s?[x×]\s?(\d)")
# prose that names a program object: "loop k", "tensor B", "the input A"
_NAMED = re.compile(r"\b(?:loops?|axis|axes|variables?|dimensions?|tensors?|buffers?|arrays?|"
                    r"inputs?|outputs?|intermediates?)\s+([A-Za-z_][A-Za-z_0-9]*)\b")
_LOOPLIKE = re.compile(r"^[a-z](?:_[a-z]+|\d+)?$")
_TENSORLIKE = re.compile(r"^[A-Z][A-Z0-9]{0,2}$")

_SCALES: dict[str, tuple[float, ...]] = {
    "": (1.0,), "%": (1.0, 0.01), "×": (1.0,), "x": (1.0,),
    "s": (1.0,), "ms": (1e-3,), "us": (1e-6,), "µs": (1e-6,), "μs": (1e-6,), "ns": (1e-9,),
    "B": (1.0,), "byte": (1.0,), "bytes": (1.0,), "KB": (1e3, 1024.0), "kB": (1e3, 1024.0),
    "KiB": (1024.0,), "MB": (1e6, 2.0 ** 20), "MiB": (2.0 ** 20,), "GB": (1e9, 2.0 ** 30),
    "GiB": (2.0 ** 30,), "FLOP": (1.0,), "FLOPs": (1.0,), "flop": (1.0,), "flops": (1.0,),
    "ops": (1.0,), "kFLOP": (1e3,), "kFLOPs": (1e3,), "MFLOP": (1e6,), "MFLOPs": (1e6,),
    "GFLOP": (1e9,), "GFLOPs": (1e9,), "FLOP/B": (1.0,), "FLOP/byte": (1.0,),
    "k": (1e3, 1024.0), "K": (1e3, 1024.0), "M": (1e6, 2.0 ** 20), "G": (1e9, 2.0 ** 30),
}


def _norm(v: Any) -> Any:
    """JSON value with integral floats as ints and tuples as lists (for equality)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {str(k): _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def _same(a: Any, b: Any) -> bool:
    return json.dumps(_norm(a), sort_keys=True) == json.dumps(_norm(b), sort_keys=True)


def _ulp(num: str) -> float:
    """One unit in the last place of a written number ("1.23" -> 0.01, "2.1e6" -> 1e5)."""
    num = num.replace(",", "")
    mant, _, exp = num.lower().partition("e")
    dec = len(mant.split(".")[1]) if "." in mant else 0
    return 10.0 ** (-dec) * (10.0 ** int(exp) if exp else 1.0)


def number_matches(num: str, unit: str, fact_values: Iterable[float]) -> bool:
    """Whether a written number (with its unit) equals some fact within rounding or truncation."""
    v = float(num.replace(",", ""))
    tol = _ulp(num)
    for scale in _SCALES.get(unit, (1.0,)):
        x, u = v * scale, tol * scale
        for f in fact_values:
            f = abs(f)
            eps = 1e-9 * max(f, u)
            if abs(x - f) <= u / 2 + eps or x - eps <= f < x + u - eps:   # rounded, or truncated
                return True
    return False


def _ws(s: str) -> str:
    return " ".join(s.split())


def cited_numbers(text: str, quotes: Iterable[str] = ()) -> list[tuple[str, str, str]]:
    """(number, unit, context) of every number in ``text`` that must match a fact. Code spans that
    quote ``quotes`` verbatim (the programs) are skipped; digits inside identifiers never count."""
    quotes = [_ws(q) for q in quotes]

    def blank(m: re.Match) -> str:
        inner = _ws(m.group(1))
        if inner and any(inner in q for q in quotes):
            return " "
        return " " + m.group(1) + " "

    t = _CODE.sub(blank, text)
    t = _BY.sub(r"\1 by \2", _BY.sub(r"\1 by \2", t))
    out = []
    for m in _NUM.finditer(t):
        unit = m.group("u1") or m.group("u2") or ""
        ctx = t[max(0, m.start() - 25):m.end() + 10].strip()
        out.append((m.group("num"), unit, ctx))
    return out


def named_identifiers(text: str) -> list[str]:
    """Program names a text refers to: identifiers in backtick code spans, and identifier-shaped
    words after "loop", "tensor", "input"... in prose."""
    names: list[str] = []
    for m in _CODE.finditer(text):
        code = re.sub(r"(?<![A-Za-z_0-9.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", " ", m.group(1))
        code = re.sub(r'"[^"]*"', " ", code)   # JSON keys / strings in a quoted site
        names += _IDENT.findall(code)
    prose = _CODE.sub(" ", text)
    for m in _NAMED.finditer(prose):
        w = m.group(1)
        if _LOOPLIKE.match(w) or _TENSORLIKE.match(w):
            names.append(w)
    return names


# ============================================================================ validation
TEXT_FIELDS = ("observation.computes", "observation.work", "bottleneck.text",
               "expected_effect.text", "check.text")
AFTER_FIELDS = ("expected_effect.text", "check.text")


def _texts(cot: Cot) -> list[tuple[str, str]]:
    out = [("observation.computes", cot.observation.computes), ("observation.work", cot.observation.work),
           ("bottleneck.text", cot.bottleneck.text)]
    out += [(f"candidates[{n}].reason", c.reason) for n, c in enumerate(cot.candidates)]
    out += [("expected_effect.text", cot.expected_effect.text), ("check.text", cot.check.text)]
    return out


def parse_cot(raw: Any) -> Cot:
    """Schema validation only; raises CotInvalid with one line per schema error."""
    if isinstance(raw, Cot):
        return raw
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise CotInvalid([f"not JSON: {e}"]) from None
    if isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if k != "schema_version" and k not in SIDE_FIELDS}
    try:
        return Cot.model_validate(raw)
    except ValidationError as e:
        probs = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(root)"
            probs.append(f"schema: {loc}: {err['msg']}")
        raise CotInvalid(probs) from None


def semantic_problems(cot: Cot, step: StepRecord, f: Facts) -> list[str]:
    probs: list[str] = []
    # ---------------------------------------------------------------- decision
    d = cot.decision
    if d.strategy != step.strategy:
        probs.append(f"decision.strategy is {d.strategy!r} but the applied strategy is {step.strategy!r}")
    if not _same(d.site, step.site):
        probs.append(f"decision.site is {json.dumps(d.site)} but the applied site is {json.dumps(step.site)}")
    if not _same(d.params, step.params):
        probs.append(f"decision.params is {json.dumps(d.params)} but the applied params are "
                     f"{json.dumps(step.params)}")
    known = set(S.names())
    chosen = [c for c in cot.candidates if c.verdict == "chosen"]
    if len(chosen) != 1:
        probs.append(f"candidates: exactly one must be 'chosen', found {len(chosen)}")
    elif chosen[0].strategy != step.strategy:
        probs.append(f"candidates: the chosen candidate is {chosen[0].strategy!r} but the applied "
                     f"strategy is {step.strategy!r}")
    distinct = {c.strategy for c in cot.candidates}
    if len(distinct) < 2:
        probs.append(f"candidates: at least two different strategies must be considered, found "
                     f"only {sorted(distinct)}")
    for n, c in enumerate(cot.candidates):
        if c.strategy not in known:
            probs.append(f"candidates[{n}].strategy {c.strategy!r} is not a registered strategy "
                         f"(known: {', '.join(sorted(known))})")
        for v in (c.site or {}).get("loops", []) or []:
            if v not in f.before.loop_vars:
                probs.append(f"candidates[{n}].site names loop {v!r}, which is not a loop of the "
                             f"program before the step (loops: {', '.join(f.before.loop_vars) or 'none'})")
    if cot.check.exactness != step.exactness:
        probs.append(f"check.exactness is {cot.check.exactness!r} but the step is {step.exactness!r}")
    outs = set(f.outputs)
    if set(cot.check.outputs) != outs:
        probs.append(f"check.outputs is {sorted(cot.check.outputs)} but the kernel's outputs are "
                     f"{sorted(outs)}: every output must stay equal")
    # ---------------------------------------------------------------- names
    loops_b, tensors_b = f.before.loop_vars, tuple(f.before.tensors)
    vocab = set(_LEIR_WORDS) | known | {f.kernel}
    for k in list(step.site) + list(step.params):
        vocab.add(str(k))
    if cot.bottleneck.loop is not None and cot.bottleneck.loop not in loops_b:
        probs.append(f"bottleneck.loop {cot.bottleneck.loop!r} is not a loop variable of the program "
                     f"before the step (loops: {', '.join(loops_b) or 'none'})")
    if cot.bottleneck.tensor is not None and cot.bottleneck.tensor not in tensors_b:
        probs.append(f"bottleneck.tensor {cot.bottleneck.tensor!r} is not a tensor of the program "
                     f"before the step (tensors: {', '.join(tensors_b)})")
    chosen_fields = {f"candidates[{n}].reason" for n, c in enumerate(cot.candidates)
                     if c.verdict == "chosen"}
    for field_, text in _texts(cot):
        allowed = set(f.names_before) | vocab
        if field_ in AFTER_FIELDS or field_ in chosen_fields:
            allowed |= f.names_after
        bad = [n for n in dict.fromkeys(named_identifiers(text)) if n not in allowed]
        for n in bad:
            what = "loop variable" if _LOOPLIKE.match(n) else "tensor" if _TENSORLIKE.match(n) else "name"
            probs.append(f"{field_} names {what} `{n}`, which does not exist in the program before "
                         f"the step (loop variables: {', '.join(loops_b) or 'none'}; tensors: "
                         f"{', '.join(tensors_b)})")
    # ---------------------------------------------------------------- numbers
    values = list(f.numbers.values())
    measured = list(measured_numbers(f).values())
    quotes = [step.before_leir, step.after_leir]
    for field_, text in _texts(cot):
        for num, unit, ctx in cited_numbers(text, quotes):
            v = float(num.replace(",", ""))
            if not unit and v in SMALL_COUNTS:
                continue
            if not number_matches(num, unit, values):
                if number_matches(num, unit, measured):
                    probs.append(f"{field_} cites {num}{(' ' + unit) if unit else ''} (\"…{ctx}…\"): "
                                 f"claim hindsight: that is the step's measured outcome, which the "
                                 f"reasoning cannot know; cite the cost model's prediction instead")
                    continue
                probs.append(f"{field_} cites {num}{(' ' + unit) if unit else ''} (\"…{ctx}…\"), which "
                             f"matches no fact of this step within rounding; cite only the given facts")
    # ---------------------------------------------------------------- effect
    e = cot.expected_effect
    if e.direction == "preparatory":
        if e.enables is None:
            probs.append("expected_effect: a preparatory step must say which strategy it enables "
                         "(expected_effect.enables)")
        elif e.enables not in known:
            probs.append(f"expected_effect.enables {e.enables!r} is not a registered strategy")
    # ---------------------------------------------------------------- claims, no hindsight
    probs += check_claims(cot, f, _texts(cot))
    # ---------------------------------------------------------------- the writing's coherence
    from .coherence import WRITING, coherence_problems

    probs += coherence_problems(cot, step, f, WRITING)
    return probs


def measured_direction(step: StepRecord, f: Facts) -> Optional[str]:
    """faster / slower / neutral by the measurement, beyond its spread (None when untimed): the
    interleaved re-timing when the step has one, as its role (``steptp.search.roles``), else
    the search's timings. (The search's first timings of a re-timed step decide nothing: the
    re-timing exists because they were near the margin or would make an SFT answer.)"""
    pb, pa = step.paired_before, step.paired_after
    if pb is not None and pa is not None and pa.median_s > 0:
        sp, noise = pb.median_s / pa.median_s, max(pb.spread, pa.spread)
    else:
        sp, noise = f.step_speedup, f.noise
    if sp is None or f.after_s is None:
        return None
    tol = max(0.03, noise)
    if sp > 1 + tol:
        return "faster"
    if sp < 1 - tol:
        return "slower"
    return "neutral"


def measured_side(step: StepRecord, f: Facts, cot: Optional[Cot] = None) -> dict[str, Any]:
    """What was measured, stored beside the reasoning (``cot["measured"]``), never in it, and
    whether it agrees with the direction the reasoning states (``cot.expected_effect``; without
    a ``cot``, the cost model's): a preparatory step agrees when it measured neutral or faster."""
    stated = cot.expected_effect.direction if cot is not None else f.predicted_direction
    out: dict[str, Any] = {
        "before_s": f.before_s, "after_s": f.after_s, "step_speedup": f.step_speedup,
        "noise": f.noise, "direction": measured_direction(step, f),
        "predicted_direction": stated,
        "prepares": (cot.expected_effect.enables if cot is not None
                     else (f.follow_up.strategy if f.prepares else None)),
    }
    md = out["direction"]
    out["prediction_agrees"] = None if md is None or stated is None else (
        md == stated or (stated == "preparatory" and md in ("neutral", "faster")))
    return out


def sft_problems(cot: Cot, step: StepRecord, f: Facts, path: Optional[list[StepRecord]] = None
                 ) -> list[str]:
    """Why this step's reasoning cannot be an SFT example: the prediction it states must agree
    with the measurement, or it is preparatory and a later step on ``path`` (the trajectory's
    steps) applies the strategy it names."""
    md = measured_direction(step, f)
    e = cot.expected_effect
    if md is None:
        return ["sft: the step has no measurement to agree with"]
    if e.direction == "preparatory":
        later = [s for s in (path or []) if s.trajectory_id == step.trajectory_id
                 and s.step_index > step.step_index and s.strategy == e.enables]
        if not later:
            return [f"sft: the reasoning calls the step preparatory for `{e.enables}`, but no later "
                    f"step on its path applies `{e.enables}`"]
        if md == "slower" and not any(s.outcome == "improved" for s in later):
            return [f"sft: preparatory step measured slower ({f.step_speedup:.3g}x) and the later "
                    f"`{e.enables}` step did not improve"]
        return []
    if e.direction != md:
        return [f"sft: expected_effect.direction is {e.direction!r} (the cost model's prediction) but "
                f"the measurement says {md!r} ({f.step_speedup:.3g}x, noise ±{max(0.03, f.noise):.0%}): "
                f"a disagreeing step is not an SFT example"]
    return []


def validate(raw: Any, step: StepRecord, f: Optional[Facts] = None, *, sft: bool = False,
             path: Optional[list[StepRecord]] = None, coherent: bool = False) -> Cot:
    """Schema, then semantic checks, the writing's coherence (:mod:`steptp.cot.coherence`), and
    with ``coherent`` also the argument's (the bottleneck is the step's own and it answers it);
    with ``sft``, agreement with the measurement. Returns the Cot or raises CotInvalid listing
    every problem."""
    cot = parse_cot(raw)
    f = f if f is not None else compute_facts(step)
    probs = semantic_problems(cot, step, f)
    if coherent:
        from .coherence import ARGUMENT, coherence_problems

        probs += coherence_problems(cot, step, f, ARGUMENT)
    if sft:
        probs += sft_problems(cot, step, f, path)
    if probs:
        raise CotInvalid(probs)
    return cot


__all__ = ["CotInvalid", "validate", "sft_problems", "measured_side", "measured_direction", "parse_cot", "semantic_problems", "cited_numbers",
           "named_identifiers", "number_matches"]
