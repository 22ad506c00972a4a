"""What a machine-hour of searching gives, and what a pool would cost: searched steps, SFT
examples and pairs per machine-hour of a release's search stage (its card's yield line,
``stats.json`` ``yield``), projected for pools of N kernels on W machines (linear in both; the
Dask scaling measured on one 2-core machine, 1.38x for 2 workers, says how far from linear one
machine's extra workers are: see RESULTS.md).

    python benchmarks/yield_plan.py releases/steptp-tiny-0.1.0 --kernels 150 500 2000 --machines 1 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from steptp.export.coverage import projection

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("release", type=Path, help="a release folder (its stats.json)")
    ap.add_argument("--kernels", type=int, nargs="+", default=[150, 1000, 10000])
    ap.add_argument("--machines", type=int, nargs="+", default=[1, 4])
    a = ap.parse_args()
    stats = json.loads((a.release / "stats.json").read_text())
    y = stats.get("yield")
    if not y:
        raise SystemExit(f"{a.release}: no search-stage timing recorded (built before "
                         "search-stats.json existed, or without a search stage)")
    m = y["per_machine_hour"]
    print(f"{a.release.name}: search stage {y['wall_s'] / 60:.1f} min on {y['machines']} machine(s), "
          f"{y['workers']} searches at once: {y['kernels']} kernels, {y['steps']} steps; release "
          f"{y['sft']} SFT examples, {y['pairs']} pairs")
    print(f"per machine-hour: {m['kernels']:.1f} kernels, {m['steps']:,.0f} searched steps, "
          f"{m['sft']:,.0f} SFT examples, {m['pairs']:,.0f} pairs\n")
    print("| kernels | machines | wall hours | searched steps | SFT examples | pairs |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in a.kernels:
        for w in a.machines:
            p = projection(y, n, w)
            if p:
                print(f"| {n:,} | {w} | {p['wall_hours']:.1f} | {p['steps']:,} | {p['sft']:,} | {p['pairs']:,} |")


if __name__ == "__main__":
    main()
