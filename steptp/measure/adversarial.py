"""Deliberately wrong candidates: the verifier must reject every one, with a reason that names
the output and the first wrong element (or the race, the input written, the buffer read).

Each case is built to look right: it builds, has the reference's signature, and is close to
correct on the easy inputs. They follow the public record of exploits of LLM-kernel benchmarks:
outputs never or partly written, off-by-one bounds, dropped reduction terms, wrong constants,
answers right only on standard-normal inputs, races in parallel loops (small, large, and in
TVMScript that only a run with threads exposes), reordered scans, inputs
ignored or aliased, constant outputs, tolerance gaming with lower precision or approximations,
kernels that write their inputs or skip work when their output buffer already looks done.

``CASES`` is the suite; ``run_suite()`` verifies every case and returns one row per case
(``benchmarks/adversarial.py`` prints them; ``tests/test_verify_adversarial.py`` requires all
rejected). Candidates are LEIR text or TVMScript (a PrimFunc can do what LEIR forbids: write an
input, leave an output unwritten).
"""

from __future__ import annotations

from dataclasses import dataclass

MATMUL = """kernel f32 matmul(A[16,32], B[32,8]) -> D[16,8]
  for i in 16, j in 8, k in 32:
    D[i,j] += A[i,k] * B[k,j]
"""
SQMM = """kernel f32 sqmm(A[16,16], B[16,16]) -> D[16,16]
  for i in 16, j in 16, k in 16:
    D[i,j] += A[i,k] * B[k,j]
"""
SOFTMAX = """kernel f32 softmax(A[4,128]) -> D[4,128]
  M[4]
  S[4]
  for i in 4:
    for j in 128:
      M[i] max= A[i,j]
    for j in 128:
      S[i] += exp(A[i,j] - M[i])
    for j in 128:
      D[i,j] = exp(A[i,j] - M[i]) / S[i]
"""
# A long row: its elements are near 6e-5, below the f32 atol of range-scaled rules.
SOFTMAX_LONG = SOFTMAX.replace("128", "16384").replace("[4,", "[2,").replace(
    "M[4]", "M[2]").replace("S[4]", "S[2]").replace("for i in 4", "for i in 2")
ROWMAX = """kernel f32 rowmax(A[8,64]) -> D[8]
  for i in 8, j in 64:
    D[i] max= A[i,j]
"""
LAYERNORM = """kernel f32 layernorm(A[4,256]) -> D[4,256]
  MU[4]
  VAR[4]
  for i in 4:
    for j in 256:
      MU[i] += A[i,j] * 0.00390625
    for j in 256:
      VAR[i] += (A[i,j] - MU[i]) * (A[i,j] - MU[i]) * 0.00390625
    for j in 256:
      D[i,j] = (A[i,j] - MU[i]) * rsqrt(VAR[i] + 1e-05)
"""
CUMSUM = """kernel f32 cumsum(A[4,32]) -> C[4,32]
  for i in 4:
    C[i,0] = A[i,0]
    for j in 31:
      C[i,j+1] = C[i,j] + A[i,j+1]
"""
ADD = """kernel f32 add(A[64], B[64]) -> D[64]
  for i in 64:
    D[i] = A[i] + B[i]
"""
RELU_SHIFT = """kernel f32 relu_shift(A[256]) -> D[256]
  for i in 256:
    D[i] = max(A[i] - 10.0, 0.0)
"""
ABSMUL = """kernel f32 absmul(A[64], B[64]) -> D[64]
  for i in 64:
    D[i] = A[i] * B[i]
"""
ROWSUM = """kernel f32 rowsum(A[8,64]) -> D[8]
  for i in 8, j in 64:
    D[i] += A[i,j]
"""
CONV1D = """kernel f32 conv1d(X[64], W[5]) -> Y[60]
  for i in 60, r in 5:
    Y[i] += X[i+r] * W[r]
"""
MASKED = """kernel masked(A: f32[64], M: bool[64]) -> D: f32[64]
  for i in 64:
    D[i] = where(M[i], A[i], 0.0)
"""
INTSCALE = """kernel scale(A: i32[64]) -> D: i32[64]
  for i in 64:
    D[i] = A[i] * 2
"""
LOGEXP = """kernel f32 logexp(A[64]) -> D[64]
  for i in 64:
    D[i] = log(exp(A[i]) + 1.0)
"""

