"""steptp.leir.analysis: enumeration, reduction axes, footprints, dependences, cost."""

from steptp.leir import ast as A, parse
from steptp.leir import analysis as an
from steptp.leir.analysis import Analysis, affine, interval

GELU = parse("""kernel k(A: f32[8,64], B: f32[64,32], C: f32[32]) -> D: f32[8,32]
  T0: f32[8,32]
  for i in 8 parallel, j in 32:
    for k in 64:
      T0[i,j] += A[i,k] * B[k,j]
    D[i,j] = (T0[i,j] + C[j]) * (0.5 + erf((T0[i,j] + C[j]) * 0.7071067811865476) * 0.5)
""")

MATMUL = parse("""kernel mm(A: f32[16,32], B: f32[32,8]) -> C: f32[16,8]
  for i in 16, j in 8:
    for k in 32:
      C[i,j] += A[i,k] * B[k,j]
""")

CUMSUM = parse("""kernel cumsum(A: f32[4,8]) -> C: f32[4,8]
  for i in 4:
    C[i,0] = A[i,0]
    for j in 7:
      C[i,j+1] = C[i,j] + A[i,j+1]
""")


def test_statement_enumeration():
    a = Analysis(GELU)
    sts = a.statements
    assert [s.path for s in sts] == [(0, 0, 0, 0), (0, 0, 1)]
    assert [s.order for s in sts] == [0, 1]
    assert sts[0].vars == ("i", "j", "k")
    assert sts[0].loop_paths == ((0,), (0, 0), (0, 0, 0))
    assert sts[1].vars == ("i", "j")
    assert a.node((0, 0, 0)).var == "k"
    assert [lp.path for lp in a.loops] == [(0,), (0, 0), (0, 0, 0)]
    assert an.statements(GELU) == sts


def test_reduction_axes():
    a = Analysis(GELU)
    assert a.reduction_axes((0, 0, 0, 0)) == ("k",)
    assert a.reduction_axes((0, 0, 1)) == ()
    p = parse("kernel k(A: f32[4,5,6]) -> B: f32[5]\n  for i in 4, j in 5, k in 6:\n    B[j] max= A[i,j,k]\n")
    assert an.reduction_axes(p, (0, 0, 0, 0)) == ("i", "k")


def test_domain_with_guard_counts_points():
    p = parse("""kernel k(A: f32[10]) -> B: f32[10]
  for i in 3, j in 4:
    if i * 4 + j < 10:
      B[i*4+j] = A[i*4+j] * 2.0
""")
    d = an.domain(p, (0, 0, 0, 0))
    assert d.vars == ("i", "j")
    assert d.extents == {"i": 3, "j": 4}
    assert d.size == 12
    assert d.count == 10
    assert len(d.guards) == 1
    assert an.flops(p) == 10


def test_affine_and_interval():
    e = parse("kernel k(A: f32[64]) -> B: f32\n  for i in 4, j in 4:\n    B += A[(i*4+j)*2-1]\n").body[0].body[0].body[0].value.index[0]
    assert affine(e) == ({"i": 8, "j": 2}, -1)
    assert interval(e, {"i": (0, 3), "j": (0, 3)}) == (-1, 29)
    f = parse("kernel k(A: f32[8]) -> B: f32\n  for f in 32:\n    B += A[f//4%8]\n").body[0].body[0].value.index[0]
    assert affine(f) is None
    assert interval(f, {"f": (0, 31)}) == (0, 7)
    assert interval(f, {"f": (0, 3)}) == (0, 0)


def test_footprints():
    a = Analysis(MATMUL)
    r = a.reads((0,))
    assert list(r) == ["A", "B", "C"]  # first-appearance order; the reduction reads C
    assert r["A"].box == ((0, 15), (0, 31)) and r["A"].exact
    assert r["A"].indices == ((A.Var("i"), A.Var("k")),)
    w = a.writes((0,))
    assert list(w) == ["C"] and w["C"].box == ((0, 15), (0, 7))
    # per iteration of i: one row of A, all of B, one row of C
    r_j = a.reads((0, 0), per_iteration=True)
    assert r_j["A"].box == ((0, 0), (0, 31))
    assert r_j["B"].box == ((0, 31), (0, 7))
    assert a.writes((0, 0), per_iteration=True)["C"].volume == 8
    # a gather is not bounded: the footprint is the whole dimension and marked inexact
    g = parse("kernel g(A: f32[100], I: i32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[I[i]]\n")
    fr = an.reads(g)
    assert fr["A"].box == ((0, 99),) and not fr["A"].exact
    assert fr["I"].box == ((0, 7),) and fr["I"].exact


