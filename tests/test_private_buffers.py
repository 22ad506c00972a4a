"""Local buffers private to a loop's iterations (``leir.private``): a register tile's local
accumulators under a parallel loop, legal only when every iteration overwrites the buffer before
reading it; TVM then allocates it inside the loop, so each thread has its own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from tvm import s_tir

import steptp.strategies as S
from steptp import examples
from steptp.leir import format_program, parse
from steptp.leir.private import private_to
from steptp.tir.build import build, run
from steptp.tir.lower import lower
from strategy_helpers import T, inputs_for, refusal, same_outputs
from test_search_settle import CONV1D_TILED

MBG = parse(examples.text("matmul_bias_gelu"))
MBG_PAR_TEXT = """
kernel f32 k(A[16,64], B[64,32]) -> D[16,32]
 T0[16,32]
 for i in 16 parallel, j in 32:
  T0[i,j] += A[i,k] * B[k,j]
 D[i,j] = T0[i,j] * 2.0
"""

#: read before each iteration overwrites it: the first read sees the previous iteration's row
STALE = """
kernel f32 k(A[8,16]) -> B[8,16]
 R[16] local
 for i in 8:
  for j in 16:
   B[i,j] = R[j] * 2.0
  for j in 16:
   R[j] = A[i,j]
"""
#: overwritten only in part before the reads
PART = """
kernel f32 k(A[8,16]) -> B[8,16]
 R[16] local
 for i in 8:
  for j in 8:
   R[j] = A[i,j]
  for j in 16:
   B[i,j] = R[j]
"""

#: a 4x16 register tile of a matmul, rows rolled, columns a vector (as the beam finds them)
TILE = parse("""
kernel f32 mm(A[32,64], B[64,64]) -> C[32,64]
 for i in 8, j in 4, k in 64, n in 4, o in 16 vectorized:
  C[i*4+n,j*16+o] += A[i*4+n,k] * B[k,j*16+o]
""")


def _one(program, strategy, pred):
    got = [c for c in S.candidates(program, strategy, seed=None) if pred(c)]
    assert got, f"no {strategy} candidate matched"
    return got[0]


def _tile_accumulator(program):
    """cache_write of C at the tile's loop j: the 4x16 accumulators in a local buffer."""
    return _one(program, "cache_read_write", lambda c: c.site.get("mode") == "write"
                and c.site.get("tensor") == "C" and list(c.site.loops) == ["j"])


def _parallel_i(program):
    return _one(program, "loop_parallelization", lambda c: list(c.site.loops) == ["i"])


def test_a_staging_buffer_each_iteration_overwrites_is_private_and_the_loop_parallel():
    cw = S.apply(MBG, "cache_read_write", {"path": [0, 0], "loops": ["j"], "tensor": "T0",
                                           "mode": "write"}, {"scope": "local"})
    assert private_to(cw, (0,)) == {"T1"} and private_to(cw, (0, 0)) == {"T1"}
    par = S.apply(cw, "loop_parallelization", {"path": [0], "loops": ["i"]}, {})
    assert format_program(par) == T("""
        kernel fused_matmul_add_gelu(A: f32[16,64], B: f32[64,32], C: f32[32]) -> D: f32[16,32]
          T0: f32[16,32]
          T1: f32[] local
          for i in 16 parallel, j in 32:
            T1 = 0.0
            for k in 64:
              T1 = T1 + A[i,k] * B[k,j]
            D[i,j] = (T1 + C[j]) * (0.5 + erf((T1 + C[j]) * 0.7071067811865476) * 0.5)
            T0[i,j] = T1
    """)
    same_outputs(par, MBG, "exact", inputs_for(MBG))


def test_a_local_buffer_that_carries_a_value_across_iterations_keeps_the_loop_serial():
    # a running sum: S holds the previous row's total when the next row starts
    running = parse("""
kernel f32 k(A[8,16]) -> B[8,16]
 S[] local
 S = 0.0
 for i in 8, j in 16:
  S = S + A[i,j]
  B[i,j] = S
""")
    assert private_to(running, (1,)) == frozenset()
    assert "dependence on S" in refusal(running, "loop_parallelization",
                                         {"path": [1], "loops": ["i"]}, {})
    # read before the iteration overwrites it: the first read sees the previous iteration's row
    stale = parse(STALE)
    assert private_to(stale, (0,)) == frozenset()
    assert "dependence on R" in refusal(stale, "loop_parallelization",
                                         {"path": [0], "loops": ["i"]}, {})
    # overwritten only in part before the reads
    part = parse(PART)
    assert private_to(part, (0,)) == frozenset()
    # a global buffer is never private: it is allocated once for the whole kernel
    glob = parse("""
kernel f32 k(A[8,16]) -> B[8,16]
 R[16]
 for i in 8:
  for j in 16:
   R[j] = A[i,j] * 2.0
  for j in 16:
   B[i,j] = R[j] + 1.0
""")
    assert private_to(glob, (0,)) == frozenset()
    assert "write the same R element" in refusal(glob, "loop_parallelization",
                                         {"path": [0], "loops": ["i"]}, {})


