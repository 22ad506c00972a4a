"""A timing's calibration from a hint (a parent's or sibling's time): one check repeat instead
of warm-up and calibration, and whatever the hint, every kept repeat lasts at least
0.8 x min_repeat_ms."""

from __future__ import annotations

import pytest

from steptp.measure.timing import HINT_SURE, MeasureConfig, hinted, timed

TARGET_MS = 20.0
CFG = MeasureConfig(min_repeat_ms=TARGET_MS, repeats=5, remeasure_tries=1, num_threads=1)


class Kernel:
    """A simulated kernel: ``per_call`` seconds a call (``cold``: the calls of the first
    ``time_evaluator`` call after its own warm-up), counting the calls made."""

    def __init__(self, per_call: float, cold: float | None = None, cold_evaluators: int = 1):
        self.per_call, self.cold, self.cold_evaluators = per_call, cold, cold_evaluators
        self.calls = 0
        self.evaluators = 0

    def time_repeats(self, number: int, repeats: int) -> list[float]:
        self.evaluators += 1
        self.calls += 1 + number * repeats   # time_evaluator's discarded first call
        c = self.cold if self.cold is not None and self.evaluators <= self.cold_evaluators \
            else self.per_call
        return [c] * repeats

    def run(self) -> None:
        self.calls += 1


@pytest.mark.parametrize("per_call", [1e-3, 15e-3, 50e-3])
def test_a_right_hint_keeps_its_check_as_the_first_repeat(per_call):
    k = Kernel(per_call)
    number, first = hinted(k.time_repeats, per_call, TARGET_MS, CFG.max_number)
    assert number * per_call >= 0.8 * TARGET_MS / 1e3
    if per_call >= HINT_SURE * TARGET_MS / 1e3:
        assert (number, first, k.calls) == (1, [], 0)   # one call a repeat: no check
    else:
        # one probe call (and the evaluator's discarded one) when number > 1, then the check
        assert first == [per_call] and k.calls == (2 if number > 1 else 0) + 1 + number
    k = Kernel(per_call)
    t = timed(k.time_repeats, k.run, CFG, hint_s=per_call)
    assert t.repeats == 5 and t.number == number
    # the calibrated protocol makes more calls: a warm-up, the calibration runs, the repeats
    full = Kernel(per_call)
    assert timed(full.time_repeats, full.run, CFG).number == number
    assert k.calls < full.calls


@pytest.mark.parametrize("hint", [1e-5, 15e-3 / 2.6, 2.0])
def test_a_wrong_hint_still_ends_with_repeats_of_the_target_length(hint):
    k = Kernel(1e-3)   # the hint is 100x or 5x too fast, or 2000x too slow
    number, first = hinted(k.time_repeats, hint, TARGET_MS, CFG.max_number)
    if hint < HINT_SURE * TARGET_MS / 1e3:  # the check set the number right
        assert 0.8 * TARGET_MS / 1e3 <= number * 1e-3 <= 2 * TARGET_MS / 1e3
        # the hint's check is not kept, but the calibration's last check, at the number it
        # returns and of the target's length, is the first repeat
        assert first == [1e-3]
    else:
        assert first == []   # a sure hint makes no check
    phases: dict = {}
    t = timed(k.time_repeats, k.run, CFG, hint_s=hint, phases=phases)
    assert t.median_s * t.number >= 0.8 * TARGET_MS / 1e3
    # a sure hint (one call a repeat) is confirmed by the repeats themselves: here they were
    # too short, and it was calibrated from them and timed again
    assert phases.get("hint_fallback") == (1 if hint >= HINT_SURE * TARGET_MS / 1e3 else None)


