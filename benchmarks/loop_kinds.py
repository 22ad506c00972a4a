"""What a loop's kind is worth on this machine: an elementwise add and a plain copy of 1M f32
elements, each serial, vectorized, parallel, and parallel with a vectorized inner loop, timed
interleaved (``--rounds`` rounds of all eight, TVM's thread count as a release times with).

    python benchmarks/loop_kinds.py               # 3 rounds
    python benchmarks/loop_kinds.py --rounds 5 --threads 2

What it showed on the 2-core EPYC VM (benchmarks/RESULTS.md): LLVM vectorizes no loop TVM did
not mark, except that it turns a serial unit-stride copy into a memcpy; a parallel loop's body
is a closure over the buffers, where it does neither, so a parallel copy without a vector loop
is several times slower than the serial one, and a parallel add gains less than the cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEAD = "kernel f32 k(A[2,512,32,32], B[2,512,32,32]) -> D[2,512,32,32]\n"
BODY = {"add": "D[i,j,k,l] = A[i,j,k,l] + B[i,j,k,l]", "copy": "D[i,j,k,l] = A[i,j,k,l]"}
LOOPS = {"serial": " for i in 2, j in 512, k in 32, l in 32:\n  ",
         "vectorized": " for i in 2, j in 512, k in 32, l in 32 vectorized:\n  ",
         "parallel": " for i in 2, j in 512 parallel:\n  ",
         "parallel+vectorized": " for i in 2, j in 512 parallel, k in 32, l in 32 vectorized:\n  "}


def main() -> None:
    from steptp.measure.runner.local import Measurer
    from steptp.measure.timing import MeasureConfig
    from steptp.search.evaluator import set_threads

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="TVM threads (default: the cores)")
    a = ap.parse_args()
    threads = set_threads(a.threads)
    progs = {(op, kind): HEAD + LOOPS[kind] + BODY[op] + "\n" for op in BODY for kind in LOOPS}
    keys = list(progs)
    times: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    with Measurer(None, MeasureConfig(min_repeat_ms=20, repeats=5, num_threads=threads),
                  cache=False, jobs=1) as m:
        for r in range(a.rounds):
            for k, oc in zip(keys, m.time_many([progs[k] for k in keys])):
                if oc.timing is None:
                    raise SystemExit(f"{k}: no timing ({oc.status}: {oc.reason})")
                times[k].append(oc.timing.median_s * 1e3)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"# 1M f32 elements, {threads} TVM threads, {a.rounds} interleaved rounds: "
          f"ms per call (min-max over rounds), and the serial loop's median over each")
    print("| statement | " + " | ".join(LOOPS) + " |")
    print("| --- |" + " ---: |" * len(LOOPS))
    for op in BODY:
        base = statistics.median(times[(op, "serial")])
        cells = []
        for kind in LOOPS:
            t = times[(op, kind)]
            cells.append(f"{min(t):.3f}-{max(t):.3f} ({base / statistics.median(t):.2f}x)")
        print(f"| {op} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
