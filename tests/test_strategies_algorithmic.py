"""The algorithmic family: online softmax, flash attention without tiling, prefix max/sum,
splits and approximate-then-correct; exact expected rewrites, refusals with reasons, numerics."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import steptp.strategies as S
from steptp import examples
from steptp.leir import format_program, parse
from steptp.leir.check import check
from steptp.strategies.base import IllegalRewrite, Site
from strategy_helpers import inputs_for, same_outputs  # noqa: E402

ALGORITHMIC = ["normal_loop_max_to_prefix_max", "exponential_split", "multiplicative_split",
               "additive_split", "normal_loop_summation_on_exp_to_prefix_summation_on_exp",
               "online_softmax", "flashattention_wo_tiling", "partially_equivalent_then_correct"]


def P(text: str):
    return parse(textwrap.dedent(text).strip() + "\n")


def T(text: str) -> str:
    return format_program(P(text))


def EX(name: str):
    return parse(examples.text(name))


def applied(program, name, site, params=None):
    new = S.apply(program, name, site, params or {})
    check(new)
    return format_program(new)


def refusal(program, name, site, params=None) -> str:
    params = params or {}
    v = S.check(program, name, site, params)
    assert not v.ok, f"{name} at {site} with {params} should be refused"
    with pytest.raises(IllegalRewrite):
        S.get(name).apply(program, Site.from_json(site), params)
    return v.reason


def test_vocabulary_and_metadata():
    for n in ALGORITHMIC:
        s = S.get(n)
        assert s.family == "algorithmic" and s.description and s.targets == {"cpu", "gpu"}
    assert S.get("normal_loop_max_to_prefix_max").exactness == "exact"
    assert S.get("additive_split").exactness == "reassociation"
    for n in ("online_softmax", "flashattention_wo_tiling", "exponential_split",
              "multiplicative_split", "partially_equivalent_then_correct",
              "normal_loop_summation_on_exp_to_prefix_summation_on_exp"):
        assert S.get(n).exactness == "algebraic"


# ============================================================================ softmax family
def test_online_softmax():
    got = applied(EX("softmax"), "online_softmax", {"path": [0, 0], "loops": ["i", "j"]})
    assert got == T("""
        kernel f32 softmax(A[8,128]) -> D[8,128]
         T0[8]
         T1[8]
         T2[8]
         for i in 8:
          T0[i] = -inf
          T1[i] = 0.0
          for j in 128:
           T2[i] = max(T0[i], A[i,j])
           T1[i] = T1[i] * exp(T0[i] - T2[i]) + exp(A[i,j] - T2[i])
           T0[i] = T2[i]
          D[i,j] = exp(A[i,j] - T0[i]) / T1[i]
    """)


def test_online_softmax_refuses_what_is_not_a_softmax():
    assert "not a softmax" in refusal(EX("layer_norm"), "online_softmax",
                                      {"path": [0, 0], "loops": ["i", "j"]})
    # max and sum of exp, but the last pass is attention's P*V, not a normalization
    assert "normalization" in refusal(EX("attention"), "online_softmax",
                                      {"path": [0, 1], "loops": ["i", "j"]})
    p = P("""
        kernel f32 k(A[8,16]) -> D[8,16]
         T0[8]
         T1[8]
         for i in 8:
          T0[i] max= A[i,j]
          T1[i] += exp(A[i,j] - T0[i])
          D[i,j] = exp(A[i,j] - T0[i]) * T1[i]
    """)
    assert "not a softmax" in refusal(p, "online_softmax", {"path": [0, 0], "loops": ["i", "j"]})
    q = P("""
        kernel f32 k(A[8,16], B[8,16]) -> D[8,16]
         T0[8]
         T1[8]
         for i in 8:
          T0[i] max= A[i,j]
          T1[i] += exp(B[i,j] - T0[i])
          D[i,j] = exp(B[i,j] - T0[i]) / T1[i]
    """)
    assert "not the maximized value" in refusal(q, "online_softmax",
                                                {"path": [0, 0], "loops": ["i", "j"]})


def test_normal_loop_max_to_prefix_max():
    got = applied(EX("softmax"), "normal_loop_max_to_prefix_max",
                  {"path": [0, 0], "loops": ["i", "j"]})
    assert got == format_program(EX("softmax_prefix_max")).replace(
        "softmax_prefix_max", "softmax")
    cands = S.candidates(EX("softmax"), "normal_loop_max_to_prefix_max")
    assert [c.exactness for c in cands] == ["exact"]


def test_prefix_max_refusals():
    p = P("""
        kernel f32 k(A[8,16]) -> D[8]
         for i in 8:
          D[i] max= A[i,j]
    """)
    # an output is read after the kernel: that counts as feeding a later pass
    assert S.check(p, "normal_loop_max_to_prefix_max", {"path": [0, 0]}, {}).ok
    q = P("""
        kernel f32 k(A[8,16]) -> D[8]
         T0[8]
         for i in 8:
          T0[i] max= A[i,j]
          D[i] = A[i,0]
    """)
    assert "feeds no later pass" in refusal(q, "normal_loop_max_to_prefix_max", {"path": [0, 0]})
    assert "not a max= reduction" in refusal(EX("softmax"), "normal_loop_max_to_prefix_max",
                                             {"path": [0, 1]})


def test_summation_on_exp_to_prefix_summation():
    name = "normal_loop_summation_on_exp_to_prefix_summation_on_exp"
    got = applied(EX("softmax_prefix_max"), name, {"path": [0, 3], "loops": ["i", "j"]})
    assert got == T("""
        kernel f32 softmax_prefix_max(A[8,128]) -> D[8,128]
         T0[8]
         T1[8]
         T2[8,128]
         for i in 8:
          T2[i,0] = A[i,0]
          for j in 127:
           T2[i,j+1] = max(T2[i,j], A[i,j+1])
          T0[i] = T2[i,127]
          T1[i] = exp(A[i,0] - T2[i,0])
          for j in 127:
           T1[i] = T1[i] * exp(T2[i,j] - T2[i,j+1]) + exp(A[i,j+1] - T2[i,j+1])
          D[i,j] = exp(A[i,j] - T0[i]) / T1[i]
    """)


def test_summation_on_exp_refusals():
    name = "normal_loop_summation_on_exp_to_prefix_summation_on_exp"
    assert "apply normal_loop_max_to_prefix_max first" in refusal(
        EX("softmax"), name, {"path": [0, 1], "loops": ["i", "j"]})
    assert "does not hold a sum" in refusal(EX("softmax_prefix_max"), name, {"path": [0, 4]})


# ---------------------------------------------------------------- softmax as TVM Relax emits it
# One operator per statement, each in its own loop nest, the exponentials materialised in an
# intermediate (real `steptp extract` output for torch.softmax / log_softmax).
EXTRACTED_SOFTMAX = """
    kernel f32 softmax(A[4,64]) -> B[4,64]
     C[4]
     D[4,64]
     E[4]
     C[i] max= A[i,j]
     D[i,j] = exp(A[i,j] - C[i])
     E[i] += D[i,j]
     B[i,j] = D[i,j] / E[i]