def test_a_misleading_check_is_calibrated_again_and_timed_again():
    # the check's calls run 10x slower than every later one (a cold first evaluator): it
    # confirms a number whose repeats then last a tenth of the target (cold: the probe call's
    # evaluator and the check's)
    k = Kernel(1e-4, cold=1e-3, cold_evaluators=2)
    phases: dict = {}
    t = timed(k.time_repeats, k.run, CFG, hint_s=1e-3, phases=phases)
    assert phases.get("hint_fallback") == 1
    assert t.median_s * t.number >= 0.8 * TARGET_MS / 1e3 and t.number >= 160


# ---------------------------------------------------------------------------- real timings
tvm = pytest.importorskip("tvm")

from steptp.measure.timing import measure  # noqa: E402

from test_measure import MATMUL  # noqa: E402

REAL = MeasureConfig(min_repeat_ms=5, repeats=5, remeasure_tries=1, num_threads=1)


@pytest.mark.parametrize("hint", [1e-8, 10.0])
def test_a_real_timing_with_a_wrong_hint_lasts_the_target(hint):
    phases: dict = {}
    t = measure(MATMUL, None, REAL, phases=phases, hint_s=hint)
    assert t.repeats == 5
    assert t.median_s * t.number >= 0.8 * REAL.min_repeat_ms / 1e3
    # and with a right hint (the time just measured) the check is kept: no fallback. A
    # loaded machine may time the next call 20% faster than the last, so the hint gets
    # three tries, each the time just measured
    kept = []
    for _ in range(3):
        again: dict = {}
        t2 = measure(MATMUL, None, REAL, phases=again, hint_s=t.median_s)
        assert t2.median_s * t2.number >= 0.8 * REAL.min_repeat_ms / 1e3
        kept.append("hint_fallback" not in again)
        if kept[-1]:
            break
        t = t2
    assert kept[-1], kept


def test_the_measurer_passes_a_hint_to_its_worker(tmp_path):
    from steptp.measure import Measurer

    from test_measure import MATMUL_SPLIT

    with Measurer(None, REAL, cache=None, lock_directory=tmp_path, speed_of_light=False) as m:
        assert m.verify_many([(MATMUL, MATMUL_SPLIT)])[0].passed
        oc = m.time_many([MATMUL_SPLIT], hints=[10.0])[0]
        assert oc.ok and m.stats["hinted"] == 1
        assert oc.timing.median_s * oc.timing.number >= 0.8 * REAL.min_repeat_ms / 1e3


def test_timing_inputs_are_drawn_once_per_kernel_signature_and_input_rules():
    """A timing's seeded inputs are kept per ``verify.inputs_key``: the same for every
    candidate of a kernel, but a kernel that needs positive inputs (log) never gets another's."""
    import numpy as np

    from steptp.leir import parse
    from steptp.measure import timing as T
    from steptp.measure.verify import inputs_key, random_inputs

    plain = parse("kernel f(A: f32[64]) -> B: f32[64]\n  B[i] = A[i] * 2.0\n")
    logk = parse("kernel f(A: f32[64]) -> B: f32[64]\n  B[i] = log(A[i])\n")
    assert inputs_key(plain, 0) != inputs_key(logk, 0)
    a = T._inputs(plain, 0)
    assert T._inputs(plain, 0) is a and not a[0].flags.writeable
    assert np.array_equal(a[0], random_inputs(plain, 0)[0]) and (a[0] < 0).any()
    b = T._inputs(logk, 0)
    assert (b[0] > 0).all() and np.array_equal(b[0], random_inputs(logk, 0)[0])
    t = measure(logk, None, REAL)
    assert t.median_s > 0


def test_a_hint_far_too_fast_costs_one_call_not_a_check_past_the_timeout():
    """A sibling 1000x faster than this candidate: a check at the hinted number of calls would
    last 1000 x min_repeat_ms (20 s here, inside the device lock; 3000x passes the 60 s
    timeout and records a valid candidate as timed out). One probe call finds it out."""
    k = Kernel(20e-3)
    number, first = hinted(k.time_repeats, 20e-6, TARGET_MS, CFG.max_number)
    assert first == [] and number == 1
    assert k.calls < 10                      # the check alone would have made 1001 calls
    t = timed(Kernel(20e-3).time_repeats, k.run, CFG, hint_s=20e-6)
    assert t.number == 1 and t.median_s == pytest.approx(20e-3)


