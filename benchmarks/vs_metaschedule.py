"""Our search vs. TVM MetaSchedule on the same kernels with the same trial budget, side by side
in one run: our best time / MetaSchedule's best time per kernel, and the geometric mean.

    .venv/bin/python benchmarks/vs_metaschedule.py --workloads matmul_square,conv2d \
        --size default --budget 64

Both best programs and the unscheduled kernel are re-measured after tuning with the same
protocol, interleaved and uncached (``steptp.measure.significance.interleaved``: A, B, C, A, B,
C, ...; same thread count), so drift hits all three alike. MetaSchedule uses the recipe of /work/shared/notes/tvm-0.27.md (a build function
that skips the slow tensor-intrinsic import). Goal (issue 5): geomean ratio <= 1.25.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _search_common import geomean, selected, workload_kernel  # noqa: E402


def fast_build(mod, target, _params):
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def metaschedule(func, target, trials: int, seed: int = 1):
    """Tune ``func`` (an unscheduled PrimFunc) and return the tuned PrimFunc."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    tt = target.to_tvm()
    with tempfile.TemporaryDirectory() as d:
        db = ms.tune_tir(mod, target=tt, work_dir=d, max_trials_global=trials,
                         num_trials_per_iter=16,
                         builder=ms.builder.LocalBuilder(max_workers=2, timeout_sec=60,
                                                         f_build=fast_build),
                         runner=ms.runner.LocalRunner(timeout_sec=60), seed=seed)
        sch = ms.tir_integration.compile_tir(db, mod, tt)
    if sch is None:
        raise RuntimeError("MetaSchedule found no valid schedule")
    return sch.mod["main"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="matmul,conv")
    ap.add_argument("--workloads", default="matmul_square,conv2d")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--size", default="default")
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--policy", default="beam")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evaluator", default="inprocess")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from steptp.leir import format_program
    from steptp.measure.significance import interleaved, uncached_timer
    from steptp.search import Budget, default_evaluator, search_kernel
    from steptp.tir.lower import lower

    ev = default_evaluator(kind=args.evaluator)
    print(f"# vs_metaschedule: {args.budget} trials each, size={args.size}, "
          f"TVM_NUM_THREADS={ev.num_threads}, policy={args.policy}")
    print(f"{'workload':24s} {'base ms':>9s} {'ours ms':>9s} {'MS ms':>9s} {'ours/MS':>8s} "
          f"{'ours s':>7s} {'MS s':>6s}")
    rows = []
    for name in selected(args.families, args.workloads, args.limit):
        kid, prog, _, _ = workload_kernel(name, args.size)
        t0 = time.perf_counter()
        res = search_kernel(prog, kid, args.policy, Budget(args.budget, args.seconds), args.seed,
                            ev, return_result=True)
        ours_wall = time.perf_counter() - t0
        if res.trajectory is None:
            print(f"{name:24s} our search failed: {res.error}")
            continue
        t0 = time.perf_counter()
        try:
            tuned = metaschedule(lower(prog, ev.target), ev.target, args.budget)
        except Exception as e:  # noqa: BLE001
            print(f"{name:24s} MetaSchedule failed: {type(e).__name__}: {e}")
            continue
        ms_wall = time.perf_counter() - t0
        timer = uncached_timer(ev.target, ev.config)
        try:
            base_t, ours_t, ms_t = interleaved(
                timer, [format_program(prog), res.trajectory.final_leir, tuned.script()], rounds=5)
        finally:
            timer.close()
        if None in (base_t, ours_t, ms_t):
            print(f"{name:24s} re-timing failed")
            continue
        ours, ms_s = ours_t.median_s, ms_t.median_s
        row = {"workload": name, "kernel_id": kid, "baseline_s": base_t.median_s,
               "ours_spread": ours_t.spread, "ms_spread": ms_t.spread,
               "ours_s": ours, "ms_s": ms_s, "ratio": ours / ms_s, "ours_wall_s": ours_wall,
               "ms_wall_s": ms_wall, "strategies": res.trajectory.strategies}
        rows.append(row)
        print(f"{name:24s} {row['baseline_s']*1e3:9.3f} {ours*1e3:9.3f} {ms_s*1e3:9.3f} "
              f"{row['ratio']:8.2f} {ours_wall:7.0f} {ms_wall:6.0f}", flush=True)
    ev.close()
    if rows:
        print(f"# geomean ours/MetaSchedule: {geomean(r['ratio'] for r in rows):.2f} "
              f"({len(rows)} kernels)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
