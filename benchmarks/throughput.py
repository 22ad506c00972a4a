"""Search throughput: verified and measured candidates per core-hour.

    .venv/bin/python benchmarks/throughput.py --workloads matmul_square,conv2d,softmax \
        --size tiny --budget 16 --policy random

A core-hour is wall time times TVM_NUM_THREADS (the cores a timing uses; verification and
compilation use the same cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _search_common import selected, workload_kernel  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="matmul,conv")
    ap.add_argument("--workloads", default="matmul_square,conv2d,softmax")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--policy", default="random")
    ap.add_argument("--evaluator", default="inprocess")
    args = ap.parse_args()

    from steptp.search import Budget, default_evaluator, search_kernel

    ev = default_evaluator(kind=args.evaluator)
    ver = meas = 0
    wall = 0.0
    for name in selected(args.families, args.workloads, args.limit):
        kid, prog, _, _ = workload_kernel(name, args.size)
        t0 = time.perf_counter()
        res = search_kernel(prog, kid, args.policy, Budget(args.budget, args.seconds), 0, ev,
                            return_result=True)
        dt = time.perf_counter() - t0
        wall += dt
        ver += res.verifications
        meas += res.measurements
        print(f"{name:24s} {res.verifications:4d} verified, {res.measurements:4d} measured in "
              f"{dt:6.1f} s", flush=True)
    ev.close()
    core_h = wall * ev.num_threads / 3600
    print(f"# {ver / core_h:.0f} verified and {meas / core_h:.0f} measured candidates per "
          f"core-hour ({args.policy}, size {args.size}, {ev.num_threads} cores, "
          f"evaluator {type(ev).__name__}, {wall:.0f} s)")


if __name__ == "__main__":
    main()
