"""The runners' one set of outcome types (``steptp.measure.runner.base``): what a step's outcome
word is for each way a verification or a timing ends, and the in-process evaluator reporting its
verdicts the way an isolated worker does."""

from __future__ import annotations

import pytest

from steptp.measure.runner.base import TimingOutcome, VerifyOutcome
from steptp.measure.verify import VerifyResult
from steptp.records import Timing

MM = "kernel f32 mm(A[8,16], B[16,4]) -> C[8,4]\n C[i,j] += A[i,k] * B[k,j]\n"
MM_SPLIT = ("kernel f32 mm(A[8,16], B[16,4]) -> C[8,4]\n"
            " for i in 8 parallel, j in 4, k in 4, l in 4:\n"
            "  C[i,j] += A[i,k*4+l] * B[k*4+l,j]\n")


def _v(passed: bool, status: str = "ok", reason: str | None = None) -> VerifyOutcome:
    return VerifyOutcome(result=VerifyResult(passed=passed, exactness="exact", max_abs_err=0.5,
                                             max_rel_err=0.25, reason=reason), status=status)


@pytest.mark.parametrize("passed, status, reason, outcome", [
    (True, "ok", None, "ok"),
    (False, "ok", "seed 0: C differs beyond tolerance", "failed_verify"),
    (False, "ok", "candidate does not build: TVMError: x", "failed_build"),
    (False, "timeout", "timeout after 5.0 s", "timeout"),
    (False, "crash", "worker crashed (signal 11, SIGSEGV)", "crashed"),
    (False, "error", "LeirSyntaxError: does not parse", "failed_build"),
    (False, "error", "the worker died", "crashed"),
    (False, "error", "ValueError: something else", "failed_verify"),
])
def test_a_verdicts_step_word(passed, status, reason, outcome):
    v = _v(passed, status, reason)
    assert v.outcome == outcome and v.ok == (outcome == "ok") and v.reason == reason


def test_a_verdicts_errors_only_when_the_verifier_ran():
    assert (_v(False).max_abs_err, _v(False).max_rel_err) == (0.5, 0.25)
    assert (_v(False, "timeout").max_abs_err, _v(False, "crash").max_rel_err) == (None, None)


T = Timing(median_s=1e-3, min_s=1e-3, spread=0.0, repeats=5, number=1)


@pytest.mark.parametrize("timing, status, outcome", [
    (T, "ok", "ok"),
    (T.model_copy(update={"suspect": True}), "suspect", "suspect_timing"),
    (None, "suspect", "suspect_timing"),
    (None, "timeout", "timeout"),
    (None, "crash", "crashed"),
    (None, "error", "failed_build"),
])
def test_a_timings_step_word(timing, status, outcome):
    t = TimingOutcome(timing=timing, status=status)
    assert t.outcome == outcome and t.ok == (timing is not None)


def test_in_process_verdicts_read_as_a_workers():
    from steptp.search.evaluator import InProcessEvaluator

    ev = InProcessEvaluator(num_threads=1, seeds=(0,))
    try:
        good = ev.verify(MM, MM_SPLIT, "reassociation")
        assert good.ok and good.outcome == "ok" and good.status == "ok" and good.reason is None
        wrong = ev.verify(MM, MM.replace("B[k,j]", "B[15-k,j]"), "exact")
        assert not wrong.ok and wrong.outcome == "failed_verify"
        assert wrong.reason.startswith("seed 0: ")
        other = ev.verify(MM, "kernel f32 mm(A[8,16], B[16,4], Z[4]) -> C[8,4]\n"
                              " C[i,j] += A[i,k] * B[k,j] * Z[j]\n", "exact")   # another signature
        assert not other.ok and other.outcome == "failed_verify" and other.reason
        bad_ref = ev.verify("kernel f32 mm(A[8]) -> C[8]\n C[i] = A[i] +\n", MM, "exact")
        assert bad_ref.outcome == "failed_build" and "reference does not build" in bad_ref.reason
        timed = ev.time(MM)
        assert timed.ok and timed.outcome == "ok" and timed.timing.median_s > 0
        unbuilt = ev.time("kernel f32 mm(A[8]) -> C[8]\n C[i] = A[i] +\n")
        assert unbuilt.timing is None and unbuilt.outcome == "failed_build" and unbuilt.reason
    finally:
        ev.close()
