"""Judging a proposal with the verifier and the timer that built the data.

For each reply, in order, the first check that fails is its outcome:

0. ``no_reply`` — the proposer produced no reply at all (the server answered no choices, an
   error status after the SDK's retries, a body that is not a completion, or nothing in time);
   the reason says which;
1. ``unparsable`` — no ``<think>`` + answer JSON (``steptp.eval.reply``), or the program does not
   parse / check with the LEIR grammar;
2. ``bad_signature`` — the program's inputs and outputs (count, dtype, shape, role) differ from
   the kernel's;
3. ``illegal`` — the stated (strategy, site, params) is not a legal registry action at the state
   (unknown strategy, refused, or a no-op). When it is legal, the registry's result is compared
   with the program by canonical form: ``faithful`` says the program IS the stated step;
4. ``failed_verification`` — it does not build, or its outputs differ from the kernel's ORIGINAL
   program (not only from the previous state) on the release's verification inputs (all of
   ``measure.verify.DEFAULT_SEEDS``, one per input distribution), within the tolerance of the
   loosest of the path's classes and the STATED strategy's class (a reply cannot loosen its
   own tolerance by claiming nothing or something else);
5. ``unfaithful`` — it verifies, but it is not the step it states: correct, yet not the step the
   model said it made, so it is neither timed nor counted as verified or fast;
6. ``timeout`` — verification or timing ran out of time;
7. ``verified`` — faithful and correct, with the measured time, ``step_speedup`` over the state
   and ``speedup`` over the unscheduled kernel; ``faster`` applies the dataset's significance
   rule (beyond spread), and only a ``faster`` step counts in the report's ``fast_p``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..leir import ast as A
from ..leir.canon import canonical_hash
from ..records import Timing
from ..exactness import worse
from .reply import ReplyError, parse_reply

OUTCOMES = ("no_reply", "unparsable", "bad_signature", "illegal", "failed_verification",
            "unfaithful", "timeout", "verified")


def parse_untrusted(text: str) -> A.Program:
    """THE one place a proposed program's text is parsed (a reply is untrusted: a bounded,
    isolated parse replaces ``steptp.leir.parse`` here, and only here)."""
    from ..leir import parse

    return parse(text)


@dataclass
class State:
    """A program state of the loop: where a proposal starts from."""

    kernel_id: str
    original: str            # the unscheduled kernel (LEIR text): every proposal is verified against it
    program: str             # this state's LEIR text
    timing: Optional[Timing] = None
    baseline: Optional[Timing] = None   # the unscheduled kernel's timing
    exactness: str = "exact"            # the loosest exactness along the path to here
    depth: int = 0
    path: tuple[str, ...] = ()          # strategies applied so far
    hardware: str = ""
    target: str = "cpu"
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the release row this state came from

    @property
    def state_id(self) -> str:
        from ..leir import parse

        return canonical_hash(parse(self.program))[:16]


@dataclass
class Judgement:
    outcome: str
    reason: str = ""
    strategy: str = ""
    legal: Optional[bool] = None
    faithful: Optional[bool] = None
    exactness: str = ""
    program: str = ""                  # the proposed program, canonical LEIR (when it parsed)
    max_abs_err: Optional[float] = None
    after: Optional[Timing] = None
    step_speedup: Optional[float] = None
    speedup: Optional[float] = None
    faster: Optional[bool] = None
    verify_cached: Optional[bool] = None
    time_cached: Optional[bool] = None
    paired_step_speedup: Optional[float] = None   # from interleaved re-timing (``retime``)
    paired_spread: Optional[float] = None

    @property
    def verified(self) -> bool:
        return self.outcome == "verified"


def _sig(p: A.Program) -> list[tuple[str, str, tuple[int, ...]]]:
    return ([("input", t.dtype, tuple(t.shape)) for t in p.inputs]
            + [("output", t.dtype, tuple(t.shape)) for t in p.outputs])


def _fmt_sig(p: A.Program) -> str:
    from ..leir.printer import format_signature

    return format_signature(p)


def static_judgement(state_prog: A.Program, original: A.Program, exactness: str, reply: str,
                     target: str = "cpu") -> tuple[Judgement, Optional[str]]:
    """Checks 1-3 (no TVM). Returns the judgement so far and the candidate text to verify
    (None when the reply already has its outcome)."""
    from .. import strategies as S
    from ..leir import LeirCheckError, LeirSyntaxError, check, format_program

    try:
        ans = parse_reply(reply)
    except ReplyError as e:
        return Judgement("unparsable", f"reply: {e}"), None
    j = Judgement("unparsable", strategy=ans.strategy[:80])
    try:
        cand = parse_untrusted(ans.program)
        check(cand)
    except (LeirSyntaxError, LeirCheckError) as e:
        j.reason = f"program: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        return j, None
    except Exception as e:  # noqa: BLE001 - any failure on untrusted text is a verdict, not a crash
        j.reason = f"program: {type(e).__name__}: {e}"
        return j, None
    text = format_program(cand)
    j.program = text
    if _sig(cand) != _sig(original):
        j.outcome = "bad_signature"
        j.reason = f"signature {_fmt_sig(cand)!r} differs from the kernel's {_fmt_sig(original)!r}"
        return j, None
    if S.canonical(cand) == S.canonical(state_prog):
        j.outcome, j.reason, j.legal, j.faithful = "illegal", "no-op: the program is the state", False, False
        return j, None
    if ans.strategy not in S.names():
        j.outcome, j.reason, j.legal = "illegal", f"unknown strategy {ans.strategy[:80]!r}", False
        return j, None
    strat = S.get(ans.strategy)
    try:
        new = S.apply(state_prog, ans.strategy, ans.site, ans.params)
        step_exact = strat.exactness_for(state_prog, S.Site.from_json(ans.site), ans.params)
    except Exception as e:  # noqa: BLE001 - IllegalRewrite, or a site/params the strategy cannot read
        j.outcome, j.legal = "illegal", False
        j.reason = f"{ans.strategy} at {ans.site} with {ans.params}: {e}"[:500]
        return j, None
    j.legal = True
    j.faithful = S.canonical(new) == S.canonical(cand)
    # the tolerance the reply asked for by naming its step, faithful or not: judging an
    # unfaithful program at the loosest class would let a mislabelled rewrite pass on slack
    # its stated step never had
    j.exactness = worse(exactness, step_exact)
    if not j.faithful:
        j.reason = f"the program is not what {ans.strategy} at the stated site and params gives"
    return j, text


class Judge:
    """Judges replies at a state with one :class:`~steptp.measure.runner.local.Measurer`."""

    def __init__(self, measurer, seeds: Optional[Sequence[int]] = None, rule=None,
                 retime_rounds: int = 3):
        """``seeds``: the verifier's inputs; by default the release's (one per input
        distribution), so a proposal passes only what a recorded step had to pass."""
        from ..measure.significance import SignificanceRule
        from ..measure.verify import DEFAULT_SEEDS

        self.measurer = measurer
        self.seeds = tuple(DEFAULT_SEEDS if seeds is None else seeds)
        self.rule = rule or SignificanceRule()
        self.retime_rounds = int(retime_rounds)
        self._timer = None

    def retime(self, before: str, after: str) -> tuple[Optional[float], Optional[float]]:
        """(before / after, the larger spread) from interleaved, uncached re-timing: drift of the
        machine between two timings taken apart divides out (as the release's paired timings)."""
        from ..measure.significance import interleaved, uncached_timer

        if self._timer is None:
            self._timer = uncached_timer(self.measurer.target, self.measurer.config)
        b, a = interleaved(self._timer, [before, after], self.retime_rounds)
        if b is None or a is None or a.median_s <= 0:
            return None, None
        return b.median_s / a.median_s, max(b.spread, a.spread)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None

    def time_state(self, program: str) -> tuple[Optional[Timing], str]:
        oc = self.measurer.time_many([program])[0]
        return oc.timing, (oc.reason or oc.status or "")

    def judge_many(self, state: State, replies: Sequence[str],
                   retime: Sequence[bool] = ()) -> list[Judgement]:
        """``retime[k]``: also re-time reply k's program interleaved with the state's (when it
        verifies and ``retime_rounds`` > 0)."""
        from ..leir import parse
        from ..measure.runner.base import VerifyJob

        # the state and the kernel are the loop's own (canonical) texts, not a reply's
        state_prog, original = parse(state.program), parse(state.original)
        out: list[Judgement] = []
        todo: list[tuple[int, str]] = []
        for r in replies:
            j, cand = static_judgement(state_prog, original, state.exactness, r, state.target)
            out.append(j)
            if cand is not None:
                todo.append((len(out) - 1, cand))
        if not todo:
            return out
        verdicts = self.measurer.verify_many(
            [VerifyJob(state.original, cand, out[i].exactness, self.seeds) for i, cand in todo])
        timed: list[tuple[int, str]] = []
        for (i, cand), v in zip(todo, verdicts):
            j = out[i]
            j.verify_cached = v.cached
            j.max_abs_err = v.result.max_abs_err
            if v.status == "timeout":
                j.outcome, j.reason = "timeout", f"verification: {v.reason or 'timed out'}"
            elif not v.passed:
                j.outcome = "failed_verification"
                j.reason = (v.reason or v.status or "verification failed")[:500]
            elif not j.faithful:
                j.outcome = "unfaithful"    # keeps the reason static_judgement gave
            else:
                timed.append((i, cand))
        timings = self.measurer.time_many([c for _, c in timed]) if timed else []
        for (i, _), t in zip(timed, timings):
            j = out[i]
            j.time_cached = t.cached
            if t.timing is None:
                j.outcome = "timeout" if t.status == "timeout" else "failed_verification"
                j.reason = f"timing: {t.reason or t.status}"[:500]
                continue
            j.outcome, j.after = "verified", t.timing
            if state.timing is not None and t.timing.median_s > 0:
                j.step_speedup = state.timing.median_s / t.timing.median_s
                j.faster = self.rule.faster(state.timing, t.timing)
            if state.baseline is not None and t.timing.median_s > 0:
                j.speedup = state.baseline.median_s / t.timing.median_s
            if self.retime_rounds > 0 and i < len(retime) and retime[i]:
                j.paired_step_speedup, j.paired_spread = self.retime(state.program, j.program)
        return out


__all__ = ["OUTCOMES", "State", "Judgement", "Judge", "static_judgement", "parse_untrusted"]
