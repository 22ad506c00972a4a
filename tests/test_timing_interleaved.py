"""Interleaved timing (A, B, A, B, ...): what benchmarks use to quote a ratio."""

from __future__ import annotations

from steptp.measure.timing import MeasureConfig, measure_interleaved

SMALL = "kernel f32 k(A[64,64]) -> D[64,64]\n  for i in 64, j in 64:\n    D[i,j] = A[i,j] * 2.0\n"
BIG = """kernel f32 mm(A[96,96], B[96,96]) -> D[96,96]
  for i in 96, j in 96, k in 96:
    D[i,j] += A[i,k] * B[k,j]
"""


def test_interleaved_timings_come_back_in_order_with_their_rounds():
    cfg = MeasureConfig(num_threads=1, min_repeat_ms=2, repeats=5, remeasure_tries=0)
    small, big, small2 = measure_interleaved([SMALL, BIG, SMALL], None, cfg, rounds=6)
    assert small.repeats == big.repeats == small2.repeats == 6
    # an unscheduled 96^3 matmul does ~100x the work of a 64x64 scale: order is kept
    assert big.median_s > 10 * small.median_s and big.median_s > 10 * small2.median_s
