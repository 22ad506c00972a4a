"""The strategy registry and the loop family: exact rewrites, refusals with reasons, and numeric
equivalence of every candidate on the bundled examples."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import steptp.strategies as S
from steptp import examples
from steptp.exactness import EXACTNESS
from steptp.leir import format_program, parse
from steptp.strategies import registry
from steptp.strategies.base import IllegalRewrite, Site, Strategy  # noqa: F401
from strategy_helpers import FUSED_MAXPOOL, P, T, applied, inputs_for, refusal, same_outputs  # noqa: F401


ELEMENTWISE = P("""
    kernel ew(A: f32[8,8]) -> B: f32[8,8]
      for i in 8, j in 8:
        B[i,j] = A[i,j] + 1.0
""")

MATMUL = P("""
    kernel mm(A: f32[4,16], B: f32[16,8]) -> C: f32[4,8]
      for i in 4, j in 8, k in 16:
        C[i,j] += A[i,k] * B[k,j]
""")

ROWSUM = P("""
    kernel rowsum(A: f32[4,16]) -> B: f32[4]
      for i in 4:
        for j in 16:
          B[i] += A[i,j]
""")

# B[i+1,j] depends on B[i,j+1]: distance (1,-1), the classic loop that cannot be interchanged
WAVEFRONT = P("""
    kernel wave(A: f32[8,8]) -> B: f32[8,8]
      for i in 7, j in 7:
        B[i+1,j] = B[i,j+1] + A[i,j]
