"""A cache tile with and without its block of accumulators staged, serial and parallel, against
the register tile it covers, timed side by side (interleaved rounds).

Why it exists: the search's follow-through once judged a cache tile serial and unstaged, where
its row tiles reload their accumulators every block of the reduction, so it skipped the move
that makes matmul_rect (256x1024x512) match MetaSchedule. ``Beam._staged`` now measures it
staged; this script shows the four programs the decision is about on any machine.

    .venv/bin/python benchmarks/cache_tile_stage.py              # 3 rounds, 2 threads
    .venv/bin/python benchmarks/cache_tile_stage.py --rounds 5 --threads 1

Prints, per program, its time in every round (ms) and the median's ratio to the uncached,
staged, parallel tile (what the search ended with before).
"""

from __future__ import annotations

import argparse
import statistics

UNCACHED = ("kernel f32 matmul(A[256,1024], B[1024,512]) -> C[256,512]\n"
            " for i_o in 64, j_o in 8, k in 1024, i_i in 4, j_i in 64 vectorized:\n"
            "  C[i_o*4+i_i,j_o*64+j_i] += A[i_o*4+i_i,k] * B[k,j_o*64+j_i]\n")
CACHED = ("kernel f32 matmul(A[256,1024], B[1024,512]) -> C[256,512]\n"
          " for i_o_o in 4, j_o in 8, k_o in 16, i_o_i in 16, k_i in 64, i_i in 4,"
          " j_i in 64 vectorized:\n"
          "  C[i_o_o*64+i_o_i*4+i_i,j_o*64+j_i] += A[i_o_o*64+i_o_i*4+i_i,k_o*64+k_i]"
          " * B[k_o*64+k_i,j_o*64+j_i]\n")


def _staged(program):
    from steptp.search.space import actions, stages_tile_accumulators

    (c,) = [c for c in actions(program) if stages_tile_accumulators(program, c)]
    return c.program


def _parallel(program, cores: int):
    from steptp.analysis.cost_model import score
    from steptp.search.space import actions

    cands = actions(program, strategies=["loop_parallelization"])
    return min(cands, key=lambda c: score(c.program, cores)).program


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=None,
                    help="TVM threads (default: every core this process may use)")
    args = ap.parse_args(argv)

    from steptp.leir import parse
    from steptp.leir.printer import format_program
    from steptp.search.evaluator import InProcessEvaluator

    ev = InProcessEvaluator(num_threads=args.threads)
    unc, cac = parse(UNCACHED), parse(CACHED)
    progs = {"tile": unc, "tile staged": _staged(unc), "cache tile": cac,
             "cache tile staged": _staged(cac)}
    progs["tile staged, parallel"] = _parallel(progs["tile staged"], ev.num_threads)
    progs["cache tile staged, parallel"] = _parallel(progs["cache tile staged"], ev.num_threads)
    texts = {k: format_program(v) for k, v in progs.items()}
    for k, t in texts.items():   # every program computes what the uncached tile does
        r = ev.verify(UNCACHED, t, "exact")
        if not r.ok:
            raise SystemExit(f"{k}: does not verify: {r.reason}")
    got: dict[str, list[float]] = {k: [] for k in texts}
    for _ in range(args.rounds):
        for k, t in texts.items():
            timing = ev.time_fresh(t)
            if timing is None:
                raise SystemExit(f"{k}: could not be timed")
            got[k].append(timing.median_s * 1e3)
    ref = statistics.median(got["tile staged, parallel"])
    print(f"# cache_tile_stage: 256x1024x512 f32 matmul, {args.rounds} interleaved rounds, "
          f"{ev.num_threads} threads, fingerprint {ev.fingerprint}")
    print(f"{'program':30s} {'ms per round':>28s}  vs tile staged, parallel")
    for k, v in got.items():
        print(f"{k:30s} {' '.join(f'{x:8.3f}' for x in v):>28s}  "
              f"{statistics.median(v) / ref:6.2f}")


if __name__ == "__main__":
    main()
