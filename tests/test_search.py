"""Search policies on a tiny kernel with real TVM builds, verification and timing (no mocks)."""

from __future__ import annotations

import math

import pytest

from steptp.leir import parse
from steptp.leir.ast import walk
from steptp.records import StepRecord, TrajectoryRecord, read_records, table, write_table
from steptp.search import Budget, InProcessEvaluator, Search, make_policy, search_kernel
from steptp.analysis.cost_model import features, predict, score
from steptp.search.ranker import LearnedCostModel, Ranker
from steptp.search.run import trajectory_id

MATMUL = "kernel f32 matmul(A[32,32], B[32,32]) -> C[32,32]\n C[i,j] += A[i,k] * B[k,j]\n"
LOOPS = ["loop_split", "loop_reorder", "loop_tiling", "loop_parallelization",
         "loop_vectorization", "loop_unrolling", "reduction_factorization"]
BUDGET = 5


@pytest.fixture(scope="module")
def evaluator():
    ev = InProcessEvaluator()
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def results(evaluator):
    prog = parse(MATMUL)
    out = {}
    for name in ("greedy", "beam", "mcts", "random"):
        out[name] = search_kernel(prog, "mm32", name, Budget(BUDGET, 25), seed=0,
                                  evaluator=evaluator, strategies=LOOPS, return_result=True)
    return out


def _check_trajectory_consistency(res):
    steps = res.steps
    assert steps, "no rows"
    base = res.baseline.median_s
    by_after = {r.after_leir: r for r in steps if r.verified and r.after is not None}
    for r in steps:
        assert isinstance(r, StepRecord)
        if r.after is None:
            assert r.outcome in ("failed_verify", "failed_build", "timeout", "crashed")
            continue
        # every kept (measured) step was verified
        assert r.verified and r.outcome in ("improved", "not_improved")
        assert r.step_speedup == pytest.approx(r.before.median_s / r.after.median_s, rel=1e-9)
        assert r.cumulative_speedup == pytest.approx(base / r.after.median_s, rel=1e-9)
        # the product of the step speedups along the path equals the cumulative one
        prod, cur, depth = 1.0, r, r.step_index
        while True:
            prod *= cur.step_speedup
            parent = by_after.get(cur.before_leir)
            if parent is None:
                assert cur.step_index == 0 and cur.before.median_s == base
                break
            assert parent.step_index == cur.step_index - 1
            assert parent.after == cur.before
            cur = parent
        assert prod == pytest.approx(r.cumulative_speedup, rel=1e-9)
        assert depth >= 0
    tr = res.trajectory
    assert isinstance(tr, TrajectoryRecord)
    assert tr.baseline_s == base
    assert tr.speedup == pytest.approx(base / tr.best_s)
    assert tr.n_steps == len(tr.strategies)
    assert tr.speedup >= 1.0 - 1e-12  # the unscheduled kernel is a valid best
    if tr.n_steps:
        last = by_after[tr.final_leir]
        assert last.cumulative_speedup == pytest.approx(tr.speedup)
        assert last.step_index == tr.n_steps - 1


@pytest.mark.parametrize("name", ["greedy", "beam", "mcts", "random"])
def test_policy_produces_valid_trajectories(results, name):
    res = results[name]
    assert res.error == ""
    assert 1 <= res.measurements <= BUDGET
    assert all(r.policy == name for r in res.steps)
    assert {r.trajectory_id for r in res.steps} == {trajectory_id("mm32", name, 0)}
    _check_trajectory_consistency(res)
    fr = res.fractions(BUDGET)
    assert set(fr) == {"25%", "50%", "100%"} and fr["100%"] == pytest.approx(1.0)
    assert fr["25%"] <= fr["50%"] <= fr["100%"] + 1e-12


def test_rows_record_the_canonical_hash_of_each_program(results):
    """Curation compares programs by the hashes the search records (it would otherwise parse
    every row again): each must be the canonical hash of the row's own text."""
    from steptp.leir import parse
    from steptp.leir.canon import canonical_hash

    rows = [r for res in results.values() for r in res.steps]
    assert rows
    for r in rows:
        assert r.before_hash == canonical_hash(parse(r.before_leir))
        assert r.after_hash == canonical_hash(parse(r.after_leir))
    assert len({r.after_hash for r in rows}) > 1


def test_negatives_are_kept(results):
    """Non-improving (and, where they happen, failed) candidates are rows with their outcome."""
    outcomes = [r.outcome for res in results.values() for r in res.steps]
    assert "not_improved" in outcomes
    assert len(outcomes) == sum(res.verifications for res in results.values())


def test_failed_candidate_is_a_row(evaluator):
    """A candidate that computes something else is recorded as failed_verify, not timed."""
    from steptp.strategies import Candidate, Site

    s = Search(parse(MATMUL), "mm32", "greedy", Budget(4, 60), 0, evaluator, strategies=LOOPS)
    wrong = parse("kernel f32 matmul(A[32,32], B[32,32]) -> C[32,32]\n C[i,j] += A[i,k] * B[j,k]\n")
    from steptp.leir.canon import canonical_text

    bad = Candidate("loop_reorder", Site.make((0,), ["i", "j", "k"]), {"order": ["j", "i", "k"]},
                    wrong, "exact", canonical_text(wrong))
    assert s.evaluate(s.root, bad) is None
    row = s.steps[-1]
    assert row.outcome == "failed_verify" and not row.verified and row.after is None
    assert row.reason and s.measurements == 0


def test_ids_and_candidate_order_are_deterministic(evaluator):
    prog = parse(MATMUL)
    assert trajectory_id("k", "beam", 0) == trajectory_id("k", "beam", 0)
    assert trajectory_id("k", "beam", 0) != trajectory_id("k", "beam", 1)
    orders = []
    for _ in range(2):
        s = Search(prog, "mm32", "beam", Budget(1, 60), 0, evaluator, strategies=LOOPS,
                   ranker=Ranker(learned=False))
        orders.append([(c.strategy, str(c.site), repr(sorted(c.params.items())))
                       for c in s.ranked(s.root)])
    assert orders[0] == orders[1] and len(orders[0]) > 5


def test_tables_roundtrip(results, tmp_path):
    steps = [r for res in results.values() for r in res.steps]
    trajs = [res.trajectory for res in results.values()]
    p1 = write_table(table(steps, StepRecord), tmp_path / "steps.parquet")
    p2 = write_table(table(trajs, TrajectoryRecord), tmp_path / "trajectories.parquet")
    assert read_records(p1, StepRecord) == steps
    assert read_records(p2, TrajectoryRecord) == trajs


