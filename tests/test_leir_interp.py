"""steptp.leir.interp: the NumPy reference interpreter."""

import math

import numpy as np
import pytest

from steptp.leir import LeirCheckError, interpret, parse
from steptp.leir.interp import InterpError, WorkLimitExceeded, identity, work

RNG = np.random.default_rng(1)


def test_matmul_matches_numpy():
    p = parse("""kernel mm(A: f32[6,5], B: f32[5,7]) -> C: f32[6,7]
  for i in 6, j in 7:
    for k in 5:
      C[i,j] += A[i,k] * B[k,j]
""")
    a = RNG.standard_normal((6, 5)).astype(np.float32)
    b = RNG.standard_normal((5, 7)).astype(np.float32)
    out = interpret(p, {"A": a, "B": b})
    assert list(out) == ["C"]
    assert out["C"].dtype == np.float32
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-5, atol=1e-5)
    # a list of inputs in argument order works too
    np.testing.assert_array_equal(interpret(p, [a, b])["C"], out["C"])


def test_softmax():
    p = parse("""kernel softmax(X: f64[3,10]) -> Y: f64[3,10]
  M: f64[3]
  S: f64[3]
  for i in 3:
    for j in 10:
      M[i] max= X[i,j]
    for j in 10:
      S[i] += exp(X[i,j] - M[i])
    for j in 10:
      Y[i,j] = exp(X[i,j] - M[i]) / S[i]
""")
    x = RNG.standard_normal((3, 10)) * 5
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(interpret(p, [x])["Y"], e / e.sum(axis=1, keepdims=True), rtol=1e-12)


