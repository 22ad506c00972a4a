"""LEIR -> TIR lowering, real TVM builds on the host CPU (and CUDA codegen without a GPU).

Each program is lowered, built with LLVM, run, and compared element-wise with a NumPy expression
written independently of both the lowering and the LEIR interpreter.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
import tvm_ffi  # noqa: E402
from tvm import tirx  # noqa: E402

from steptp import examples  # noqa: E402
from steptp.leir import parse  # noqa: E402
from steptp.tir.build import BuildError, Built, build, run, signature, time  # noqa: E402
from steptp.tir.lower import LowerError, index_dtype, lower  # noqa: E402
from steptp.tir.target import Target, detect_x86_cpu  # noqa: E402

HOST = Target.host_cpu()


def rnd(shape, dtype="float32", seed=0, positive=False):
    x = np.random.default_rng(seed).normal(0, 1, shape)
    if positive:
        x = np.abs(x) + 0.1
    return x.astype(dtype)


def build_run(text, *inputs, target=HOST):
    return run(build(parse(text), target), list(inputs))


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- target
def test_target_host_cpu_round_trip():
    t = Target.host_cpu()
    assert t.kind == "llvm" and t.mtriple and t.mcpu and not t.is_gpu
    assert Target.from_dict(t.to_dict()) == t
    assert t.key == Target.host_cpu().key  # stable
    tt = t.to_tvm()
    assert isinstance(tt, tvm.target.Target) and str(tt.attrs["mcpu"]) == t.mcpu


def test_target_cpu_detection_from_flags():
    spr = frozenset("avx512f avx512bw avx512vl avx512dq avx512cd avx512ifma avx512vbmi avx512_vbmi2 "
                    "avx512_bitalg avx512_vpopcntdq avx512_vnni avx512_bf16 avx512_fp16 amx_tile "
                    "amx_bf16 amx_int8 avx2 fma bmi1 bmi2 movbe f16c abm avx xsave sse4_2 sse4_1 "
                    "ssse3 popcnt cx16".split())
    assert detect_x86_cpu("GenuineIntel", spr) == "sapphirerapids"
    assert detect_x86_cpu("AuthenticAMD", spr - {"amx_tile"}) == "znver4"
    assert detect_x86_cpu("GenuineIntel", frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "movbe",
                                                     "f16c", "abm", "xsave"})) == "x86-64-v3"
    assert detect_x86_cpu(None, frozenset()) == "x86-64"


def test_target_cuda():
    t = Target.cuda("sm_80")
    assert t.is_gpu and t.key.startswith("cuda-sm_80")
    assert Target.from_dict(t.to_dict()) == t
    tt = t.to_tvm()
    assert str(tt.kind.name) == "cuda" and tt.host is not None


# ----------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", examples.names())
def test_lowering_is_deterministic(name):
    text = examples.text(name)
    f1, f2 = lower(parse(text)), lower(parse(text))
    assert tvm_ffi.structural_equal(f1, f2)
    assert tvm_ffi.structural_hash(f1) == tvm_ffi.structural_hash(f2)
    assert f1.attrs["global_symbol"] == "main" and bool(f1.attrs["tirx.noalias"])
    # The printed TVMScript parses back to the same function.
    g = tvm.script.from_source(f1.script())
    g = g["main"] if isinstance(g, tvm.IRModule) else g
    assert tvm_ffi.structural_equal(f1, g)


def test_lower_accepts_text_and_names_blocks():
    text = """kernel k(A: f32[4]) -> D: f32[4]
  T0: f32[4] local
  for i in 4:
    T0[i] = A[i]
  for i in 4:
    D[i] = T0[i]
  for i in 4:
    D[i] = D[i] + T0[i]