"""
SUMMATION = "normal_loop_summation_on_exp_to_prefix_summation_on_exp"


def numerically_same(new, old, exactness="algebraic", tvm=True):
    """The rewrite computes the original's outputs: NumPy interpreter on two seeds, then TVM."""
    from steptp.measure.verify import verify

    for seed in (0, 1):
        same_outputs(new, old, exactness, inputs_for(old, seed))
    if tvm:
        r = verify(new, old, exactness=exactness, seeds=(0,))
        assert r.passed, r.reason


def test_online_softmax_on_the_extracted_form():
    p = P(EXTRACTED_SOFTMAX)
    site = {"path": [0, 0], "loops": ["i", "j"]}
    got = applied(p, "online_softmax", site)
    # the online pass takes the max and sum nests; D is computed after it, from the final max
    assert got == T("""
        kernel f32 softmax(A[4,64]) -> B[4,64]
         C[4]
         D[4,64]
         E[4]
         T0[4]
         for i in 4:
          C[i] = -inf
          E[i] = 0.0
          for j in 64:
           T0[i] = max(C[i], A[i,j])
           E[i] = E[i] * exp(C[i] - T0[i]) + exp(A[i,j] - T0[i])
           C[i] = T0[i]
         D[i,j] = exp(A[i,j] - C[i])
         B[i,j] = D[i,j] / E[i]
    """)
    (c,) = S.candidates(p, "online_softmax")
    assert c.site.to_json() == site and c.exactness == "algebraic"
    numerically_same(c.program, p)


