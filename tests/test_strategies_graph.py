"""The graph / expression family: exact rewrites, refusals with reasons, and numeric equivalence
of every candidate on the bundled examples (NumPy interpreter; TVM for a sample)."""

from __future__ import annotations


import numpy as np
import pytest

import steptp.strategies as S
from steptp import examples
from steptp.leir import format_program, parse
from steptp.leir.ast import walk
from steptp.strategies.base import IllegalRewrite, Site  # noqa: F401
from strategy_helpers import P, T, applied, inputs_for, refusal, same_outputs  # noqa: F401

GRAPH = ["operator_fusion", "operator_fission", "compute_inline", "expression_splitting",
         "common_subexpression_elimination", "dead_code_elimination", "expression_reorder",
         "tensor_concat_to_fuse_operators", "tensor_split_to_decouple_operators"]


LLR = parse(examples.text("linear_leaky_relu"))
MBG = parse(examples.text("matmul_bias_gelu"))
DUAL = parse(examples.text("dual_matmul"))


def test_vocabulary_and_metadata():
    for n in GRAPH:
        s = S.get(n)
        assert s.family == "graph" and s.targets == {"cpu", "gpu"}
    assert S.get("operator_fusion").inverse == "operator_fission"
    assert S.get("operator_fission").inverse == "operator_fusion"
    assert S.get("tensor_concat_to_fuse_operators").inverse == "tensor_split_to_decouple_operators"
    assert S.get("tensor_split_to_decouple_operators").inverse == "tensor_concat_to_fuse_operators"
    assert S.get("expression_reorder").exactness == "reassociation"
    assert S.get("compute_inline").exactness == "exact"


def test_every_graph_strategy_applies_to_a_bundled_example():
    found = set()
    for name in examples.names():
        if name in ("conv2d_relu", "split_matmul"):
            continue
        found |= {c.strategy for c in S.candidates(parse(examples.text(name)), GRAPH)}
    assert found == set(GRAPH)


# ============================================================================ fusion / fission
def test_operator_fusion():
    got = applied(LLR, "operator_fusion", {"path": [1], "loops": ["i", "i"]}, {})
    assert got == T("""
        kernel linear_bias_leaky_relu(A: f32[8,16], B: f32[16,12], C: f32[12]) -> D: f32[8,12]
          T0: f32[8,12]
          T1: f32[8,12]
          T2: f32[8]
          T0[i,j] += A[i,k] * B[k,j]
          for i in 8, j in 12:
            T1[i,j] = T0[i,j] + C[j]
            T2[i] max= T1[i,j]
          D[i,j] = where(T1[i,j] > 0.0, T1[i,j], T1[i,j] * 0.01)
    """)


def test_operator_fusion_refusals():
    # the bias nest reads T0 while the matmul nest is still reducing it over k... no: k is inner;
    # fusing (i,j) is fine there. A reduction over the fused loop itself must be refused:
    p = P("""
        kernel rs(A: f32[8,8]) -> B: f32[8,8]
          T0: f32[8]
          for i in 8, j in 8:
            T0[i] += A[i,j]
          for i in 8, j in 8:
            B[i,j] = A[i,j] - T0[i]
    """)
    reason = refusal(p, "operator_fusion", {"path": [0], "loops": ["i", "i"]}, {})
    assert "before the reduction" in reason and "over j" in reason
    p2 = P("""
        kernel ind(A: f32[8]) -> B: f32[8], C: f32[8]
          for i in 8:
            B[i] = A[i]
          for i in 8:
            C[i] = A[i] * 2.0
    """)
    assert "not a producer-consumer" in refusal(p2, "operator_fusion", {"path": [0], "loops": ["i", "i"]}, {})
    p3 = P("""
        kernel rev(A: f32[8]) -> B: f32[8]
          T0: f32[8]
          for i in 8:
            T0[i] = A[i] * 2.0
          for i in 8:
            B[i] = T0[7-i]
    """)
    assert "read-after-write" in refusal(p3, "operator_fusion", {"path": [0], "loops": ["i", "i"]}, {})


