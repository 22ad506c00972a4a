"""Races of parallel loops at any size (issue #35): the static check decides symbolically where
enumerating the iterations is too much, and a parallel candidate is also run with several
threads. Real TVM builds at the sizes that used to pass."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm")

from steptp.leir import parse  # noqa: E402
from steptp.leir.races import LIMIT, parallel_races, symbolic_race  # noqa: E402
from steptp.measure.verify import verify  # noqa: E402


def row_buffer(rows: int, cols: int, private: bool, init_outside: bool = False) -> str:
    """``B = 2A + 1`` through a row buffer ``T`` written and read in a parallel row loop. ``T``
    declared `local` is private to each row (leir.private); declared plain it is one buffer
    every row shares. ``init_outside`` also writes it before the loop, which makes TVM allocate
    it once for the whole kernel (else it allocates it inside the loop and the race stays on
    paper)."""
    init = f"  for j in {cols}:\n    T[j] = 0.0\n" if init_outside else ""
    return (f"kernel f32 k(A[{rows},{cols}]) -> B[{rows},{cols}]\n"
            f"  T[{cols}]{' local' if private else ''}\n{init}"
            f"  for i in {rows} parallel:\n"
            f"    for j in {cols}:\n      T[j] = A[i,j] * 2.0\n"
            f"    for j in {cols}:\n      B[i,j] = T[j] + 1.0\n")


def reference(rows: int, cols: int) -> str:
    return (f"kernel f32 k(A[{rows},{cols}]) -> B[{rows},{cols}]\n"
            f"  for i in {rows}, j in {cols}:\n    B[i,j] = A[i,j] * 2.0 + 1.0\n")


@pytest.mark.parametrize("rows,cols,init", [(1024, 1024, False), (1024, 4096, False),
                                            (2048, 2048, True)])
def test_a_shared_row_buffer_races_at_every_size(rows, cols, init):
    """1024x1024 (2M points) is enumerated; 1024x4096 and 2048x2048 (8M, above LIMIT) used to
    pass as exact. Each is a race, and the race-free version (T private) passes."""
    racy = parse(row_buffer(rows, cols, private=False, init_outside=init))
    found = parallel_races(racy)
    assert len(found) == 1 and found[0].startswith("parallel loop i:") and " T" in found[0]
    big = 2 * rows * cols > LIMIT
    if big:
        assert "no subscript of T depends on i" in found[0]
    res = verify(racy, reference(rows, cols), seeds=(0,))
    assert not res.passed and res.reason.startswith("race: parallel loop i"), res.reason
    ok = row_buffer(rows, cols, private=True)
    assert parallel_races(parse(ok)) == []
    res = verify(ok, reference(rows, cols), seeds=(0, 1))
    assert res.passed, res.reason


def test_the_symbolic_test_agrees_with_enumeration_and_refuses_what_it_cannot_read():
    """Below LIMIT both tests run: on the racy and private row buffers, a fused loop whose
    subscripts are not affine (``i*16 + jk//4``) and a reduction over the parallel axis they
    agree, as they do on a split with a tail guard. A scatter through a non-affine subscript
    above LIMIT is refused as a possible race; the same fused loop and split above LIMIT are
    not races."""
    from steptp.leir.private import private_to

    fused = """kernel f32 k(A[{n},64]) -> B[{n},64]
  for i in {m} parallel:
    for jk in 16:
      for l in 64:
        B[i*16 + jk//4, jk%4*16 + l] = A[i*16 + jk//4, jk%4*16 + l] * 2.0
"""
    split = """kernel f32 k(A[{n},64]) -> C[{n},64]
  for i in {m} parallel, j_o in 4, j_i_o in 2, j_i_i in 3:
    if j_i_o*3 + j_i_i < {tail}:
      for l in 64:
        C[i*16+j_o*4+j_i_o*3+j_i_i, l] = A[i*16+j_o*4+j_i_o*3+j_i_i, l] * 2.0
"""
    small = [row_buffer(64, 64, False), row_buffer(64, 64, True),
             fused.format(n=256, m=64), split.format(n=256, m=16, tail=4),
             split.format(n=256, m=16, tail=5),
             "kernel f32 k(A[64,32]) -> B[64]\n for j in 32 parallel, i in 64:\n  B[i] += A[i,j]\n"]
    for text in small:
        p = parse(text)
        enum = parallel_races(p)
        path = (len(p.body) - 1,)
        assert bool(enum) == bool(symbolic_race(p, path, private_to(p, path))), text
    assert parallel_races(parse(fused.format(n=65536, m=16384))) == []   # 16M points
    # a split's tail guard keeps the rows of different i apart (the guard-blind test alone
    # would call it a race); one row too many and they meet
    assert parallel_races(parse(split.format(n=65536, m=4096, tail=4))) == []
    assert "meet for two different values of i" in parallel_races(
        parse(split.format(n=65536, m=4096, tail=5)))[0]
    scatter = parse("kernel f32 k(A[8192,1024]) -> B[8192,1024]\n"
                    "  for i in 8192 parallel, j in 1024:\n"
                    "    B[(i*7)%8192, j] = A[i,j]\n")
    why = parallel_races(scatter)
    assert why and "not affine" in why[0] and "possible race" in why[0]


def test_a_race_the_static_check_cannot_see_fails_when_run_with_threads():
    """A TVMScript candidate (no LEIR for the static check) whose parallel loop reads what the
    previous iteration wrote: on one thread it is right, on 2 threads the second half reads the
    NaN pre-fill. Verified in a worker as the Measurer does (verification on one thread, a
    pool of 4)."""
    from steptp.measure.worker import WorkerPool
    from steptp.tir.lower import lower

    n = 1 << 22
    racy = parse(f"kernel f32 scan(A[{n}]) -> B[{n}]\n  for i in {n} parallel:\n"
                 f"    B[i] = where(i > 0, B[max(i - 1, 0)], 0.0) + A[i]\n")
    assert parallel_races(racy)          # the LEIR is refused statically ...
    script = lower(racy).script()        # ... its TVMScript only by running it
    ref = (f"kernel f32 scan(A[{n}]) -> B[{n}]\n  B[0] = A[0]\n  for i in {n - 1}:\n"
           f"    B[i + 1] = B[i] + A[i + 1]\n")
    serial = script.replace("T.parallel(", "T.serial(")
    assert serial != script
    with WorkerPool(1, num_threads=4, timeout_s=300) as pool:
        r = pool.run("build_verify", {"after": script, "before": ref, "seeds": [0],
                                      "verify_threads": 1})
        assert r.ok, r.reason
        res = r.value["result"]
        assert not res["passed"] and "race: run with 2 threads" in res["reason"], res["reason"]
        assert "NaN where the reference is not" in res["reason"]
        r = pool.run("build_verify", {"after": serial, "before": ref, "seeds": [0],
                                      "verify_threads": 1})
        assert r.ok and r.value["result"]["passed"], r.value
