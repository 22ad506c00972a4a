"""Numerical verification of candidates against references, with real TVM builds."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tvm")

from steptp import examples  # noqa: E402
from steptp.leir import parse  # noqa: E402
from steptp.measure import TOLERANCES, VerifyResult, random_inputs, tolerance, verify  # noqa: E402
from steptp.measure.verify import compare  # noqa: E402
from steptp.tir.lower import lower  # noqa: E402

MATMUL = """kernel matmul(A: f32[32,32], B: f32[32,32]) -> C: f32[32,32]
  for i in 32, j in 32:
    for k in 32:
      C[i,j] += A[i,k] * B[k,j]
"""

# The same matmul with i split by 8 and j vectorized: a pure loop change.
MATMUL_SPLIT = """kernel matmul(A: f32[32,32], B: f32[32,32]) -> C: f32[32,32]
  for io in 4 parallel, ii in 8:
    for k in 32:
      for j in 32 vectorized:
        C[io*8+ii,j] += A[io*8+ii,k] * B[k,j]
"""

# Reduction split in two halves: k = ko*16 + ki summed as two partial sums.
MATMUL_RFACTOR = """kernel matmul(A: f32[32,32], B: f32[32,32]) -> C: f32[32,32]
  T0: f32[32,32,2]
  for i in 32, j in 32, ko in 2:
    for ki in 16:
      T0[i,j,ko] += A[i,ko*16+ki] * B[ko*16+ki,j]
  for i in 32, j in 32:
    for ko in 2:
      C[i,j] += T0[i,j,ko]
"""


def test_correct_candidate_passes():
    res = verify(MATMUL_SPLIT, MATMUL, exactness="exact")
    assert isinstance(res, VerifyResult)
    assert res.passed, res.reason
    assert res.reason is None and [s.seed for s in res.seeds] == [0, 1, 2, 3, 4]
    assert all(s.passed for s in res.seeds)
    assert res.max_abs_err < 1e-4
    json.dumps(res.to_dict())  # JSON-able


def test_wrong_candidate_fails_with_the_error_magnitude():
    wrong = MATMUL_SPLIT.replace("A[io*8+ii,k] * B[k,j]", "A[io*8+ii,k] * B[k,j] * 1.01")
    res = verify(wrong, MATMUL)
    assert not res.passed
    assert "output C" in res.reason and "differ beyond" in res.reason
    assert res.max_abs_err > 1e-3  # about 1% of entries of size ~5
    assert res.max_rel_err == pytest.approx(0.01, rel=0.05)


def test_off_by_one_subscript_fails():
    wrong = MATMUL.replace("C[i,j] += A[i,k]", "C[i,j] += A[(i+1)%32,k]")
    res = verify(wrong, MATMUL)
    assert not res.passed and res.max_abs_err > 1.0


def test_unwritten_elements_fail_with_nan_reason():
    partial = MATMUL.replace("for i in 32, j in 32:", "for i in 32, j in 31:")
    res = verify(partial, MATMUL)
    assert not res.passed
    assert "output C: 32 of 1024 elements not written (NaN)" in res.reason


def test_unwritten_integer_elements_fail():
    ref = "kernel k(A: i32[8]) -> D: i32[8]\n  for i in 8:\n    D[i] = A[i] * 2\n"
    cand = "kernel k(A: i32[8]) -> D: i32[8]\n  for i in 7:\n    D[i] = A[i] * 2\n"
    res = verify(cand, ref)
    assert not res.passed and "1 of 8 elements not written (sentinel)" in res.reason
    assert verify(ref, ref).passed


def test_computed_nan_is_not_reported_as_unwritten():
    ref = "kernel k(A: f32[8]) -> D: f32[8]\n  for i in 8:\n    D[i] = A[i]\n"
    cand = "kernel k(A: f32[8]) -> D: f32[8]\n  for i in 8:\n    D[i] = sqrt(A[i])\n"
    res = verify(cand, ref, seeds=(0,), positive=())  # negative inputs: sqrt gives NaN
    assert not res.passed and "NaN where the reference is not" in res.reason


def test_nan_in_both_is_accepted_and_inf_must_match():
    a = np.array([np.nan, np.inf, -np.inf, 1.0])
    ok, *_ = compare(a.copy(), a.copy(), "float32", "exact")
    assert ok
    b = a.copy()
    b[1] = 1e30
    ok, _, _, why = compare(b, a, "float32", "exact")
    assert not ok and "infinity" in why
    # a reference NaN (a 0/0 of cancellation) is undetermined even for exact rewrites
    c = a.copy()
    c[0] = -0.0005
    ok, *_ = compare(c, a, "float32", "exact")
    assert ok
    # non-exact classes: where the reference overflowed, the candidate may hold the value it
    # should have had; an infinity or NaN where the reference is finite still fails
    ok, *_ = compare(b, a, "float32", "algebraic")
    assert ok
    c = a.copy()
    c[3] = np.inf
    ok, _, _, why = compare(c, a, "float32", "algebraic")
    assert not ok and "infinity" in why
    c[3] = np.nan
    ok, _, _, why = compare(c, a, "float32", "reassociation")
    assert not ok and "NaN where the reference is not" in why


def test_a_reference_with_no_finite_value_proves_nothing():
    ref = "kernel f32 k(A[8]) -> D[8]\n  for i in 8:\n    D[i] = sqrt(-1.0 - A[i] * A[i])\n"
    cand = "kernel f32 k(A[8]) -> D[8]\n  for i in 8:\n    D[i] = A[i]\n"
    res = verify(cand, ref, "algebraic")
    assert not res.passed and "no finite value" in res.reason


def test_tolerance_classes_differ():
    rtol = {cls: TOLERANCES[cls]["f32"][1] for cls in TOLERANCES}
    assert rtol["exact"] <= rtol["reassociation"] < rtol["algebraic"]
    # atol is for (near-)zero elements and does not loosen with the class: rounding beyond it
    # is the error bound's job
    assert len({TOLERANCES[cls]["f32"][0] for cls in TOLERANCES}) == 1
    for cls in TOLERANCES:
        assert set(TOLERANCES[cls]) == {"f16", "bf16", "f32", "f64"}
        assert TOLERANCES[cls]["f64"] < TOLERANCES[cls]["f32"] < TOLERANCES[cls]["f16"] \
            <= TOLERANCES[cls]["bf16"]
    assert tolerance("exact", "int32") == (0.0, 0.0)
    with pytest.raises(ValueError, match="unknown exactness"):
        tolerance("roughly", "f32")
    # A perturbation of 1e-4 relative: too much for "exact", fine for "algebraic".
    cand = MATMUL.replace("A[i,k] * B[k,j]", "A[i,k] * B[k,j] * 1.0001")
    assert not verify(cand, MATMUL, exactness="exact").passed
    assert verify(cand, MATMUL, exactness="algebraic").passed


def test_reassociated_reduction_passes_its_class():
    res = verify(MATMUL_RFACTOR, MATMUL, exactness="reassociation")
    assert res.passed, res.reason


def test_reference_as_primfunc():
    ref = lower(parse(MATMUL))
    assert verify(MATMUL_SPLIT, ref).passed
    wrong = MATMUL_SPLIT.replace("+=", "max=")
    assert not verify(wrong, ref).passed


def test_signature_mismatch():
    other = MATMUL.replace("C: f32[32,32]", "C: f64[32,32]").replace(
        "A[i,k] * B[k,j]", "f64(A[i,k] * B[k,j])")
    res = verify(other, MATMUL)
    assert not res.passed and "signature mismatch" in res.reason
    fewer = "kernel k(A: f32[32,32]) -> C: f32[32,32]\n  for i in 32, j in 32:\n    C[i,j] = A[i,j]\n"
    res = verify(fewer, MATMUL)
    assert not res.passed and "signature mismatch" in res.reason


def test_candidate_that_does_not_build_fails_cleanly():
    bad = MATMUL.replace("for k in 32:", "for k in 32 vectorized:")
    res = verify(bad, MATMUL)
    assert not res.passed and res.reason.startswith("candidate does not build")


def test_random_inputs():
    p = parse("""kernel k(A: f32[4,4], P: f32[4], I: i32[3], U: u8[2], M: bool[2]) -> D: f32[3,4]
  for i in 3, j in 4:
    D[i,j] = A[I[i],j] + log(P[j]) + f32(U[0]) + where(M[0], 1.0, 0.0)