def test_operator_fusion_under_a_parallel_loop_needs_each_iteration_to_read_its_own():
    """Two parallel nests fuse into one parallel region (one fork instead of two) only when each
    consumer iteration reads what the same producer iteration writes: fused, another
    iteration's write is unordered (the verifier's race check rejected such a candidate, but
    the catalog offered it)."""
    from steptp.measure.verify import verify

    shifted = P("""
        kernel f32 sh(A[64]) -> C[63]
         B[64]
         B[0] = 0.0
         for i in 63 parallel:
          B[i+1] = A[i+1] * 2.0
         for i in 63 parallel:
          C[i] = B[i] + 1.0
    """)
    site = {"path": [1], "loops": ["i", "i"]}
    reason = refusal(shifted, "operator_fusion", site, {})
    assert "parallel loop i would race" in reason and "`C[i] = B[i] + 1.0`" in reason
    # GPU-bound loops run their iterations at once too
    for kind in ("blockIdx.x", "threadIdx.x"):
        bound = parse(format_program(shifted).replace(" parallel", f" {kind}"))
        assert f"{kind} loop i would race" in refusal(bound, "operator_fusion", site, {})
    # serially the same fusion is legal: the producer's iteration i-1 runs before i
    serial = parse(format_program(shifted).replace(" parallel", ""))
    assert S.check(serial, "operator_fusion", site, {}).ok
    own = P("""
        kernel f32 own(A[64,16]) -> C[64,16]
         B[64,16]
         for i in 64 parallel, j in 16:
          B[i,j] = A[i,j] * 2.0
         for i in 64 parallel, j in 16:
          C[i,j] = B[i,j] + 1.0
    """)
    fused = S.apply(own, "operator_fusion", {"path": [0], "loops": ["i", "i"]}, {})
    assert format_program(fused).count(" parallel") == 1
    r = verify(fused, own, exactness="exact", seeds=(0,))
    assert r.passed, r.reason


def test_operator_fission():
    got = applied(MBG, "operator_fission", {"path": [0], "loops": ["i", "j"]}, {"at": 1})
    assert got == T("""
        kernel fused_matmul_add_gelu(A: f32[16,64], B: f32[64,32], C: f32[32]) -> D: f32[16,32]
          T0: f32[16,32]
          T0[i,j] += A[i,k] * B[k,j]
          D[i,j] = (T0[i,j] + C[j]) * (0.5 + erf((T0[i,j] + C[j]) * 0.7071067811865476) * 0.5)
    """)
    # fission then fusion gives the original back
    back = S.apply(S.apply(MBG, "operator_fission", {"path": [0], "loops": ["i", "j"]}, {"at": 1}),
                   "operator_fusion", {"path": [0], "loops": ["i", "i"]}, {})
    assert format_program(back) == format_program(MBG)


def test_operator_fission_refusals():
    p = P("""
        kernel sh(A: f32[9]) -> B: f32[9], C: f32[9]
          for i in 8:
            C[i] = B[i] * 2.0
            B[i+1] = A[i]
    """)
    reason = refusal(p, "operator_fission", {"path": [0], "loops": ["i"]}, {"at": 1})
    assert "write-after-read" in reason or "read-after-write" in reason
    assert "at must be" in refusal(MBG, "operator_fission", {"path": [0], "loops": ["i", "j"]}, {"at": 2})


# ============================================================================ compute_inline
def test_compute_inline():
    site = {"path": [1, 0, 0], "loops": ["i", "j"], "tensor": "T1"}
    got = applied(LLR, "compute_inline", site, {})
    assert got == T("""
        kernel linear_bias_leaky_relu(A: f32[8,16], B: f32[16,12], C: f32[12]) -> D: f32[8,12]
          T0: f32[8,12]
          T2: f32[8]
          T0[i,j] += A[i,k] * B[k,j]
          T2[i] max= T0[i,j] + C[j]
          D[i,j] = where(T0[i,j] + C[j] > 0.0, T0[i,j] + C[j], (T0[i,j] + C[j]) * 0.01)
    """)