def test_online_softmax_on_extracted_log_softmax_and_softmax_over_dim1():
    log = P("""
        kernel f32 log_softmax(A[8,10]) -> B[8,10]
         C[8]
         D[8]
         C[i] max= A[i,j]
         D[i] += exp(A[i,j] - C[i])
         B[i,j] = A[i,j] - C[i] - log(D[i])
    """)
    got = applied(log, "online_softmax", {"path": [0, 0]})
    assert got == T("""
        kernel f32 log_softmax(A[8,10]) -> B[8,10]
         C[8]
         D[8]
         T0[8]
         for i in 8:
          C[i] = -inf
          D[i] = 0.0
          for j in 10:
           T0[i] = max(C[i], A[i,j])
           D[i] = D[i] * exp(C[i] - T0[i]) + exp(A[i,j] - T0[i])
           C[i] = T0[i]
         B[i,j] = A[i,j] - C[i] - log(D[i])
    """)
    numerically_same(P(got), log, tvm=False)
    # torch.softmax(x, dim=1) on 4-D: each nest names its loops by depth, so the reduced axis is
    # `l` in the max and the sum but `j` in the definition of D and in the normalization
    dim1 = P("""
        kernel f32 softmax(A[1,8,4,4]) -> B[1,8,4,4]
         C[1,4,4]
         D[1,8,4,4]
         E[1,4,4]
         C[i,j,k] max= A[i,l,j,k]
         D[i,j,k,l] = exp(A[i,j,k,l] - C[i,k,l])
         E[i,j,k] += D[i,l,j,k]
         B[i,j,k,l] = D[i,j,k,l] / E[i,k,l]
    """)
    got = applied(dim1, "online_softmax", {"path": [0, 0, 0, 0]})
    assert got == T("""
        kernel f32 softmax(A[1,8,4,4]) -> B[1,8,4,4]
         C[1,4,4]
         D[1,8,4,4]
         E[1,4,4]
         T0[1,4,4]
         for i in 1, j in 4, k in 4:
          C[i,j,k] = -inf
          E[i,j,k] = 0.0
          for l in 8:
           T0[i,j,k] = max(C[i,j,k], A[i,l,j,k])
           E[i,j,k] = E[i,j,k] * exp(C[i,j,k] - T0[i,j,k]) + exp(A[i,l,j,k] - T0[i,j,k])
           C[i,j,k] = T0[i,j,k]
         D[i,j,k,l] = exp(A[i,j,k,l] - C[i,k,l])
         B[i,j,k,l] = D[i,j,k,l] / E[i,k,l]
    """)
    numerically_same(P(got), dim1, tvm=False)


def test_online_softmax_materialised_with_shared_row_loops():
    p = P("""
        kernel f32 k(A[4,64]) -> B[4,64]
         C[4]
         D[4,64]
         E[4]
         for i in 4:
          C[i] max= A[i,j]
          D[i,j] = exp(A[i,j] - C[i])
          E[i] += D[i,j]
          B[i,j] = D[i,j] / E[i]
    """)
    got = applied(p, "online_softmax", {"path": [0, 0]})
    assert got == T("""
        kernel f32 k(A[4,64]) -> B[4,64]
         C[4]
         D[4,64]
         E[4]
         T0[4]
         for i in 4:
          C[i] = -inf
          E[i] = 0.0
          for j in 64:
           T0[i] = max(C[i], A[i,j])
           E[i] = E[i] * exp(C[i] - T0[i]) + exp(A[i,j] - T0[i])
           C[i] = T0[i]
          D[i,j] = exp(A[i,j] - C[i])
          B[i,j] = D[i,j] / E[i]
    """)
    numerically_same(P(got), p, tvm=False)


