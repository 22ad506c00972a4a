"""Extraction throughput and raise success over a zoo suite.

Runs ``steptp.zoo.extract.extract`` on one or more suites (or comma-separated workload names)
with ``--jobs`` worker processes and prints, per suite: wall seconds, seconds per model, kernels
per second, kernels found, unique kernels, the raise success rate over unique kernels (target:
>= 98%) and every kernel that failed the raise or its check, with the reason. ``--out DIR``
also writes each suite's kernels table and summary there.

    python benchmarks/extraction.py --zoo tiny --jobs 2
    python benchmarks/extraction.py --zoo tiny --zoo ops,fused --size tiny --jobs 2 --json

Coverage of problem folders (KernelBench-style files): ``--problems DIR`` (repeatable) prints per
folder the problems tried, the problems fully extracted (scanned, no unsupported operator, every
kernel raised and its raise check passed) and the failures grouped by cause (stage, operator,
reason) with the problems each one costs:

    python benchmarks/extraction.py --problems benchmarks/problems/aten_survey --jobs 2
    python benchmarks/extraction.py --problems KernelBench/level1 --scale elements=1M --jobs 2

Architecture folders: ``--archs N`` writes N (at most 50) small architectures of
``benchmarks/problems/make_arch_problems.py`` (MLPs, CNNs, ResNet/MobileNet/ShuffleNet units, a
Swin stage that asserts its image size, ViT, transformer and GPT blocks, U-Net, ConvNeXt, ...)
into a folder (``--out DIR``/archs, else a temporary one) and extracts them with the raise
checks at ``--scale`` (default for this report: 0.25), reporting the wall time against
``--budget`` (default 900 s for an architecture folder: 15 minutes on 2 cores):

    python benchmarks/extraction.py --archs 50 --scale 0.25 --jobs 2

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


def _cause(f: dict) -> tuple[str, str, str]:
    """(stage, operator or kernel, reason) with the instance-specific tail cut off."""
    reason = f["reason"]
    if f["stage"] == "raise":
        code = reason.split(":", 1)[0]
        return "raise", f.get("kernel", ""), code if code in (
            "not checked", "check-skipped", "check-crashed", "check-out-of-memory") else reason[:90]
    return f["stage"], f.get("op", ""), reason[:90]


def run_problems(directory: Path, scale: str, jobs: int, out_dir: Path | None,
                 memory_limit_mb: int | None, check_budget_s: float,
                 scan_timeout_s: float | None = None,
                 problem_check_budget_s: float | None = None) -> dict:
    from steptp.zoo import extract as X

    refs = X.refs_for_problems(directory, scale=scale)
    bounds = {k: v for k, v in (("scan_timeout_s", scan_timeout_s),
                                ("problem_check_budget_s", problem_check_budget_s))
              if v is not None}
    t0 = time.perf_counter()
    res = X.extract(refs, jobs=jobs, progress=sys.stderr.isatty(), memory_limit_mb=memory_limit_mb,
                    check_budget_s=check_budget_s, **bounds,
                    log_path=None if out_dir is None else out_dir / f"{directory.name}.log")
    wall = time.perf_counter() - t0
    if out_dir is not None:
        X.write(res, out_dir / f"kernels-{directory.name}.parquet")
    s = res.summary()
    recs_of: dict[str, list] = {}
    for r in res.records:
        for o in r.occurrences:
            recs_of.setdefault(o.workload, []).append(r)
    full = [sc.workload for sc in res.scans
            if sc.ok and not sc.unsupported and recs_of.get(sc.workload)
            and all(r.raise_ok for r in recs_of[sc.workload])]
    causes: dict[tuple[str, str, str], set[str]] = {}
    for f in s["failures"]:
        causes.setdefault(_cause(f), set()).add(f["workload"])
    rows = [{"stage": st, "what": what, "reason": why, "problems": sorted(ws)}
            for (st, what, why), ws in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    checked = [c for c in res.checks.values() if not c.reason.startswith("check-skipped")]
    return {"folder": str(directory), "scale": scale, "jobs": res.options["jobs"],
            "checks_run": len(checked), "checks_passed": sum(1 for c in checked if c.passed),
            "checks_skipped": len(res.checks) - len(checked),
            "scan_s": round(s["seconds"]["scan"], 1), "check_s": round(s["seconds"]["check"], 1),
            "problems": len(res.scans), "fully_extracted": len(full),
            "not_fully_extracted": sorted(set(sc.workload for sc in res.scans) - set(full)),
            "wall_s": round(wall, 2), "unique_kernels": s["unique_kernels"],
            "raise_ok": s["raise_ok"], "failures_by_cause": rows}


def _print_problems(r: dict) -> None:
    n, k = r["problems"], r["fully_extracted"]
    print(f"\n== {r['folder']} (scale {r['scale']}, jobs {r['jobs']}): {n} problems tried, {k} "
          f"fully extracted ({100 * k / max(1, n):.1f}%), {r['unique_kernels']} unique kernels, "
          f"{r['raise_ok']} raise-checked, {r['wall_s']} s")
    if r["failures_by_cause"]:
        print("   failures by cause (problems affected):")
    for c in r["failures_by_cause"]:
        what = f" {c['what']}" if c["what"] else ""
        ps = ", ".join(c["problems"][:6]) + (" ..." if len(c["problems"]) > 6 else "")
        print(f"   {len(c['problems']):4d}  {c['stage']}{what}: {c['reason']}  [{ps}]")


def run_archs(args) -> int:
    """Write ``args.archs`` architecture problems, extract them with their checks, time it."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent / "problems"))
    import make_arch_problems

    scale = args.scale if args.scale != "1" else "0.25"
    budget = 900.0 if args.budget is None else args.budget
    with tempfile.TemporaryDirectory(prefix="steptp-archs-") as tmp:
        folder = (args.out if args.out is not None else Path(tmp)) / "archs"
        names = sorted(make_arch_problems.problems())[:args.archs]
        if folder.exists():
            for old in folder.glob("*.py"):
                old.unlink()
        make_arch_problems.write(folder)
        for extra in sorted(folder.glob("*.py"))[len(names):]:
            extra.unlink()
        r = run_problems(folder, scale, args.jobs, args.out, args.memory_limit,
                         args.check_budget, args.scan_timeout, args.problem_check_budget)
    r["budget_s"] = budget
    r["load_average"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"cores: {os.cpu_count()}, jobs: {args.jobs}, load average now "
              f"{r['load_average']}")
        _print_problems(r)
        print(f"   scan {r['scan_s']} s, checks {r['check_s']} s: {r['checks_run']} run "
              f"({r['checks_passed']} passed), {r['checks_skipped']} skipped by their bounds; "
              f"wall {r['wall_s']} s against a budget of {budget:g} s")
    return 0 if r["wall_s"] <= budget else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", action="append", help="suite or workload names (repeatable); "
                                                   "default: tiny")
    ap.add_argument("--size", default="tiny", choices=("tiny", "default"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="folder for the kernels tables")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds allowed per suite (default 600) or architecture folder "
                         "(default 900)")
    ap.add_argument("--min-rate", type=float, default=0.98)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--problems", action="append", type=Path,
                    help="a folder of KernelBench-style problem files (repeatable): coverage report")
    ap.add_argument("--scale", default="1", help="--problems scale: a factor, elements=N or "
                                                 "seconds=T (see steptp extract --help)")
    ap.add_argument("--memory-limit", type=int, default=None, help="MB per worker")
    ap.add_argument("--check-budget", type=float, default=120.0, help="seconds per kernel check")
    ap.add_argument("--scan-timeout", type=float, default=None,
                    help="seconds per problem scan (default: steptp's for problem files)")
    ap.add_argument("--problem-check-budget", type=float, default=None,
                    help="seconds of raise checks per problem (default: steptp's)")
    ap.add_argument("--archs", type=int, default=None, metavar="N",
                    help="write N (<= 50) small architecture problems and extract them with "
                         "their checks at --scale (0.25 unless given); wall time vs --budget")
    args = ap.parse_args()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    if args.archs:
        return run_archs(args)
    if args.problems:
        prow = [run_problems(d, args.scale, args.jobs, args.out, args.memory_limit,
                             args.check_budget, args.scan_timeout, args.problem_check_budget)
                for d in args.problems]
        if args.json:
            print(json.dumps(prow, indent=2))
        else:
            print(f"cores: {os.cpu_count()}, jobs: {args.jobs}")
            for r in prow:
                _print_problems(r)
        if not args.zoo:
            return 0
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
    bad = [r for r in rows if r["wall_s"] > (600.0 if args.budget is None else args.budget)
           or (r["raise_success_rate"] is not None and r["raise_success_rate"] < args.min_rate)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