def test_compute_inline_refusals():
    site = {"path": [0, 0, 0, 0], "loops": ["i", "j", "k"], "tensor": "T0"}
    assert "is a reduction" in refusal(LLR, "compute_inline", site, {})
    # an input of the producer changed before the consumer reads the inlined value
    p = P("""
        kernel ch(A: f32[8]) -> B: f32[8], C: f32[8]
          T0: f32[8]
          for i in 8:
            T0[i] = C[i] * 2.0
          for i in 8:
            C[i] = A[i]
          for i in 8:
            B[i] = T0[i]
    """)
    assert "written by" in refusal(p, "compute_inline", {"path": [0, 0], "loops": ["i"], "tensor": "T0"}, {})
    out = P("""
        kernel o(A: f32[8]) -> B: f32[8], C: f32[8]
          for i in 8:
            B[i] = A[i] * 2.0
          for i in 8:
            C[i] = B[i]
    """)
    assert "not an intermediate" in refusal(out, "compute_inline", {"path": [0, 0], "loops": ["i"]}, {})


# ============================================================================ splitting / CSE
def test_expression_splitting():
    got = applied(MBG, "expression_splitting", {"path": [0, 0, 1], "loops": ["i", "j"]},
                  {"expr": "T0[i,j] + C[j]"})
    assert got == T("""
        kernel fused_matmul_add_gelu(A: f32[16,64], B: f32[64,32], C: f32[32]) -> D: f32[16,32]
          T0: f32[16,32]
          T1: f32[16,32]
          for i in 16, j in 32:
            T0[i,j] += A[i,k] * B[k,j]
            T1[i,j] = T0[i,j] + C[j]
            D[i,j] = T1[i,j] * (0.5 + erf(T1[i,j] * 0.7071067811865476) * 0.5)
    """)
    assert "not a subexpression" in refusal(MBG, "expression_splitting", {"path": [0, 0, 1], "loops": ["i", "j"]},
                                            {"expr": "A[i,k] + 1.0"})


def test_common_subexpression_elimination():
    site = {"path": [0, 0, 1], "loops": ["i", "j"]}
    got = applied(MBG, "common_subexpression_elimination", site, {"expr": "T0[i,j] + C[j]"})
    assert got == T("""
        kernel fused_matmul_add_gelu(A: f32[16,64], B: f32[64,32], C: f32[32]) -> D: f32[16,32]
          T0: f32[16,32]
          T1: f32[] local
          for i in 16, j in 32:
            T0[i,j] += A[i,k] * B[k,j]
            T1 = T0[i,j] + C[j]
            D[i,j] = T1 * (0.5 + erf(T1 * 0.7071067811865476) * 0.5)
    """)
    assert "occurs only once" in refusal(MBG, "common_subexpression_elimination", site,
                                         {"expr": "(T0[i,j] + C[j]) * 0.7071067811865476"})
    par = S.apply(MBG, "loop_parallelization", {"path": [0], "loops": ["i"]}, {})
    assert "parallel" in refusal(par, "common_subexpression_elimination", site, {"expr": "T0[i,j] + C[j]"})


# ============================================================================ dead code
def test_dead_code_elimination():
    got = applied(LLR, "dead_code_elimination", {"path": [2, 0, 0], "loops": ["i", "j"], "tensor": "T2"}, {})
    assert got == T("""
        kernel linear_bias_leaky_relu(A: f32[8,16], B: f32[16,12], C: f32[12]) -> D: f32[8,12]
          T0: f32[8,12]
          T1: f32[8,12]
          T0[i,j] += A[i,k] * B[k,j]
          T1[i,j] = T0[i,j] + C[j]
          D[i,j] = where(T1[i,j] > 0.0, T1[i,j], T1[i,j] * 0.01)
    """)


def test_dead_code_elimination_refusals():
    reason = refusal(LLR, "dead_code_elimination", {"path": [1, 0, 0], "loops": ["i", "j"], "tensor": "T1"}, {})
    assert "T1 is read by" in reason and "not dead" in reason
    assert "output" in refusal(LLR, "dead_code_elimination", {"path": [3], "loops": [], "tensor": "D"}, {})