def test_summation_on_exp_on_the_extracted_form():
    p = P(EXTRACTED_SOFTMAX)
    # the sum is over D, whose definition is exp(x - C): C must first become a prefix max
    assert "apply normal_loop_max_to_prefix_max first" in refusal(
        p, SUMMATION, {"path": [2, 0], "loops": ["i", "j"]})
    pm = S.apply(p, "normal_loop_max_to_prefix_max", {"path": [0, 0]}, {})
    assert format_program(pm) == T("""
        kernel f32 softmax(A[4,64]) -> B[4,64]
         C[4]
         D[4,64]
         E[4]
         T0[4,64]
         for i in 4:
          T0[i,0] = A[i,0]
          for j in 63:
           T0[i,j+1] = max(T0[i,j], A[i,j+1])
          C[i] = T0[i,63]
         D[i,j] = exp(A[i,j] - C[i])
         E[i] += D[i,j]
         B[i,j] = D[i,j] / E[i]
    """)
    site = {"path": [2, 0], "loops": ["i", "j"]}
    got = applied(pm, SUMMATION, site)
    # the recurrence computes exp(x - prefix max) itself; D stays for the normalization
    assert got == T("""
        kernel f32 softmax(A[4,64]) -> B[4,64]
         C[4]
         D[4,64]
         E[4]
         T0[4,64]
         for i in 4:
          T0[i,0] = A[i,0]
          for j in 63:
           T0[i,j+1] = max(T0[i,j], A[i,j+1])
          C[i] = T0[i,63]
         D[i,j] = exp(A[i,j] - C[i])
         for i in 4:
          E[i] = exp(A[i,0] - T0[i,0])
          for j in 63:
           E[i] = E[i] * exp(T0[i,j] - T0[i,j+1]) + exp(A[i,j+1] - T0[i,j+1])
         B[i,j] = D[i,j] / E[i]
    """)
    (c,) = S.candidates(pm, SUMMATION)
    assert c.site.to_json() == site and c.exactness == "algebraic"
    numerically_same(c.program, p)


def test_materialised_softmax_refusals():
    # D has a reader between its definition and the sum: refused (not moved past the online pass)
    p = P("""
        kernel f32 k(A[4,64]) -> B[4,64], F[4,64]
         C[4]
         D[4,64]
         E[4]
         C[i] max= A[i,j]
         D[i,j] = exp(A[i,j] - C[i])
         F[i,j] = D[i,j] * 2.0
         E[i] += D[i,j]
         B[i,j] = D[i,j] / E[i]
    """)
    why = refusal(p, "online_softmax", {"path": [0, 0]})
    assert "D (= exp(x - max)) is also read by `F[i,j] = D[i,j] * 2.0` between its definition " \
           "and the sum" in why
    pm = S.apply(p, "normal_loop_max_to_prefix_max", {"path": [0, 0]}, {})
    assert "D is not defined by an elementwise statement right before the sum" in refusal(
        pm, SUMMATION, {"path": [3, 0]})
    # (loops around D's definition, the value exponentiated, the sum, the reason): the sum adds
    # more than D; D covers half a row; exp of another value than the maximized one; the sum's
    # loop split (j is no longer one loop of the sum's nest)
    cases = [
        ("", "A", "E[i] += D[i,j] * 2.0", "adds D[i,j] * 2.0, not D[...] itself"),
        ("for i in 4, j in 32:\n  ", "A", "for i in 4, j in 64:\n  E[i] += D[i,j]",
         "D is defined on 32 of the 64 elements of its dimension 1"),
        ("", "G", "E[i] += D[i,j]", "not the maximized value"),
        ("", "A", "for i in 4, jo in 8, ji in 8:\n  E[i] += D[i,jo*8+ji]",
         "not indexed by its own loops"),
    ]
    for dloops, x, sum_, reason in cases:
        q = parse(f"kernel f32 k(A[4,64], G[4,64]) -> B[4,64]\n C[4]\n D[4,64]\n E[4]\n"
                  f" C[i] max= A[i,j]\n {dloops}D[i,j] = exp({x}[i,j] - C[i])\n {sum_}\n"
                  f" B[i,j] = D[i,j] / E[i]\n")
        assert reason in refusal(q, "online_softmax", {"path": [0, 0]}), sum_
    # flash attention keeps to the inline form with shared row loops
    assert "not attention" in refusal(P(EXTRACTED_SOFTMAX), "flashattention_wo_tiling",
                                      {"path": [0, 0]})


@pytest.fixture(scope="module")
def zoo_softmax_kernels():
    """The softmax-family kernels of a few zoo workloads, extracted from PyTorch via TVM Relax
    (no raise check: only the LEIR text is used)."""
    from steptp.zoo.extract import extract, refs_for_zoo

    res = extract(refs_for_zoo("softmax,log_softmax,softmax_dim1_4d,attention_block"),
                  check=False)
    out = {}
    for r in res.records:
        if r.leir and "max=" in r.leir and "exp(" in r.leir:
            out.setdefault(r.name + "/" + r.occurrences[0].workload, parse(r.leir))
    return out