# Races above the size the race check used to enumerate (4M iteration points): a row buffer,
# declared once for the kernel, written and read by every row of a parallel loop.
ROWBUF_REF = """kernel f32 k(A[{r},{c}]) -> B[{r},{c}]
  for i in {r}, j in {c}:
    B[i,j] = A[i,j] * 2.0 + 1.0
"""
ROWBUF = """kernel f32 k(A[{r},{c}]) -> B[{r},{c}]
  T[{c}]
{init}  for i in {r} parallel:
    for j in {c}:
      T[j] = A[i,j] * 2.0
    for j in {c}:
      B[i,j] = T[j] + 1.0
"""
ROWSUM_BIG = """kernel f32 rowsum(A[2048,2048]) -> D[2048]
  for i in 2048, j in 2048:
    D[i] += A[i,j]
"""
SCAN_BIG = """kernel f32 scan(A[4194304]) -> B[4194304]
  B[0] = A[0]
  for i in 4194303:
    B[i + 1] = B[i] + A[i + 1]
"""
# The parallel loop's iteration reads what the previous one wrote: right on one thread; TVMScript,
# so only running it with threads can tell.
SCAN_BIG_PRIMFUNC = '''# from tvm.script import tirx as T
@T.prim_func(s_tir=True)
def main(A: T.Buffer((4194304,), "float32"), B: T.Buffer((4194304,), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i in T.parallel(4194304):
        with T.sblock("B"):
            vi = T.axis.spatial(4194304, i)
            T.reads(B[T.max(vi - 1, 0)], A[vi])
            T.writes(B[vi])
            B[vi] = T.if_then_else(vi > 0, B[T.max(vi - 1, 0)], T.float32(0.0)) + A[vi]
'''

_PRIMFUNC_HEAD = '''# from tvm.script import tirx as T
@T.prim_func(s_tir=True)
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), D: T.Buffer((64,), "float32")):
    T.func_attr({"tirx.noalias": True})
'''


@dataclass(frozen=True)
class Case:
    name: str
    what: str            # the exploit, in words
    reference: str
    candidate: str
    exactness: str = "exact"
    threads: bool = False    # verified as the Measurer does: one thread, in a pool of four