# ============================================================================ expression_reorder
def test_expression_reorder():
    site = {"path": [0, 0, 1], "loops": ["i", "j"]}
    got = applied(MBG, "expression_reorder", site, {"expr": "T0[i,j] + C[j]", "rewrite": "swap"})
    assert got == T("""
        kernel fused_matmul_add_gelu(A: f32[16,64], B: f32[64,32], C: f32[32]) -> D: f32[16,32]
          T0: f32[16,32]
          for i in 16, j in 32:
            T0[i,j] += A[i,k] * B[k,j]
            D[i,j] = (C[j] + T0[i,j]) * (0.5 + erf((T0[i,j] + C[j]) * 0.7071067811865476) * 0.5)
    """)
    s = S.get("expression_reorder")
    assert s.exactness_for(MBG, Site.from_json(site), {"expr": "T0[i,j] + C[j]", "rewrite": "swap"}) == "exact"
    p = P("""
        kernel r(A: f32[8], B: f32[8], C: f32[8]) -> D: f32[8]
          for i in 8:
            D[i] = A[i] * B[i] * C[i]
    """)
    rs = {"path": [0, 0], "loops": ["i"]}
    params = {"expr": "A[i] * B[i] * C[i]", "rewrite": "rotate_right"}
    assert applied(p, "expression_reorder", rs, params) == T("""
        kernel r(A: f32[8], B: f32[8], C: f32[8]) -> D: f32[8]
          for i in 8:
            D[i] = A[i] * (B[i] * C[i])
    """)
    assert s.exactness_for(p, Site.from_json(rs), params) == "reassociation"
    assert "not another" in refusal(p, "expression_reorder", rs,
                                    {"expr": "A[i] * B[i] * C[i]", "rewrite": "rotate_left"})


# ============================================================================ concat / split
def test_tensor_concat_to_fuse_operators():
    got = applied(DUAL, "tensor_concat_to_fuse_operators", {"path": [0], "loops": ["i", "j", "k"]},
                  {"loop": "j"})
    assert got == T("""
        kernel dual_matmul(A: f32[8,16], B: f32[16,8], C: f32[16,8]) -> D: f32[8,8], E: f32[8,8]
          T0: f32[8,16]
          T1: f32[16,16]
          for c0 in 16, c1 in 8:
            T1[c0,c1] = B[c0,c1]
          for c0 in 16, c1 in 8:
            T1[c0,c1+8] = C[c0,c1]
          for i in 8, j in 16, k in 16:
            T0[i,j] += A[i,k] * T1[k,j]
          for c0 in 8, c1 in 8:
            D[c0,c1] = T0[c0,c1]
          for c0 in 8, c1 in 8:
            E[c0,c1] = T0[c0,c1+8]
    """)
    reason = refusal(DUAL, "tensor_concat_to_fuse_operators", {"path": [0], "loops": ["i", "j", "k"]},
                     {"loop": "i"})
    assert "choices: j" in reason
    p = P("""
        kernel dep(A: f32[8]) -> B: f32[8], C: f32[8]
          for i in 8:
            B[i] = A[i] * 2.0
          for i in 8:
            C[i] = B[i] * 2.0
    """)
    assert "not independent" in refusal(p, "tensor_concat_to_fuse_operators",
                                               {"path": [0], "loops": ["i"]}, {"loop": "i"})


def test_tensor_split_to_decouple_operators():
    got = applied(DUAL, "tensor_split_to_decouple_operators", {"path": [0], "loops": ["i", "j", "k"]},
                  {"loop": "j"})
    assert got == T("""
        kernel dual_matmul(A: f32[8,16], B: f32[16,8], C: f32[16,8]) -> D: f32[8,8], E: f32[8,8]
          for i in 8, j in 4, k in 16:
            D[i,j] += A[i,k] * B[k,j]
          for i in 8, j in 4, k in 16:
            D[i,j+4] += A[i,k] * B[k,j+4]
          for i in 8, j in 8, k in 16:
            E[i,j] += A[i,k] * C[k,j]
    """)
    reason = refusal(DUAL, "tensor_split_to_decouple_operators", {"path": [0], "loops": ["i", "j", "k"]},
                     {"loop": "k"})
    assert "reduction axis" in reason
    p = P("""
        kernel wave(A: f32[9,9]) -> B: f32[9,9]
          for i in 8, j in 8:
            B[i+1,j] = B[i,j+1] + A[i,j]
    """)
    assert "illegal" in refusal(p, "tensor_split_to_decouple_operators", {"path": [0], "loops": ["i", "j"]},
                                {"loop": "j"})