def test_every_zoo_softmax_candidate_verifies(zoo_softmax_kernels):
    from steptp.measure.verify import verify

    assert len(zoo_softmax_kernels) >= 4, sorted(zoo_softmax_kernels)
    for name, p in zoo_softmax_kernels.items():
        online = S.candidates(p, "online_softmax")
        assert len(online) == 1, name
        pms = S.candidates(p, "normal_loop_max_to_prefix_max")
        summed = [c for pm in pms for c in S.candidates(pm.program, SUMMATION)]
        assert len(summed) == 1, name
        for c in online + summed:
            check(c.program)
            same_outputs(c.program, p, c.exactness, inputs_for(p, 0))
            r = verify(c.program, p, exactness=c.exactness, seeds=(0, 1))
            assert r.passed, (name, c.strategy, c.to_json(), r.reason)


# ============================================================================ attention
def test_flashattention_wo_tiling():
    got = applied(EX("attention"), "flashattention_wo_tiling", {"path": [0, 1], "loops": ["i", "j"]})
    assert got == T("""
        kernel f32 attention(A[16,32], B[64,32], C[64,32]) -> D[16,32]
         T0[16,64]
         T1[16]
         T2[16]
         T3[16]
         T4[16]
         for i in 16:
          T0[i,j] += A[i,k] * B[j,k] * 0.17677669529663687
          T1[i] = -inf
          T2[i] = 0.0
          D[i,l] = 0.0
          for j in 64:
           T3[i] = max(T1[i], T0[i,j])
           T4[i] = exp(T1[i] - T3[i])
           T2[i] = T2[i] * T4[i] + exp(T0[i,j] - T3[i])
           D[i,l] = D[i,l] * T4[i] + exp(T0[i,j] - T3[i]) * C[j,l]
           T1[i] = T3[i]
          D[i,l] = D[i,l] / T2[i]
    """)


def test_flashattention_refusals():
    assert "not attention" in refusal(EX("softmax"), "flashattention_wo_tiling",
                                      {"path": [0, 0], "loops": ["i", "j"]})
    assert "not attention" in refusal(EX("attention"), "flashattention_wo_tiling",
                                      {"path": [0, 0]})


def test_multiplicative_split():
    got = applied(EX("attention"), "multiplicative_split",
                  {"path": [0, 0, 0, 0], "loops": ["i", "j", "k"]})
    assert got == T("""
        kernel f32 attention(A[16,32], B[64,32], C[64,32]) -> D[16,32]
         T0[16,64]
         T1[16]
         T2[16]
         for i in 16:
          for j in 64:
           T0[i,j] += A[i,k] * B[j,k]
           T0[i,j] = T0[i,j] * 0.17677669529663687
          T1[i] max= T0[i,j]
          T2[i] += exp(T0[i,j] - T1[i])
          D[i,l] += exp(T0[i,j] - T1[i]) / T2[i] * C[j,l]
    """)
    mm = EX("matmul_bias_gelu")
    assert "invariant" in refusal(mm, "multiplicative_split", {"path": [0, 0, 0, 0]})
    assert "perfect band" in refusal(EX("split_matmul"), "multiplicative_split",
                                     {"path": [0, 0, 0, 0, 0, 0]})


# ============================================================================ splits
def test_exponential_split():
    p = P("""
        kernel f32 k(A[8,128], B[8]) -> T1[8]
         T1[i] += exp(A[i,j] - B[i])
    """)
    got = applied(p, "exponential_split", {"path": [0, 0, 0], "loops": ["i", "j"]})
    assert got == T("""
        kernel f32 k(A[8,128], B[8]) -> T1[8]
         T1[i] += exp(A[i,j]) * exp(-B[i])
    """)
    # a running maximum subtracted for stability is not split: exp(A) alone overflows above 88
    assert "running maximum T0" in refusal(EX("softmax"), "exponential_split",
                                           {"path": [0, 1, 0], "loops": ["i", "j"]})
    assert "running maximum" in refusal(EX("softmax_prefix_max"), "exponential_split",
                                        {"path": [0, 3, 0], "loops": ["i", "j"]})
    p = P("""
        kernel f32 k(A[8,16], B[8,16]) -> D[8,16]
         D[i,j] = exp(A[i,j] + B[i,j])
    """)
    assert "invariant" in refusal(p, "exponential_split", {"path": [0, 0, 0]})


MATMUL = """
    kernel f32 mm(A[4,16], B[16,8]) -> C[4,8]
     for i in 4, j in 8, k in 16:
      C[i,j] += A[i,k] * B[k,j]
"""