def test_a_hinted_timing_keeps_the_configured_warmup():
    k = Kernel(1e-3)
    timed(k.time_repeats, k.run, MeasureConfig(**{**CFG.model_dump(), "warmup": 4}), hint_s=1e-3)
    plain = Kernel(1e-3)
    timed(plain.time_repeats, plain.run, CFG, hint_s=1e-3)
    assert k.calls - plain.calls == 3        # the evaluator's discarded call is the fourth


@pytest.mark.parametrize("hint", [1e-5, 15e-3 / 2.6])
def test_a_calibration_after_a_wrong_hint_keeps_its_last_check_as_the_first_repeat(hint):
    k = Kernel(1e-3)   # the hint is 100x or 5x too fast
    number, first = hinted(k.time_repeats, hint, TARGET_MS, CFG.max_number)
    assert first == [1e-3] and number == 20
    after_hint = k.calls
    k = Kernel(1e-3)
    t = timed(k.time_repeats, k.run, CFG, hint_s=hint)
    assert t.repeats == 5 and t.number == number
    # four repeats after the kept one (and their evaluator's discarded first call), not five
    assert k.calls == after_hint + 1 + number * (CFG.repeats - 1)


def test_a_confirming_run_past_the_slack_is_not_kept():
    from steptp.measure.timing import calibrate

    kept: list = []
    # 10 calls took 10 ms (1 ms a call), so 20 are asked; those 20 took 60 ms: a repeat 3x the
    # target is not one the protocol keeps (20 stays the number: fewer would be too short)
    n = calibrate(lambda m: 3e-3 if m == 20 else 1e-3, TARGET_MS, CFG.max_number,
                  measured=(10, 1e-3), kept=kept)
    assert n == 20 and kept == []
    # the same calibration whose 20 calls take 20 ms keeps that run
    n = calibrate(lambda m: 1e-3, TARGET_MS, CFG.max_number, measured=(10, 1e-3), kept=kept)
    assert n == 20 and kept == [1e-3]


@pytest.mark.parametrize("per_call", [1e-3, 5e-3])
def test_a_known_call_time_spares_the_probe_call(per_call):
    """The worker that verified a module timed its runs: with that call time, a check of
    ``number`` calls is known to stay short, and no probe call (with its evaluator's discarded
    one) comes first. The check is still made and kept as the first repeat."""
    from steptp.measure.timing import PROBE_FREE

    probed, spared = Kernel(per_call), Kernel(per_call)
    ph: dict = {}
    n1, f1 = hinted(probed.time_repeats, per_call, TARGET_MS, CFG.max_number, phases=ph)
    assert ph == {"hint_probe": 1}
    ph = {}
    n2, f2 = hinted(spared.time_repeats, per_call, TARGET_MS, CFG.max_number,
                    call_s=per_call, phases=ph)
    assert ph == {} and (n2, f2) == (n1, f1) and f2 == [per_call]
    assert probed.calls - spared.calls == 2 and spared.evaluators == 1
    assert n2 * per_call <= PROBE_FREE * TARGET_MS / 1e3
    t = timed(Kernel(per_call).time_repeats, spared.run, CFG, hint_s=per_call, call_s=per_call)
    assert t.repeats == 5 and t.median_s * t.number >= 0.8 * TARGET_MS / 1e3


def test_a_known_call_time_far_above_the_hint_keeps_the_probe():
    """A sibling 1000x faster, and the verification's run says so: the check at the hinted
    number would last 20 s, so the probe call comes first as without a known time."""
    k = Kernel(20e-3)
    ph: dict = {}
    number, first = hinted(k.time_repeats, 20e-6, TARGET_MS, CFG.max_number, call_s=20e-3,
                           phases=ph)
    assert ph == {"hint_probe": 1} and number == 1 and first == [] and k.calls < 10