CASES: tuple[Case, ...] = (
    Case("unwritten_output", "a PrimFunc that never writes its output (reads stale memory)", ADD,
         _PRIMFUNC_HEAD + "    for i in range(64):\n        T.evaluate(0)\n"),
    Case("partial_write_primfunc", "a PrimFunc that writes half of its output", ADD,
         _PRIMFUNC_HEAD + "    for i in range(32):\n        with T.sblock(\"d\"):\n"
         "            vi = T.axis.spatial(64, i)\n            D[vi] = A[vi] + B[vi]\n"),
    Case("off_by_one_rows", "the last row is never computed (loop bound 15 of 16)", MATMUL,
         MATMUL.replace("for i in 16, j in 8, k in 32:", "for i in 15, j in 8, k in 32:")),
    Case("partial_write_columns", "only the first half of the columns is written", MATMUL,
         MATMUL.replace("for i in 16, j in 8, k in 32:", "for i in 16, j in 4, k in 32:")),
    Case("split_tail_dropped", "a split by 3 of 16 rows without its tail", MATMUL,
         MATMUL.replace("for i in 16, j in 8, k in 32:\n    D[i,j]",
                        "for io in 5, ii in 3, j in 8, k in 32:\n    D[io*3+ii,j]").replace(
             "A[i,k]", "A[io*3+ii,k]")),
    Case("dropped_reduction_term", "the reduction stops one term early", MATMUL,
         MATMUL.replace("k in 32:", "k in 31:")),
    Case("shifted_reduction", "the reduction skips its first term (k+1)", MATMUL,
         MATMUL.replace("k in 32:", "k in 31:").replace("A[i,k] * B[k,j]",
                                                         "A[i,k+1] * B[k+1,j]")),
    Case("wrong_reduction_axis", "sums A's row against B's row (B[j,k]-like transposed read)",
         SQMM, SQMM.replace("B[k,j]", "B[j,k]")),
    Case("aliased_input", "reads A where it should read B", SQMM,
         SQMM.replace("B[k,j]", "A[k,j]")),
    Case("ignores_input", "adds A to itself, ignoring B", ADD, ADD.replace("A[i] + B[i]",
                                                                            "A[i] + A[i]")),
    Case("constant_output", "a constant that matches a degenerate reference on normal inputs",
         RELU_SHIFT, RELU_SHIFT.replace("max(A[i] - 10.0, 0.0)", "0.0")),
    Case("uniform_softmax", "a constant 1/N softmax (right when the row is flat)", SOFTMAX,
         SOFTMAX.replace("exp(A[i,j] - M[i]) / S[i]", "0.0078125 + S[i] * 0.0"),
         "algebraic"),
    Case("softmax_only_max", "right on each row's maximum, 0 elsewhere", SOFTMAX,
         SOFTMAX.replace("D[i,j] = exp(A[i,j] - M[i]) / S[i]",
                         "D[i,j] = where(A[i,j] == M[i], 1.0 / S[i], 0.0)"), "algebraic"),
    Case("softmax_small_flushed", "elements below 1e-4 flushed to zero (16,384 columns)",
         SOFTMAX_LONG, SOFTMAX_LONG.replace(
             "D[i,j] = exp(A[i,j] - M[i]) / S[i]",
             "D[i,j] = where(exp(A[i,j] - M[i]) / S[i] > 0.0001, exp(A[i,j] - M[i]) / S[i], 0.0)"),
         "reassociation"),
    Case("softmax_wrong_normalizer", "divides by the row length too (a wrong normalization)",
         SOFTMAX, SOFTMAX.replace("/ S[i]", "/ (S[i] * 1.001)"), "algebraic"),
    Case("layernorm_unbiased", "variance divided by N-1 instead of N", LAYERNORM,
         LAYERNORM.replace("* (A[i,j] - MU[i]) * 0.00390625",
                           "* (A[i,j] - MU[i]) * 0.00392156862745098"), "reassociation"),
    Case("layernorm_no_epsilon", "drops the epsilon (visible on small-magnitude inputs)",
         LAYERNORM, LAYERNORM.replace("rsqrt(VAR[i] + 1e-05)", "rsqrt(VAR[i])"), "algebraic"),
    Case("right_only_on_normal", "correct while |x| < 6, zero beyond (standard normal never gets "
         "there)", ADD, ADD.replace("A[i] + B[i]", "where(abs(A[i]) < 6.0, A[i] + B[i], 0.0)")),
    Case("wrong_for_negatives", "sqrt(A*A)*B: an 'algebraic' rewrite right only for A >= 0",
         ABSMUL, ABSMUL.replace("A[i] * B[i]", "sqrt(A[i] * A[i]) * B[i]"), "algebraic"),
    Case("max_from_zero", "a running max started at 0 instead of -inf (wrong on negative rows)",
         ROWMAX, ROWMAX.replace("for i in 8, j in 64:\n    D[i] max= A[i,j]",
                                "for i in 8:\n    D[i] = 0.0\n    for j in 64:\n"
                                "      D[i] = max(D[i], A[i,j])")),
    Case("parallel_reduction_race", "the reduction axis marked parallel", ROWSUM,
         ROWSUM.replace("for i in 8, j in 64:", "for i in 8:\n    for j in 64 parallel:")
         .replace("    D[i] += A[i,j]", "      D[i] += A[i,j]"), "reassociation"),
    Case("parallel_scan_race", "a scan's carried loop marked parallel", CUMSUM,
         CUMSUM.replace("for j in 31:", "for j in 31 parallel:")),
    Case("scan_reversed", "the scan runs from the right (a suffix sum)", CUMSUM,
         """kernel f32 cumsum(A[4,32]) -> C[4,32]
  for i in 4:
    C[i,31] = A[i,31]
    for j in 31:
      C[i,30-j] = C[i,31-j] + A[i,30-j]
"""),
    Case("scan_dropped_carry", "each element adds only its left neighbour's input", CUMSUM,
         CUMSUM.replace("C[i,j+1] = C[i,j] + A[i,j+1]", "C[i,j+1] = A[i,j] + A[i,j+1]")),
    Case("conv_off_by_one", "the filter window shifted by one", CONV1D,
         CONV1D.replace("for i in 60, r in 5:\n    Y[i] += X[i+r] * W[r]",
                        "for i in 60, r in 4:\n    Y[i] += X[i+r+1] * W[r+1]")),
    Case("mask_ignored", "the boolean mask is ignored", MASKED,
         MASKED.replace("where(M[i], A[i], 0.0)", "A[i]")),
    Case("integer_off_on_one_value", "an integer kernel wrong for one input value", INTSCALE,
         INTSCALE.replace("A[i] * 2", "where(A[i] == 3, 0, A[i] * 2)")),
    Case("half_precision_gaming", "computes in f16 and casts back: inside an 'algebraic' "
         "tolerance on small values, not beyond", MATMUL,
         """kernel f32 matmul(A[16,32], B[32,8]) -> D[16,8]
  H: f16[16,8]
  for i in 16, j in 8, k in 32:
    H[i,j] += f16(A[i,k]) * f16(B[k,j])
  for i in 16, j in 8:
    D[i,j] = f32(H[i,j])
""", "algebraic"),
    Case("fast_exp_approximation", "exp replaced by its 2nd-order Taylor polynomial", LOGEXP,
         LOGEXP.replace("exp(A[i])", "(1.0 + A[i] + A[i] * A[i] * 0.5)"), "algebraic"),
    Case("cancellation_gaming", "adds and subtracts 1e10 to inflate its own error bound, then is "
         "off by 1%", ABSMUL, ABSMUL.replace("A[i] * B[i]", "((A[i] * B[i] + 10000000000.0) - "
                                               "10000000000.0) + A[i] * B[i] * 0.01"),
         "algebraic"),
    Case("tiny_bias_gaming", "a constant offset just above the old f32 atol of 1e-6", ADD,
         ADD.replace("A[i] + B[i]", "A[i] + B[i] + 5e-06")),
    Case("reads_own_output", "skips work when the output buffer already holds a number "
         "(a cached result on repeat calls)", ADD,
         ADD.replace("D[i] = A[i] + B[i]", "D[i] = where(isnan(D[i]), A[i] + B[i], D[i])")),
    Case("reads_own_output_sniffing", "skips work unless its buffer holds NaN or the verifier's "
         "second fill value", ADD,
         ADD.replace("D[i] = A[i] + B[i]", "D[i] = where(isnan(D[i]) or D[i] == 1234.5, "
                                           "A[i] + B[i], D[i])")),
    Case("writes_input", "a PrimFunc that zeroes input B after using it", ADD,
         _PRIMFUNC_HEAD + "    for i in range(64):\n        with T.sblock(\"d\"):\n"
         "            vi = T.axis.spatial(64, i)\n            D[vi] = A[vi] + B[vi]\n"
         "            B[vi] = T.float32(0)\n"),
    Case("transposed_output", "writes D[j,i] for a square output", SQMM,
         SQMM.replace("D[i,j] += A[i,k] * B[k,j]", "D[j,i] += A[i,k] * B[k,j]")),
    Case("nan_hidden", "returns NaN where the reference is finite (NaN compares false)", ADD,
         ADD.replace("A[i] + B[i]", "where(A[i] > 2.5, sqrt(-1.0 - abs(A[i])), A[i] + B[i])")),
    Case("large_row_buffer_race", "a row buffer shared by the rows of a parallel loop, "
         "1024x4096 (8M points: passed as exact before)", ROWBUF_REF.format(r=1024, c=4096),
         ROWBUF.format(r=1024, c=4096, init="")),
    Case("large_row_buffer_race_2048", "the same at 2048x2048, the buffer also zeroed before the "
         "loop (TVM allocates it once: wrong elements with 2 threads)",
         ROWBUF_REF.format(r=2048, c=2048),
         ROWBUF.format(r=2048, c=2048, init="  for j in 2048:\n    T[j] = 0.0\n")),
    Case("large_shared_accumulator_race", "each row of a parallel loop sums into one shared "
         "scalar, 2048x2048", ROWSUM_BIG, """kernel f32 rowsum(A[2048,2048]) -> D[2048]
  S[1]
  for i in 2048 parallel:
    S[0] = 0.0
    for j in 2048:
      S[0] += A[i,j]
    D[i] = S[0]
""", "reassociation"),
    Case("primfunc_parallel_scan_race", "a TVMScript scan whose carried loop is parallel "
         "(4M elements; no LEIR for the static check)", SCAN_BIG, SCAN_BIG_PRIMFUNC,
         threads=True),
)


