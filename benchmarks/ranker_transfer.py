"""Does a cost model learned on other kernels rank a new kernel's candidates? Leave-one-kernel-out
over the measured programs of one or more steps tables.

    .venv/bin/python benchmarks/ranker_transfer.py build/search/steps.parquet [more.parquet ...]

For each kernel with at least ``--min-programs`` distinct measured programs (the before and after
programs of its steps), the model is trained on every other kernel's programs and scores the
held-out kernel's programs. Columns, per scorer:

* ``rho``: Spearman rank correlation of the score with the measured time (higher is better);
* ``top``: 1 when the truly fastest program is in the scorer's best ``--top`` share (at least
  one program), else 0; its mean is the share of kernels where it is;
* ``reg``: measured time of the scorer's first choice over the fastest measured time (1 = the
  scorer picked the best; the mean is geometric).

Scorers: ``analytic`` (``cost_model.score``), ``learned`` (``LearnedCostModel`` on the residual
``log measured - log predict``, trained on the other kernels), ``blend`` (what a ``Ranker``
warm-started on those rows would order by, at its blend weight), and ``abs`` (the same trees on
absolute log seconds, for comparison with the residual target). Printed figures, not a timed
test. A program measured in several tables (or twice) takes the median of its times.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict


def load(paths: list[str]) -> dict[str, dict[str, float]]:
    """kernel_id -> {LEIR text: median seconds} over the measured programs of the tables."""
    import polars as pl

    times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        for r in pl.read_parquet(path).iter_rows(named=True):
            for text_key, t_key in (("before_leir", "before"), ("after_leir", "after")):
                t, text = r.get(t_key), r.get(text_key)
                if t and text and t.get("median_s") and t["median_s"] > 0:
                    times[r["kernel_id"]][text].append(float(t["median_s"]))
    return {k: {text: statistics.median(v) for text, v in sorted(progs.items())}
            for k, progs in sorted(times.items())}


def _ranks(xs) -> list[float]:
    """Ranks from 1, ties sharing their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(score, measured) -> float:
    """Pearson correlation of the ranks (no scipy needed)."""
    if len(set(score)) < 2 or len(set(measured)) < 2:
        return float("nan")
    a, b = _ranks(list(score)), _ranks(list(measured))
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    return cov / math.sqrt(va * vb)


def metrics(score: list[float], measured: list[float], top: float) -> tuple[float, int, float]:
    n = len(score)
    k = max(1, math.ceil(top * n))
    order = sorted(range(n), key=lambda i: (score[i], i))
    fastest = min(range(n), key=lambda i: (measured[i], i))
    return (spearman(score, measured), int(fastest in order[:k]),
            measured[order[0]] / measured[fastest])


def evaluate(data: dict[str, dict[str, float]], min_programs: int, top: float, seed: int):
    from steptp.leir import parse
    from steptp.analysis.cost_model import score
    from steptp.search.ranker import LearnedCostModel, Ranker, _prior_row

    rows = []
    for held, progs in data.items():
        if len(progs) < min_programs:
            continue
        prior = [(text, s) for k, p in data.items() if k != held for text, s in p.items()]
        ranker = Ranker(learned=True, seed=seed, prior=prior)
        if not ranker.model.ready:
            continue
        cores = ranker.cores
        absolute = LearnedCostModel(min_samples=1, seed=seed)
        for text, s in prior:
            row = _prior_row(text, cores)
            if row is not None:
                absolute.add_row(row[0], 0.0, s)   # a zero base: the trees learn log seconds
        absolute.fit()
        texts = list(progs)
        programs = [parse(t) for t in texts]
        measured = [progs[t] for t in texts]
        scores = {
            "analytic": [score(p, cores) for p in programs],
            "learned": list(ranker.model.predict(programs, cores)),
            "blend": ranker.scores(programs),
            "abs": list(absolute.residuals(programs, cores)),
        }
        rows.append((held, len(texts), ranker.n_prior, ranker.blend_weight,
                     {name: metrics(s, measured, top) for name, s in scores.items()}))
    return rows


def report(rows, top: float) -> None:
    names = ("analytic", "learned", "blend", "abs")
    head = " ".join(f"{n + ' rho/top/reg':>21s}" for n in names)
    print(f"{'kernel':16s} {'n':>3s} {'train':>5s} {'w':>4s} {head}")
    for kid, n, n_train, w, m in rows:
        cells = " ".join(f"{m[x][0]:7.2f} {m[x][1]:3d} {m[x][2]:9.2f}" for x in names)
        print(f"{kid:16s} {n:3d} {n_train:5d} {w:4.2f} {cells}")
    if not rows:
        print("no kernel with enough measured programs")
        return
    print(f"\nmeans over {len(rows)} kernels (top = fastest program in the scorer's best "
          f"{top:.0%}; reg = geometric mean):")
    for x in names:
        rhos = [m[x][0] for *_, m in rows if not math.isnan(m[x][0])]
        hits = [m[x][1] for *_, m in rows]
        regs = [m[x][2] for *_, m in rows]
        print(f"  {x:9s} rho {statistics.fmean(rhos) if rhos else float('nan'):6.3f}   "
              f"top {statistics.fmean(hits):5.2f}   "
              f"reg {math.exp(statistics.fmean(math.log(r) for r in regs)):6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("steps", nargs="+", help="steps tables (parquet)")
    ap.add_argument("--min-programs", type=int, default=5)
    ap.add_argument("--top", type=float, default=0.1, help="share of the ranking for 'top'")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = load(args.steps)
    total = sum(len(p) for p in data.values())
    print(f"# ranker_transfer: {len(args.steps)} tables, {len(data)} kernels, {total} measured "
          f"programs; leave-one-kernel-out, seed {args.seed}")
    report(evaluate(data, args.min_programs, args.top, args.seed), args.top)


if __name__ == "__main__":
    sys.exit(main())