"""
    f = lower(text)
    script = f.script()
    for name in ('"T0"', '"D"', '"D_1"'):
        assert f"T.sblock({name})" in script
    assert 'scope="local"' in script
    assert [p.name for p in f.params] == ["A", "D"]


# ----------------------------------------------------------------------------- numerics
def test_matmul_bias_gelu():
    a, b, c = rnd((16, 64)), rnd((64, 32), seed=1), rnd((32,), seed=2)
    (d,) = build_run(examples.text("matmul_bias_gelu"), a, b, c)
    t = a.astype(np.float64) @ b + c
    want = t * (0.5 + np.vectorize(math.erf)(t * 0.7071067811865476) * 0.5)
    close(d, want, 1e-4)


@pytest.mark.parametrize("op,init,fn", [
    ("+=", 0.0, np.sum), ("*=", 1.0, np.prod), ("max=", -np.inf, np.max), ("min=", np.inf, np.min)])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_float_reductions(op, init, fn, dtype):
    a = rnd((4, 8), {"f32": "float32", "f64": "float64"}[dtype])
    (s,) = build_run(f"""kernel k(A: {dtype}[4,8]) -> S: {dtype}[4]
  for i in 4 parallel:
    for j in 8:
      S[i] {op} A[i,j]
""", a)
    close(s, fn(a, axis=1))


@pytest.mark.parametrize("op,fn", [("+=", np.sum), ("*=", np.prod), ("max=", np.max),
                                   ("min=", np.min)])
@pytest.mark.parametrize("dtype", ["i32", "i64", "u8"])
def test_int_reductions(op, fn, dtype):
    npd = {"i32": "int32", "i64": "int64", "u8": "uint8"}[dtype]
    a = np.random.default_rng(0).integers(0 if dtype == "u8" else -4, 5, (4, 6)).astype(npd)
    (s,) = build_run(f"""kernel k(A: {dtype}[4,6]) -> S: {dtype}[4]
  for i in 4, j in 6:
    S[i] {op} A[i,j]
""", a)
    np.testing.assert_array_equal(s, fn(a, axis=1).astype(npd))


def test_reduction_identities_for_empty_update():
    # The init of max=/min= is -inf/+inf (floats) and the dtype's min/max (integers).
    a = np.full((2, 3), -np.inf, "float32")
    (s,) = build_run("""kernel k(A: f32[2,3]) -> S: f32[2]
  for i in 2, j in 3:
    S[i] max= A[i,j]
""", a)
    assert np.all(s == -np.inf)
    f = lower("""kernel k(A: i16[2,3]) -> S: i16[2], M: i16[2]
  for i in 2, j in 3:
    S[i] max= A[i,j]
    M[i] min= A[i,j]
""")
    assert "T.int16(-32768)" in f.script() and "T.int16(32767)" in f.script()


def test_split_loops_and_tail_guard():
    a = rnd((10, 6))
    d, s = build_run("""kernel k(A: f32[10,6]) -> D: f32[10,6], S: f32[10]
  for io in 3, ii in 4:
    if io * 4 + ii < 10:
      for j in 6:
        S[io*4+ii] += A[io*4+ii,j]
      for j in 6 vectorized:
        D[io*4+ii,j] = A[io*4+ii,j] * 2.0
""", a)
    close(s, a.sum(1))
    close(d, a * 2)


def test_split_matmul_example():
    a, b = rnd((64, 64)), rnd((64, 64), seed=1)
    (c,) = build_run(examples.text("split_matmul"), a, b)
    close(c, a.astype(np.float64) @ b, 1e-4)


def test_fused_nest_with_several_statements():
    a = rnd((8, 16))
    (d,) = build_run(examples.text("softmax").replace("[8,128]", "[8,16]").replace("128", "16"), a)
    e = np.exp(a - a.max(1, keepdims=True))
    close(d, e / e.sum(1, keepdims=True))


def test_layer_norm_example():
    a, b, c = rnd((8, 64)), rnd((64,), seed=1), rnd((64,), seed=2)
    (d,) = build_run(examples.text("layer_norm"), a, b, c)
    mu = a.mean(1, keepdims=True)
    var = ((a - mu) ** 2).mean(1, keepdims=True)
    close(d, (a - mu) / np.sqrt(var + 1e-5) * b + c, 1e-4)


def test_compute_at_recomputation():
    a, b = rnd((8,)), rnd((4, 8), seed=1)
    (d,) = build_run("""kernel k(A: f32[8], B: f32[4,8]) -> D: f32[4,8]
  T0: f32[8]
  for i in 4:
    for j in 8:
      T0[j] = A[j] * 2.0
      D[i,j] = T0[j] + B[i,j]