def test_tensor_split_gives_each_half_its_own_register_tile_so_both_can_run_parallel():
    """A local buffer each iteration of the split loop overwrites first (a staged register
    tile's accumulators) is copied for the second half: shared, it tied the halves together and
    neither could be parallelized (a held-out grouped conv's search split its conv nest so and
    ended with both halves serial)."""
    staged = parse("""kernel f32 c1(A[4,16,34], B[32,16,3]) -> F[4,32,32]
 T0[4,8] local
 for i in 4, j in 8, k in 4:
  T0[c0,c1] = 0.0
  for l in 16, m in 3, n in 4, o in 8 vectorized:
   T0[n,o] = T0[n,o] + A[i,l,k*8+o+m] * B[j*4+n,l,m]
  F[i,j*4+c0,k*8+c1] = T0[c0,c1]
""")
    site = {"path": [0], "loops": ["i", "j", "k"]}
    got = S.apply(staged, "tensor_split_to_decouple_operators", site, {"loop": "i"})
    text = format_program(got).splitlines()
    assert [t.name for t in got.intermediates if t.scope == "local"] == ["T0", "T1"]
    first, second = got.body
    names = lambda s: {n.tensor for n in walk(s) if hasattr(n, "tensor")}  # noqa: E731
    assert "T0" in names(first) and "T1" not in names(first)
    assert "T1" in names(second) and "T0" not in names(second)
    same_outputs(got, staged, "exact", inputs_for(staged))
    for half in (0, 1):
        assert S.check(got, "loop_parallelization", {"path": [half], "loops": ["i"]}, {}).ok, text
    # the buffer stays shared (no copy) when an iteration reads what the one before left there
    carried = parse("""kernel f32 cs(A[8,8]) -> B[8,8]
 T0[1] local
 T0[0] = 0.0
 for i in 8, j in 8:
  T0[0] = T0[0] + A[i,j]
  B[i,j] = T0[0]
""")
    kept = S.apply(carried, "tensor_split_to_decouple_operators",
                   {"path": [1], "loops": ["i", "j"]}, {"loop": "i"})
    assert [t.name for t in kept.intermediates] == ["T0"]
    same_outputs(kept, carried, "exact", inputs_for(carried))


# ============================================================================ numerics
FAST = ["matmul_bias_gelu", "softmax", "layer_norm", "cumsum", "linear_leaky_relu", "dual_matmul"]


@pytest.mark.parametrize("name", FAST)
def test_candidates_compute_the_same_outputs(name):
    p = parse(examples.text(name))
    inputs = inputs_for(p)
    for c in S.candidates(p, GRAPH, max_per_site=2):
        same_outputs(c.program, p, c.exactness, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", examples.names())
def test_every_candidate_computes_the_same_outputs(name):
    p = parse(examples.text(name))
    inputs = inputs_for(p)
    for target in ("cpu", "gpu"):
        for c in S.candidates(p, GRAPH, target=target):
            same_outputs(c.program, p, c.exactness, inputs)


def test_one_candidate_per_strategy_verifies_with_tvm():
    from steptp.measure.verify import verify

    done = set()
    for name in FAST:
        p = parse(examples.text(name))
        for c in S.candidates(p, [n for n in GRAPH if n not in done], max_per_site=1):
            if c.strategy in done:
                continue
            r = verify(c.program, p, exactness=c.exactness, seeds=(0,))
            assert r.passed, (name, c.strategy, c.to_json(), r.reason)
            done.add(c.strategy)
    assert done == set(GRAPH)


@pytest.mark.slow
@pytest.mark.parametrize("name", examples.names())
def test_every_candidate_verifies_with_tvm(name):
    from steptp.measure.verify import verify

    p = parse(examples.text(name))
    for c in S.candidates(p, GRAPH):
        r = verify(c.program, p, exactness=c.exactness, seeds=(0,))
        assert r.passed, (c.strategy, c.to_json(), r.reason)