@dataclass(frozen=True)
class Row:
    name: str
    what: str
    rejected: bool
    reason: str


def run_suite(cases=CASES, target=None) -> list[Row]:
    """Verify every case against its reference; one row per case. Cases marked ``threads``
    run in a worker whose TVM thread pool has four threads, verified on one as the Measurer
    does (this process's pool may have one thread, which no run can grow)."""
    from .programs import load_kernel
    from .verify import verify
    from .worker import WorkerPool

    rows = []
    pool = None
    try:
        for c in cases:
            try:
                if c.threads:
                    if pool is None:
                        pool = WorkerPool(1, num_threads=4, timeout_s=600)
                    r = pool.run("build_verify", {
                        "after": c.candidate, "before": c.reference, "exactness": c.exactness,
                        "verify_threads": 1,
                        "target": target.to_dict() if target is not None else None})
                    if not r.ok:
                        raise RuntimeError(f"worker {r.status}: {r.reason}")
                    res = r.value["result"]
                    rows.append(Row(c.name, c.what, not res["passed"], res["reason"] or ""))
                    continue
                res = verify(load_kernel(c.candidate), load_kernel(c.reference), c.exactness,
                             target)
                rows.append(Row(c.name, c.what, not res.passed, res.reason or ""))
            except Exception as e:  # noqa: BLE001 - a case that breaks the verifier is a finding
                rows.append(Row(c.name, c.what, False,
                                f"verifier raised {type(e).__name__}: {e}"))
    finally:
        if pool is not None:
            pool.close()
    return rows
