"""GPU schedules without a GPU: shared-memory staging filled by a block's threads, per-thread
accumulators, threads bound inside a block's serial loop, and the tiled schedules of the CUDA
space. Each rewrite is checked three ways: its exact LEIR text (what a record shows), its
meaning (the CPU twin verified against the kernel) and its CUDA build (barriers, shared bytes,
launch shape)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from steptp.leir import format_program, parse
from steptp.measure.gpu_backend import cpu_twin
from steptp.measure.verify import verify
from steptp.search.cuda_space import is_bound, tiled_schedules
from steptp.strategies import registry
from steptp.strategies.base import Site
from steptp.tir.cuda_artifact import build_artifact
from steptp.tir.target import Target

TARGET = Target.cuda()

MATMUL = """kernel matmul(A: f32[256,256], B: f32[256,256]) -> C: f32[256,256]
  for i in 256, j in 256:
    for k in 256:
      C[i,j] += A[i,k] * B[k,j]
"""

# blocks of 16x16 threads, one output each, the whole reduction inside the thread
BOUND = """kernel matmul(A: f32[256,256], B: f32[256,256]) -> C: f32[256,256]
  for io in 16 blockIdx.y, jo in 16 blockIdx.x:
    for ii in 16 threadIdx.y, ji in 16 threadIdx.x:
      for k in 256:
        C[io*16+ii, jo*16+ji] += A[io*16+ii,k] * B[k,jo*16+ji]
"""

# the reduction split: k_o between the blocks and the threads
SPLIT = """kernel matmul(A: f32[256,256], B: f32[256,256]) -> C: f32[256,256]
  for io in 16 blockIdx.y, jo in 16 blockIdx.x:
    for ko in 16:
      for ii in 16, ji in 16:
        for ki in 16:
          C[io*16+ii, jo*16+ji] += A[io*16+ii,ko*16+ki] * B[ko*16+ki,jo*16+ji]
