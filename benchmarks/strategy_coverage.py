"""Strategy coverage on real kernels: for each strategy, on how many kernels it has a site, how
many candidates it produced, and the verification pass rate (TVM build against the original, in
isolated workers, cached).

    python benchmarks/strategy_coverage.py [--kernels kernels.parquet] [--zoo tiny]
                                           [--max-per-site 1] [--limit N] [--jobs 2]
                                           [--with-examples] [--no-verify]
                                           [--per-strategy N]

Without --kernels it extracts the zoo (default: the tiny zoo, whose LEIR-native workloads host
the strategies no imported kernel does) first. Kernels are taken as extracted;
``--with-examples`` adds the bundled examples (``steptp/zoo/leir/examples``).
A strategy whose candidates fail verification more than 1% of the time is a bug: the script
exits non-zero and lists those candidates, as it does when a strategy has no site on any kernel.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

from steptp import examples
from steptp import strategies as S
from steptp.leir import parse


def load_kernels(args) -> list[tuple[str, object]]:
    progs: list[tuple[str, object]] = []
    if args.kernels:
        import polars as pl

        df = pl.read_parquet(args.kernels)
        rows = df.filter(pl.col("raise_ok")) if "raise_ok" in df.columns else df
        for r in rows.iter_rows(named=True):
            progs.append((f"{r['name']}:{r['kernel_id'][:8]}", parse(r["leir"])))
    else:
        from steptp.zoo.extract import extract, refs_for_zoo

        res = extract(refs_for_zoo(args.zoo), jobs=args.jobs)
        for rec in res.records:
            if rec.raise_ok:
                progs.append((f"{rec.name}:{rec.kernel_id[:8]}", parse(rec.leir)))
    if args.limit:
        progs = progs[: args.limit]
    if args.with_examples:
        for name in examples.names():
            progs.append((f"example:{name}", parse(examples.text(name))))
    return progs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=Path, help="a kernels table from `steptp extract`")
    ap.add_argument("--zoo", default="tiny", help="zoo to extract when --kernels is not given")
    ap.add_argument("--max-per-site", type=int, default=1, help="parameter choices per site")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N extracted kernels")
    ap.add_argument("--jobs", type=int, default=2, help="parallel verification workers")
    ap.add_argument("--no-verify", action="store_true", help="count sites and candidates only")
    ap.add_argument("--per-strategy", type=int, default=0,
                    help="verify at most N candidates of each strategy (a seeded sample; "
                         "0: all of them)")
    ap.add_argument("--with-examples", action="store_true",
                    help="also count the bundled example programs")
    a = ap.parse_args(argv)

    t0 = time.perf_counter()
    progs = load_kernels(a)
    print(f"{len(progs)} kernels ({time.perf_counter() - t0:.0f} s to load)", flush=True)
    names = S.names()
    with_site: dict[str, set] = defaultdict(set)
    cands_by: dict[str, list] = defaultdict(list)
    for kname, p in progs:
        for target in ("cpu", "gpu"):
            for c in S.candidates(p, None, target=target, seed=0, max_per_site=a.max_per_site):
                if target == "gpu" and "cpu" in S.get(c.strategy).targets:
                    continue  # counted on the CPU pass
                with_site[c.strategy].add(kname)
                cands_by[c.strategy].append((kname, p, c))
    print(f"enumerated {sum(map(len, cands_by.values()))} candidates in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)

    passed: dict[str, int] = defaultdict(int)
    tried: dict[str, int] = defaultdict(int)
    failures: dict[str, list] = defaultdict(list)
    if not a.no_verify:
        from steptp.measure import Measurer
        from steptp.tir.target import Target

        # GPU-only candidates cannot run here; they are counted, not verified.
        import random

        def sample(lst):
            if not a.per_strategy or len(lst) <= a.per_strategy:
                return lst
            idx = sorted(random.Random(0).sample(range(len(lst)), a.per_strategy))
            return [lst[i] for i in idx]

        jobs = [(s, k, p, c) for s, lst in sorted(cands_by.items()) for k, p, c in sample(lst)
                if "cpu" in S.get(s).targets]
        print(f"verifying {len(jobs)} candidates", flush=True)
        with Measurer(target=Target.host_cpu(), jobs=a.jobs) as m:
            outs = m.verify_many([(p, c.program, c.exactness) for _, _, p, c in jobs])
        for (s, k, _, c), o in zip(jobs, outs):
            tried[s] += 1
            if o.passed:
                passed[s] += 1
            else:
                failures[s].append((k, c.to_json(), o.reason))

    print(f"\n{'strategy':42s} {'family':12s} {'kernels':>7s} {'cands':>6s} {'tried':>6s} "
          f"{'verified':>9s}")
    bad = []
    for n in names:
        st = S.get(n)
        nc = len(cands_by[n])
        if "cpu" not in st.targets or a.no_verify:
            rate = "  (gpu)" if "cpu" not in st.targets else "      -"
        else:
            nt = tried[n]
            rate = f"{100 * passed[n] / nt:8.1f}%" if nt else "      -"
            if nt and (nt - passed[n]) / nt > 0.01:
                bad.append(n)
        print(f"{n:42s} {st.family:12s} {len(with_site[n]):7d} {nc:6d} {tried[n]:6d} {rate:>9s}")
    missing = [n for n in names if not cands_by[n]]
    print(f"\nstrategies with no site on any kernel: {', '.join(missing) or 'none'}")
    print(f"strategies failing > 1% of verifications: {', '.join(bad) or 'none'}")
    for n in bad:
        for k, cj, reason in failures[n][:5]:
            print(f"  {n} on {k}: {cj} -> {reason}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