def test_additive_split():
    got = applied(P(MATMUL), "additive_split", {"path": [0, 0, 0], "loops": ["i", "j", "k"]},
                  {"at": 8})
    assert got == T("""
        kernel f32 mm(A[4,16], B[16,8]) -> C[4,8]
         T0[4,8]
         for i in 4, j in 8:
          for k in 8:
           C[i,j] += A[i,k] * B[k,j]
          for k in 8:
           T0[i,j] += A[i,k+8] * B[k+8,j]
          C[i,j] = C[i,j] + T0[i,j]
    """)
    cands = S.candidates(P(MATMUL), "additive_split")
    assert [c.exactness for c in cands] == ["reassociation"]
    mx = S.candidates(EX("softmax"), "additive_split")
    assert {c.exactness for c in mx} == {"exact", "reassociation"}  # max= is exact
    assert "re-add partial sums" in refusal(EX("conv2d_relu"), "additive_split",
                                            {"path": [1, 0, 0, 0, 0, 0]}, {"at": 1})
    assert "split point" in refusal(P(MATMUL), "additive_split", {"path": [0, 0, 0]}, {"at": 16})


def test_partially_equivalent_then_correct():
    got = applied(EX("layer_norm"), "partially_equivalent_then_correct",
                  {"path": [0, 1], "loops": ["i", "j"]})
    assert got == T("""
        kernel f32 layer_norm(A[8,64], B[64], C[64]) -> D[8,64]
         T0[8]
         T1[8]
         T2[8]
         for i in 8:
          T0[i] += A[i,j]
          T1[i] += (A[i,j] - A[i,0]) * (A[i,j] - A[i,0])
          T2[i] += A[i,j] - A[i,0]
          T1[i] = T1[i] + (A[i,0] - T0[i] * 0.015625) * (T2[i] * 2.0 + (A[i,0] - T0[i] * 0.015625) * 64.0)
         D[i,j] = (A[i,j] - T0[i] * 0.015625) * rsqrt(T1[i] * 0.015625 + 1e-05) * B[j] + C[j]
    """)
    assert "does not sum a square" in refusal(P(MATMUL), "partially_equivalent_then_correct",
                                              {"path": [0, 0, 0]})
    p = P("""
        kernel f32 k(A[8,16], B[8,16]) -> D[8]
         for i in 8:
          D[i] += (A[i,j] - B[i,j]) * (A[i,j] - B[i,j])
    """)
    assert "not invariant" in refusal(p, "partially_equivalent_then_correct", {"path": [0, 0]})


def test_every_strategy_applies_to_a_bundled_example():
    found = set()
    for name in examples.names():
        found |= {c.strategy for c in S.candidates(EX(name), ALGORITHMIC)}
    assert found == set(ALGORITHMIC)


# ============================================================================ numerics
EXAMPLES = ["softmax", "exp_bias", "softmax_prefix_max", "attention", "layer_norm", "matmul_bias_gelu",
            "conv2d_relu", "cumsum"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_candidate_computes_the_same_outputs(name):
    from steptp.leir.interp import run

    p = EX(name)
    for seed in (0, 1):
        inputs = inputs_for(p, seed)
        want = run(p, inputs)
        for c in S.candidates(p, ALGORITHMIC):
            got = run(c.program, inputs)
            for k in want:
                if c.exactness == "exact":
                    assert np.array_equal(got[k], want[k]), (c.strategy, c.to_json())
                else:
                    np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5,
                                               err_msg=f"{c.strategy} {c.to_json()}")


def test_one_candidate_per_strategy_verifies_with_tvm():
    from steptp.measure.verify import verify

    first = {}
    for name in EXAMPLES:
        p = EX(name)
        for c in S.candidates(p, ALGORITHMIC):
            first.setdefault(c.strategy, (p, c))
    assert set(first) == set(ALGORITHMIC)
    for p, c in first.values():
        r = verify(c.program, p, exactness=c.exactness, seeds=(0,))
        assert r.passed, (c.strategy, c.to_json(), r.reason)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES + ["split_matmul"])
def test_every_candidate_verifies_with_tvm(name):
    from steptp.measure.verify import verify

    p = EX(name)
    for c in S.candidates(p, ALGORITHMIC):
        r = verify(c.program, p, exactness=c.exactness)
        assert r.passed, (c.strategy, c.to_json(), r.reason)
