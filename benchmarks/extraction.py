"""Extraction throughput and raise success over a zoo suite.

Runs ``steptp.zoo.extract.extract`` on one or more suites (or comma-separated workload names)
with ``--jobs`` worker processes and prints, per suite: wall seconds, seconds per model, kernels
per second, kernels found, unique kernels, the raise success rate over unique kernels (target:
>= 98%) and every kernel that failed the raise or its check, with the reason. ``--out DIR``
also writes each suite's kernels table and summary there.

    python benchmarks/extraction.py --zoo tiny --jobs 2
    python benchmarks/extraction.py --zoo tiny --zoo ops,fused --size tiny --jobs 2 --json

The CI budget for ``--zoo tiny --jobs 2`` on 2 cores is ``--budget`` seconds (default 600); the
exit code is 1 when a suite exceeds it or its raise success rate is below ``--min-rate``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def run_suite(spec: str, size: str, jobs: int, out_dir: Path | None) -> dict:
    from steptp.zoo import extract as X

    refs = X.refs_for_zoo(spec, size=size)
    t0 = time.perf_counter()
    res = X.extract(refs, jobs=jobs, progress=sys.stderr.isatty())
    wall = time.perf_counter() - t0
    if out_dir is not None:
        X.write(res, out_dir / f"kernels-{spec.replace(',', '+')}-{size}.parquet")
    s = res.summary()
    fails = [{"kernel_id": r.kernel_id, "name": r.name,
              "workloads": sorted({o.workload for o in r.occurrences}), "reason": r.raise_reason}
             for r in res.records if not r.raise_ok]
    other = [f for f in s["failures"] if f["stage"] != "raise"]
    return {"suite": spec, "size": size, "jobs": jobs, "models": s["models_tried"],
            "models_ok": s["models_ok"], "wall_s": round(wall, 2),
            "s_per_model": round(wall / max(1, s["models_tried"]), 3),
            "kernels_found": s["kernels_found"], "unique_kernels": s["unique_kernels"],
            "kernels_per_s": round(s["kernels_found"] / wall, 3) if wall else None,
            "raise_ok": s["raise_ok"], "raise_success_rate": s["raise_success_rate"],
            "raise_failures_by_reason": s["raise_failures_by_reason"],
            "scan_s": s["seconds"]["scan"], "check_s": s["seconds"]["check"],
            "raise_failures": fails, "other_failures": other,
            "per_model_s": {w["workload"]: w["seconds"] for w in s["workloads"]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", action="append", help="suite or workload names (repeatable); "
                                                   "default: tiny")
    ap.add_argument("--size", default="tiny", choices=("tiny", "default"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="folder for the kernels tables")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds allowed per suite")
    ap.add_argument("--min-rate", type=float, default=0.98)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    rows = [run_suite(z, args.size, args.jobs, args.out) for z in (args.zoo or ["tiny"])]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"cores: {os.cpu_count()}, jobs: {args.jobs}, size: {args.size}")
        for r in rows:
            rate = r["raise_success_rate"]
            print(f"\n== {r['suite']}: {r['models']} models ({r['models_ok']} ok) in {r['wall_s']} s "
                  f"(scan {r['scan_s']} s, raise check {r['check_s']} s)\n"
                  f"   {r['s_per_model']} s/model, {r['kernels_per_s']} kernels/s, "
                  f"{r['kernels_found']} kernels, {r['unique_kernels']} unique, raise ok "
                  f"{r['raise_ok']} ({100 * rate:.1f}%)" if rate is not None else "")
            for f in r["raise_failures"]:
                print(f"   raise failure {f['kernel_id']} {f['name']} ({', '.join(f['workloads'])}): "
                      f"{f['reason']}")
            for f in r["other_failures"]:
                print(f"   {f['stage']} failure in {f['workload']} {f.get('op', '')}: {f['reason']}")
    bad = [r for r in rows if r["wall_s"] > args.budget
           or (r["raise_success_rate"] is not None and r["raise_success_rate"] < args.min_rate)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