"""


def _apply(prog, name, path, loops, params, **kw):
    strat = registry.get(name)
    site = Site.make(tuple(path), list(loops), **kw)
    v = strat.check(prog, site, params)
    assert v.ok, v.reason
    return strat.rewrite(prog, site, params)


def _refusal(prog, name, path, loops, params, **kw) -> str:
    v = registry.get(name).check(prog, Site.make(tuple(path), list(loops), **kw), params)
    assert not v.ok
    return v.reason


def _text(prog) -> str:
    return format_program(prog)


def _body(prog) -> str:
    return _text(prog).split("\n", 1)[1]


def _verified(prog) -> bool:
    return verify(cpu_twin(prog), parse(MATMUL), seeds=(0, 4)).passed


# ---------------------------------------------------------------------------- shared staging
def test_a_block_stages_a_panel_in_shared_memory_filled_by_all_its_threads():
    prog = parse(BOUND)
    sites = [(tuple(c.site.path), c.site.get("tensor"), c.site.get("mode"), c.params)
             for c in registry.candidates(prog, "cache_read_write", target="gpu", seed=None)]
    # at the block (outside the threads) only reads, in shared; inside a thread, local
    assert ((0, 0), "A", "read", {"scope": "shared"}) in sites
    assert ((0, 0), "B", "read", {"scope": "shared"}) in sites
    assert not any(p == (0, 0) and m == "write" for p, _, m, _ in sites)
    assert ((0, 0, 0, 0), "C", "write", {"scope": "local"}) in sites

    staged = _apply(prog, "cache_read_write", (0, 0), ["jo"], {"scope": "shared"},
                    tensor="A", mode="read")
    # 16 x 256 elements, 256 threads: 16 rounds, neighbouring threads on neighbouring columns
    assert " T0[16,256] shared" in _text(staged)
    assert ("for c0 in 16, ty in 16 threadIdx.y, tx in 16 threadIdx.x:\n"
            "   T0[(c0*256+(ty*16+tx))//256,(c0*256+(ty*16+tx))%256] = "
            "A[io*16+(c0*256+(ty*16+tx))//256,(c0*256+(ty*16+tx))%256]") in _body(staged)
    assert "+= T0[ii,k] * B[k,jo*16+ji]" in _body(staged)
    assert _verified(staged)
    art = build_artifact(staged, TARGET)
    assert art.meta["launches"][0]["static_shared_bytes"] == 16 * 256 * 4
    # the barrier between the threads' copy and their reads is TVM's (ThreadSync)
    assert "__syncthreads();" in art.source


def test_a_slice_of_the_blocks_shape_is_copied_one_element_per_thread():
    prog = _apply(parse(SPLIT), "loop_binding", (0, 0, 0, 0), ["ii", "ji"],
                  {"axes": ["threadIdx.y", "threadIdx.x"]})
    staged = _apply(prog, "cache_read_write", (0, 0, 0), ["ko"], {"scope": "shared"},
                    tensor="B", mode="read")
    assert ("for ty in 16 threadIdx.y, tx in 16 threadIdx.x:\n"
            "   T0[ty,tx] = B[ko*16+ty,jo*16+tx]") in _body(staged)
    assert _verified(staged)
    src = build_artifact(staged, TARGET).source
    # one barrier before the copy (the last k_o's reads), one after it
    assert src.count("__syncthreads();") == 2


def test_shared_staging_is_refused_where_a_block_cannot_fill_it():
    prog = parse(BOUND)
    # a write: every thread's accumulators in one buffer
    assert "cache_read" in _refusal(prog, "cache_read_write", (0, 0), ["jo"], {"scope": "shared"},
                                    tensor="C", mode="write")
    # inside a thread: no block around it to share with
    assert "outside the threadIdx" in _refusal(prog, "cache_read_write", (0, 0, 0, 0), ["ji"],
                                               {"scope": "shared"}, tensor="A", mode="read")
    # a CPU kernel has no block
    assert "blockIdx" in _refusal(parse(MATMUL), "cache_read_write", (0,), ["i"],
                                  {"scope": "shared"}, tensor="A", mode="read")
    # beyond 48 KiB: A's panel (16 KiB) fits, a 64-row panel of it (64 KiB) does not
    big = parse(BOUND.replace("io in 16 blockIdx.y", "io in 4 blockIdx.y")
                .replace("ii in 16 threadIdx.y", "ii in 64 threadIdx.y")
                .replace("io*16+ii", "io*64+ii"))
    assert "48 KiB" in _refusal(big, "cache_read_write", (0, 0), ["jo"], {"scope": "shared"},
                                tensor="A", mode="read")
    # a local copy of a whole panel in every thread
    assert "private copy" in _refusal(prog, "cache_read_write", (0, 0), ["jo"],
                                      {"scope": "local"}, tensor="A", mode="read")


# ---------------------------------------------------------------------------- threads in a block
def test_threads_are_bound_inside_a_blocks_serial_loop_with_one_block_shape():
    prog = parse(SPLIT)
    offered = [(tuple(c.site.path), c.params["axes"])
               for c in registry.candidates(prog, "loop_binding", target="gpu", seed=None)]
    assert ((0, 0, 0, 0), ["threadIdx.y", "threadIdx.x"]) in offered
    # k_o is the reduction's axis: binding it is refused, not offered
    assert not any(p == (0, 0, 0) for p, _ in offered)
    assert "reduction axis" in _refusal(prog, "loop_binding", (0, 0, 0), ["ko"],
                                        {"axes": ["threadIdx.x"]})
    bound = _apply(prog, "loop_binding", (0, 0, 0, 0), ["ii", "ji"],
                   {"axes": ["threadIdx.y", "threadIdx.x"]})
    assert "ko in 16, ii in 16 threadIdx.y, ji in 16 threadIdx.x, ki in 16:" in _body(bound)
    assert _verified(bound)
    # a second nest of the same block must have the same shape
    shapes = parse("""kernel k(A: f32[64,64]) -> D: f32[64,64], E: f32[64,64]
  for b in 4 blockIdx.x:
    for t in 16 threadIdx.x, j in 64:
      D[b*16+t, j] = A[b*16+t, j]
    for r in 2:
      for t2 in 32, j2 in 8:
        E[b*16+r*8+j2, t2*2] = 1.0