""", a, b)
    close(d, a * 2 + b)


def test_scalars():
    s, a = np.array(1.5, "float32"), rnd((4,))
    d, e = build_run("""kernel k(S: f32, A: f32[4]) -> D: f32, E: f32[4]
  D = S * 2.0
  for i in 4:
    E[i] = A[i] + S
""", s, a)
    assert d.shape == () and d == np.float32(3.0)
    close(e, a + 1.5)


def test_scalar_reduction():
    a = rnd((3, 5))
    (s,) = build_run("""kernel k(A: f32[3,5]) -> S: f32
  for i in 3, j in 5:
    S += A[i,j]
""", a)
    close(s, a.sum())


def test_floordiv_floormod_subscripts():
    a = rnd((6, 8))
    (d,) = build_run("""kernel k(A: f32[6,8]) -> D: f32[8,6]
  for f in 48:
    D[f % 8, f // 8] = A[f // 8, f % 8] + f32(f)
""", a)
    close(d, a.T + np.arange(48).reshape(6, 8).T)


def test_negative_floordiv_floormod_values():
    a = np.arange(-6, 6, dtype="int32")
    d, e = build_run("""kernel k(A: i32[12]) -> D: i32[12], E: i32[12]
  for i in 12:
    D[i] = A[i] // 4
    E[i] = A[i] % 4
""", a)
    np.testing.assert_array_equal(d, a // 4)
    np.testing.assert_array_equal(e, a % 4)


def test_gather():
    a, idx = rnd((16, 4)), np.array([3, 0, 15, 7, 7], "int32")
    (d,) = build_run("""kernel k(A: f32[16,4], I: i32[5]) -> D: f32[5,4]
  for i in 5, j in 4:
    D[i,j] = A[I[i], j]
""", a, idx)
    close(d, a[idx])


def test_where_padding_does_not_read_out_of_bounds():
    a = rnd((4, 10, 10))
    (d,) = build_run("""kernel k(A: f32[4,10,10]) -> D: f32[4,12,12]
  for i in 4, j in 12, k in 12:
    D[i,j,k] = where(1 <= j and j < 11 and 1 <= k and k < 11, A[i,j-1,k-1], 0.0)
""", a)
    close(d, np.pad(a, ((0, 0), (1, 1), (1, 1))))


@pytest.mark.parametrize("kind", ["serial", "parallel", "vectorized", "unrolled"])
def test_loop_kinds(kind):
    a = rnd((8, 16))
    f = lower(f"""kernel k(A: f32[8,16]) -> D: f32[8,16]
  for i in 8, j in 16 {kind}:
    D[i,j] = A[i,j] * A[i,j]
""")
    loop = f.body.block.body.body
    assert isinstance(loop, tirx.For)
    assert loop.kind == {"serial": tirx.ForKind.SERIAL, "parallel": tirx.ForKind.PARALLEL,
                         "vectorized": tirx.ForKind.VECTORIZED,
                         "unrolled": tirx.ForKind.UNROLLED}[kind]
    (d,) = run(build(f), [a])
    close(d, a * a)


@pytest.mark.parametrize("dtype,npd,tol", [("f16", "float16", 2e-3), ("f64", "float64", 1e-12),
                                           ("f32", "float32", 1e-5)])
def test_intrinsics(dtype, npd, tol):
    a, p = rnd((4, 8), npd), rnd((4, 8), npd, seed=1, positive=True)
    d, e = build_run(f"""kernel k(A: {dtype}[4,8], P: {dtype}[4,8]) -> D: {dtype}[4,8], E: {dtype}[4,8]
  for i in 4, j in 8:
    D[i,j] = exp(A[i,j]) + log(P[i,j]) + sqrt(P[i,j]) + tanh(A[i,j]) + sigmoid(A[i,j]) + abs(A[i,j])
    E[i,j] = erf(A[i,j]) + floor(A[i,j]) + max(A[i,j], 0.5) + pow(P[i,j], 2.0) + where(A[i,j] > 0.0, 1.0, -1.0)
""", a, p)
    x, y = a.astype(np.float64), p.astype(np.float64)
    close(d.astype(np.float64), np.exp(x) + np.log(y) + np.sqrt(y) + np.tanh(x)
          + 1 / (1 + np.exp(-x)) + np.abs(x), tol * 10)
    close(e.astype(np.float64), np.vectorize(math.erf)(x) + np.floor(x) + np.maximum(x, 0.5)
          + y ** 2 + np.where(x > 0, 1.0, -1.0), tol * 10)


def test_round_is_half_to_even_and_casts():
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.7, 3.2], "float32")
    d, e, f = build_run("""kernel k(A: f32[6]) -> D: f32[6], E: i32[6], F: bool[6]
  for i in 6:
    D[i] = round(A[i])
    E[i] = i32(A[i])
    F[i] = bool(i32(A[i]))
""", a)
    np.testing.assert_array_equal(d, np.rint(a))
    np.testing.assert_array_equal(e, a.astype("int32"))
    np.testing.assert_array_equal(f, a.astype("int32") != 0)


def test_bf16_builds_and_runs():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = rnd((8,)).astype(ml_dtypes.bfloat16)
    (d,) = build_run("""kernel k(A: bf16[8]) -> D: bf16[8]
  for i in 8:
    D[i] = exp(A[i]) * 2.0 + erf(A[i])
""", a)
    x = a.astype(np.float64)
    close(d.astype(np.float64), np.exp(x) * 2 + np.vectorize(math.erf)(x), 3e-2)


def test_storage_scopes_on_cpu():
    a = rnd((4,))
    (d,) = build_run("""kernel k(A: f32[4]) -> D: f32[4]
  T0: f32[4] shared
  T1: f32[4] local
  for i in 4:
    T0[i] = A[i] + 1.0
    T1[i] = T0[i] * 2.0
  for i in 4:
    D[i] = T1[i]
""", a)
    close(d, (a + 1) * 2)


def test_int64_index_type_for_huge_buffers():
    p = parse("""kernel k(A: i8[3000000000]) -> D: i8[3000000000]
  for i in 3000000000:
    D[i] = A[i]
""")
    assert index_dtype(p) == "int64"
    loop = lower(p).body.block.body
    assert str(loop.loop_var.ty.dtype) == "int64"
    assert index_dtype(parse(examples.text("softmax"))) == "int32"


# ----------------------------------------------------------------------------- errors
THREADED = """kernel k(A: f32[64,32]) -> D: f32[64,32]
  for b in 64 blockIdx.x:
    for t in 32 threadIdx.x:
      D[b,t] = A[b,t] * 2.0
"""


def test_thread_binding_rejected_on_cpu():
    with pytest.raises(LowerError, match=r"loop 'b' is bound to blockIdx.x.*CPU"):
        lower(THREADED, HOST)
    with pytest.raises(LowerError, match="loop 'b'"):
        build(parse(THREADED), HOST)
    # A PrimFunc lowered without a target is refused by build for a CPU target too.
    with pytest.raises(LowerError, match="bound to blockIdx.x"):
        build(lower(THREADED), HOST)


@pytest.mark.parametrize("kind", ["vectorized", "parallel"])
def test_vectorized_or_parallel_reduction_axis_rejected(kind):
    with pytest.raises(LowerError, match=f"reduces over loop 'k', which is {kind}"):
        lower(f"""kernel k(A: f32[4,8]) -> S: f32[4]
  for i in 4:
    for k in 8 {kind}:
      S[i] += A[i,k]
""")


def test_a_vector_wider_than_tvm_lanes_is_a_clear_error_not_a_crashed_worker():
    # 65,536 lanes wrap to zero in TVM's 16-bit lane count: the build died with SIGFPE
    wide = """kernel k(A: f32[65536]) -> D: f32[65536]
  for i in 65536 vectorized:
    D[i] = A[i] + 1.0
"""
    with pytest.raises(LowerError, match=r"loop 'i' is vectorized over 65536 iterations.*65535 lanes"):
        lower(wide, HOST)
    assert lower(wide.replace("65536", "8192"), HOST) is not None   # wide, yet within the limit


def test_build_error_is_reported():
    # TVM's CPU thread pool refuses nested parallel loops; the BuildError carries its reason.
    with pytest.raises(BuildError, match="Nested parallel loop"):
        build(parse("""kernel k(A: f32[4,4]) -> D: f32[4,4]
  for i in 4 parallel:
    for j in 4 parallel:
      D[i,j] = A[i,j]
"""))


# ----------------------------------------------------------------------------- build API
def test_signature_and_time():
    f = lower(examples.text("matmul_bias_gelu"))
    sig = signature(f)
    assert [(p.name, p.shape, p.dtype, p.is_output) for p in sig] == [
        ("A", (16, 64), "float32", False), ("B", (64, 32), "float32", False),
        ("C", (32,), "float32", False), ("D", (16, 32), "float32", True)]
    b = build(f)
    assert isinstance(b, Built) and b.outputs == sig[3:]
    ins = [rnd(p.shape, seed=i) for i, p in enumerate(b.inputs)]
    t = time(b, ins, number=2, repeat=2)
    assert len(t.results) == 2 and t.mean > 0
    with pytest.raises(ValueError, match="takes 3 inputs"):
        run(b, ins[:2])


def test_run_prefills_outputs_with_nan_and_sentinels():
    d, e = build_run("""kernel k(A: f32[4]) -> D: f32[4], E: i32[4]
  for i in 2:
    D[i] = A[i]
    E[i] = 1
""", rnd((4,)))
    assert np.isnan(d[2:]).all() and not np.isnan(d[:2]).any()
    assert (e[2:] == np.iinfo(np.int32).min).all() and (e[:2] == 1).all()


# ----------------------------------------------------------------------------- CUDA codegen
def _cuda_codegen_available() -> bool:
    try:
        return bool(tvm.get_global_func("target.build.cuda", allow_missing=True))
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(not _cuda_codegen_available(), reason="TVM built without CUDA codegen")
def test_cuda_codegen_with_thread_bindings():
    p = parse("""kernel k(A: f32[64,32], B: f32[32]) -> D: f32[64,32], S: f32[64]
  T0: f32[32] shared
  T1: f32[64,32] local
  for b in 64 blockIdx.x:
    for t in 32 threadIdx.x:
      T0[t] = A[b,t] * B[t]
    for t in 32 threadIdx.x:
      for k in 32:
        T1[b,t] += T0[k]
      D[b,t] = T1[b,t]
    for t in 32 threadIdx.x:
      S[b] += T0[t]
""")
    f = lower(p, Target.cuda())
    assert 'thread="blockIdx.x"' in f.script()
    try:
        b = build(p, Target.cuda("sm_90"))
    except BuildError as e:  # pragma: no cover - depends on the TVM build
        pytest.skip(f"CUDA codegen unavailable here: {e}")
    src = b.source()
    assert "__global__" in src and "blockIdx.x" in src and "threadIdx.x" in src
    assert "__shared__" in src and "__syncthreads" in src
    if shutil.which("nvidia-smi") is None:
        return  # no GPU: codegen only


def test_blockidx_reduction_axis_rejected():
    with pytest.raises(LowerError, match="bound to blockIdx.x"):
        lower("""kernel k(A: f32[64,32]) -> S: f32[32]
  for b in 64 blockIdx.x:
    for t in 32 threadIdx.x:
      S[t] += A[b,t]
""", Target.cuda())


def test_data_dependent_guards_and_top_level_if():
    text = """kernel k(A: f32[8], S: f32) -> D: f32[8], E: f32
  if S > 0.0:
    for i in 8:
      if A[i] > 0.0:
        D[i] = A[i]
      if A[i] <= 0.0:
        D[i] = 0.0
      E += A[i]
  if S <= 0.0:
    E = 1.0
    for i in 8:
      D[i] = 1.0
"""
    b = build(parse(text))
    a = rnd((8,))
    d, e = run(b, [a, np.array(1.0, "float32")])
    close(d, np.maximum(a, 0))
    close(e, a.sum())
    d, e = run(b, [a, np.array(-1.0, "float32")])
    assert (d == 1).all() and e == 1
