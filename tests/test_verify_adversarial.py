"""The verifier against deliberately wrong candidates (steptp.measure.adversarial), and the
per-element error bound that keeps it from rejecting correct reorderings."""

from __future__ import annotations

import numpy as np
import pytest

from steptp.leir import parse
from steptp.measure.adversarial import CASES, run_suite
from steptp.measure.error_bound import bound_program, error_bounds
from steptp.measure.timing import load_kernel
from steptp.measure.verify import DISTRIBUTIONS, random_inputs, verify
from steptp.tir import build as B


@pytest.fixture(scope="module")
def suite():
    return {r.name: r for r in run_suite()}


def test_every_wrong_candidate_is_rejected_with_a_reason_naming_where(suite):
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)
    not_rejected = [n for n, r in suite.items() if not r.rejected]
    assert not_rejected == []
    for c in CASES:
        why = suite[c.name].reason
        assert "verifier raised" not in why, (c.name, why)
        names = [p.name for p in B.program_signature(parse(c.reference))] \
            if not c.reference.startswith("#") else []
        # a race names the tensor the iterations share, which may be an intermediate
        assert any(n in why for n in names) or why.startswith("race: parallel loop"), \
            (c.name, why)
        if "differ" in why or "not written" in why:
            assert "first" in why, (c.name, why)


def test_reasons_say_what_was_caught(suite):
    assert "race" in suite["parallel_reduction_race"].reason
    assert "race" in suite["parallel_scan_race"].reason
    # above the 4M points the race check enumerates, and in TVMScript it cannot read
    for name in ("large_row_buffer_race", "large_row_buffer_race_2048"):
        assert "race: parallel loop i" in suite[name].reason and "element of T" in suite[name].reason
    assert "element of S" in suite["large_shared_accumulator_race"].reason
    assert "race: run with 2 threads" in suite["primfunc_parallel_scan_race"].reason
    assert "never written" in suite["unwritten_output"].reason
    assert "writes to its input B" in suite["writes_input"].reason
    assert "depends on what its buffer held" in suite["reads_own_output"].reason
    assert "not written" in suite["off_by_one_rows"].reason
    # the distributions do the work: these pass on standard-normal inputs
    assert "large magnitude" in suite["right_only_on_normal"].reason
    assert "large magnitude" in suite["constant_output"].reason
    assert "small magnitude" in suite["layernorm_no_epsilon"].reason
    assert "mixed signs" in suite["max_from_zero"].reason
    assert "first wrong element D[0, 0]: got 0, want" in suite["softmax_small_flushed"].reason


@pytest.mark.parametrize("case", [c for c in CASES if not c.reference.startswith("#")][:12],
                         ids=lambda c: c.name)
def test_references_pass_against_themselves(case):
    res = verify(case.reference, case.reference, case.exactness)
    assert res.passed, res.reason


def test_candidate_cannot_choose_its_inputs():
    # wrapping a read in sqrt() makes the *candidate* look like it needs positive inputs; the
    # inputs still come from the reference, so the sign error shows
    ref = "kernel f32 k(A[64], B[64]) -> D[64]\n  for i in 64:\n    D[i] = A[i] * B[i]\n"
    cand = ref.replace("A[i] * B[i]", "sqrt(A[i] * A[i]) * B[i]")
    res = verify(cand, ref, "algebraic")
    assert not res.passed and "first wrong element D[" in res.reason


def test_inputs_cover_five_distributions():
    p = parse("kernel f32 k(A[64,64]) -> D[64,64]\n  for i in 64, j in 64:\n    D[i,j] = A[i,j]\n")
    xs = [random_inputs(p, s)[0] for s in range(len(DISTRIBUTIONS))]
    assert len(DISTRIBUTIONS) == 5
    assert (xs[0] < 0).any() and abs(float(xs[0].std()) - 1.0) < 0.1
    assert (xs[1] > 0).all()
    assert xs[2].std() > 5
    assert np.abs(xs[3]).max() < 0.01
    rows_neg = (xs[4] < 0).all(axis=1)
    assert rows_neg.any() and not rows_neg.all()  # some rows entirely negative


REF_DOT = """kernel f32 dot(A[8,512], B[512,8]) -> D[8,8]
  for i in 8, j in 8, k in 512:
    D[i,j] += A[i,k] * B[k,j]
"""
# the same sum in 16 interleaved partial sums, then combined: a reassociation
CAND_DOT = """kernel f32 dot(A[8,512], B[512,8]) -> D[8,8]
  P: f32[8,8,16]
  for i in 8, j in 8, h in 16, k in 32:
    P[i,j,h] += A[i,k*16+h] * B[k*16+h,j]
  for i in 8, j in 8, h in 16:
    D[i,j] += P[i,j,h]
"""


def test_a_correct_reassociation_passes_on_every_distribution():
    res = verify(CAND_DOT, REF_DOT, "reassociation")
    assert res.passed, res.reason
    assert [s.seed for s in res.seeds] == [0, 1, 2, 3, 4]


def test_a_dropped_term_of_the_reassociated_sum_still_fails():
    bad = CAND_DOT.replace("for i in 8, j in 8, h in 16:\n    D[i,j] += P[i,j,h]",
                           "for i in 8, j in 8, h in 15:\n    D[i,j] += P[i,j,h]")
    res = verify(bad, REF_DOT, "reassociation")
    assert not res.passed and "first wrong element D[" in res.reason


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "matmul_bias_gelu"])
def test_error_bound_covers_the_references_own_rounding(name):
    # the bound (any evaluation order) must cover the f32 evaluation's distance to the f64 one
    from steptp import examples

    prog = parse(examples.text(name))
    built32 = B.build(prog)
    twin = B.build(bound_program(prog, reorders=True))
    n = len(prog.outputs)
    for seed in range(5):
        ins = random_inputs(prog, seed)
        got32 = B.run(built32, ins)
        outs64 = B.run(twin, [x.astype(np.float64) for x in ins])
        for k in range(n):
            err = np.abs(got32[k].astype(np.float64) - outs64[k])
            bound = outs64[n + k]
            finite = np.isfinite(outs64[k])
            assert (err[finite] <= bound[finite] + 1e-30).all(), (name, seed, float(
                (err - bound)[finite].max()))


def test_error_bounds_are_per_element():
    prog = parse(REF_DOT)
    ins = random_inputs(prog, 0)
    ins[0][0, :] *= 1000.0  # one row of large terms
    (bound,) = error_bounds(prog, ins, reorders=True)
    assert bound.shape == (8, 8)
    assert bound[0].min() > 100 * bound[1:].max()