def test_def_use_and_dependences():
    p = parse("""kernel k(A: f32[8]) -> B: f32[8], C: f32[8]
  T0: f32[8]
  for i in 8:
    T0[i] = A[i] * 2.0
  for i in 8:
    B[i] = T0[i] + 1.0
  for i in 8:
    C[i] = T0[i] + B[i]
  for i in 4:
    B[i] = 0.0
""")
    a = Analysis(p)
    assert a.def_use == {
        (0, 0): [((1, 0), "T0"), ((2, 0), "T0")],
        (1, 0): [((2, 0), "B")],
        (2, 0): [],
        (3, 0): [],
    }
    deps = [(d.src, d.dst, d.tensor, d.kind) for d in a.dependences]
    assert ((1, 0), (3, 0), "B", "WAW") in deps
    assert ((2, 0), (3, 0), "B", "WAR") in deps
    assert ((0, 0), (1, 0), "T0", "RAW") in deps
    assert a.producers((2, 0)) == [((0, 0), "T0"), ((1, 0), "B")]
    assert a.consumers((0, 0)) == [((1, 0), "T0"), ((2, 0), "T0")]
    assert an.def_use(p) == a.def_use and an.dependences(p) == a.dependences


def test_disjoint_boxes_are_independent():
    p = parse("""kernel pad(A: f32[8]) -> B: f32[10]
  for i in 8:
    B[i+1] = A[i]
  B[0] = 0.0
  B[9] = 0.0
""")
    assert an.dependences(p) == []


def test_matmul_loops_carry_only_the_reduction():
    a = Analysis(MATMUL)
    assert a.is_parallelizable((0,))        # i
    assert a.is_parallelizable((0, 0))      # j
    carried = a.loop_carried((0, 0, 0))     # k
    assert carried and all(c.reduction and c.var == "k" and c.tensor == "C" for c in carried)
    assert {c.kind for c in carried} == {"RAW", "WAW"}


def test_scan_is_carried_by_j_not_i():
    a = Analysis(CUMSUM)
    assert a.is_parallelizable((0,))
    carried = an.loop_carried(CUMSUM, (0, 1))
    assert carried
    assert all(c.var == "j" and c.tensor == "C" and not c.reduction for c in carried)
    assert any(c.kind == "RAW" for c in carried)


def test_scan_in_place_pattern_is_carried():
    p = parse("""kernel scan(A: f32[4,8]) -> C: f32[4,8]
  for i in 4, j in 8:
    C[i,j] = A[i,j] + where(j > 0, C[i,max(j-1,0)], 0.0)
""")
    a = Analysis(p)
    assert a.carries_dependence((0, 0))
    assert not a.carries_dependence((0,))


def test_injective_split_and_non_injective_accesses():
    # B[i*4+j]: distinct i never touch the same element (|4| > spread of j)
    p = parse("kernel k(A: f32[16]) -> B: f32[16]\n  for i in 4, j in 4:\n    B[i*4+j] = A[i*4+j]\n")
    assert Analysis(p).is_parallelizable((0,))
    # B[i+j]: i=0,j=1 and i=1,j=0 write the same element
    q = parse("kernel k(A: f32[16]) -> B: f32[16]\n  for i in 4, j in 4:\n    B[i+j] = A[i]\n")
    assert Analysis(q).carries_dependence((0,))
    # a temporary overwritten every iteration is carried (WAW) until privatised
    t = parse("kernel k(A: f32[8]) -> B: f32[8]\n  T0: f32\n  for i in 8:\n    T0 = A[i]\n    B[i] = T0\n")
    kinds = {c.kind for c in Analysis(t).loop_carried((0,))}
    assert kinds == {"RAW", "WAW"}


def test_flops_bytes_intensity():
    assert an.flops(MATMUL) == 2 * 16 * 8 * 32
    assert an.bytes_moved(MATMUL) == (16 * 32 + 32 * 8 + 16 * 8) * 4
    assert an.arithmetic_intensity(MATMUL) == an.flops(MATMUL) / an.bytes_moved(MATMUL)
    a = Analysis(GELU)
    # reduction: mul + add; epilogue: + * + erf * + * = 7 ops (the shared T0+C counted twice)
    assert a.statement_flops((0, 0, 0, 0)) == 2 * 8 * 32 * 64
    assert a.statement_flops((0, 0, 1)) == 7 * 8 * 32
    # the intermediate T0 is not compulsory traffic; unused inputs are not counted
    assert a.bytes_moved == (8 * 64 + 64 * 32 + 32 + 8 * 32) * 4
    u = parse("kernel k(A: f64[8], B: i8[100]) -> C: f64[8]\n  for i in 8:\n    C[i] = f64(i)\n")
    assert an.bytes_moved(u) == 8 * 8 and an.flops(u) == 0


def test_results_are_deterministic():
    a1, a2 = Analysis(GELU), Analysis(parse(__import__("steptp.leir", fromlist=["format_program"]).format_program(GELU)))
    assert a1.dependences == a2.dependences
    assert list(a1.reads(())) == list(a2.reads(()))
    assert a1.loop_carried((0, 0, 0)) == a2.loop_carried((0, 0, 0))
