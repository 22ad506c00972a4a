"""What the beam's exploration slot (``search.explore``) buys a dataset, and what it costs the
search: the same kernels searched by the pipeline's own search (``pipeline.search_one``, its
role re-timing included) with ``explore`` 0 and with each given value, one after the other.

    .venv/bin/python benchmarks/explore_yield.py --kernels <release>/data/kernels.parquet \
        --count 10 --explore 2
    .venv/bin/python benchmarks/explore_yield.py --kernels K.parquet --names softmax,layernorm

Per variant it prints: the strategies and families measured, those with a step that is
``improving`` or ``preparatory`` (the SFT roles, by ``search.roles.assign_roles`` on the
re-timed steps), prompts with such a child per kernel, and the geometric mean of the search's
trajectory speedups (its own figure: the minimum over the search's timings, so only a ratio
between variants of one run means anything). Kernels are picked one per operator family
(``search.selection.kernel_family``), seeded, among those whose unscheduled time lies within
the search's floor and ceiling (``--min-us``, ``--max-ms``).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter, defaultdict


def pick(path: str, count: int, seed: int, min_us: float, max_ms: float, names: list[str]):
    import polars as pl

    from steptp.records import KernelRecord
    from steptp.search.selection import kernel_family

    df = pl.read_parquet(path)
    recs = []
    for r in df.iter_rows(named=True):
        try:
            recs.append(KernelRecord.model_validate(_decoded(r)))
        except Exception as e:  # noqa: BLE001 - a row this version cannot read is named
            print(f"skip {r.get('name')} ({r.get('kernel_id')}): {e}", file=sys.stderr)
    if names:
        want = set(names)
        return [k for k in recs if k.name in want][:count or None]
    ok = [k for k in recs if k.raise_ok and k.unscheduled_s is not None
          and min_us * 1e-6 <= k.unscheduled_s <= max_ms * 1e-3]
    by_fam: dict[str, list] = defaultdict(list)
    for k in sorted(ok, key=lambda k: k.kernel_id):
        by_fam[kernel_family(k)].append(k)
    rng = random.Random(seed)
    fams = sorted(by_fam)
    rng.shuffle(fams)
    return [rng.choice(by_fam[f]) for f in fams[:count]]


def _decoded(r: dict) -> dict:
    import json

    out = dict(r)
    for key in ("occurrences", "signature", "names"):
        v = out.get(key)
        if isinstance(v, str):
            out[key] = json.loads(v)
    out.pop("split", None)
    return out


def run(kernels, explore: int, measurements: int, seconds: float) -> dict:
    from steptp import params as P
    from steptp.pipeline import search_one
    from steptp.search.roles import assign_roles
    from steptp.strategies import get

    s = P.Settings.model_validate({"search": {"explore": explore, "measurements": measurements,
                                              "seconds": seconds, "remeasure_rounds": 2,
                                              "remeasure_pairs": 4, "remeasure_seconds": 25,
                                              "threads": 2}}).search
    measured, sft_strats = Counter(), Counter()
    answerable, speedups, wall = 0, [], 0.0
    for k in kernels:
        t0 = time.time()
        steps, trajs = search_one(k, s, log=lambda m: None)
        wall += time.time() - t0
        steps = assign_roles(steps)
        measured.update({st.strategy for st in steps if st.after is not None})
        good = [st for st in steps if st.role in ("improving", "preparatory")]
        sft_strats.update({st.strategy for st in good})
        answerable += len({st.before_leir for st in good})
        if trajs and trajs[0].speedup:
            speedups.append(trajs[0].speedup)
        print(f"  explore={explore} {k.name}: {len(steps)} steps, faster by strategy "
              f"{dict(Counter(st.strategy for st in good))}, trajectory x{trajs[0].speedup if trajs else float('nan'):.3g}",
              flush=True)
    fam = lambda c: sorted({get(n).family for n in c})  # noqa: E731
    return {"explore": explore, "kernels": len(kernels), "wall_s": wall,
            "measured": sorted(measured), "measured_families": fam(measured),
            "faster": sorted(sft_strats), "faster_families": fam(sft_strats),
            "answerable_per_kernel": answerable / max(1, len(kernels)),
            "geomean_speedup": math.exp(sum(math.log(x) for x in speedups) / len(speedups)) if speedups else float("nan")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", required=True, help="a kernels table (a release's data/kernels.parquet)")
    ap.add_argument("--count", type=int, default=10, help="kernels, one per operator family")
    ap.add_argument("--names", default="", help="comma-separated kernel names instead of a pick")
    ap.add_argument("--explore", default="2", help="comma-separated explore values beside 0")
    ap.add_argument("--measurements", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=35.0)
    ap.add_argument("--min-us", type=float, default=20.0)
    ap.add_argument("--max-ms", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    ks = pick(a.kernels, a.count, a.seed, a.min_us, a.max_ms,
              [n for n in a.names.split(",") if n])
    if not ks:
        print("no kernel matched", file=sys.stderr)
        return 2
    print(f"{len(ks)} kernels: " + ", ".join(k.name for k in ks), flush=True)
    rows = [run(ks, e, a.measurements, a.seconds)
            for e in [0] + [int(x) for x in a.explore.split(",") if x]]
    print("\n| explore | strategies measured | families measured | strategies with a faster step | "
          "families with a faster step | answerable prompts / kernel | trajectory speedup geomean | search wall s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['explore']} | {len(r['measured'])} | {len(r['measured_families'])} | "
              f"{len(r['faster'])} | {len(r['faster_families'])} | {r['answerable_per_kernel']:.2f} | "
              f"{r['geomean_speedup']:.3g} | {r['wall_s']:.0f} |")
    base = set(rows[0]["faster"])
    for r in rows[1:]:
        print(f"explore={r['explore']}: faster steps of strategies the plain beam had none of: "
              f"{sorted(set(r['faster']) - base) or 'none'}; lost: {sorted(base - set(r['faster'])) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