def test_a_sure_hint_timed_too_short_keeps_its_confirming_run():
    """A sure hint (one call a repeat) whose repeats were too short is calibrated again; the
    run confirming the new number lasts the target and is the first repeat of the new attempt
    (four more, not five)."""
    k = Kernel(5e-3)
    phases: dict = {}
    t = timed(k.time_repeats, k.run, CFG, hint_s=1.0, phases=phases)
    assert phases.get("hint_fallback") == 1 and t.number == 4 and t.repeats == 5
    # the sure attempt (1 + 5), the confirming run (1 + 4), four more repeats (1 + 16)
    assert k.calls == 6 + 5 + 17


def test_the_verifying_worker_hands_its_call_time_to_the_timing(tmp_path):
    """Through the Measurer: the worker that verified the candidate timed its runs, and the
    hinted timing it then makes (a right hint) needs no probe call; the same timing on a
    module it did not verify (built again) probes first."""
    from steptp.measure import Measurer

    # about a millisecond a call: a few calls a repeat, each well above the buffer copies a
    # verification run's time includes
    ref = ("kernel matmul(A: f32[128,128], B: f32[128,128]) -> C: f32[128,128]\n"
           "  for i in 128, j in 128:\n    for k in 128:\n      C[i,j] += A[i,k] * B[k,j]\n")
    cand = ("kernel matmul(A: f32[128,128], B: f32[128,128]) -> C: f32[128,128]\n"
            "  for io in 16, ii in 8:\n    for k in 128:\n      for j in 128 vectorized:\n"
            "        C[io*8+ii,j] += A[io*8+ii,k] * B[k,j]\n")
    t = measure(cand, None, REAL)
    assert t.number > 1
    with Measurer(None, REAL, cache=None, lock_directory=tmp_path, speed_of_light=False) as m:
        assert m.verify_many([(ref, cand)])[0].passed
        oc = m.time_many([cand], hints=[t.median_s])[0]
        assert oc.ok and m.stats["hinted"] == 1 and m.stats["rebuilds"] == 0
        assert m.stats["hint_probes"] == 0
        assert oc.timing.median_s * oc.timing.number >= 0.8 * REAL.min_repeat_ms / 1e3
        # not verified by that worker: no call time, so the probe is made
        oc2 = m.time_many([cand], use_cache=False, hints=[t.median_s])[0]
        assert oc2.ok and m.stats["rebuilds"] == 1 and m.stats["hint_probes"] == 1


def test_a_sure_hint_contradicted_by_the_known_call_time_is_not_timed_in_full():
    """A slow parent's time (a sure hint: one call a repeat) for a child whose verification run
    lasted a quarter of a repeat: the call time is the hint, one check sets the number, and no
    attempt of too-short repeats is timed and thrown away."""
    plain, known = Kernel(5e-3), Kernel(5e-3)
    phases: dict = {}
    t0 = timed(plain.time_repeats, plain.run, CFG, hint_s=1.0, phases=phases)
    assert phases.get("hint_fallback") == 1
    phases = {}
    t1 = timed(known.time_repeats, known.run, CFG, hint_s=1.0, phases=phases, call_s=6e-3)
    assert "hint_fallback" not in phases and "hint_probe" not in phases
    assert t1.number == t0.number == 4 and t1.repeats == 5
    assert t1.median_s * t1.number >= 0.8 * TARGET_MS / 1e3
    # the check (1 + 4 calls, kept) and four more repeats (1 + 16) against 28 calls
    assert known.calls == 5 + 17 and plain.calls == 28
    # a call time that agrees with the sure hint leaves it sure: no check
    slow = Kernel(60e-3)
    assert hinted(slow.time_repeats, 1.0, TARGET_MS, CFG.max_number, call_s=70e-3) == (1, [])
    assert slow.calls == 0
