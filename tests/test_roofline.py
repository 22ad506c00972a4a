"""Speed of light: impossible timings are marked suspect and never become improvements."""

from __future__ import annotations

import json

from steptp.measure.roofline import Peaks, load_or_calibrate, speed_of_light_s, suspect_reason
from steptp.measure.runner.local import Measurer
from steptp.measure.timing import MeasureConfig
from steptp.search.evaluator import MeasurerEvaluator

MATMUL = """kernel f32 mm(A[64,64], B[64,64]) -> D[64,64]
  for i in 64, j in 64, k in 64:
    D[i,j] += A[i,k] * B[k,j]
"""
PEAKS = Peaks(fingerprint="test", peak_flops=1e11, peak_bytes_s=5e10)
FAST = MeasureConfig(num_threads=1, min_repeat_ms=2, repeats=5, remeasure_tries=0)


def test_an_injected_impossible_timing_is_suspect():
    sol = speed_of_light_s(2 * 64 ** 3, 3 * 64 * 64 * 4, PEAKS)
    assert sol == (2 * 64 ** 3 / 1e11) / PEAKS.headroom
    why = suspect_reason(MATMUL, sol / 10, PEAKS)
    assert why is not None and "below the speed of light" in why
    assert suspect_reason(MATMUL, sol * 2, PEAKS) is None
    assert suspect_reason(MATMUL, 1e-15, None) is None  # no peaks, no verdict


def test_the_measurer_marks_a_timing_below_the_speed_of_light(tmp_path):
    # peaks so low that any real timing of the matmul is "impossible": the plumbing from the
    # timing worker to the search's outcome is exercised with a real measurement
    slow_machine = Peaks(fingerprint="x", peak_flops=1e3, peak_bytes_s=1e3)
    with Measurer(config=FAST, cache=None, peaks=slow_machine) as m:
        (oc,) = m.time_many([MATMUL])
        assert oc.status == "suspect" and oc.timing.suspect and "speed of light" in oc.reason
        (raw,) = m.time_many([MATMUL], check_speed_of_light=False)
        assert raw.status == "ok" and not raw.timing.suspect
    ev = MeasurerEvaluator(config=FAST, cache=None)
    ev.measurer._peaks, ev.measurer._recalibrated = slow_machine, True
    try:
        t = ev.time(MATMUL)
        assert not t.ok and t.outcome == "suspect_timing" and t.timing is None
    finally:
        ev.close()


def test_calibration_is_measured_once_per_fingerprint_and_real_timings_pass(tmp_path):
    with Measurer(config=FAST, cache=None) as m:
        peaks = load_or_calibrate(m, tmp_path)
        assert peaks is not None and peaks.fingerprint == m.fingerprint.id
        assert 1e9 < peaks.peak_flops < 1e14 and 1e9 < peaks.peak_bytes_s < 1e14
        saved = tmp_path / "roofline" / f"{m.fingerprint.id}.json"
        assert json.loads(saved.read_text())["peak_flops"] == peaks.peak_flops
        saved.write_text(json.dumps({**peaks.model_dump(), "peak_flops": 123.0}))
        assert load_or_calibrate(m, tmp_path).peak_flops == 123.0  # read back, not re-measured
        m._peaks = peaks
        (oc,) = m.time_many([MATMUL])
        assert oc.status == "ok" and not oc.timing.suspect


def test_a_calibration_taken_on_a_busy_machine_is_measured_again(tmp_path):
    cache = tmp_path / "cache.sqlite"
    with Measurer(config=FAST, cache=cache) as m:
        saved = tmp_path / "roofline" / f"{m.fingerprint.id}.json"
        saved.parent.mkdir(parents=True)
        saved.write_text(json.dumps(Peaks(fingerprint=m.fingerprint.id, peak_flops=1e3,
                                          peak_bytes_s=1e3).model_dump()))
        (oc,) = m.time_many([MATMUL])
        # the saved peaks call the matmul impossible; measured again they do not
        assert oc.status == "ok" and not oc.timing.suspect
        assert json.loads(saved.read_text())["peak_flops"] > 1e9