""")
    assert "one block has one shape" in _refusal(shapes, "loop_binding", (0, 1, 0), ["t2"],
                                                 {"axes": ["threadIdx.x"]})
    many = parse(SPLIT.replace("io in 16 blockIdx.y", "io in 2 blockIdx.y")
                 .replace("ii in 16, ji in 16", "ii in 128, ji in 16")
                 .replace("io*16+ii", "io*128+ii"))
    assert "2048 threads per block: more than 1024" in _refusal(
        many, "loop_binding", (0, 0, 0, 0), ["ii", "ji"], {"axes": ["threadIdx.y", "threadIdx.x"]})


# ---------------------------------------------------------------------------- accumulators
def test_each_thread_keeps_its_accumulators_local_across_the_split_reduction():
    prog = _apply(parse(SPLIT), "loop_binding", (0, 0, 0, 0), ["ii", "ji"],
                  {"axes": ["threadIdx.y", "threadIdx.x"]})
    acc = _apply(prog, "cache_read_write", (0, 0), ["jo"], {"scope": "local"},
                 tensor="C", mode="write")
    body = _body(acc)
    assert " T0[16,16] local" in _text(acc)
    assert ("for ii_1 in 16 threadIdx.y, ji_1 in 16 threadIdx.x:\n   T0[ii_1,ji_1] = 0.0"
            in body)
    assert "T0[ii,ji] = T0[ii,ji] + A[io*16+ii,ko*16+ki] * B[ko*16+ki,jo*16+ji]" in body
    assert ("for ii_2 in 16 threadIdx.y, ji_2 in 16 threadIdx.x:\n"
            "   C[io*16+ii_2,jo*16+ji_2] = T0[ii_2,ji_2]") in body
    assert _verified(acc)
    src = build_artifact(acc, TARGET).source
    # TVM keeps one element per thread: the block's 16x16 region compacted to a register
    assert "float T0_ptr[1];" in src or "float T0_ptr[1]" in src


def test_accumulators_two_threads_update_are_refused():
    # ji is not in C's subscript: the 16 threads of a row update the same element
    racy = parse("""kernel k(A: f32[256,256]) -> C: f32[256]
  for io in 16 blockIdx.x:
    for ko in 16:
      for ii in 16 threadIdx.y, ji in 16 threadIdx.x:
        C[io*16+ii] += A[io*16+ii, ko*16+ji]
""")
    assert "the 16 threads of ji (threadIdx.x) update the same elements of C" in _refusal(racy, "cache_read_write", (0,), ["io"],
                                                 {"scope": "local"}, tensor="C", mode="write")


# ---------------------------------------------------------------------------- the schedules
def test_tiled_schedules_are_replayable_chains_that_verify_and_build():
    prog = parse(MATMUL)
    scheds = tiled_schedules(prog)
    labels = [s.label for s in scheds]
    assert labels == [s.label for s in tiled_schedules(prog)]     # deterministic
    assert "tile 16x16, A and B in shared, accumulator local" in labels
    assert ("tile 64x64 of 4x4 per thread, reduction split by 16, A and B slices in shared, "
            "accumulators local") in labels
    assert len(set(s.text for s in scheds)) == len(scheds)
    for s in scheds:
        assert is_bound(s.program)
        # every state of the chain is a registered, legal step: replaying gives the program
        p = prog
        for st in s.steps:
            p = registry.apply(p, st.strategy, st.site, st.params)
        assert registry.canonical(p) == s.text
    best = next(s for s in scheds if s.label.startswith("tile 64x64 of 4x4")
                and s.label.endswith("accumulators local"))
    assert [st.strategy for st in best.steps] == [
        "loop_split", "loop_tiling", "loop_tiling", "loop_binding", "loop_binding",
        "cache_read_write", "cache_read_write", "cache_read_write"]
    assert _verified(best.program)
    art = build_artifact(best.program, TARGET)
    ln, = art.meta["launches"]
    assert ln["grid"][:2] == [4, 4] and ln["block"][:2] == [16, 16]
    assert ln["static_shared_bytes"] == 2 * 64 * 16 * 4
    assert "float T2_ptr[16];" in art.source      # 4x4 accumulators per thread


@pytest.mark.parametrize("name", ["tile 16x16, bound", "tile 32x32, A in shared",
                                  "tile 16x16, reduction split by 16, A and B slices in shared"])
def test_each_schedule_form_verifies(name):
    s = next(s for s in tiled_schedules(parse(MATMUL)) if s.label == name)
    assert _verified(s.program)


def test_a_kernel_without_two_spatial_loops_has_no_tiled_schedule():
    assert tiled_schedules(parse("""kernel cumsum(A: f64[128,1024]) -> B: f64[128,1024]
  for i in 128:
    B[i,0] = A[i,0]
    for j in 1023:
      B[i,j+1] = B[i,j] + A[i,j+1]
