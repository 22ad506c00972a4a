"""Summarize a GPU runner's results (standard library only: runs on the GPU machine).

    python benchmarks/gpu_report.py RESULTS.json

Per kernel: verified / failed / error counts, the bound-but-unoptimized baseline's median, the
fastest verified candidate's, its speedup over the baseline (marked ``*`` only when it is beyond
both timings' spread) and over PyTorch (cuBLAS/cuDNN; > 1 means faster than PyTorch).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def _beyond_spread(fast: dict, slow: dict) -> bool:
    return fast["median_s"] * (1 + fast["spread"]) < slow["median_s"] * (1 - slow["spread"])


def _x_base(base: dict | None, t: dict | None) -> str:
    """The baseline's median over ``t``'s, ``*`` when beyond both timings' spread."""
    if not base or not t:
        return "-"
    return (f"{base['median_s'] / t['median_s']:.2f}"
            + ("*" if _beyond_spread(t, base) else " "))


def report(res: dict) -> str:
    lines = []
    fp = res.get("fingerprint", {})
    lines.append(f"mode {res.get('mode')}; device {fp.get('gpu_name', '-')} "
                 f"({fp.get('sm_count', '-')} SMs, driver {fp.get('driver_version', '-')}, "
                 f"CUDA runtime {fp.get('cuda_runtime', '-')}); fingerprint {fp.get('id')}")
    by = defaultdict(list)
    for r in res["results"]:
        by[r["task"]].append(r)
    tot = defaultdict(int)
    bases: dict[str, dict | None] = {}
    lines.append(f"{'kernel':<20}{'ok':>4}{'fail':>5}{'err':>5}{'baseline us':>13}"
                 f"{'best us':>10}{'x base':>9}{'torch us':>10}{'x torch':>9}  best candidate")
    for task in sorted(by):
        rs = by[task]
        ok = [r for r in rs if r["verified"]]
        n_fail = sum(r["status"] == "failed" for r in rs)
        n_err = sum(r["status"] == "error" for r in rs)
        tot["ok"] += len(ok)
        tot["fail"] += n_fail
        tot["err"] += n_err
        base = next((r for r in ok if r["role"] == "baseline" and r.get("timing")), None)
        bases[task] = base
        timed = [r for r in ok if r.get("timing")]
        best = min(timed, key=lambda r: r["timing"]["median_s"]) if timed else None
        torch = res.get("torch", {}).get(task)
        torch_t = torch.get("median_s") if isinstance(torch, dict) else None

        def us(x):
            return f"{x * 1e6:.1f}" if x is not None else "-"

        xb = _x_base(base and base["timing"], best and best["timing"])
        xt = "-"
        if torch_t and best:
            xt = f"{torch_t / best['timing']['median_s']:.2f}"
        lines.append(f"{task:<20}{len(ok):>4}{n_fail:>5}{n_err:>5}"
                     f"{us(base['timing']['median_s'] if base else None):>13}"
                     f"{us(best['timing']['median_s'] if best else None):>10}{xb:>9}"
                     f"{us(torch_t):>10}{xt:>9}  {best['label'] if best else '-'}")
    sched = [r for r in res["results"] if r["label"].startswith("schedule:")]
    if sched:
        lines.append("multi-step schedules (x base: the bound baseline's median over this one's):")
        for task in sorted({r["task"] for r in sched}):
            base = bases.get(task)
            for r in (x for x in sched if x["task"] == task):
                t = r.get("timing") if r["verified"] else None
                xb = _x_base(base and base["timing"], t)
                lines.append(f"  {task:<18}{(t['median_s'] * 1e6 if t else float('nan')):>10.1f} us"
                             f"{xb:>8}  {r['status'] if not r['verified'] else ''}"
                             f"{r['label'][len('schedule: '):]}")
    lines.append(f"verified {tot['ok']}, failed {tot['fail']}, errors {tot['err']} of "
                 f"{len(res['results'])} artifacts in {res.get('wall_s', 0):.0f} s "
                 f"(* = faster beyond the measured spread)")
    for r in res["results"]:
        if not r["verified"]:
            lines.append(f"  {r['status']}: {r['task']} {r['label']}: {(r.get('reason') or '')[:200]}")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(report(json.load(f)))