def test_reductions_max_min_prod_with_identities():
    p = parse("""kernel r(X: f32[4,6], I: i32[4,6]) -> Mx: f32[4], Mn: f32[4], Pr: f32[4], Im: i32[4], In: i32[4]
  for i in 4, j in 6:
    Mx[i] max= X[i,j]
    Mn[i] min= X[i,j]
    Pr[i] *= X[i,j]
    Im[i] max= I[i,j]
    In[i] min= I[i,j]
""")
    x = RNG.standard_normal((4, 6)).astype(np.float32) - 3.0  # all negative: a 0 init would show
    ii = RNG.integers(-100, 100, (4, 6)).astype(np.int32)
    out = interpret(p, [x, ii])
    np.testing.assert_array_equal(out["Mx"], x.max(axis=1))
    np.testing.assert_array_equal(out["Mn"], x.min(axis=1))
    np.testing.assert_allclose(out["Pr"], x.prod(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(out["Im"], ii.max(axis=1))
    np.testing.assert_array_equal(out["In"], ii.min(axis=1))
    assert identity("max=", "f32") == -np.inf and identity("min=", "f64") == np.inf
    assert identity("max=", "i8") == -128 and identity("min=", "u16") == 65535
    assert identity("+=", "i32") == 0 and identity("*=", "f32") == 1


def test_reduction_axis_outside_the_spatial_loop():
    # init happens when the (outer) reduction axis is 0, for every element
    p = parse("""kernel r(X: f32[5,3]) -> S: f32[3]
  for k in 5, i in 3:
    S[i] += X[k,i]
""")
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(interpret(p, [x])["S"], x.sum(axis=0), rtol=1e-6)


def test_degenerate_reduction_initialises_every_time():
    p = parse("kernel r(X: f32[3]) -> S: f32[3]\n  for i in 3:\n    S[i] += X[i]\n")
    x = np.array([1, 2, 3], dtype=np.float32)
    np.testing.assert_array_equal(interpret(p, [x])["S"], x)


def test_floor_division_and_modulo_on_negative_numbers():
    p = parse("""kernel fd(A: i32[6], B: i32[6], X: f32[6], Y: f32[6]) -> Q: i32[6], R: i32[6], Fq: f32[6], Fr: f32[6], Iq: i32[6]
  for i in 6:
    Q[i] = A[i] // B[i]
    R[i] = A[i] % B[i]
    Fq[i] = X[i] // Y[i]
    Fr[i] = X[i] % Y[i]
    Iq[i] = i32((i - 3) // 2 + (i - 3) % 4 * 10)
""")
    a = np.array([-7, 7, -7, 7, -1, 0], dtype=np.int32)
    b = np.array([2, -2, -2, 2, 3, -5], dtype=np.int32)
    x = np.array([-7.5, 7.5, -7.5, 7.5, -0.5, 1.0], dtype=np.float32)
    y = np.array([2.0, -2.0, -2.0, 2.0, 3.0, -4.0], dtype=np.float32)
    out = interpret(p, [a, b, x, y])
    np.testing.assert_array_equal(out["Q"], [-4, -4, 3, 3, -1, 0])
    np.testing.assert_array_equal(out["R"], [1, -1, -1, 1, 2, 0])
    np.testing.assert_array_equal(out["Fq"], np.floor_divide(x, y))
    np.testing.assert_array_equal(out["Fr"], np.mod(x, y))
    idx = np.arange(6) - 3
    np.testing.assert_array_equal(out["Iq"], idx // 2 + idx % 4 * 10)


def test_unwritten_output_elements_are_nan():
    p = parse("kernel k(A: f32[8]) -> B: f32[8], C: i32[8]\n  for i in 5:\n    B[i] = A[i]\n    C[i] = 1\n")
    out = interpret(p, [np.ones(8, np.float32)])
    assert np.all(out["B"][:5] == 1) and np.all(np.isnan(out["B"][5:]))
    np.testing.assert_array_equal(out["C"], [1] * 5 + [0] * 3)


def test_split_with_tail_guard():
    p = parse("""kernel k(A: f32[10]) -> B: f32[10]
  for i in 3, j in 4:
    if i * 4 + j < 10:
      B[i*4+j] = A[i*4+j] * 2.0
""")
    a = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(interpret(p, [a])["B"], a * 2)


def test_intrinsics_casts_and_where():
    p = parse("""kernel k(X: f32[5], I: i32[5]) -> Y: f32[5], Z: f32[5], W: f32[5], V: i32[5], U: f64[5], S: bool[5]
  for i in 5:
    Y[i] = sigmoid(X[i]) + rsqrt(abs(X[i]) + 1.0) + erf(X[i])
    Z[i] = where(X[i] > 0.0, log(X[i]), -X[i])
    W[i] = round(X[i] * 2.0) + floor(X[i]) + ceil(X[i]) + max(X[i], 0.0) * min(X[i], 1.0)
    V[i] = i32(X[i] * 3.0) + I[i] * 2 + i32(i)
    U[i] = f64(X[i]) ** 2 + pow(f64(i), 0.5)
    S[i] = isnan(X[i]) or X[i] < -1.0 and not I[i] == 0
""")
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5], dtype=np.float32)
    ii = np.array([0, 1, -1, 2, 0], dtype=np.int32)
    out = interpret(p, [x, ii])
    erf = np.array([math.erf(v) for v in x], dtype=np.float32)
    np.testing.assert_allclose(out["Y"], 1 / (1 + np.exp(-x)) + 1 / np.sqrt(np.abs(x) + 1) + erf,
                               rtol=1e-6)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(out["Z"], np.where(x > 0, np.log(x), -x), rtol=1e-6)
    np.testing.assert_allclose(out["W"], np.rint(x * 2) + np.floor(x) + np.ceil(x)
                               + np.maximum(x, 0) * np.minimum(x, 1), rtol=1e-6)
    np.testing.assert_array_equal(out["V"], (x * 3).astype(np.int32) + ii * 2 + np.arange(5))
    np.testing.assert_allclose(out["U"], x.astype(np.float64) ** 2 + np.sqrt(np.arange(5)))
    np.testing.assert_array_equal(out["S"], np.isnan(x) | ((x < -1) & ~(ii == 0)))
    assert out["U"].dtype == np.float64 and out["S"].dtype == np.bool_


def test_computes_in_the_tensor_dtype():
    p = parse("kernel k(A: f32[1]) -> B: f32[1], C: f64[1]\n  B[0] = A[0] + 1e-08\n  C[0] = f64(A[0]) + 1e-08\n")
    out = interpret(p, [np.ones(1, np.float32)])
    assert out["B"][0] == np.float32(1.0)       # 1e-08 vanishes in f32
    assert out["C"][0] == 1.0 + 1e-08


def test_integer_arithmetic_wraps():
    p = parse("kernel k(A: i8[1]) -> B: i8[1]\n  B[0] = A[0] * 2\n")
    assert interpret(p, [np.array([100], np.int8)])["B"][0] == np.int8(-56)


def test_where_only_evaluates_the_chosen_branch():
    p = parse("""kernel pad(A: f32[4], I: i32[6]) -> B: f32[6]
  for i in 6:
    B[i] = where(I[i] < 4, A[I[i]], 0.0)
""")
    a = np.arange(4, dtype=np.float32)
    idx = np.array([0, 3, 9, 1, 4, 2], dtype=np.int32)
    np.testing.assert_array_equal(interpret(p, [a, idx])["B"], [0, 3, 0, 1, 0, 2])


def test_out_of_range_gather_is_an_error():
    p = parse("kernel g(A: f32[4], I: i32[2]) -> B: f32[2]\n  for i in 2:\n    B[i] = A[I[i]]\n")
    with pytest.raises(InterpError, match=r"subscript I\[i\] = -1 out of range for dimension 0 of A"):
        interpret(p, [np.zeros(4, np.float32), np.array([0, -1], np.int32)])


def test_scalars_and_intermediates():
    p = parse("""kernel k(X: f32[4], a: f32) -> S: f32
  T0: f32[4]
  for i in 4:
    T0[i] = X[i] * a
  for i in 4:
    S += T0[i]
""")
    out = interpret(p, {"X": np.arange(4, dtype=np.float32), "a": 2.0}, intermediates=True)
    assert out["S"].shape == () and out["S"] == 12.0
    np.testing.assert_array_equal(out["T0"], [0, 2, 4, 6])


def test_input_validation():
    p = parse("kernel k(A: f32[4]) -> B: f32[4]\n  for i in 4:\n    B[i] = A[i]\n")
    with pytest.raises(InterpError, match="shape"):
        interpret(p, [np.zeros(5)])
    with pytest.raises(InterpError, match="missing inputs"):
        interpret(p, {})
    with pytest.raises(InterpError, match="unknown inputs"):
        interpret(p, {"A": np.zeros(4), "Z": np.zeros(4)})
    with pytest.raises(InterpError, match="takes 1 inputs"):
        interpret(p, [])


def test_invalid_program_is_rejected():
    p = parse("kernel k(A: f32[4]) -> B: f32[4]\n  for i in 4:\n    A[i] = 1.0\n")
    with pytest.raises(LeirCheckError):
        interpret(p, [np.zeros(4)])


def test_work_limit():
    p = parse("kernel k(A: f32[100,100]) -> B: f32[100]\n  for i in 100, j in 100, k in 10:\n    B[i] += A[i,j]\n")
    assert work(p) == 100_000
    with pytest.raises(WorkLimitExceeded, match="100000 statement executions"):
        interpret(p, [np.zeros((100, 100))], limit=50_000)


def test_bf16_is_not_supported():
    p = parse("kernel k(A: bf16[4]) -> B: bf16[4]\n  for i in 4:\n    B[i] = A[i]\n")
    with pytest.raises(NotImplementedError):
        interpret(p, [np.zeros(4)])


def test_speed_of_a_small_matmul():
    import time
    p = parse("""kernel mm(A: f32[32,32], B: f32[32,32]) -> C: f32[32,32]
  for i in 32, j in 32:
    for k in 32:
      C[i,j] += A[i,k] * B[k,j]
""")
    a = RNG.standard_normal((32, 32)).astype(np.float32)
    t = time.perf_counter()
    out = interpret(p, [a, a])
    assert time.perf_counter() - t < 5.0  # ~33k updates; typically well under a second
    np.testing.assert_allclose(out["C"], a @ a, rtol=1e-4, atol=1e-4)
