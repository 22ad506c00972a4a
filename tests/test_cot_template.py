"""The template writer: deterministic given (step, seed), varied across steps, always valid."""

import json
import re
from collections import Counter

import pytest

from steptp.cot import TemplateWriter, facts, validate, write_cot
from steptp.cot.samples import sample_steps
from steptp.format.cot_schema import SCHEMA_VERSION, cot_from_record, render
from steptp.records import StepRecord, read_records, table, write_table


@pytest.fixture(scope="module")
def steps():
    return sample_steps(limit_per_kernel=6)


def test_every_sample_step_gets_a_valid_cot(steps):
    assert len(steps) >= 20
    assert len({s.strategy for s in steps}) >= 5
    out, summary = write_cot(steps)
    assert summary["ok"] == len(steps) and summary["failed"] == summary["fallbacks"] == 0
    for s in out:
        assert s.cot_source == "template"
        assert s.cot["schema_version"] == SCHEMA_VERSION
        validate(s.cot, s)                       # the stored dict validates too
        assert cot_from_record(s.cot).decision.strategy == s.strategy


def test_deterministic_given_seed(steps):
    a = [TemplateWriter(seed=1).write(s) for s in steps]
    b = [TemplateWriter(seed=1).write(s) for s in steps]
    assert a == b
    c = [TemplateWriter(seed=2).write(s) for s in steps]
    assert sum(x != y for x, y in zip(a, c)) >= len(steps) // 3


def test_wording_varies_across_steps(steps):
    def skeleton(text: str) -> str:       # the sentence with names and numbers masked
        text = re.sub(r"`[^`]*`", "`_`", text)
        return re.sub(r"\d+(\.\d+)?", "N", text)

    cots = [TemplateWriter(seed=0).write(s) for s in steps]
    for field in ("observation.work", "bottleneck.text", "expected_effect.text", "check.text"):
        part, attr = field.split(".")
        sk = Counter(skeleton(getattr(getattr(c, part), attr)) for c in cots)
        assert len(sk) >= 3, f"{field}: only {len(sk)} distinct sentences"
        assert sk.most_common(1)[0][1] < len(cots) * 0.6, f"{field}: one sentence dominates"
    texts = {skeleton(c.observation.computes) for c in cots}
    assert len(texts) >= 5


def test_facts_are_grounded(steps):
    st = next(s for s in steps if s.kernel_id == "matmul_bias_gelu")
    f = facts(st)
    assert f.before.flops == 2 * 16 * 32 * 64 + 7 * 16 * 32
    hot = f.before.hot_statement
    assert hot.reduction_axes == ("k",)
    strides = {a.text: a.stride for a in hot.accesses}
    assert strides["A[i,k]"] == 1 and strides["B[k,j]"] == 32 and strides["T0[i,j]"] == 0
    assert f.before.footprint_bytes["B"] == 64 * 32 * 4
    assert f.numbers["before.median_s"] == pytest.approx(2.4e-5)
    assert set(f.outputs) == {"D"}


def test_render_think_then_answer(steps):
    st = steps[0]
    cot = TemplateWriter().write(st)
    text = render(cot, {"strategy": st.strategy, "site": st.site, "params": st.params,
                        "program": st.after_leir})
    assert text.startswith("<think>\n") and "\n</think>\n" in text
    answer = json.loads(text.split("</think>\n", 1)[1])
    assert answer == {"strategy": st.strategy, "site": st.site, "params": st.params,
                      "program": st.after_leir}
    assert "Candidates:" in text and f"+ `{st.strategy}`" in text


def test_cot_columns_round_trip_parquet(steps, tmp_path):
    out, _ = write_cot(steps[:5])
    p = write_table(table(out, StepRecord), tmp_path / "steps.parquet")
    back = read_records(p, StepRecord)
    assert back == out


def test_content_follows_the_hardware_not_only_the_seed():
    from cot_steps import step
    from steptp.cot.facts import GENERIC, Hardware

    st = step("rowsum", "loop_split", {"path": [0], "loops": ["i"]}, {"factor": 4})
    one = Hardware("one core, AVX2", 32 * 1024, 256 * 1024, 8 << 20, 256, 1)
    a = TemplateWriter(seed=0, hardware=GENERIC).write(st)
    b = TemplateWriter(seed=0, hardware=one).write(st)
    validate(a, st, facts(st, GENERIC))
    validate(b, st, facts(st, one))
    # the caches the text reasons with are the machine's, per core
    assert "fits in L2 (2 MiB per core)" in a.observation.work
    assert "fits in L2 (256 KiB per core)" in b.observation.work