def test_cache_write_stages_a_local_tile_under_a_parallel_loop_not_a_global_one():
    par = _parallel_i(TILE)
    local = _tile_accumulator(par.program)
    assert "for i in 8 parallel" in local.text and "local" in local.text
    # the same program as staging first and parallelizing after
    assert local.text == _parallel_i(_tile_accumulator(TILE).program).text
    site = {"path": [0, 0], "loops": ["j"], "tensor": "C", "mode": "write"}
    why = refusal(par.program, "cache_read_write", site, {"scope": "global"})
    assert "loop i is parallel" in why and "private" in why
    # the parallel loop itself is no place for a staging buffer
    assert "loop i is parallel" in refusal(par.program, "cache_read_write",
                                           {"path": [0], "loops": ["i"], "tensor": "C",
                                            "mode": "write"}, {"scope": "local"})
    same_outputs(local.program, TILE, "exact", inputs_for(TILE))


def _allocated_under_parallel(func, name: str) -> bool:
    """After TVM's allocation planning (the first passes of its default TIR pipeline), is ``name`` allocated
    inside a parallel loop? Read off the printed TIR: the allocation line is indented under
    a ``T.parallel`` loop's line."""
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    text = tvm.transform.Sequential([
        s_tir.transform.CanonicalizeLoop(), s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation()])(mod).script()
    open_par: list[int] = []   # indentation of the parallel loops enclosing the current line
    found = []
    for line in text.splitlines():
        ind = len(line) - len(line.lstrip())
        open_par = [k for k in open_par if k < ind]
        if f"{name} = T.sblock_alloc_buffer" in line:
            found.append(bool(open_par))
        if "in T.parallel(" in line:
            open_par.append(ind)
    assert found, f"{name} is not allocated anywhere in\n{text}"
    return all(found)


def test_tvm_gives_each_thread_its_own_accumulators_and_the_result_is_exact():
    prog = _tile_accumulator(_parallel_i(TILE).program).program
    name = next(t.name for t in prog.intermediates if t.scope == "local")
    assert _allocated_under_parallel(lower(prog), name)
    # the global buffer of an unstaged intermediate is allocated once, outside
    glob = parse(MBG_PAR_TEXT)
    assert not _allocated_under_parallel(lower(glob), "T0")
    inputs = [inputs_for(TILE)[t.name] for t in TILE.inputs]
    want = run(build(TILE), inputs)
    got = run(build(prog), inputs)
    assert np.array_equal(want[0], got[0])


def test_the_verifiers_race_check_spares_private_buffers_only():
    from steptp.leir.races import parallel_races

    staged = _tile_accumulator(_parallel_i(TILE).program).program
    assert parallel_races(staged) == []
    # written by hand (no strategy offers them): a local buffer the parallel loop's iterations
    # share, read before the iteration overwrites it, or overwritten only in part
    stale = parse(STALE.replace(" for i in 8:", " for i in 8 parallel:"))
    part = parse(PART.replace(" for i in 8:", " for i in 8 parallel:"))
    for prog in (stale, part):
        races = parallel_races(prog)
        assert len(races) == 1 and "R[" in races[0], races


CONV1D_TILE = parse(CONV1D_TILED)   # the conv1d search's best state (session 9)


def test_cost_model_sees_a_staged_tiles_updates_as_a_register_tile():
    """Timed here (2 cores, 3 interleaved rounds): conv1d's 4x15 tile 2.4-2.6 ms serial, 7.4-7.7
    parallel, 2.1-2.4 parallel with its accumulators staged in a local buffer, 2.9-3.1 staged
    serial. The model sees staging as about neutral either way (it does not model the parallel
    slowdown, which a 512^3 matmul's tile does not show: the search stages before it
    parallelizes instead)."""
    from steptp.analysis import cost_model as cm

    conv = [c for c in S.candidates(CONV1D_TILE, "loop_parallelization", seed=None)
            if "for i in 8 parallel, j in 32" in c.text]
    assert len(conv) == 1
    par = conv[0].program
    staged_par = _one(par, "cache_read_write", lambda c: c.site.get("mode") == "write"
                      and c.site.get("tensor") == "F" and list(c.site.loops) == ["k"]).program
    staged = _one(CONV1D_TILE, "cache_read_write", lambda c: c.site.get("mode") == "write"
                  and c.site.get("tensor") == "F" and list(c.site.loops) == ["k"]).program
    # the staged update G[n,o] = G[n,o] + ... is a reduction over l and m (not over i, j, k:
    # the fill at the top of each k iteration restarts it): a 4-vector register tile, whose
    # accumulators stay in registers rather than costing a load and a store each update
    for prog in (staged, staged_par):
        assert cm._estimate(prog, False, 2).feats["register_tile"] == 4.0
    for a, b in ((staged, CONV1D_TILE), (staged_par, par)):
        assert abs(math.log(cm.predict(a, 2) / cm.predict(b, 2))) < 0.05


def test_the_reasonings_dependence_facts_agree_on_private_buffers():
    """The chain of thought's facts (``leir.analysis``) call a staged tile's outer loop
    independent, as the strategy and the race check do (else its reasoning fails validation:
    the release lost 9 SFT answers that parallelize a staged tile), and a stale buffer's not."""
    from steptp.leir.analysis import analyze

    staged = _tile_accumulator(TILE).program
    assert analyze(staged).is_parallelizable((0,))
    stale = parse(STALE)
    assert not analyze(stale).is_parallelizable((0,))