""")
    ins = [random_inputs(p, s) for s in (0, 1, 2)]
    for x in ins:
        a, pos, idx, u, m = x
        assert a.dtype == np.float32 and a.shape == (4, 4)
        assert (pos > 0).all()  # read under log: positive
        assert ((0 <= idx) & (idx < 4)).all() and idx.dtype == np.int32  # gather index in range
        assert u.dtype == np.uint8 and m.dtype == bool
    assert (ins[0][0] < 0).any() and (ins[0][0] > 0).any()  # mixed signs
    assert (ins[1][0] > 0).all()  # seed 1: uniform positive
    assert np.abs(ins[2][0]).std() > 3 * np.abs(ins[0][0]).std()  # seed 2: large magnitude
    small = random_inputs(p, 3)[0]
    assert 0 < np.abs(small).max() < 0.01  # seed 3: small magnitude
    np.testing.assert_array_equal(random_inputs(p, 1)[0], ins[1][0])  # deterministic


def test_examples_verify_against_themselves():
    for name in ("softmax", "layer_norm", "cumsum"):
        res = verify(examples.text(name), examples.text(name), seeds=(0,))
        assert res.passed, (name, res.reason)


def test_reassociation_slack_is_the_elements_error_bound_not_the_outputs_range():
    # a reordered dot product: an element that cancels to ~0 carries the rounding of its large
    # terms; that slack comes from its own error bound, not from the largest output
    want = np.array([800.0, -650.0, 0.001, 3.0])
    got = want + np.array([0.0, 0.0007, 0.0007, 0.0])
    ok, _, _, why = compare(got, want, "float32", "reassociation")
    assert not ok and "1 of 4 elements" in why and "first wrong element out[2]" in why
    bound = np.array([1e-3, 1e-3, 1e-3, 1e-5])  # the terms of each element were large
    ok, *_ = compare(got, want, "float32", "reassociation", bound=bound)
    assert ok
    # a wrong element (a term dropped: off by about the terms' size) still fails
    bad = want + np.array([0.0, 0.0, 1.5, 0.0])
    ok, _, _, why = compare(bad, want, "float32", "reassociation", bound=bound)
    assert not ok and "1 of 4 elements" in why
    # small elements next to a large maximum are compared on their own scale
    soft = np.full(16384, 6.1e-5)
    soft[0] = 0.5
    zeroed = soft.copy()
    zeroed[1:] = 0.0
    for cls in ("exact", "reassociation", "algebraic"):
        ok, _, _, why = compare(zeroed, soft, "float32", cls)
        assert not ok and "16383 of 16384" in why, cls