def test_cost_model_orders_matmul_schedules():
    naive = parse("kernel f32 mm(A[512,512], B[512,512]) -> C[512,512]\n C[i,j] += A[i,k] * B[k,j]\n")
    good = parse("kernel f32 mm(A[512,512], B[512,512]) -> C[512,512]\n"
                 " for i in 512 parallel, k in 512, j in 32, l in 16 vectorized:\n"
                 "  C[i,j*16+l] += A[i,k] * B[k,j*16+l]\n")
    assert predict(good) < predict(naive) / 4
    assert score(good) < score(naive)
    m = LearnedCostModel(min_samples=8)
    assert not m.fit([naive, good, naive, good], [0.2, 0.01, 0.21, 0.011])  # too few samples
    assert features(naive).shape == features(good).shape
    m2 = LearnedCostModel(min_samples=4)
    for k in range(4):
        m2.add(naive, 0.2 + 0.01 * k)
        m2.add(good, 0.01 + 0.001 * k)
    assert m2.fit()
    pn, pg = m2.predict([naive, good])
    assert pg < pn


def test_unknown_policy():
    with pytest.raises(ValueError):
        make_policy("annealing")


def test_action_space_offers_register_tilings_of_a_reduction():
    from steptp.search.space import actions

    mm = parse("kernel f32 mm(A[64,64], B[64,64]) -> C[64,64]\n C[i,j] += A[i,k] * B[k,j]\n")
    tiles = sorted(tuple(c.params["factors"]) for c in actions(mm)
                   if c.strategy == "loop_tiling" and c.params.get("point") == "inner")
    # rows 2..16, columns half a vector register (8 f32) to four of them (64: the whole row),
    # as long as the accumulators leave 4 of the 32 AVX-512 registers for the operands: 8x64,
    # 16x32 and 16x64 would need 32 and 64 (every update spills)
    assert tiles == sorted((r, c) for r in (2, 4, 8, 16) for c in (8, 16, 32, 64)
                           if r * -(-c // 16) <= 28)
    assert (8, 32) in tiles and (4, 64) in tiles and (8, 64) not in tiles
    # unless the tile spans the whole row loop: 8 rows of 64 then stream B once
    skinny = parse("kernel f32 mm(A[8,64], B[64,256]) -> C[8,256]\n C[i,j] += A[i,k] * B[k,j]\n")
    assert (8, 64) in {tuple(c.params["factors"]) for c in actions(skinny)
                       if c.strategy == "loop_tiling" and c.params.get("point") == "inner"}
    # but not over a batch loop: every operand differs per batch, nothing is streamed once
    bmm = parse("kernel f32 bmm(A[8,4,64], B[8,64,256]) -> C[8,4,256]\n"
                " C[b,i,j] += A[b,i,k] * B[b,k,j]\n")
    over_b = {tuple(c.params["factors"]) for c in actions(bmm) if c.strategy == "loop_tiling"
              and c.params.get("point") == "inner" and c.params["loops"][0] == "b"}
    assert (8, 32) in over_b and (8, 64) not in over_b
    ew = parse("kernel f32 ew(A[64,64]) -> B[64,64]\n B[i,j] = A[i,j] + 1.0\n")
    assert not [c for c in actions(ew) if c.params.get("point") == "inner"]


def test_action_space_offers_cache_tiles_over_a_register_tile():
    """Over a register tile (rows `i_i`, a vector of columns `j_i`) the space offers cache
    tiles: an outer row loop and the reduction loop tiled with the point loops right above
    the tile's rows, the reduction block by the tile's columns within half of L1, the factors
    dividing. Not over an elementwise nest, and not when the tile's columns alone fill L1."""
    from steptp.analysis.cost_model import L1_BYTES
    from steptp.search.space import actions

    def cache_tiles(text):
        return sorted((tuple(c.params["loops"]), tuple(c.params["factors"])) for c in actions(parse(text))
                      if c.strategy == "loop_tiling" and c.params.get("above"))

    tile = ("kernel f32 mm(A[256,1024], B[1024,512]) -> C[256,512]\n"
            " for i_o in 64, j_o in 8, k in 1024, i_i in 4, j_i in 64 vectorized:\n"
            "  C[i_o*4+i_i,j_o*64+j_i] += A[i_o*4+i_i,k] * B[k,j_o*64+j_i]\n")
    got = cache_tiles(tile)
    # blocks of 32 and 64 of k by 64 columns: 8 and 16 KiB; 128 would be 32 KiB, over half of L1
    assert 64 * 64 * 4 <= L1_BYTES // 2 < 128 * 64 * 4
    assert got == sorted((("i_o", "k"), (r, b)) for b in (32, 64) for r in (2, 4, 8, 16))
    # B is the operand the rows share: `j_o` (which B depends on) is never the outer loop
    assert all(loops[0] == "i_o" for loops, _ in got)
    wide = tile.replace("512]", "4096]").replace("j_o in 8", "j_o in 8").replace(
        "j_i in 64", "j_i in 512").replace("*64+j_i", "*512+j_i")
    assert cache_tiles(wide) == []
    # a strip of B that fits in L1 by itself (64 of k by 64 columns: 16 KiB) needs no block
    small = tile.replace("1024", "64")
    assert "B[64,512]" in small and cache_tiles(small) == []
    ew = ("kernel f32 ew(A[256,512]) -> B[256,512]\n"
          " for i_o in 64, j_o in 8, i_i in 4, j_i in 64 vectorized:\n"
          "  B[i_o*4+i_i,j_o*64+j_i] = A[i_o*4+i_i,j_o*64+j_i] + 1.0\n")
    assert cache_tiles(ew) == []


def test_a_cache_tiles_block_of_accumulators_is_a_stage_within_half_of_l1():
    """``stages_tile_accumulators``: a register tile's accumulators are staged within the
    vector registers; under a cache tile (row tiles between the reduction's blocks) the stage
    at the loop around the reduction holds every row tile's, up to half of L1 (16 row tiles
    of 4x64 f32: 64 KiB of registers would spill, 16 KiB of L1 is fine)."""
    from steptp.analysis.cost_model import L1_BYTES, REGISTERS
    from steptp.analysis.tiles import VECTOR_BYTES
    from steptp.search.space import actions, stages_tile_accumulators

    def stages(text):
        p = parse(text)
        return [c for c in actions(p) if stages_tile_accumulators(p, c)]

    cached = ("kernel f32 mm(A[256,1024], B[1024,512]) -> C[256,512]\n"
              " for i_o_o in 4, j_o in 8, k_o in 16, i_o_i in 16, k_i in 64, i_i in 4,"
              " j_i in 64 vectorized:\n"
              "  C[i_o_o*64+i_o_i*4+i_i,j_o*64+j_i] += A[i_o_o*64+i_o_i*4+i_i,k_o*64+k_i]"
              " * B[k_o*64+k_i,j_o*64+j_i]\n")
    (c,) = stages(cached)
    assert tuple(c.site.loops) == ("j_o",) and "[64,64] local" in c.text
    assert (REGISTERS - 4) * VECTOR_BYTES < 64 * 64 * 4 <= L1_BYTES // 2
    # twice the rows: 32 KiB, over half of L1
    assert stages(cached.replace("i_o_o in 4", "i_o_o in 2").replace("i_o_i in 16", "i_o_i in 32")
                  .replace("i_o_o*64", "i_o_o*128")) == []
    # no cache tile: a 16x64 register tile (4 KiB) is more than the registers hold
    big = ("kernel f32 mm(A[256,1024], B[1024,512]) -> C[256,512]\n"
           " for i_o in 16, j_o in 8, k in 1024, i_i in 16, j_i in 64 vectorized:\n"
           "  C[i_o*16+i_i,j_o*64+j_i] += A[i_o*16+i_i,k] * B[k,j_o*64+j_i]\n")
    assert stages(big) == []
    assert len(stages(big.replace("16", "4").replace("i_o in 4", "i_o in 64"))) == 1


def test_register_tiles_of_a_row_no_vector_divides_use_a_partial_register():
    from steptp.search.space import actions, column_tiles

    # 56 f32 (a ResNet row): 16 does not divide it, 14 fills most of one register; 28 would be
    # a vector LLVM splits badly, so it is not offered
    assert column_tiles(56, 16) == [8, 14]
    assert column_tiles(512, 16) == [8, 16, 32, 64]
    assert column_tiles(12, 16) == [12]     # one masked register: the row is its own column
    assert column_tiles(16, 16) == [8, 16]
    assert column_tiles(4, 16) == []
    conv = parse("kernel f32 c(E[8,58], B[16,8,3]) -> F[16,56]\n"
                 " F[j,l] += E[m,l+o] * B[j,m,o]\n")
    cols = {c.params["factors"][1] for c in actions(conv)
            if c.strategy == "loop_tiling" and c.params.get("point") == "inner"}
    assert cols == {8, 14}


def test_collapse_is_offered_where_whole_registers_divide_the_collapsed_row_only():
    from steptp.search.space import actions, collapse_reason
    from steptp.strategies import Site

    def offered(text):
        return [c.site.loops for c in actions(parse(text)) if c.strategy == "loop_collapse"]

    # a 1x1 conv of 12-wide rows: 12 f32 is no whole AVX-512 register, 6x12 = 72 is not
    # either, 8x12 = 96 is six
    pw = "kernel f32 pw(A[8,{h},12], B[4,8]) -> C[4,{h},12]\n C[j,k,l] += A[m,k,l] * B[j,m]\n"
    assert offered(pw.format(h=8)) == [("k", "l")]
    assert offered(pw.format(h=6)) == []
    # rows of 16 already fill a register; a padded 3-wide conv row walks a wider input row, so
    # the collapsed loop would not be contiguous in it
    assert offered("kernel f32 r(A[8,16]) -> B[8,16]\n B[i,j] = A[i,j] * 2.0\n") == []
    assert offered("kernel f32 c(E[8,8,14], B[4,8,3]) -> F[4,8,12]\n"
                   " F[j,k,l] += E[m,k,l+o] * B[j,m,o]\n") == []
    # parallel balance: 3 rows over 2 cores (a core idles a third of the time), 3 x 6 = 18 do not
    three = parse("kernel f32 t(A[3,6]) -> B[3,6]\n for i in 3, j in 6:\n  B[i,j] = A[i,j] + 1.0\n")
    site = Site.make([0], ["i", "j"])
    assert collapse_reason(three, site, cores=2) == "parallel"
    assert collapse_reason(three, site, cores=3) is None


def test_an_epilogue_moves_into_its_producer_only_once_the_producer_is_vectorized():
    from steptp.search.space import actions

    text = ("kernel f32 mmb(A[8,16], B[16,32], C[32]) -> D[8,32]\n T0[8,32]\n"
            " for i in 2, k in 16, l in 4, j in 32{v}:\n  T0[i*4+l,j] += A[i*4+l,k] * B[k,j]\n"
            " D[i,j] = T0[i,j] + C[j]\n")

    def offered(v):
        return [c.params for c in actions(parse(text.format(v=v))) if c.strategy == "reverse_compute_at"]

    assert offered("") == []
    assert offered(" vectorized") == [{"at": "i"}]


def test_cost_model_reads_an_epilogue_inside_its_producers_tile_from_cache():
    from steptp.analysis import cost_model as cm

    head = ("kernel f32 mmb(A[256,256], B[256,256], C[256]) -> D[256,256]\n T0[256,256]\n")
    mm = "T0[i*16+l,j] += A[i*16+l,k] * B[k,j]"
    apart = parse(head + f" for i in 16, k in 256, l in 16, j in 256 vectorized:\n  {mm}\n"
                  " D[i,j] = T0[i,j] + C[j]\n")
    inside = parse(head + f" for i in 16:\n  for k in 256, l in 16, j in 256 vectorized:\n   {mm}\n"
                   "  for l in 16, j in 256:\n   D[i*16+l,j] = T0[i*16+l,j] + C[j]\n")
    assert cm.predict(inside) < cm.predict(apart)


def test_cost_model_reads_a_collapsed_subscript_pair_as_one_unit_stride_dimension():
    from steptp.analysis import cost_model as cm

    text = ("kernel f32 pw(A[8,8,12], B[4,8]) -> C[4,8,12]\n"
            " for j in 4, x in 6, m in 8, xi in 16{v}:\n"
            "  C[j,(x*16+xi)//12,(x*16+xi)%12] += A[m,(x*16+xi)//12,(x*16+xi)%12] * B[j,m]\n")
    vec, ser = parse(text.format(v=" vectorized")), parse(text.format(v=""))
    f = cm.features(vec)
    assert f[cm.FEATURE_NAMES.index("vector_lanes")] == 16.0
    assert f[cm.FEATURE_NAMES.index("inner_strided")] == 0.0
    assert cm.predict(vec) < cm.predict(ser)


def test_cost_model_reads_dimensions_of_one_element_as_no_break_in_a_contiguous_walk():
    """A 1x1 conv's weights ``B[64,256,1,1]`` walk their input channels one element apart:
    the model read every channel as its own cache line (16x the footprint of ``B[64,256]``),
    and preferred copying the weights into a local buffer that pinned the channel-tile loop
    outermost, re-streaming the input once per channel tile."""
    from steptp.analysis import cost_model as cm

    text = ("kernel f32 pw(A[256,56,56], B[64,256{ones}]) -> C[64,56,56]\n"
            " for k in 56, l_o in 4, j_o in 4, m in 256, j_i in 16, l_i in 14 vectorized:\n"
            "  C[j_o*16+j_i,k,l_o*14+l_i] += A[m,k,l_o*14+l_i] * B[j_o*16+j_i,m{zeros}]\n")
    p = parse(text.format(ones=",1,1", zeros=",0,0"))
    four = cm._estimate(p, False, 2)
    two = cm._estimate(parse(text.format(ones="", zeros="")), False, 2)
    assert four.l1 == two.l1 and four.l2 == two.l2 and four.seconds == two.seconds
    load = next(n for n in walk(p.body[0]) if getattr(n, "tensor", None) == "B")
    b = cm._Access(p.tensors["B"], load.index, False)
    assert b.footprint({"j_i": 16, "m": 256}) == 16 * 256 * 4   # 16 rows of 1 KiB, whole lines


def test_cost_model_reads_a_groups_base_channel_as_the_channel_it_rounds_down():
    from steptp.analysis import cost_model as cm

    # a grouped conv (4 channels a group) as the import writes it, ``j//4*4+m``, and the same
    # computation with the group as its own loop (every subscript affine): the same work and
    # the same memory walk, so the same prediction (it was 11x apart: the opaque subscript
    # spanned all 128 input channels for every output channel)
    head = "kernel f32 g(E[1,128,58,58], B[128,4,3,3]) -> F[1,128,56,56]\n"
    imported = parse(head + " F[i,j,k,l] += E[i,j//4*4+m,k+n,l+o] * B[j,m,n,o]\n")
    grouped = parse(head + " for i in 1, g in 32, jj in 4, k in 56, l in 56, m in 4, n in 3,"
                           " o in 3:\n  F[i,g*4+jj,k,l] += E[i,g*4+m,k+n,l+o] * B[g*4+jj,m,n,o]\n")
    assert cm.predict(imported) == pytest.approx(cm.predict(grouped), rel=0.05)
    e = parse(head + " F[i,j,k,l] += E[i,j//4*4+m,k+n,l+o] * B[j,m,n,o]\n").body[0]
    while not hasattr(e, "value"):
        e = e.body[0]
    (load,) = [ld for ld in cm.A.loads(e.value) if ld.tensor == "E"]
    acc = cm._Access(imported.tensors["E"], load.index, write=False)
    # the footprint over one group: 4 + 3 channels at most (the rounding is at most c - 1)
    assert acc.footprint({"j": 4, "m": 4}) <= 7 * acc.footprint({})
    # but j's step is no stride: a vector loop over j is not a contiguous walk
    assert acc.stride_of("j") == math.inf and acc.stride_of("o") == 1


def test_cost_model_vectorizes_a_row_read_a_few_elements_apart():
    from steptp.analysis import cost_model as cm

    # a stride-2 conv's register tile (8 output channels x 14 output columns, MetaSchedule's
    # tile): the input row is read 2 apart, which two loads and a shuffle assemble per vector
    text = ("kernel f32 c(E[1,128,58,58], B[256,128,3,3]) -> F[1,256,28,28]\n"
            " for i in 1, j in 32, k in 28, l in 2, m in 128, n in 3, o in 3, jj in 8, ll in 14{v}:\n"
            "  F[i,j*8+jj,k,l*14+ll] += E[i,m,k*2+n,l*28+ll*{s}+o] * B[j*8+jj,m,n,o]\n")
    vec, ser = parse(text.format(v=" vectorized", s=2)), parse(text.format(v="", s=2))
    assert cm.features(vec)[cm.FEATURE_NAMES.index("vector_lanes")] == 14.0
    assert cm.predict(vec) < cm.predict(ser) / 4
    # the same tile at stride 1 stays cheaper (fewer loads per vector)
    assert cm.predict(parse(text.format(v=" vectorized", s=1))) < cm.predict(vec)
    # rows 8 apart are a gather (no gain modelled); so is a strided store
    wide = parse(text.format(v=" vectorized", s=8).replace("E[1,128,58,58]", "E[1,128,58,240]"))
    assert cm.features(wide)[cm.FEATURE_NAMES.index("vector_lanes")] == 1.0
    store = parse("kernel f32 t(A[64,64]) -> B[64,128]\n"
                  " for i in 64, j in 64 vectorized:\n  B[i,j*2] = A[i,j]\n")
    assert cm.features(store)[cm.FEATURE_NAMES.index("vector_lanes")] == 1.0


def test_cost_model_counts_an_inlined_bounds_test_as_one_select():
    from steptp.analysis import cost_model as cm

    # a padded max pool with its padding inlined: the where's condition tests loop indices
    # only (integer work and one mask per vector), so inlining saves the padded copy's pass
    # instead of costing ~16 float ops per window element
    head = "kernel f32 p(A[1,8,32,32]) -> B[1,8,16,16]\n"
    staged = parse(head + " C[1,8,34,34]\n"
                   " C[i,j,k,l] = where(1 <= k and k < 33 and 1 <= l and l < 33,"
                   " A[i,j,k-1,l-1], -3.0e+38)\n"
                   " for i in 1, j in 8, k in 16, l in 16, m in 3, n in 3:\n"
                   "  B[i,j,k,l] max= C[i,j,k*2+m,l*2+n]\n")
    inlined = parse(head + " for i in 1, j in 8, k in 16, l in 16, m in 3, n in 3:\n"
                    "  B[i,j,k,l] max= where(1 <= k*2+m and k*2+m < 33 and 1 <= l*2+n and"
                    " l*2+n < 33, A[i,j,k*2+m-1,l*2+n-1], -3.0e+38)\n")
    assert cm.predict(inlined) < 0.9 * cm.predict(staged)   # it was 3.7x the staged one
    st = cm._statements(inlined)[0].stmt
    assert cm._ops(st.value) == 1     # the select; the max is the reduction's own op
    # a condition that reads memory (a mask tensor) is data, and its arithmetic still counts
    masked = parse("kernel f32 m(A[64], M[64]) -> B[64]\n"
                   " B[i] = where(M[i] * 2.0 + 1.0 > 0.5, A[i], 0.0)\n")
    assert cm._ops(cm._statements(masked)[0].stmt.value) == 4


def test_the_space_offers_no_reorder_that_moves_only_single_iteration_loops():
    """Moving ``i in 1`` about the band is the same schedule in another text: not offered
    (a max pool's search measured 8 of them, and one put ``i`` innermost, under its window)."""
    from steptp.search.space import actions

    pool = parse("""kernel f32 mp(A[1,8,18,18]) -> B[1,8,8,8]
 for i in 1, j in 8, k in 8, l in 8, m in 3, n in 3:
  B[i,j,k,l] max= A[i,j,k*2+m,l*2+n]
""")
    orders = [c.params["order"] for c in actions(pool, "cpu", 0, ("loop_reorder",))]
    real = [[v for v in o if v != "i"] for o in orders]
    assert orders and all(r != ["j", "k", "l", "m", "n"] for r in real)
    assert ["i", "j", "k", "l", "n", "m"] in orders or ["j", "k", "l", "n", "m", "i"] in orders


def test_unrolling_copies_of_a_long_serial_loop_are_bounded():
    from steptp.search.space import (MAX_UNROLLED, MAX_UNROLLED_OVER_LOOPS, actions,
                                     unrolled_over_loops, unrolled_size)

    def mm(ko: str, ki: str) -> str:
        return ("kernel f32 mm(A[4,128], B[128,64]) -> C[4,64]\n"
                f" for i in 4, ko in 8{ko}, ki in 16{ki}, j in 64:\n"
                "  C[i,j] += A[i,ko*16+ki] * B[ko*16+ki,j]\n")

    assert unrolled_over_loops(parse(mm("", ""))) == 1
    assert unrolled_over_loops(parse(mm("", " unrolled"))) == 16
    # 128 copies of the 64-long j loop: few statement copies, but each copy of a long loop is
    # vectorized with its own checks and remainder (such builds took minutes)
    both = parse(mm(" unrolled", " unrolled"))
    assert unrolled_size(both) == 128 <= MAX_UNROLLED
    assert unrolled_over_loops(both) == 128 > MAX_UNROLLED_OVER_LOOPS
    offered = [c.text for c in actions(parse(mm("", " unrolled")), strategies=["loop_unrolling"])]
    assert any("i in 4 unrolled" in t for t in offered)        # 64 copies: fine
    assert not any("ko in 8 unrolled" in t for t in offered)   # 128 copies: never offered


def test_band_dependences_are_shared_between_orders_of_one_band():
    from steptp.strategies import get
    from steptp.strategies.loops import _BAND_DEPS, _band_dependences

    text = "kernel f32 k(A[16,16]) -> B[16,16]\n for i in 15, j in 16:\n  B[i+1,j] = B[i,j] + A[i,j]\n"
    prog = parse(text)
    s = get("loop_reorder")
    site = next(iter(s.sites(prog)))
    _BAND_DEPS.clear()
    first = _band_dependences(prog, tuple(site.path), tuple(site.loops))
    assert _band_dependences(prog, tuple(site.path), tuple(site.loops)) is first
    # a structurally equal program is another object: its own (equal) entry, never a stale one
    again = parse(text)
    assert _band_dependences(again, tuple(site.path), tuple(site.loops)) is not first
    # the verdicts read from the shared vectors: i carries the dependence, so j may go outside
    # (it carries none) but the order must keep i's direction positive either way
    assert s.check(prog, site, {"order": ["j", "i"]}).ok
    blocked = parse("kernel f32 k(A[16,16]) -> B[16,16]\n"
                    " for i in 15, j in 15:\n  B[i+1,j] = B[i,j+1] + A[i,j]\n")
    site_b = next(iter(s.sites(blocked)))
    v = s.check(blocked, site_b, {"order": ["j", "i"]})
    assert not v.ok and "reverses" in v.reason


def test_cost_model_prefers_a_register_tile_that_fits():
    from steptp.analysis import cost_model as cm

    def tiled(ti: int, tj: int) -> str:
        return (f"kernel f32 mm(A[512,512], B[512,512]) -> C[512,512]\n"
                f" for io in {512 // ti}, jo in {512 // tj}, k in 512, ii in {ti}, "
                f"ji in {tj} vectorized:\n"
                f"  C[io*{ti}+ii,jo*{tj}+ji] += A[io*{ti}+ii,k] * B[k,jo*{tj}+ji]\n")

    ikj = parse("kernel f32 mm(A[512,512], B[512,512]) -> C[512,512]\n"
                " for i in 512, k in 512, j in 512:\n  C[i,j] += A[i,k] * B[k,j]\n")
    fits, spills = parse(tiled(4, 64)), parse(tiled(16, 64))   # 16 vs 64 accumulator registers
    assert cm.predict(fits) < cm.predict(spills)
    assert cm.predict(fits) < cm.predict(ikj)
    assert cm.features(fits)[cm.FEATURE_NAMES.index("register_tile")] == 16.0


def test_search_modules_import_one_way():
    """run.py (the search state) imports no policy; policies import run; kernel.py joins them."""
    import ast
    from pathlib import Path

    import steptp.search as S

    def imports(mod: str) -> set[str]:
        tree = ast.parse((Path(S.__file__).parent / f"{mod}.py").read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}

    assert "policies" not in imports("run") and "kernel" not in imports("run")
    assert "run" in imports("policies") and "kernel" not in imports("policies")
    assert {"run", "policies"} <= imports("kernel")


def test_lookahead_credits_a_step_with_what_its_finishing_moves_reach(evaluator):
    """Search.lookahead scores each candidate by the best the cost model expects after a
    finishing move (vectorize / parallelize / unroll / reorder): never above its own score,
    below it where a finishing move pays (a split whose inner loop can then be vectorized), and
    each state's finishing moves are enumerated once. Beam(lookahead=k) re-ranks only the k best
    actions of a state, the same way on every run."""
    from steptp.search.policies import Beam

    prog = parse(MATMUL)
    s = Search(prog, "mm32", "beam", Budget(1, 60), 0, evaluator, strategies=LOOPS,
               ranker=Ranker(learned=False))
    cands = s.ranked(s.root)[:8]
    own = s.ranker.scores([c.program for c in cands])
    look = s.lookahead(cands, depth=2)
    assert all(v <= o + 1e-12 for v, o in zip(look, own))
    assert any(v < o - 1e-6 for v, o in zip(look, own))
    n = s.lookahead_expansions
    assert n == len(cands)
    assert s.lookahead(cands, depth=2) == look and s.lookahead_expansions == n
    orders = []
    for _ in range(2):
        s = Search(prog, "mm32", "beam", Budget(1, 60), 0, evaluator, strategies=LOOPS,
                   ranker=Ranker(learned=False))
        before = [c.text for c in s.ranked(s.root)]
        Beam(lookahead=4)._look(s, s.root)
        after = [c.text for c in s.ranked(s.root)]
        assert sorted(after[:4]) == sorted(before[:4]) and after[4:] == before[4:]
        orders.append(after)
    assert orders[0] == orders[1]


class _TileTimes:
    """Real verification, timings from the cost model with every unvectorized register tile
    4x slower (as a stride-2 conv's 8x14 tile measured before its vector loop): the policy's
    order is under test, and measured times would make it depend on the machine's noise."""

    def __init__(self, real):
        self.real, self.target, self.num_threads, self.fingerprint = real, real.target, 1, "model"

    def verify(self, original, candidate, exactness):
        return self.real.verify(original, candidate, exactness)

    def time(self, program, **kw):
        from steptp.records import Timing
        from steptp.analysis import cost_model as cm
        from steptp.measure.runner.base import TimingOutcome

        p = parse(program)
        f = cm.features(p)
        m = cm.predict(p)
        if f[cm.FEATURE_NAMES.index("register_tile")] > 0 \
                and f[cm.FEATURE_NAMES.index("vector_lanes")] < 4:
            m *= 4
        return TimingOutcome(timing=Timing(median_s=m, min_s=m, spread=0.0, repeats=5, number=1))

    def close(self):
        pass


def test_beam_vectorizes_a_states_first_register_tile_right_away(evaluator):
    from steptp.search.policies import Beam

    mm = "kernel f32 matmul(A[64,64], B[64,64]) -> C[64,64]\n C[i,j] += A[i,k] * B[k,j]\n"
    s = Search(parse(mm), "mm64", "beam", Budget(5, 120), 0, _TileTimes(evaluator),
               strategies=LOOPS, ranker=Ranker(learned=False))
    Beam(finish=0).run(s)   # no measurements kept for the last finishing moves
    steps = [r for r in s.steps if r.after is not None]
    k = next(i for i, r in enumerate(steps) if r.strategy == "loop_tiling")
    tile = steps[k]
    assert tile.params["point"] == "inner" and tile.outcome == "not_improved"
    # measured right after it, from it: its vector loop (the beam would move on to the root's
    # next actions and drop the tile), then the vectorized tile's outer loop in parallel, as
    # MetaSchedule finishes every tile; only once per state: the next tile is not followed
    vec, par = steps[k + 1], steps[k + 2]
    assert vec.strategy == "loop_vectorization" and vec.before_leir == tile.after_leir
    assert vec.after.median_s < tile.before.median_s
    assert par.strategy == "loop_parallelization" and par.before_leir == vec.after_leir
    assert " parallel" in par.after_leir and " vectorized" in par.after_leir
    assert steps[k + 3].strategy == "loop_tiling" and steps[k + 3].before_leir == tile.before_leir


def _first_tiles_follow_through(ev, strategies=LOOPS, rows=3):
    """The ``rows`` rows measured after the first register tile of a 128x1024x512 matmul's
    beam search (no finish) with ``ev``'s timings."""
    from steptp.search.policies import Beam

    mm = "kernel f32 matmul(A[128,1024], B[1024,512]) -> C[128,512]\n C[i,j] += A[i,k] * B[k,j]\n"
    s = Search(parse(mm), "mm", "beam", Budget(rows + 3, 300), 0, ev, strategies=strategies,
               ranker=Ranker(learned=False))
    Beam(finish=0).run(s)
    steps = [r for r in s.steps if r.after is not None]
    k = next(i for i, r in enumerate(steps) if r.strategy == "loop_tiling")
    return steps[k + 1:k + 1 + rows]


def test_a_first_register_tile_is_cache_tiled_before_its_stage_when_the_model_expects_it(evaluator):
    """The follow-through of a state's first register tile: vectorize, then the cost model's
    best cache tile over it (``CACHE_TILE``) when it expects one to pay (a 4-row tile of this
    matmul walks all of B, 2 MiB, per 4 rows), then the stage (none: the cache tile keeps the
    accumulators in C across k's blocks) and the parallel loop, each step from the one
    before; the rows verify with TVM."""
    from steptp.search.policies import FINISH_TILE, CACHE_TILE

    assert FINISH_TILE.index(CACHE_TILE) == 1
    vec, cache, par = _first_tiles_follow_through(_TileTimes(evaluator))
    assert vec.strategy == "loop_vectorization"
    assert cache.strategy == "loop_tiling" and cache.params.get("above") \
        and cache.before_leir == vec.after_leir
    assert par.strategy == "loop_parallelization" and par.before_leir == cache.after_leir
    assert all(r.verified for r in (vec, cache, par))
    assert cache.after.median_s < vec.after.median_s


def test_a_register_tile_vectorized_into_the_fastest_state_is_finished_at_once(evaluator):
    """Not only a state's first tile: any register tile whose vectorization is the fastest
    state so far, with a cache tile or a stage still to take, is finished right away
    (``Beam._new_best_tile``); a vectorization that is not the fastest, or leaves nothing to
    take, is not."""
    from steptp.search.policies import FINISH_TILE, Beam

    mm = "kernel f32 matmul(A[128,1024], B[1024,512]) -> C[128,512]\n C[i,j] += A[i,k] * B[k,j]\n"
    s = Search(parse(mm), "mm", "beam", Budget(8, 300), 0, _TileTimes(evaluator),
               strategies=LOOPS, ranker=Ranker(learned=False))
    tiles = [c for c in s.ranked(s.root) if c.strategy == "loop_tiling"
             and c.params.get("point") == "inner" and c.params["factors"] == [4, 64]]
    c_tile = tiles[0]
    tile = s.evaluate(s.root, c_tile)
    c_vec = next(c for c in s.untried(tile) if c.strategy == "loop_vectorization"
                 and " in 64 vectorized" in c.text)
    before = s.best.seconds
    vec = s.evaluate(tile, c_vec)
    assert vec.seconds < before
    assert Beam._new_best_tile(s, c_vec, vec, before)
    assert not Beam._new_best_tile(s, c_vec, vec, vec.seconds / 2)   # not the fastest
    # a serial tile competes with serial states: a faster parallel one does not count
    par = s.evaluate(vec, next(c for c in s.untried(vec) if c.strategy == "loop_parallelization"
                               and " parallel" in c.text.splitlines()[1]))
    assert par.seconds < vec.seconds
    assert Beam._best_like(s, tile) == vec.seconds and Beam._best_like(s, par) == par.seconds
    plain = "kernel f32 add(A[64,64]) -> B[64,64]\n B[i,j] = A[i,j] + 1.0\n"
    s2 = Search(parse(plain), "add", "beam", Budget(4, 60), 0, _TileTimes(evaluator),
                strategies=LOOPS, ranker=Ranker(learned=False))
    c2 = next(c for c in s2.ranked(s2.root) if c.strategy == "loop_vectorization")
    v2 = s2.evaluate(s2.root, c2)
    assert not Beam._new_best_tile(s2, c2, v2, math.inf)   # no tile: nothing to cache or stage
    # the finish it gets (``FINISH_TILE`` after the vectorization): the cache tile first, from
    # the vectorized tile
    got = Beam()._follow_through(s, vec, FINISH_TILE[1:])
    assert got and got[0].parent is vec
    assert s.steps[-len(got)].strategy == "loop_tiling" and s.steps[-len(got)].params.get("above")


class _SlowCacheTiles(_TileTimes):
    """``_TileTimes``, with every cache-tiled program (its 7-loop nest) 10x slower."""

    def time(self, program, **kw):
        from steptp.records import Timing
        from steptp.measure.runner.base import TimingOutcome

        t = super().time(program, **kw).timing
        nests = [ln for ln in program.splitlines() if ln.lstrip().startswith("for ")]
        if any(ln.count(" in ") >= 7 for ln in nests):   # a cache tile's 7 loops
            m = t.median_s * 10
            t = Timing(median_s=m, min_s=m, spread=0.0, repeats=5, number=1)
        return TimingOutcome(timing=t)


class _SlowCacheBlocks(_TileTimes):
    """``_TileTimes``, with every cache-tiled program 10x slower, its block of accumulators
    staged or not (7 loops in all: the stage puts the fill and copy-out between them)."""

    def time(self, program, **kw):
        from steptp.records import Timing
        from steptp.measure.runner.base import TimingOutcome

        t = super().time(program, **kw).timing
        if sum(ln.count(" in ") for ln in program.splitlines() if ln.lstrip().startswith("for ")) >= 7:
            m = t.median_s * 10
            t = Timing(median_s=m, min_s=m, spread=0.0, repeats=5, number=1)
        return TimingOutcome(timing=t)


WITH_STAGES = LOOPS + ["cache_read_write"]


def test_a_cache_tile_that_measures_slower_is_skipped_not_built_on(evaluator):
    """The follow-through measures the cache tile; measured slower than the vectorized tile
    (and, where a stage can be taken, slower staged too), the stage and the parallel loop come
    from the vectorized tile, not from the cache tile."""
    vec, cache, par = _first_tiles_follow_through(_SlowCacheTiles(evaluator))
    assert cache.params.get("above") and cache.after.median_s > vec.after.median_s
    assert par.strategy == "loop_parallelization" and par.before_leir == vec.after_leir

    vec, cache, staged, stage, par = _first_tiles_follow_through(
        _SlowCacheBlocks(evaluator), WITH_STAGES, rows=5)
    assert cache.params.get("above") and cache.after.median_s > vec.after.median_s
    assert staged.strategy == "cache_read_write" and staged.before_leir == cache.after_leir
    assert staged.after.median_s > vec.after.median_s
    assert stage.strategy == "cache_read_write" and stage.before_leir == vec.after_leir
    assert par.strategy == "loop_parallelization" and par.before_leir == stage.after_leir


def test_a_slower_cache_tile_that_pays_staged_is_built_on(evaluator):
    """Unstaged, a cache tile's row tiles reload their accumulators every block of the
    reduction, so it is judged with its block of accumulators staged (``Beam._staged``): a
    cache tile 10x slower unstaged but faster than the vectorized tile once staged is what the
    parallel loop is taken from; the stage is not measured again from the vectorized tile."""
    vec, cache, staged, par = _first_tiles_follow_through(
        _SlowCacheTiles(evaluator), WITH_STAGES, rows=4)
    assert cache.params.get("above") and cache.after.median_s > vec.after.median_s
    assert staged.strategy == "cache_read_write" and staged.before_leir == cache.after_leir
    assert staged.after.median_s < vec.after.median_s and staged.verified
    # the stage holds every row tile's accumulators: more than the registers, within L1
    assert " local" in staged.after_leir.splitlines()[1]
    assert par.strategy == "loop_parallelization" and par.before_leir == staged.after_leir
    assert par.verified and " parallel" in par.after_leir


def test_rows_keep_the_names_their_site_and_reasoning_use(evaluator):
    """A row's programs keep the strategies' names: after a reorder each loop keeps its name
    (the canonical renaming would call the new innermost loop by the old innermost's name, and
    the reasoning "`k` becomes the innermost loop" would contradict the answer's program); a
    split's loops are ``i_o``/``i_i``; the child's row starts from its parent's written text."""
    from steptp.cot import TemplateWriter, validate
    from steptp.format.cot_schema import think_text
    from steptp.cot.facts import program_facts
    from steptp.leir.canon import canonical_text

    s = Search(parse(MATMUL), "mm32", "greedy", Budget(4, 60), 0, evaluator, strategies=LOOPS)
    assert s.root.leir == s.root.text        # the root is the canonically renamed kernel
    re_ = next(c for c in s.ranked(s.root) if c.strategy == "loop_reorder"
               and c.params["order"][-1] != "k")
    child = s.evaluate(s.root, re_)
    row = child.step
    new = re_.params["order"][-1]
    hot = program_facts(row.after_leir).hot_statement
    assert hot.innermost == new               # the canonical text would name it `k`
    assert program_facts(child.text).hot_statement.innermost == "k"
    assert canonical_text(parse(row.after_leir)) == child.text   # the same state
    cot = TemplateWriter(seed=0).write(row)
    validate(cot, row)
    text = think_text(cot)
    assert f"`{new}` becomes the innermost loop" in text or f"makes `{new}` innermost" in text

    sp = next(c for c in s.ranked(child) if c.strategy == "loop_split")
    grand = s.evaluate(child, sp)
    loop = sp.site.loops[0]
    assert grand.step.before_leir == row.after_leir
    assert f"for {loop}_o in " in grand.step.after_leir and f"{loop}_i" in grand.step.after_leir


def test_beam_root_option_measures_fewer_of_the_unscheduled_kernels_actions(evaluator):
    """``Beam(root=k)``: the first level measures only the root's k best-ranked actions (the
    budget then goes deeper); without it the root gets the level's ``per_level``."""
    from steptp.search.policies import Beam

    mm = "kernel f32 matmul(A[64,64], B[64,64]) -> C[64,64]\n C[i,j] += A[i,k] * B[k,j]\n"

    def root_rows(policy):
        s = Search(parse(mm), "mm64", "beam", Budget(10, 120), 0, _TileTimes(evaluator),
                   strategies=LOOPS, ranker=Ranker(learned=False))
        policy.run(s)
        rows = [r for r in s.steps if r.after is not None]
        return sum(r.step_index == 0 for r in rows), max(r.step_index for r in rows)

    at_root, deepest = root_rows(Beam(finish=0, root=2))
    assert at_root == 2 and deepest >= 3                  # the budget went deeper
    at_root8, deepest8 = root_rows(Beam(finish=0))
    assert at_root8 >= 5 and deepest8 < deepest          # per_level (8) of the root's actions


def test_beam_explore_measures_a_family_the_cost_model_ranks_last(evaluator):
    """``Beam(explore=e)``: the first e levels give their last slot to the best-ranked action
    of a strategy family (else a strategy) no step has tried yet. A fused matmul + bias offers
    graph moves (inlining, fusion) and memory moves (staging) beside the loop moves; the
    model ranks loop moves first, so without exploration no graph step is measured."""
    from steptp.search.policies import Beam
    from steptp.strategies import get

    fused = ("kernel f32 mm_bias(A[64,64], B[64,64], C[64]) -> D[64,64]\n"
             " E[64,64]\n"
             " E[i,j] += A[i,k] * B[k,j]\n"
             " D[i,j] = E[i,j] + C[j]\n")
    allowed = LOOPS + ["compute_inline", "operator_fusion", "loop_fusion", "cache_read_write",
                       "reverse_compute_at"]

    def run(policy):
        s = Search(parse(fused), "mmb", "beam", Budget(12, 120), 0, _TileTimes(evaluator),
                   strategies=allowed, ranker=Ranker(learned=False))
        policy.run(s)
        return s.steps

    plain = run(Beam(finish=0))
    explored = run(Beam(finish=0, explore=2))
    fams = lambda rows: [get(r.strategy).family for r in rows]          # noqa: E731
    assert len(explored) == len(plain)                                  # the same budget
    assert "graph" not in fams(plain)                                   # ranked below the loop moves
    graph = [r for r in explored if get(r.strategy).family == "graph"]
    assert len(graph) == 1 and graph[0].step_index == 0                 # the root level's last slot
    assert len({r.strategy for r in explored}) == len({r.strategy for r in plain}) + 1
    # deterministic: the same steps again
    again = run(Beam(finish=0, explore=2))
    assert [(r.strategy, r.after_hash) for r in again] == [(r.strategy, r.after_hash) for r in explored]


def test_search_explore_is_a_beam_setting_the_pipeline_passes_on():
    """``search.explore`` in params reaches the beam of each kernel's search (a real search of
    a tiny fused kernel: its root level's last slot measures a family the loop moves are
    not), and any other policy refuses it with the setting named."""
    import pydantic

    from steptp import params as P
    from steptp.pipeline import search_one
    from steptp.records import KernelRecord
    from steptp.strategies import get

    with pytest.raises(pydantic.ValidationError, match="search.explore .* beam policy"):
        P.Settings.model_validate({"search": {"policy": "mcts", "explore": 1}})
    fused = ("kernel f32 mm_bias(A[16,16], B[16,16], C[16]) -> D[16,16]\n"
             " E[16,16]\n"
             " E[i,j] += A[i,k] * B[k,j]\n"
             " D[i,j] = E[i,j] + C[j]\n")
    k = KernelRecord(kernel_id="mmb16", name="mm_bias", leir=fused, leir_hash="mmb16", tir_hash="",
                     signature=[], occurrences=[], weight=1, flops=1, bytes_moved=1, tvmscript="",
                     target="cpu", raise_ok=True)

    def families(explore):
        s = P.Settings.model_validate({"search": {"explore": explore, "measurements": 6,
                                                  "seconds": 60, "remeasure_rounds": 0}}).search
        steps, trajs = search_one(k, s, log=lambda m: None)
        assert trajs and trajs[0].trajectory_id == steps[0].trajectory_id
        return {get(st.strategy).family for st in steps}

    assert "graph" in families(1) and "graph" not in families(0)


def test_beam_measures_at_most_two_variants_of_one_move_per_level(evaluator):
    """``Beam(variants=2)``: a state's actions at one level hold at most two
    variants of one move (a strategy on one top-level statement). A row sum's root offers a
    dozen reduction factors and tilings the cost model ranks alike; without the rule the root
    level measures mostly factors of the one reduction."""
    from collections import Counter

    from steptp.search.policies import Beam

    rowsum = "kernel f32 rowsum(X[256,768]) -> Y[256]\n Y[i] += X[i,k]\n"
    allowed = LOOPS + ["reduction_factorization"]

    def root_moves(policy):
        s = Search(parse(rowsum), "rs", "beam", Budget(8, 120), 0, _TileTimes(evaluator),
                   strategies=allowed, ranker=Ranker(learned=False))
        policy.run(s)
        rows = [r for r in s.steps if r.step_index == 0][:8]
        return Counter((r.strategy, r.site["path"][0]) for r in rows)

    plain = root_moves(Beam(finish=0))
    assert max(plain.values()) > 2                        # the model's order repeats one move
    diverse = root_moves(Beam(finish=0, variants=2))
    assert max(diverse.values()) <= 2 and len(diverse) > len(plain)


class _SlowParallelFirstNest(_TileTimes):
    """The cost model's times, with every program whose first nest is parallel 3x slower (as
    a copy nest that loses LLVM's memcpy once it is a parallel closure)."""

    def time(self, program, **kw):
        out = super().time(program, **kw)
        p = parse(program)
        if any(getattr(x, "kind", None) == "parallel" for x in walk(p.body[0])):
            t = out.timing
            out.timing = type(t)(median_s=3 * t.median_s, min_s=3 * t.min_s, spread=0.0,
                                 repeats=5, number=1)
        return out


def test_beam_does_not_measure_again_a_change_it_measured_slower(evaluator):
    """``Beam(recall=True)``: an action that replaces the same statements by the
    same statements as a step measured slower elsewhere in the tree goes behind the others, so
    the parallelizations of a nest that measured 3x slower at the root are not measured again,
    unchanged, below it; without it (the default) they are measured again at the next level."""
    from steptp.search.policies import Beam, rewrite_key

    prog = ("kernel f32 two(X[512,512]) -> W[512,512]\n T[512,512]\n"
            " T[i,j] = X[i,j]\n W[i,j] = exp(T[i,j]) * 2.0\n")

    def repeats(policy):
        s = Search(parse(prog), "two", "beam", Budget(16, 120), 0,
                   _SlowParallelFirstNest(evaluator), strategies=LOOPS,
                   ranker=Ranker(learned=False))
        policy.run(s)
        nodes, stack = [], [s.root]
        while stack:
            n = stack.pop()
            nodes.append(n)
            stack.extend(n.children)
        slower = {rewrite_key(m.step.strategy, m.parent.text, m.text) for m in nodes
                  if m.parent is s.root and m.seconds > s.root.seconds}
        again = [m for m in nodes if m.parent is not None and m.parent is not s.root
                 and rewrite_key(m.step.strategy, m.parent.text, m.text) in slower]
        return slower, again

    slower, again = repeats(Beam(finish=0))
    assert slower and again          # the model ranks the slow parallelizations first again
    slower, again = repeats(Beam(finish=0, recall=True))
    assert slower and not again