""")

CUMSUM = parse(examples.text("cumsum"))


# ============================================================================ registry
def test_registry_vocabulary_and_metadata():
    names = S.names()
    for n in ("loop_split", "loop_tiling", "loop_reorder", "loop_fusion", "loop_collapse",
              "loop_unrolling", "reverse_compute_at",
              "loop_parallelization", "loop_vectorization", "loop_binding",
              "reduction_factorization", "compute_at"):
        assert n in names
        s = S.get(n)
        assert s.family == "loop" and s.exactness in EXACTNESS and s.targets <= {"cpu", "gpu"}
    assert S.get("loop_binding").targets == {"gpu"}
    assert S.get("loop_parallelization").targets == {"cpu"}
    assert S.get("reduction_factorization").exactness == "reassociation"
    assert S.get("loop_reorder").inverse == "loop_reorder"
    with pytest.raises(KeyError):
        S.get("no_such_strategy")
    rows = S.describe()
    assert json.loads(json.dumps(rows)) == rows


def test_candidates_are_deterministic_and_json():
    p = parse(examples.text("matmul_bias_gelu"))
    a = S.candidates(p, seed=3, max_per_site=2)
    b = S.candidates(p, seed=3, max_per_site=2)
    assert [c.to_json() for c in a] == [c.to_json() for c in b]
    assert [c.text for c in a] == [c.text for c in b]
    for c in a:
        d = c.to_json()
        assert json.loads(json.dumps(d)) == d
        assert Site.from_json(d["site"]) == c.site
        # the site and params written back as JSON reproduce the candidate
        assert S.apply(p, c.strategy, d["site"], d["params"]) == c.program
    assert all(c.strategy != "loop_binding" for c in a)  # CPU target by default
    gpu = S.candidates(p, target="gpu")
    assert any(c.strategy == "loop_binding" for c in gpu)
    assert all(c.strategy != "loop_parallelization" for c in gpu)


def test_apply_never_mutates_and_rejects_illegal():
    before = format_program(MATMUL)
    S.candidates(MATMUL)
    S.apply(MATMUL, "loop_split", {"path": [0], "loops": ["i"]}, {"factor": 2})
    assert format_program(MATMUL) == before
    with pytest.raises(IllegalRewrite, match="reduction axis"):
        S.apply(MATMUL, "loop_parallelization", {"path": [0, 0, 0], "loops": ["k"]}, {})


def test_noop_dropped_at_the_registry(monkeypatch):
    @registry.register
    class Identity(Strategy):
        name = "test_identity"
        family = "loop"

        def sites(self, program, analysis=None):
            return [Site.make((0,), ["i"])]

        def check(self, program, site, params):
            return S.Verdict(True)

        def rewrite(self, program, site, params):
            return program

    try:
        cands, rejected = S.candidates(ELEMENTWISE, "test_identity", with_rejected=True)
        assert cands == []
        assert [r.reason for r in rejected] == ["no-op: canonical text unchanged"]
        with pytest.raises(IllegalRewrite, match="no-op"):
            S.apply(ELEMENTWISE, "test_identity", {"path": [0], "loops": ["i"]}, {})
    finally:
        registry._REGISTRY.pop("test_identity", None)


def test_rejected_choices_carry_reasons():
    cands, rejected = S.candidates(parse(examples.text("softmax")), with_rejected=True)
    reasons = {r.strategy: r.reason for r in rejected}
    assert "reduction axis" in reasons["loop_parallelization"]
    assert "before the reduction is complete" in reasons["loop_fusion"]


# ============================================================================ loop_split
def test_split_divisible():
    got = applied(MATMUL, "loop_split", {"path": [0, 0, 0], "loops": ["k"]}, {"factor": 4})
    assert got == T("""
        kernel mm(A: f32[4,16], B: f32[16,8]) -> C: f32[4,8]
          for i in 4, j in 8, k_o in 4, k_i in 4:
            C[i,j] += A[i,k_o*4+k_i] * B[k_o*4+k_i,j]
    """)


def test_split_with_guard():
    p = P("""
        kernel k(A: f32[10]) -> B: f32[10]
          for i in 10:
            B[i] = A[i] * 2.0
    """)
    got = applied(p, "loop_split", {"path": [0], "loops": ["i"]}, {"factor": 3})
    assert got == T("""
        kernel k(A: f32[10]) -> B: f32[10]
          for i_o in 4, i_i in 3:
            if i_o * 3 + i_i < 10:
              B[i_o*3+i_i] = A[i_o*3+i_i] * 2.0
    """)


def test_split_refusals():
    assert "factor 1" in refusal(MATMUL, "loop_split", {"path": [0], "loops": ["i"]}, {"factor": 1})
    assert "is i, not j" in refusal(MATMUL, "loop_split", {"path": [0], "loops": ["j"]}, {"factor": 2})
    assert "no loop" in refusal(MATMUL, "loop_split", {"path": [5], "loops": ["i"]}, {"factor": 2})


# ============================================================================ loop_reorder
def test_reorder_matmul():
    site = {"path": [0], "loops": ["i", "j", "k"]}
    got = applied(MATMUL, "loop_reorder", site, {"order": ["k", "i", "j"]})
    assert got == T("""
        kernel mm(A: f32[4,16], B: f32[16,8]) -> C: f32[4,8]
          for k in 16, i in 4, j in 8:
            C[i,j] += A[i,k] * B[k,j]
    """)
    cands = S.candidates(MATMUL, "loop_reorder")
    assert len(cands) == 5 and all(c.exactness == "exact" for c in cands)


def test_reorder_refuses_a_reversed_dependence():
    reason = refusal(WAVEFRONT, "loop_reorder", {"path": [0], "loops": ["i", "j"]},
                     {"order": ["j", "i"]})
    assert "reverses" in reason and "(<,>)" in reason and "(>,<)" in reason


def test_reorder_of_a_scan_carried_by_the_inner_loop_keeps_it():
    p = P("""
        kernel scan(A: f64[4,32]) -> B: f64[4,32]
          for j in 31, i in 4:
            B[i,j+1] = B[i,j] + A[i,j+1]
    """)
    # interchange keeps the scan's direction: (<,=) becomes (=,<)
    assert S.check(p, "loop_reorder", {"path": [0], "loops": ["j", "i"]}, {"order": ["i", "j"]}).ok
    # a scan whose element is reused across the outer loop too cannot be interchanged
    p2 = P("""
        kernel scan2(A: f64[4,32]) -> B: f64[4,32]
          for i in 3, j in 31:
            B[i+1,j+1] = B[i,j+1] + B[i+1,j] + A[i,j]
    """)
    assert S.check(p2, "loop_reorder", {"path": [0], "loops": ["i", "j"]}, {"order": ["j", "i"]}).ok
    p3 = P("""
        kernel scan3(A: f64[8,8]) -> B: f64[8,8]
          for i in 7, j in 7:
            B[i+1,j] = B[i,j+1] * A[i,j]
    """)
    assert not S.check(p3, "loop_reorder", {"path": [0], "loops": ["i", "j"]}, {"order": ["j", "i"]}).ok


def test_reorder_of_reduction_axes_is_a_reassociation():
    p = P("""
        kernel s(A: f32[4,8]) -> B: f32
          for i in 4, j in 8:
            B += A[i,j]
    """)
    site = {"path": [0], "loops": ["i", "j"]}
    assert S.check(p, "loop_reorder", site, {"order": ["j", "i"]}).ok
    assert S.get("loop_reorder").exactness_for(p, Site.from_json(site), {"order": ["j", "i"]}) \
        == "reassociation"
    # but not when another statement reads the partial sums in between
    p2 = P("""
        kernel s2(A: f32[4,8]) -> B: f32, C: f32[4,8]
          for i in 4, j in 8:
            B += A[i,j]
            C[i,j] = B
    """)
    assert "reverses" in refusal(p2, "loop_reorder", site, {"order": ["j", "i"]})


# ============================================================================ loop_tiling
def test_tiling():
    got = applied(ELEMENTWISE, "loop_tiling", {"path": [0], "loops": ["i", "j"]},
                  {"loops": ["i", "j"], "factors": [2, 4]})
    assert got == T("""
        kernel ew(A: f32[8,8]) -> B: f32[8,8]
          for i_o in 4, j_o in 2, i_i in 2, j_i in 4:
            B[i_o*2+i_i,j_o*4+j_i] = A[i_o*2+i_i,j_o*4+j_i] + 1.0
    """)


def test_tiling_refusals():
    site = {"path": [0], "loops": ["i", "j"]}
    reason = refusal(WAVEFRONT, "loop_tiling", {"path": [0], "loops": ["i", "j"]},
                     {"loops": ["i", "j"], "factors": [7, 7]})
    assert "factor 7" in reason
    p = P("""
        kernel wave(A: f32[9,9]) -> B: f32[9,9]
          for i in 8, j in 8:
            B[i+1,j] = B[i,j+1] + A[i,j]
    """)
    assert "reverses" in refusal(p, "loop_tiling", site, {"loops": ["i", "j"], "factors": [2, 2]})
    assert "does not divide" in refusal(ELEMENTWISE, "loop_tiling", site,
                                        {"loops": ["i", "j"], "factors": [3, 2]})



def test_tiling_point_loops_inner_makes_a_register_tile_of_a_reduction():
    mm = P("""
        kernel mm(A: f32[8,16], B: f32[16,32]) -> C: f32[8,32]
          for i in 8, j in 32, k in 16:
            C[i,j] += A[i,k] * B[k,j]
    """)
    site = {"path": [0], "loops": ["i", "j", "k"]}
    got = applied(mm, "loop_tiling", site, {"loops": ["i", "j"], "factors": [4, 16],
                                             "point": "inner"})
    assert got == T("""
        kernel mm(A: f32[8,16], B: f32[16,32]) -> C: f32[8,32]
          for i_o in 2, j_o in 2, k in 16, i_i in 4, j_i in 16:
            C[i_o*4+i_i,j_o*16+j_i] += A[i_o*4+i_i,k] * B[k,j_o*16+j_i]
    """)
    # spatial loops moved below the reduction keep each element's summation order: exact
    assert S.get("loop_tiling").exactness_for(mm, S.Site.make([0], ["i", "j", "k"]),
                                               {"loops": ["i", "j"], "factors": [4, 16],
                                                "point": "inner"}) == "exact"
    same_outputs(P(got), mm, "exact", inputs_for(mm))
    assert "would equal 'adjacent'" in refusal(mm, "loop_tiling", site,
                                               {"loops": ["j", "k"], "factors": [4, 4],
                                                "point": "inner"})
    assert "'adjacent' or 'inner'" in refusal(mm, "loop_tiling", site,
                                              {"loops": ["i", "j"], "factors": [4, 4],
                                               "point": "below"})



def test_tiling_point_inner_with_a_whole_loop_as_the_column():
    """A 16-wide row is one vector register: the tile's column is the whole row (factor = its
    extent, not split), the rows split below the reduction."""
    from steptp.measure.verify import verify

    p = P("""
        kernel c(E: f32[8,4,18], B: f32[8,8,3]) -> F: f32[8,4,16]
          for j in 8, k in 4, l in 16, m in 8, o in 3:
            F[j,k,l] += E[m,k,l+o] * B[j,m,o]
    """)
    got = S.apply(p, "loop_tiling", {"path": [0], "loops": ["j", "k", "l", "m", "o"]},
                  {"loops": ["j", "l"], "factors": [4, 16], "point": "inner"})
    assert format_program(got) == T("""
        kernel c(E: f32[8,4,18], B: f32[8,8,3]) -> F: f32[8,4,16]
          for j_o in 2, k in 4, m in 8, o in 3, j_i in 4, l in 16:
            F[j_o*4+j_i,k,l] += E[m,k,l+o] * B[j_o*4+j_i,m,o]
    """)
    assert verify(got, p, exactness="reassociation", seeds=(0,)).passed
    site = {"path": [0], "loops": ["j", "k", "l", "m", "o"]}
    assert "that is a loop_reorder" in refusal(
        p, "loop_tiling", site, {"loops": ["j", "l"], "factors": [8, 16], "point": "inner"})
    assert "must be in [2, 15]" in refusal(p, "loop_tiling", site,
                                           {"loops": ["k", "l"], "factors": [2, 16]})


def test_tiling_point_inner_tiles_two_loops_apart():
    cv = P("""
        kernel cv(A: f32[4,10,10], W: f32[8,4,3,3]) -> C: f32[8,8,8]
          for f in 8, y in 8, x in 8, c in 4, r in 3, s in 3:
            C[f,y,x] += A[c,y+r,x+s] * W[f,c,r,s]
    """)
    site = {"path": [0], "loops": ["f", "y", "x", "c", "r", "s"]}
    got = applied(cv, "loop_tiling", site, {"loops": ["f", "x"], "factors": [4, 4],
                                             "point": "inner"})
    assert got == T("""
        kernel cv(A: f32[4,10,10], W: f32[8,4,3,3]) -> C: f32[8,8,8]
          for f_o in 2, y in 8, x_o in 2, c in 4, r in 3, s in 3, f_i in 4, x_i in 4:
            C[f_o*4+f_i,y,x_o*4+x_i] += A[c,y+r,x_o*4+x_i+s] * W[f_o*4+f_i,c,r,s]
    """)
    same_outputs(P(got), cv, "exact", inputs_for(cv))
    assert "only point='inner' tiles loops apart" in refusal(
        cv, "loop_tiling", site, {"loops": ["f", "x"], "factors": [4, 4]})
    assert "outer first" in refusal(cv, "loop_tiling", site,
                                    {"loops": ["x", "f"], "factors": [4, 4], "point": "inner"})


def test_tiling_above_a_register_tile_makes_a_cache_tile_that_tvm_verifies():
    """``above``: the point loops of a tile go right above a loop of the band, not below all
    of it. Over a register tile (rows `i_i`, columns `j_i`) that is a cache tile: a block of
    B (`k_i` by the tile's columns) is reused by `i_o_i`'s row tiles. Each element still sums
    over k in the same order (exact); TVM builds it and it matches the reference; a tile with
    a wrong block offset fails verification."""
    from steptp.measure.verify import verify

    tile = P("""
        kernel mm(A: f32[32,64], B: f32[64,32]) -> C: f32[32,32]
          for i_o in 8, j_o in 2, k in 64, i_i in 4, j_i in 16:
            C[i_o*4+i_i,j_o*16+j_i] += A[i_o*4+i_i,k] * B[k,j_o*16+j_i]
    """)
    site = {"path": [0], "loops": ["i_o", "j_o", "k", "i_i", "j_i"]}
    prm = {"loops": ["i_o", "k"], "factors": [4, 16], "point": "inner", "above": "i_i"}
    got = applied(tile, "loop_tiling", site, prm)
    assert got == T("""
        kernel mm(A: f32[32,64], B: f32[64,32]) -> C: f32[32,32]
          for i_o_o in 2, j_o in 2, k_o in 4, i_o_i in 4, k_i in 16, i_i in 4, j_i in 16:
            C[i_o_o*16+i_o_i*4+i_i,j_o*16+j_i] += A[i_o_o*16+i_o_i*4+i_i,k_o*16+k_i] * B[k_o*16+k_i,j_o*16+j_i]
    """)
    assert S.get("loop_tiling").exactness_for(tile, S.Site.from_json(site), prm) == "exact"
    assert verify(P(got), tile, exactness="exact", seeds=(0, 1)).passed
    wrong = got.replace("B[k_o*16+k_i,", "B[k_o*8+k_i,")
    assert not verify(P(wrong), tile, exactness="exact", seeds=(0,)).passed
    # without `above` the point loops go below j_i: another program
    inner = applied(tile, "loop_tiling", site, {**prm, "above": None})
    assert inner != got and inner.splitlines()[1].endswith("i_o_i in 4, k_i in 16:")
    assert "must name a loop of the band below k" in refusal(
        tile, "loop_tiling", site, {**prm, "above": "j_o"})
    assert "with point 'inner'" in refusal(
        tile, "loop_tiling", site, {"loops": ["k", "i_i"], "factors": [16, 2], "above": "j_i"})
    assert "that is the 'adjacent' tiling" in refusal(
        tile, "loop_tiling", site, {"loops": ["k", "i_i"], "factors": [16, 2], "point": "inner",
                                    "above": "j_i"})


# ============================================================================ loop_fusion
PRODUCER_CONSUMER = P("""
    kernel pc(A: f32[8]) -> B: f32[8]
      T0: f32[8]
      for i in 8:
        T0[i] = A[i] * 2.0
      for j in 8:
        B[j] = T0[j] + 1.0
""")


def test_fusion():
    got = applied(PRODUCER_CONSUMER, "loop_fusion", {"path": [0], "loops": ["i", "j"]}, {})
    assert got == T("""
        kernel pc(A: f32[8]) -> B: f32[8]
          T0: f32[8]
          for i in 8:
            T0[i] = A[i] * 2.0
            B[i] = T0[i] + 1.0
    """)


def test_fusion_refuses_an_incomplete_reduction():
    p = parse(examples.text("layer_norm"))
    reason = refusal(p, "loop_fusion", {"path": [0, 0], "loops": ["j", "j"]}, {})
    assert "reduces T0 over j" in reason and "before the reduction is complete" in reason


def test_fusion_refuses_a_backward_read():
    p = P("""
        kernel rev(A: f32[8]) -> B: f32[8]
          T0: f32[8]
          for i in 8:
            T0[i] = A[i] * 2.0
          for i in 8:
            B[i] = T0[7-i]
    """)
    reason = refusal(p, "loop_fusion", {"path": [0], "loops": ["i", "i"]}, {})
    assert "read-after-write" in reason
    # a write-after-read: the second loop overwrites what the first still has to read
    p2 = P("""
        kernel war(A: f32[8]) -> B: f32[8], C: f32[8]
          for i in 8:
            B[i] = A[i] + 1.0
          for i in 8:
            C[i] = B[7-i] * 2.0
          for i in 8:
            B[i] = A[i] * 3.0
    """)
    assert "write-after-read" in refusal(p2, "loop_fusion", {"path": [1], "loops": ["i", "i"]}, {})
    assert "extents differ" in refusal(
        P("""
            kernel d(A: f32[8]) -> B: f32[8], C: f32[4]
              for i in 8:
                B[i] = A[i]
              for i in 4:
                C[i] = A[i]
        """), "loop_fusion", {"path": [0], "loops": ["i", "i"]}, {})


# ============================================================================ collapse
POINTWISE = P("""
    kernel pw(A: f32[8,6,12], B: f32[4,8]) -> C: f32[4,6,12]
      for j in 4, k in 6, l in 12, m in 8:
        C[j,k,l] += A[m,k,l] * B[j,m]
""")


def test_collapse_fuses_a_perfect_nest_into_one_loop_and_verifies_in_tvm():
    from steptp.measure.verify import verify

    got = S.apply(POINTWISE, "loop_collapse", {"path": [0, 0], "loops": ["k", "l"]}, {})
    assert format_program(got) == T("""
        kernel pw(A: f32[8,6,12], B: f32[4,8]) -> C: f32[4,6,12]
          for j in 4, k_l in 72, m in 8:
            C[j,k_l//12,k_l%12] += A[m,k_l//12,k_l%12] * B[j,m]
    """)
    r = verify(got, POINTWISE, exactness="exact", seeds=(0, 1))
    assert r.passed, r.reason
    # the collapsed loop is one unit-stride row of 72: split by a whole register and vectorized
    # (the subscript pair reads as one dimension, so no dependence blocks either step)
    split = S.apply(got, "loop_split", {"path": [0, 0], "loops": ["k_l"]}, {"factor": 8})
    inner = S.apply(split, "loop_reorder", {"path": [0, 0], "loops": ["k_l_o", "k_l_i", "m"]},
                    {"order": ["k_l_o", "m", "k_l_i"]})
    vec = S.apply(inner, "loop_vectorization", {"path": [0, 0, 0, 0], "loops": ["k_l_i"]}, {})
    assert "k_l_i in 8 vectorized" in format_program(vec)
    par = S.apply(got, "loop_parallelization", {"path": [0, 0], "loops": ["k_l"]}, {})
    r = verify(vec, POINTWISE, exactness="exact", seeds=(0,))
    assert r.passed, r.reason
    assert verify(par, POINTWISE, exactness="exact", seeds=(0,)).passed


def test_collapse_refusals():
    assert "does not hold exactly one loop" in refusal(
        PRODUCER_CONSUMER, "loop_collapse", {"path": [0], "loops": ["i", "j"]}, {})
    assert "is m, not l" in refusal(POINTWISE, "loop_collapse",
                                    {"path": [0, 0, 0], "loops": ["l", "l"]}, {})
    assert "no loop at path" in refusal(POINTWISE, "loop_collapse", {"path": [3], "loops": []}, {})
    vec = S.apply(ELEMENTWISE, "loop_vectorization", {"path": [0, 0], "loops": ["j"]}, {})
    assert "already vectorized" in refusal(vec, "loop_collapse",
                                           {"path": [0], "loops": ["i", "j"]}, {})
    one = P("""
        kernel one(A: f32[1,8]) -> B: f32[1,8]
          for i in 1, j in 8:
            B[i,j] = A[i,j]
    """)
    assert "extent 1" in refusal(one, "loop_collapse", {"path": [0], "loops": ["i", "j"]}, {})
    # j is spatial, m a reduction axis of the same statement
    assert "m is a reduction axis of `C[j,k,l] += A[m,k,l] * B[j,m]` and l is not" in refusal(
        POINTWISE, "loop_collapse", {"path": [0, 0, 0], "loops": ["l", "m"]}, {})


def test_collapse_keeps_a_carried_dependence_visible():
    """B[i,j+1] = B[i,j] runs along each row: after collapsing, the subscript pairs still say
    that iteration x writes what x+1 reads, so the collapsed loop is not parallelized."""
    scan = P("""
        kernel scan(A: f32[4,5]) -> B: f32[4,5]
          for i in 4, j in 4:
            B[i,j+1] = B[i,j] + A[i,j]
    """)
    rows = P("""
        kernel rows(A: f32[4,5]) -> B: f32[4,5]
          for i in 4, j in 5:
            B[i,j] = A[i,j] * 2.0
    """)
    got = S.apply(scan, "loop_collapse", {"path": [0], "loops": ["i", "j"]}, {})
    assert "carries a read-after-write dependence on B" in refusal(
        got, "loop_parallelization", {"path": [0], "loops": ["i_j"]}, {})
    ok = S.apply(rows, "loop_collapse", {"path": [0], "loops": ["i", "j"]}, {})
    assert S.check(ok, "loop_parallelization", {"path": [0], "loops": ["i_j"]}, {}).ok


# ============================================================================ reverse compute_at
MATMUL_BIAS = P("""
    kernel mmb(A: f32[8,16], B: f32[16,8], C: f32[8]) -> D: f32[8,8]
      T0: f32[8,8]
      for i_o in 2, j in 8, k in 16, i_i in 4:
        T0[i_o*4+i_i,j] += A[i_o*4+i_i,k] * B[k,j]
      for i in 8, j in 8:
        D[i,j] = T0[i,j] + C[j]
""")


def test_reverse_compute_at_runs_the_epilogue_on_each_finished_tile():
    from steptp.measure.verify import verify

    site = {"path": [0], "loops": ["i_o", "j", "k", "i_i"]}
    assert [c.params for c in S.candidates(MATMUL_BIAS, "reverse_compute_at", seed=None)] == \
        [{"at": "i_o"}, {"at": "j"}]     # k is the reduction: nothing is complete above it
    got = S.apply(MATMUL_BIAS, "reverse_compute_at", site, {"at": "i_o"})
    assert format_program(got) == T("""
        kernel mmb(A: f32[8,16], B: f32[16,8], C: f32[8]) -> D: f32[8,8]
          T0: f32[8,8]
          for i_o in 2:
            for j in 8, k in 16, i_i in 4:
              T0[i_o*4+i_i,j] += A[i_o*4+i_i,k] * B[k,j]
            for j in 8, i_i in 4:
              D[i_o*4+i_i,j] = T0[i_o*4+i_i,j] + C[j]
    """)
    r = verify(got, MATMUL_BIAS, exactness="exact", seeds=(0, 1))
    assert r.passed, r.reason


def test_reverse_compute_at_refusals():
    site = {"path": [0], "loops": ["i_o", "j", "k", "i_i"]}
    assert "k is a reduction axis" in refusal(MATMUL_BIAS, "reverse_compute_at", site, {"at": "k"})
    assert "`at` must name a loop" in refusal(MATMUL_BIAS, "reverse_compute_at", site,
                                              {"at": "i_i"})
    transposed = P("""
        kernel t(A: f32[8,16], B: f32[16,8]) -> D: f32[8,8]
          T0: f32[8,8]
          for i in 8, j in 8, k in 16:
            T0[i,j] += A[i,k] * B[k,j]
          for i in 8, j in 8:
            D[i,j] = T0[j,i] * 2.0
    """)
    assert "exactly at the element it writes" in refusal(
        transposed, "reverse_compute_at", {"path": [0], "loops": ["i", "j", "k"]}, {"at": "i"})
    # the producer writes each row twice (a sum over r, in two halves that overlap): an
    # iteration of i does not finish its elements
    twice = P("""
        kernel tw(A: f32[8,8]) -> D: f32[4,8]
          T0: f32[4,8]
          for i in 8, j in 8:
            T0[i//2,j] = A[i,j]
          for i in 4, j in 8:
            D[i,j] = T0[i,j] + 1.0
    """)
    assert "each element of T0 once" in refusal(
        twice, "reverse_compute_at", {"path": [0], "loops": ["i", "j"]}, {"at": "i"})


# ============================================================================ kinds
def test_unrolling():
    got = applied(ROWSUM, "loop_unrolling", {"path": [0], "loops": ["i"]}, {})
    assert got == T("""
        kernel rowsum(A: f32[4,16]) -> B: f32[4]
          for i in 4 unrolled, j in 16:
            B[i] += A[i,j]
    """)
    p = P("""
        kernel big(A: f32[128]) -> B: f32[128]
          for i in 128:
            B[i] = A[i]
    """)
    assert "extent 128" in refusal(p, "loop_unrolling", {"path": [0], "loops": ["i"]}, {})


MAXPOOL = P("""
    kernel f32 mp(A[1,4,8,8]) -> B[1,4,4,4]
     C[1,4,10,10]
     C[i,j,k,l] = where(1 <= k and k < 9 and 1 <= l and l < 9, A[i,j,k-1,l-1], -3.4e+38)
     for i in 1, j in 4, k in 4, l in 4, m in 3, n in 3:
      B[i,j,k,l] max= C[i,j,k*2+m,l*2+n]
""")
WINDOW = {"path": [1, 0, 0, 0, 0], "loops": ["m"]}   # the pooling's 3x3 taps


def test_unrolling_a_window_unrolls_the_loops_inside_it():
    got = applied(MAXPOOL, "loop_unrolling", WINDOW, {"inner": True})
    assert "for i in 1, j in 4, k in 4, l in 4, m in 3 unrolled, n in 3 unrolled:" in got
    # without ``inner`` only the loop itself
    assert "m in 3 unrolled, n in 3:" in applied(MAXPOOL, "loop_unrolling", WINDOW, {})
    # offered where a serial loop is inside, as a second choice beside the plain unroll
    offered = [(c.site.path, c.params) for c in S.candidates(MAXPOOL, "loop_unrolling")]
    assert ((1, 0, 0, 0, 0), {"inner": True}) in offered
    assert ((1, 0, 0, 0, 0, 0), {"inner": True}) not in offered   # n: nothing inside
    assert ((1, 0, 0, 0, 0, 0), {}) in offered


def test_unrolling_a_window_refuses_too_many_copies_and_other_kinds_inside():
    k = {"path": [1, 0, 0], "loops": ["k"]}
    assert "144 statement instances" in refusal(MAXPOOL, "loop_unrolling", k, {"inner": True})
    n = {"path": [1, 0, 0, 0, 0, 0], "loops": ["n"]}
    assert "no serial loop" in refusal(MAXPOOL, "loop_unrolling", n, {"inner": True})
    ew3 = P("""
        kernel f32 ew3(A[2,4,8]) -> B[2,4,8]
         for i in 2, j in 4, k in 8:
          B[i,j,k] = A[i,j,k] + 1.0
    """)
    vec = S.apply(ew3, "loop_vectorization", {"path": [0, 0, 0], "loops": ["k"]}, {})
    assert "one is vectorized" in refusal(vec, "loop_unrolling", {"path": [0], "loops": ["i"]},
                                          {"inner": True})


def test_unrolled_windows_of_a_fused_pooling_verify_in_tvm():
    """The padding copy computed at each output and both 3x3 windows unrolled: built and run
    with TVM against the original, and a window unrolled with a wrong tap fails."""
    from steptp.measure.verify import verify

    fused = S.apply(MAXPOOL, "compute_at", {"path": [0], "loops": ["i", "j", "k", "l"],
                                            "consumer": [1], "tensor": "C"}, {"at": "l"})
    assert format_program(fused) == T(FUSED_MAXPOOL)   # the other window tests' program
    p = S.apply(fused, "loop_unrolling", {"path": [0, 0, 0, 0, 0], "loops": ["k_1"]},
                {"inner": True})
    p = S.apply(p, "loop_unrolling", {"path": [0, 0, 0, 0, 1], "loops": ["m"]}, {"inner": True})
    text = format_program(p)
    assert "k_1 in 3 unrolled, l_1 in 3 unrolled:" in text and "m in 3 unrolled, n in 3 unrolled:" in text
    r = verify(p, MAXPOOL, exactness="exact", seeds=(0,))
    assert r.passed, r.reason
    wrong = parse(text.replace("l*2+n]", "l*2+n-n//2]"))   # the window's last tap reads the middle one
    assert not verify(wrong, MAXPOOL, exactness="exact", seeds=(0,)).passed


def test_parallelization():
    got = applied(ROWSUM, "loop_parallelization", {"path": [0], "loops": ["i"]}, {})
    assert got == T("""
        kernel rowsum(A: f32[4,16]) -> B: f32[4]
          for i in 4 parallel, j in 16:
            B[i] += A[i,j]
    """)


def test_parallelization_refusals():
    reason = refusal(ROWSUM, "loop_parallelization", {"path": [0, 0], "loops": ["j"]}, {})
    assert "reduction axis" in reason and "B[i] += A[i,j]" in reason
    reason = refusal(CUMSUM, "loop_parallelization", {"path": [0, 1], "loops": ["j"]}, {})
    assert "read-after-write" in reason and "B[i,j+1] = B[i,j] + A[i,j+1]" in reason
    par = S.apply(ROWSUM, "loop_parallelization", {"path": [0], "loops": ["i"]}, {})
    assert "inside a parallel loop" in refusal(par, "loop_parallelization",
                                               {"path": [0, 0], "loops": ["j"]}, {})
    assert "already parallel" in refusal(par, "loop_parallelization", {"path": [0], "loops": ["i"]}, {})


def test_a_tile_loop_outside_its_digit_loop_is_not_carried():
    # i = i_o*16 + i_t with i_t outside i_o: different i_t never meet whatever i_o does (the
    # interval and GCD tests alone saw a dependence: 16*(i_o - i_o') spans every difference)
    swapped = P("""
        kernel k(A: f32[64,8]) -> B: f32[64]
          for i_t in 16, i_o in 4, j in 8:
            B[i_o*16+i_t] += A[i_o*16+i_t, j]
    """)
    got = applied(swapped, "loop_parallelization", {"path": [0], "loops": ["i_t"]}, {})
    assert "for i_t in 16 parallel, i_o in 4:" in got
    assert S.check(swapped, "loop_binding", {"path": [0], "loops": ["i_t"]},
                   {"axes": ["threadIdx.x"]}).ok
    # with a stride of 15 the tiles overlap (i_o=1, i_t=0 meets i_o=0, i_t=15): still carried
    overlapping = P("""
        kernel k(A: f32[61,8]) -> B: f32[61]
          for i_t in 16, i_o in 4, j in 8:
            B[i_o*15+i_t] += A[i_o*15+i_t, j]
    """)
    assert "write-after" in refusal(overlapping, "loop_parallelization",
                                    {"path": [0], "loops": ["i_t"]}, {})


def test_vectorization():
    got = applied(ELEMENTWISE, "loop_vectorization", {"path": [0, 0], "loops": ["j"]}, {})
    assert got == T("""
        kernel ew(A: f32[8,8]) -> B: f32[8,8]
          for i in 8, j in 8 vectorized:
            B[i,j] = A[i,j] + 1.0
    """)


@pytest.mark.parametrize("width", [3, 7, 12, 14])
def test_vectorization_of_part_of_one_register_verifies_in_tvm(width):
    """Widths up to one AVX-512 register need not be powers of two (a masked operation); the
    sliding +o offset is the conv row case that motivated it."""
    from steptp.measure.verify import verify

    p = P(f"""
        kernel row(A: f32[4,{width + 2}]) -> B: f32[4,{width}]
          for i in 4, o in 3, j in {width}:
            B[i,j] += A[i,j+o] * 2.0
    """)
    got = S.apply(p, "loop_vectorization", {"path": [0, 0, 0], "loops": ["j"]}, {})
    assert f"j in {width} vectorized" in format_program(got)
    r = verify(got, p, exactness="exact", seeds=(0, 1))
    assert r.passed, r.reason


def test_vectorization_refusals():
    assert "not an innermost loop" in refusal(ELEMENTWISE, "loop_vectorization",
                                              {"path": [0], "loops": ["i"]}, {})
    assert "reduction axis" in refusal(ROWSUM, "loop_vectorization",
                                       {"path": [0, 0], "loops": ["j"]}, {})
    p = P("""
        kernel odd(A: f32[24]) -> B: f32[24]
          for i in 24:
            B[i] = A[i]
    """)
    assert "power of two" in refusal(p, "loop_vectorization", {"path": [0], "loops": ["i"]}, {})
    # one iteration is one lane (1 is a power of two, and a search spent a measurement on it)
    assert "one lane" in refusal(P("""
        kernel one(A: f32[8,1]) -> B: f32[8,1]
          for i in 8, j in 1:
            B[i,j] = A[i,j]
    """), "loop_vectorization", {"path": [0, 0], "loops": ["j"]}, {})
    assert "carries" in refusal(P("""
        kernel sh(A: f32[9]) -> B: f32[9]
          for i in 8:
            B[i+1] = B[i] + A[i]
    """), "loop_vectorization", {"path": [0], "loops": ["i"]}, {})


def test_binding():
    p = P("""
        kernel g(A: f32[8,32]) -> B: f32[8,32]
          for i in 8, j in 32:
            B[i,j] = A[i,j] * 2.0
    """)
    got = applied(p, "loop_binding", {"path": [0], "loops": ["i", "j"]},
                  {"axes": ["blockIdx.x", "threadIdx.x"]})
    assert got == T("""
        kernel g(A: f32[8,32]) -> B: f32[8,32]
          for i in 8 blockIdx.x, j in 32 threadIdx.x:
            B[i,j] = A[i,j] * 2.0
    """)
    rowsum = P("""
        kernel r(A: f32[4,16]) -> B: f32[4]
          for i in 4, j in 16:
            B[i] += A[i,j]
    """)
    # a reduction axis on threads is TVM's cross-thread reduction (a reassociation); on blocks,
    # which share nothing, it is refused
    site = {"path": [0], "loops": ["i", "j"]}
    assert S.check(rowsum, "loop_binding", site, {"axes": ["blockIdx.x", "threadIdx.x"]}).ok
    assert registry.get("loop_binding").exactness_for(
        rowsum, Site.from_json(site), {"axes": ["blockIdx.x", "threadIdx.x"]}) == "reassociation"
    reason = refusal(rowsum, "loop_binding", site, {"axes": ["blockIdx.y", "blockIdx.x"]})
    assert "reduction axis" in reason
    assert "must enclose" in refusal(p, "loop_binding", {"path": [0], "loops": ["i", "j"]},
                                     {"axes": ["threadIdx.x", "blockIdx.x"]})


# ============================================================================ rfactor
def test_reduction_factorization():
    got = applied(ROWSUM, "reduction_factorization", {"path": [0, 0], "loops": ["j"]}, {"factor": 4})
    assert got == T("""
        kernel rowsum(A: f32[4,16]) -> B: f32[4]
          T0: f32[4,4]
          for i in 4:
            for j_o in 4, j_i in 4:
              T0[i,j_i] += A[i,j_o*4+j_i]
            for j_i in 4:
              B[i] += T0[i,j_i]
    """)
    cands = S.candidates(ROWSUM, "reduction_factorization")
    assert [c.params["factor"] for c in cands] == [2, 4, 8]
    assert {c.exactness for c in cands} == {"reassociation"}
    # the partial loop j_i carries no dependence: it can now be vectorized
    new = S.apply(ROWSUM, "reduction_factorization", {"path": [0, 0], "loops": ["j"]}, {"factor": 4})
    assert S.check(new, "loop_vectorization", {"path": [0, 0, 0], "loops": ["j_i"]}, {}).ok


def test_reduction_factorization_refusals():
    p = P("""
        kernel s(A: f32[4,8]) -> B: f32
          for i in 4, j in 8:
            B += A[i,j]
    """)
    assert "also reduces over i" in refusal(p, "reduction_factorization",
                                            {"path": [0, 0], "loops": ["j"]}, {"factor": 2})
    assert "not a reduction axis" in refusal(ROWSUM, "reduction_factorization",
                                             {"path": [0], "loops": ["i"]}, {"factor": 2}) \
        or "not a single reduction" in refusal(ROWSUM, "reduction_factorization",
                                               {"path": [0], "loops": ["i"]}, {"factor": 2})
    assert "does not divide" in refusal(ROWSUM, "reduction_factorization",
                                        {"path": [0, 0], "loops": ["j"]}, {"factor": 3})


# ============================================================================ compute_at
TWO_STAGE = P("""
    kernel two(A: f32[8,8]) -> B: f32[8,8]
      T0: f32[8,8]
      for i in 8, j in 8:
        T0[i,j] = A[i,j] * 2.0
      for i in 8, j in 8:
        B[i,j] = T0[i,j] + 1.0
""")


def test_compute_at():
    site = {"path": [0], "loops": ["i", "j"], "consumer": [1], "tensor": "T0"}
    got = applied(TWO_STAGE, "compute_at", site, {"at": "i"})
    assert got == T("""
        kernel two(A: f32[8,8]) -> B: f32[8,8]
          T0: f32[8,8]
          for i in 8:
            for j_1 in 8:
              T0[i,j_1] = A[i,j_1] * 2.0
            for j in 8:
              B[i,j] = T0[i,j] + 1.0
    """)
    got = applied(TWO_STAGE, "compute_at", site, {"at": "j"})
    assert got == T("""
        kernel two(A: f32[8,8]) -> B: f32[8,8]
          T0: f32[8,8]
          for i in 8, j in 8:
            T0[i,j] = A[i,j] * 2.0
            B[i,j] = T0[i,j] + 1.0
    """)


def test_compute_at_conv_padding_into_the_conv_loop():
    p = parse(examples.text("conv2d_relu"))
    site = {"path": [0], "loops": ["i", "j", "k"], "consumer": [1], "tensor": "T0"}
    got = applied(p, "compute_at", site, {"at": "k"})
    assert "for i_1 in 4, j_1 in 3, k_1 in 3:\n   T0[0,i_1,j+j_1,k+k_1] = where(" in got


def test_compute_at_refusals():
    p = P("""
        kernel three(A: f32[8,8]) -> B: f32[8,8], C: f32[8,8]
          T0: f32[8,8]
          for i in 8, j in 8:
            T0[i,j] = A[i,j] * 2.0
          for i in 8, j in 8:
            B[i,j] = T0[i,j] + 1.0
          for i in 8, j in 8:
            C[i,j] = T0[j,i]
    """)
    site = {"path": [0], "loops": ["i", "j"], "consumer": [1], "tensor": "T0"}
    assert "read outside loop i" in refusal(p, "compute_at", site, {"at": "i"})
    assert "not a loop of the consumer" in refusal(TWO_STAGE, "compute_at", site, {"at": "q"})
    par = S.apply(TWO_STAGE, "loop_parallelization", {"path": [1], "loops": ["i"]}, {})
    assert "race" in refusal(par, "compute_at", site, {"at": "j"})


# ============================================================================ numerics
# The numeric sweeps here cover the loop family; every other family's test file sweeps its own.
LOOP = [n for n in S.names() if S.get(n).family == "loop"]


def _all_candidates(p, max_per_site=None):
    return (S.candidates(p, LOOP, target="cpu", max_per_site=max_per_site)
            + S.candidates(p, "loop_binding", target="gpu", max_per_site=max_per_site))


@pytest.mark.parametrize("name", ["matmul_bias_gelu", "softmax", "layer_norm", "conv2d_relu",
                                  "cumsum", pytest.param("split_matmul", marks=pytest.mark.slow)])
def test_candidates_compute_the_same_outputs(name):
    """The NumPy interpreter runs a seeded sample of the candidates (every site, up to two
    parameter choices each): exact rewrites must be bit-identical."""
    p = parse(examples.text(name))
    inputs = inputs_for(p)
    cands = _all_candidates(p, max_per_site=2)
    assert cands
    for c in cands:
        same_outputs(c.program, p, c.exactness, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul_bias_gelu", "softmax", "layer_norm", "conv2d_relu",
                                  "cumsum", "split_matmul"])
def test_every_candidate_computes_the_same_outputs(name):
    """Every candidate, through the NumPy interpreter."""
    p = parse(examples.text(name))
    inputs = inputs_for(p)
    for c in _all_candidates(p):
        same_outputs(c.program, p, c.exactness, inputs)


@pytest.mark.parametrize("name", ["matmul_bias_gelu", "layer_norm", "conv2d_relu", "cumsum"])
def test_random_rewrite_sequences_stay_equivalent(name):
    """Three seeded steps in a row (split then vectorize, compute_at then parallelize...)."""
    p0 = parse(examples.text(name))
    inputs = inputs_for(p0, 1)
    rng = random.Random(7)
    for walk in range(3):
        p, exact = p0, "exact"
        for _ in range(3):
            cands = S.candidates(p, LOOP, seed=rng.randrange(1000), max_per_site=2)
            if not cands:
                break
            c = rng.choice(cands)
            p = c.program
            if c.exactness != "exact":
                exact = c.exactness
        same_outputs(p, p0, exact, inputs)


@pytest.mark.parametrize("name", ["matmul_bias_gelu", "softmax", "layer_norm", "conv2d_relu",
                                  "cumsum", "split_matmul"])
def test_candidates_verify_with_tvm(name):
    """A sample of the candidates, built and run with TVM against the original."""
    from steptp.measure.verify import verify

    p = parse(examples.text(name))
    for c in S.candidates(p, LOOP, seed=0, max_per_site=1):
        r = verify(c.program, p, exactness=c.exactness, seeds=(0,))
        assert r.passed, (c.strategy, c.to_json(), r.reason)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul_bias_gelu", "softmax", "layer_norm", "conv2d_relu",
                                  "cumsum", "split_matmul"])
def test_every_candidate_verifies_with_tvm(name):
    from steptp.measure.verify import verify

    p = parse(examples.text(name))
    for c in S.candidates(p, LOOP):
        r = verify(c.program, p, exactness=c.exactness, seeds=(0,))
        assert r.passed, (c.strategy, c.to_json(), r.reason)


def test_vectorization_refuses_a_body_of_several_statements():
    # TVM 0.27 miscompiles this when vectorized (E came out wrong in 31 of 32 lanes)
    p = P("""
        kernel f32 v(A[32], B[32]) -> E[32]
          T0[32]
          for i in 32:
            T0[i] = A[i] * A[i] + 1.0
            E[i] = exp(A[i]) * exp(B[i]) / (T0[i] * (T0[i] + 1.0))
    """)
    reason = refusal(p, "loop_vectorization", {"path": [0], "loops": ["i"]}, {})
    assert "2 statements" in reason


def test_reorder_params_of_a_long_band_are_sampled_without_listing_every_order():
    """An 11-loop band has 40 million orders; the sample is drawn by index."""
    import itertools
    import random

    from steptp.strategies.loops import _nth_permutation

    names = list("abcde")
    assert [_nth_permutation(names, k) for k in range(120)] == \
        [list(p) for p in itertools.permutations(names)]
    loops = ", ".join(f"{v} in 2" for v in "abcdefghijk")
    p = P(f"""
        kernel big(A: f32[2048]) -> B: f32[2048]
          for {loops}:
            B[a*1024+b*512+c*256+d*128+e*64+f*32+g*16+h*8+i*4+j*2+k] = A[a*1024+b*512+c*256+d*128+e*64+f*32+g*16+h*8+i*4+j*2+k]
    """)
    s = registry.get("loop_reorder")
    site = next(iter(s.sites(p)))
    got = s.params(p, site, random.Random(0))
    assert len(got) == 24 and len({tuple(g["order"]) for g in got}) == 24
    assert all(sorted(g["order"]) == list("abcdefghijk") and g["order"] != list("abcdefghijk")
               for g in got)
    assert got == s.params(p, site, random.Random(0))