""")) == []


# ---------------------------------------------------------------------------- block races
# found on an H200: j bound to threads inside the block, the max, sum and output loops left
# serial, so every thread ran them and reset G[i] under the others (NaN on seed 4)
def _attention_row() -> str:
    """The GPU check's attention kernel, one row per block."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gpu_check import KERNELS
    text = KERNELS["attention"][0]
    assert "  for i in 128:\n" in text
    return text.replace("  for i in 128:\n", "  for i in 128 blockIdx.x:\n")


def test_threads_bound_beside_serial_work_of_the_block_are_a_race():
    from steptp.leir.races import thread_races
    from steptp.measure.gpu_backend import GpuJob
    from steptp.search.cuda_space import cuda_candidates

    text = _attention_row()
    prog = parse(text)
    reason = _refusal(prog, "loop_binding", (0, 0), ["j"], {"axes": ["threadIdx.x"]})
    assert reason == ("`T1[i] max= T0[i,j]` lies outside the threadIdx loops of kernel 0: every "
                      "thread of the block runs it, so they all write T1 at once")
    racy = registry.get("loop_binding").rewrite(prog, Site.make((0, 0), ["j"]),
                                                {"axes": ["threadIdx.x"]})
    assert thread_races(racy) == [reason]
    # the GPU job refuses it before anything is built or timed
    job = GpuJob(TARGET, seeds=(0,), cpu_outputs=False)
    job.add_task("attention", parse(text.replace(" blockIdx.x", "")))
    assert job.add_candidate("attention", racy, label="racy") is None
    assert job.failures[-1]["reason"] == "race: " + reason
    # and the CUDA space does not offer it
    cands = cuda_candidates(parse(text.replace(" blockIdx.x", "")))
    assert len(cands) > 20
    assert registry.canonical(racy) not in {c.text for c in cands}
    assert [c.label for c in cands if thread_races(c.program)] == []


def test_a_global_tensor_passed_between_thread_nests_of_a_block_is_a_race():
    from steptp.leir.races import thread_races
    text = """kernel k(A: f32[8,128]) -> D: f32[8,128]
  T0: f32[8,128]
  for i in 8 blockIdx.x:
    for j in 128 threadIdx.x:
      T0[i,j] = A[i,j] * 2.0
    for j in 128 threadIdx.x:
      D[i,j] = T0[i,127 - j] + 1.0
"""
    assert thread_races(parse(text)) == [
        "T0 is written by one thread nest of kernel 0 and read by another: nothing orders "
        "global memory between them (stage it in shared memory, or split the kernel)"]
    # in shared memory TVM puts the barrier in; local accumulators are each thread's own
    assert thread_races(parse(text.replace("T0: f32[8,128]", "T0: f32[8,128] shared"))) == []
    acc = _apply(_apply(parse(SPLIT), "loop_binding", (0, 0, 0, 0), ["ii", "ji"],
                        {"axes": ["threadIdx.y", "threadIdx.x"]}),
                 "cache_read_write", (0, 0), ["jo"], {"scope": "local"}, tensor="C", mode="write")
    assert thread_races(acc) == []