def test_summary_counts_distinct_templates(steps):
    out, summary = write_cot(steps[:12])
    assert 0 < summary["distinct_templates"] < summary["sentences"]
    assert summary["distinct_openings"] >= 2
    assert summary["prediction_agrees"] + summary["prediction_disagrees"] == 12
    assert all("measured" in s.cot and "step_speedup" in s.cot["measured"] for s in out)
    assert all(str(round(s.step_speedup, 2)) + "x" not in s.cot_text.split("</think>")[0] for s in out)


def test_the_refusal_shown_is_the_remedys_else_varies_with_the_seed():
    """Both kernels refuse a collapse of a reduction axis with a spatial loop, first in the
    registry's order; it was the refusal of nearly every released example. A serial row sum
    shows why its reduction loop cannot be parallelized (the diagnosis's remedy); a
    locality-bound matmul, with no refused remedy, shows one teaching refusal or the other
    depending on the seed, never always the same."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from cot_steps import step

    from steptp.cot.facts import GENERIC

    def refused(st, f, seed):
        cot = TemplateWriter(seed=seed, hardware=GENERIC).write(st, f)
        validate(cot.model_dump(), st)
        (r,) = [c for c in cot.candidates if c.refused]
        assert "reduction axis" in r.reason
        return r.strategy

    rowsum = step("rowsum", "reduction_factorization", {"path": [0, 0], "loops": ["j"]}, {"factor": 32})
    f = facts(rowsum, GENERIC)
    assert f.refusals[0].strategy == "loop_collapse"
    assert len({refused(rowsum, f, seed) for seed in range(8)}) >= 2

    mm = step("mm_add", "loop_parallelization", {"path": [0], "loops": ["i"]}, {})
    f = facts(mm, GENERIC)
    # the parallelization answers the nest's serial limit: the refusal shown is the one of a
    # move for the same limit (a collapse that would take in the reduction axis)
    assert f.refusals[0].strategy == "loop_collapse"
    assert {refused(mm, f, seed) for seed in range(8)} == {"loop_collapse"}


def test_every_step_on_a_staged_register_tile_gets_a_valid_cot():
    """A register tile whose accumulators were staged in a local buffer (the beam's finish), serial
    and parallel: the fill and copy-out nests rewrite the same buffer elements every iteration of
    the tile loop, which is reuse; a release once lost the reasoning of such steps because the
    template called it "no reuse" and the validator disagreed."""
    import steptp.strategies as S
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from test_private_buffers import TILE, _parallel_i, _tile_accumulator

    staged = _tile_accumulator(TILE).program
    n = 0
    for prog in (staged, _parallel_i(staged).program):
        for c in S.candidates(prog, max_per_site=2):
            step = make_step("mm", c.strategy, c.site.to_json(), dict(c.params), speedup=1.3,
                             step_index=n, program=prog)
            validate(cot_record(TemplateWriter(seed=n).write(step)), step)
            n += 1
    assert n >= 20
    fill = next(c for c in S.candidates(staged, "loop_unrolling")
                if c.site.to_json()["path"] == [0, 0, 0])
    work = TemplateWriter().write(make_step("mm", fill.strategy, fill.site.to_json(),
                                            dict(fill.params), program=staged)).observation.work
    assert "`T0[c0,c1]`" in work and "iteration of `j`" in work and "no reuse" not in work


def test_a_nest_too_large_to_count_claims_no_overlap_figures():
    """Beyond ``MAX_POINTS`` iterations the facts do not count touched elements exactly; the
    reasoning said "48 MiB distinct of 0 bytes accessed" for the default release's gelu."""
    import steptp.strategies as S
    from steptp.cot.facts import MAX_POINTS
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from steptp.leir import parse

    big = parse("kernel f32 k(A[2048,4096], F[2048,4096]) -> B[2048,4096]\n"
                " B[i,j] = A[i,j] * F[i,j] + A[i,j]\n")
    assert 2048 * 4096 > MAX_POINTS
    c = next(c for c in S.candidates(big, "loop_split"))
    step = make_step("big", c.strategy, c.site.to_json(), dict(c.params), program=big)
    cot = TemplateWriter().write(step)
    validate(cot_record(cot), step)
    work = cot.observation.work
    assert " 0 bytes" not in work and "share" not in work and "overlap" not in work, work
    assert "none repeats its own elements" in work or "No access comes back to its own" in work


POOL = """kernel f32 max_pool2d(A[1,64,112,112]) -> B[1,64,56,56]
 C[1,64,114,114]
 C[i,j,k,l] = where(1 <= k and k < 113 and 1 <= l and l < 113, A[i,j,k-1,l-1], -3.4028234663852886e+38)
 for i in 1, j in 64, k_o in 7, l_o in 7, m in 3, n in 3, k_i in 8, l_i in 8:
  B[i,j,k_o*8+k_i,l_o*8+l_i] max= C[i,j,k_o*16+k_i*2+m,l_o*16+l_i*2+n]
"""


def test_the_bottleneck_is_the_statement_the_step_acts_on():
    """The default release's max_pool2d: the reasoning once diagnosed the heaviest statement
    (the padding copy: "Scalar code: `l` is innermost, contiguous and 114 long") above a step
    that vectorizes the pooling's `l_i` (8 long). The bottleneck is now the site's own: the
    pooling statement and its `l_i`, which the vectorization answers."""
    from steptp.cot.coherence import coherence_problems
    from steptp.cot.samples import make_step
    from steptp.leir import parse

    step = make_step("max_pool2d", "loop_vectorization", {"loops": ["l_i"], "path": [1] + [0] * 7},
                     {}, speedup=1.3, program=parse(POOL))
    f = facts(step)
    assert tuple(f.at_hot.main.path) != tuple(f.at_site.main.path)   # the heaviest is elsewhere
    pad, pool = f.at_hot.main.text, f.at_site.main.text
    for seed in range(4):     # both wordings
        cot = TemplateWriter(seed=seed).write(step)
        validate(cot, step)
        assert (cot.bottleneck.kind, cot.bottleneck.loop) == ("vectorization", "l_i")
        assert f"`{pool}`" in cot.bottleneck.text and pad not in cot.bottleneck.text
        assert coherence_problems(cot, step, f) == []

def test_a_window_unrolled_whole_names_the_loops_inside_it_and_validates():
    """``loop_unrolling`` with ``inner`` unrolls the loops inside the site's loop too: the
    reasoning names each of them with its extent (claims the validator checks), not only the
    site's loop, on a fused max pooling's padding copy and its taps."""
    import steptp.strategies as S
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from steptp.leir import parse
    from strategy_helpers import FUSED_MAXPOOL

    fused = parse(FUSED_MAXPOOL)
    windows = [c for c in S.candidates(fused, "loop_unrolling") if c.params.get("inner")]
    assert [c.site.loops[0] for c in windows] == ["k_1", "m"]
    for seed, c in enumerate(windows):
        step = make_step("mp", c.strategy, c.site.to_json(), dict(c.params), speedup=1.5,
                         program=fused)
        cot = TemplateWriter(seed=seed).write(step)
        validate(cot_record(cot), step)
        inner = "l_1" if c.site.loops[0] == "k_1" else "n"
        (chosen,) = [x for x in cot.candidates if x.verdict == "chosen"]
        assert f"`{inner}` (3)" in chosen.reason, chosen.reason
        assert {(x.loop, x.value) for x in cot.claims if x.kind == "loop_extent"} >= {
            (c.site.loops[0], 3), (inner, 3)}


def test_an_operator_fusion_of_two_parallel_nests_says_it_makes_one_parallel_region():
    """The beam's finish merges an epilogue that is already parallel into its producer's
    parallel loop; the reasoning says what that buys (one fork and join of the threads), and
    validates."""
    import steptp.strategies as S
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from steptp.leir import parse

    two = parse("""kernel f32 own(A[64,16]) -> C[64,16]
 B[64,16]
 for i in 64 parallel, j in 16:
  B[i,j] = A[i,j] * 2.0
 for i in 64 parallel, j in 16:
  C[i,j] = B[i,j] + 1.0
""")
    (c,) = S.candidates(two, "operator_fusion")
    reasons = set()
    for seed in range(4):
        step = make_step("own", c.strategy, c.site.to_json(), dict(c.params), speedup=1.2,
                         program=two)
        cot = TemplateWriter(seed=seed).write(step)
        validate(cot_record(cot), step)
        (chosen,) = [x for x in cot.candidates if x.verdict == "chosen"]
        reasons.add(chosen.reason)
    assert all("parallel region" in r and "`i`" in r for r in reasons), reasons


def test_a_register_tiles_rows_unrolled_say_what_the_unroll_buys_and_validate():
    """The finish's ``UNROLL_TILE``: a staged tile's row loop written out. The reasoning says
    the rows' accumulators keep their registers and shared loads are made once, names the row
    loop and the vector loop with their extents (checked claims), for both wordings."""
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from steptp.leir import parse
    from test_search_settle import GROUPED_TILE

    path = [0, 0, 0, 1, 0, 0, 0]   # j_i, under m, n, o
    for seed in range(4):
        step = make_step("gc", "loop_unrolling", {"path": path, "loops": ["j_i"]}, {},
                         speedup=1.4, program=parse(GROUPED_TILE))
        cot = TemplateWriter(seed=seed).write(step)
        validate(cot_record(cot), step)
        (chosen,) = [x for x in cot.candidates if x.verdict == "chosen"]
        assert "`j_i` (8)" in chosen.reason or "8 rows `j_i`" in chosen.reason, chosen.reason
        assert "`l_i`" in chosen.reason and "register" in chosen.reason
        assert {(x.loop, x.value) for x in cot.claims if x.kind == "loop_extent"} >= {
            ("j_i", 8), ("l_i", 8)}


def test_a_register_tile_that_fixes_the_innermost_stride_says_so_and_validates():
    """A row sum read down its columns (``B[i,j] += A[i,k,j]``, ``k`` innermost, stride 256):
    a register tile with its point loops inside makes (a point loop of) ``j`` innermost, stride
    1. A release
    example (2.9x) had said "no read of this nest is reused, so nothing is kept for later"."""
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from steptp.leir import parse

    rows = parse("kernel f32 sum(A[16,256,256]) -> B[16,256]\n B[i,j] += A[i,k,j]\n")
    site = {"path": [0], "loops": ["i", "j", "k"]}
    prm = {"loops": ["i", "j"], "factors": [2, 16], "point": "inner"}
    for seed in range(4):
        step = make_step("sum", "loop_tiling", site, prm, speedup=2.9, program=rows)
        cot = TemplateWriter(seed=seed).write(step)
        validate(cot_record(cot), step)
        (chosen,) = [x for x in cot.candidates if x.verdict == "chosen"]
        # (the loop and access as the before-program names them, as the facts do)
        assert "`j`" in chosen.reason and "innermost" in chosen.reason, chosen.reason
        assert "`A[i,k,j]` then stride 1" in chosen.reason, chosen.reason
        assert "nothing is kept" not in chosen.reason
        assert any(x.kind == "reorder_innermost" and x.loop == "j" for x in cot.claims)


def test_a_cache_tile_names_the_shared_block_it_keeps_and_validates():
    """``loop_tiling`` with ``above`` over a register tile (the search's cache tile): the
    reasoning names the operand the row tiles share (not the one they differ in), the block
    and the number of row tiles that use it (loop extents: checked claims), both wordings. The
    nearest-reuse sentence said "the reuse of C across k does not get closer", a non-reason."""
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from steptp.leir import parse

    tile = parse("kernel f32 mm(A[64,256], B[256,128]) -> C[64,128]\n"
                 " for i_o in 16, j_o in 2, k in 256, i_i in 4, j_i in 64 vectorized:\n"
                 "  C[i_o*4+i_i,j_o*64+j_i] += A[i_o*4+i_i,k] * B[k,j_o*64+j_i]\n")
    site = {"path": [0], "loops": ["i_o", "j_o", "k", "i_i"]}
    prm = {"loops": ["i_o", "k"], "factors": [8, 64], "point": "inner", "above": "i_i"}
    for seed in range(4):
        step = make_step("mm", "loop_tiling", site, prm, speedup=1.4, program=tile)
        cot = TemplateWriter(seed=seed).write(step)
        validate(cot_record(cot), step)
        (chosen,) = [x for x in cot.candidates if x.verdict == "chosen"]
        # the shared operand is B (A depends on i_o), its block of 64 of k used by 8 row tiles
        assert "`B[k,j_o*64+j_i]`" in chosen.reason and "`A[" not in chosen.reason
        assert "64" in chosen.reason and "8" in chosen.reason
        assert "L1" in chosen.reason or "L2" in chosen.reason
        assert {(x.loop, x.value) for x in cot.claims if x.kind == "loop_extent"} >= {
            ("i_o", 16), ("k", 256)}


def test_a_tiling_that_fixes_a_strided_walk_is_not_told_it_passed_over_the_remedy():
    """A column sum read down its columns (the default release's `sum`): the bottleneck is the
    strided walk, the chosen tiling brings the unit-stride loop innermost. The reorder listed
    beside it is not "the direct answer" the chosen step neglected: both answer it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from cot_steps import step

    from steptp.cot.facts import GENERIC

    colsum = """kernel colsum(A: f32[16,256,256]) -> B: f32[16,256]
  for i in 16, j in 256, k in 256:
    B[i,j] += A[i,k,j]
"""
    st = step("colsum", "loop_tiling", {"path": [0], "loops": ["i", "j", "k"]},
              {"factors": [2, 16], "loops": ["i", "j"], "point": "inner"}, before=colsum)
    f = facts(st, GENERIC)
    assert f.diagnosis.kind == "locality"
    for seed in range(6):
        cot = TemplateWriter(seed=seed, hardware=GENERIC).write(st, f)
        assert not any("bottleneck" in c.reason for c in cot.candidates), [c.reason for c in cot.candidates]
        validate(cot.model_dump(), st)


def test_a_cache_tiles_staged_block_says_it_lives_in_l1_not_in_registers():
    """The stage of a cache tile's block of accumulators (16 row tiles of 4x64 f32: 16 KiB)
    is not told a small buffer lives in registers: the reasoning gives its size (a checked
    number) and the cache level that holds it; a register tile's own stage keeps the register
    sentence, and so does a stage as large over no cache tile. All validate, with every seed
    tried."""
    from steptp.cot.samples import make_step
    from steptp.format.cot_schema import cot_record
    from steptp.leir import parse

    cached = parse("kernel f32 mm(A[256,1024], B[1024,512]) -> C[256,512]\n"
                   " for i_o_o in 4, j_o in 8, k_o in 16, i_o_i in 16, k_i in 64, i_i in 4,"
                   " j_i in 64 vectorized:\n"
                   "  C[i_o_o*64+i_o_i*4+i_i,j_o*64+j_i] += A[i_o_o*64+i_o_i*4+i_i,k_o*64+k_i]"
                   " * B[k_o*64+k_i,j_o*64+j_i]\n")
    tile = parse("kernel f32 mm(A[256,1024], B[1024,512]) -> C[256,512]\n"
                 " for i_o in 64, j_o in 8, k in 1024, i_i in 4, j_i in 64 vectorized:\n"
                 "  C[i_o*4+i_i,j_o*64+j_i] += A[i_o*4+i_i,k] * B[k,j_o*64+j_i]\n")
    # as large a stage (16 rows by 64: 4 KiB) over no cache tile holds one tile, not a block
    big = parse("kernel f32 mm(A[256,1024], B[1024,512]) -> C[256,512]\n"
                " for i_o in 16, j_o in 8, k in 1024, i_i in 16, j_i in 64 vectorized:\n"
                "  C[i_o*16+i_i,j_o*64+j_i] += A[i_o*16+i_i,k] * B[k,j_o*64+j_i]\n")
    site = {"path": [0, 0], "loops": ["j_o"], "tensor": "C", "mode": "write"}
    said = {"block": set(), "tile": set()}
    for seed in range(6):
        for kind, prog in (("block", cached), ("tile", tile), ("tile", big)):
            step = make_step("mm", "cache_read_write", site, {"scope": "local"}, speedup=1.5,
                             program=prog)
            cot = TemplateWriter(seed=seed).write(step)
            validate(cot_record(cot), step)
            (chosen,) = [x for x in cot.candidates if x.verdict == "chosen"]
            said[kind].add(chosen.reason)
    assert all("16 KiB" in r and "L1" in r and "can live in registers" not in r
               for r in said["block"])
    assert all("can live in registers" in r and "KiB buffer" not in r for r in said["tile"])


ROWMAX = """kernel f32 row_max(A[256,1024]) -> B[256]
 for i in 256, k in 1024:
  B[i] max= A[i,k]
"""


def test_a_max_reduction_is_a_chain_of_max_operations_not_of_adds():
    """``make run``'s release called a `max=` reduction "a serial chain of dependent adds": the
    dependence finding names the reduction's own operator, and rfactor's effect speaks of
    partial results (a max has no sums)."""
    import steptp.strategies as S
    from steptp.cot.samples import make_step
    from steptp.leir import parse

    prog = parse(ROWMAX)
    (c, *_) = [c for c in S.candidates(prog, "reduction_factorization")]
    step = make_step("row_max", c.strategy, c.site.to_json(), dict(c.params), speedup=1.4,
                     program=prog)
    texts = []
    for seed in range(4):     # both wordings of each sentence
        cot = TemplateWriter(seed=seed).write(step)
        validate(cot, step)
        assert cot.bottleneck.kind == "dependence"
        texts.append(json.dumps(cot.model_dump()))
    joined = " ".join(texts)
    assert "max operations" in joined or "waits for the previous one" in joined
    assert "dependent adds" not in joined and "partial sums" not in joined
    assert any("serial chain of dependent max operations" in t for t in texts), texts[0][:400]
