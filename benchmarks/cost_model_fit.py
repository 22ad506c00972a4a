"""How well the analytic cost model predicts what a release measured: for every verified,
timed step of a release (its ``data/steps.parquet``), the model's predicted ratio of before to
after against the measured step speedup. Prints, over all steps and per strategy: the rank
correlation (Spearman) of the two log ratios, and how often the model gets the direction right
on steps that measured more than 10% faster or slower. Parallelizations are also split by
whether the nest they parallelize already has a vectorized loop.

    python benchmarks/cost_model_fit.py releases/steptp-standard-0.1.0+nightly.20261213
    python benchmarks/cost_model_fit.py RELEASE --cores 2 --top 12

The model never sees these timings (no fitting here): this is the ranking signal the search
starts from on every state before its learned model has data.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MARGIN = math.log(1.1)   # a step counts for the direction only beyond 10% either way


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        for r, i in enumerate(order):
            out[i] = float(r)
        return out

    if len(xs) < 3:
        return float("nan")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else float("nan")


def line(name: str, rows: list[tuple[float, float]]) -> str:
    decided = [(p, m) for p, m in rows if abs(m) > MARGIN]
    right = sum(1 for p, m in decided if (p > 0) == (m > 0))
    share = f"{right / len(decided):.2f}" if decided else "  - "
    med = statistics.median(math.exp(m) for _, m in rows) if rows else float("nan")
    faster = sum(1 for _, m in decided if m > 0)
    return (f"| {name} | {len(rows)} | {spearman([p for p, _ in rows], [m for _, m in rows]):.2f} | "
            f"{right}/{len(decided)} = {share} | {faster} / {len(decided) - faster} | {med:.2f} |")


def main() -> None:
    import polars as pl

    from steptp.analysis.cost_model import predict
    from steptp.leir import ast as A
    from steptp.leir import parse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("release", type=Path, help="a release folder (its data/steps.parquet)")
    ap.add_argument("--cores", type=int, default=None, help="cores the model assumes (default: "
                    "the release's timing threads)")
    ap.add_argument("--top", type=int, default=10, help="strategies listed, most steps first")
    a = ap.parse_args()
    path = a.release / "data/steps.parquet"
    if not path.exists():
        raise SystemExit(f"{a.release}: no data/steps.parquet (not a release folder)")
    cores = a.cores
    if cores is None:
        manifest = a.release / "manifest.json"
        fps = json.loads(manifest.read_text()).get("fingerprints", {}) if manifest.exists() else {}
        hw = (fps or {}).get("hardware") or {}
        cores = int(hw.get("num_threads") or hw.get("cpu_affinity") or 0)
        if not cores:
            raise SystemExit(f"{a.release}: its manifest names no timing threads; pass --cores")
    steps = (pl.read_parquet(path, columns=["strategy", "site", "before_leir", "after_leir",
                                            "step_speedup", "verified"])
             .filter(pl.col("verified") & (pl.col("step_speedup") > 0)))
    memo: dict[str, float | None] = {}

    def predicted(text: str) -> float | None:
        if text not in memo:
            try:
                memo[text] = predict(parse(text), cores)
            except Exception:  # noqa: BLE001  (a program the model cannot read counts as none)
                memo[text] = None
        return memo[text]

    every: list[tuple[float, float]] = []
    by: dict[str, list[tuple[float, float]]] = defaultdict(list)
    par: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for strategy, site, before, after, speedup in steps.select(
            "strategy", "site", "before_leir", "after_leir", "step_speedup").iter_rows():
        b, f = predicted(before), predicted(after)
        if not b or not f:
            continue
        row = (math.log(b / f), math.log(speedup))
        every.append(row)
        by[strategy].append(row)
        if strategy == "loop_parallelization":
            path_ = json.loads(site)["path"] if isinstance(site, str) else site["path"]
            nest = parse(before).body[path_[0]]
            vec = any(isinstance(x, A.Loop) and x.kind == "vectorized" for x in A.walk(nest))
            where = "outermost loop" if len(path_) == 1 else "an inner loop"
            par[f"parallelization of a nest {'with' if vec else 'without'} a vector loop, at "
                f"{where}"].append(row)
    print(f"# {a.release.name}: {len(every)} timed steps, model with {cores} cores")
    print("| steps | n | Spearman | direction right (measured beyond 10%) | measured >10% faster / "
          ">10% slower | median measured speedup |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(line("all", every))
    for k, v in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:a.top]:
        print(line(f"`{k}`", v))
    for k, v in sorted(par.items()):
        print(line(k, v))


if __name__ == "__main__":
    main()
