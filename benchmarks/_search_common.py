"""Shared helpers of the search benchmarks: which kernels to run (a fixed list of
``workloads.py``, workload names, a family filter, or any extracted ``kernels.parquet``) and the
main kernel of an operator workload."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Iterator


def workload_kernel(name: str, size: str = "default"):
    """(kernel_id, LEIR program, module, inputs) of the heaviest fused kernel (most flops) of an
    operator-suite workload, raised to canonical LEIR."""
    from steptp.leir.analysis import flops
    from steptp.leir.canon import canonicalize
    from steptp.search.run import kernel_id_of
    from steptp.tir.raise_ import raise_primfunc
    from steptp.zoo import workloads as W
    from steptp.zoo.relax_import import fused_primfuncs
    from workloads import LEIR_KERNELS, torch_fn

    if name in LEIR_KERNELS:
        import torch

        from steptp.leir import parse
        from steptp.zoo._base import Lambda, stable_seed

        _, text, fn, shapes = LEIR_KERNELS[name]
        prog, _ = canonicalize(parse(text))
        g = torch.Generator().manual_seed(stable_seed(name))
        inputs = tuple(torch.randn(*s, generator=g) for s in shapes)
        return kernel_id_of(prog), prog, Lambda(torch_fn(fn), name).eval(), inputs
    w = W.get(name)
    module, inputs = w.build(size)
    best = None
    for kname, f in fused_primfuncs(module, inputs):
        try:
            prog, _ = canonicalize(raise_primfunc(f, kname))
        except Exception:  # noqa: BLE001 - kernels LEIR cannot express are skipped
            continue
        fl = flops(prog)
        if best is None or fl > best[0]:
            best = (fl, prog)
    if best is None:
        raise RuntimeError(f"{name}: no kernel raised to LEIR")
    prog = best[1]
    return kernel_id_of(prog), prog, module, inputs


def selected(families: str, names: str | None, limit: int | None) -> list[str]:
    from steptp.zoo import workloads as W

    if names:
        return [n.strip() for n in names.split(",") if n.strip()]
    fams = {f.strip() for f in families.split(",")}
    out = [w.name for w in W.suite("ops") if w.family in fams]
    return out[:limit] if limit else out


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


@dataclass
class Item:
    """One kernel a benchmark runs: ``module``/``inputs`` (the PyTorch workload) are None for a
    kernel read from a kernels table."""

    name: str
    kernel_id: str
    program: Any
    module: Any = None
    inputs: Any = None
    family: str = ""


def add_selection_args(ap: argparse.ArgumentParser, default_list: str | None = None) -> None:
    from workloads import LISTS

    g = ap.add_argument_group("which kernels (first match wins: --kernels, --workloads, --list, "
                              "--families)")
    g.add_argument("--kernels", default=None, metavar="PARQUET",
                   help="an extracted kernels table (steptp extract ... --out kernels.parquet); "
                        "every kernel that raised to LEIR is run (no PyTorch baseline)")
    g.add_argument("--workloads", default=None, help="comma-separated workload names")
    g.add_argument("--list", default=default_list, choices=tuple(LISTS),
                   help="a fixed list of benchmarks/workloads.py: heldout (the generalization "
                        "figures), fresh (a second held-out list, never developed on) or tuning "
                        "(what the heuristics were developed on)")
    g.add_argument("--families", default="matmul,conv",
                   help="zoo families of the ops suite (when no list/workloads are given)")
    g.add_argument("--limit", type=int, default=None, help="only the first N kernels")
    g.add_argument("--size", default="default", help="workload size preset (tiny or default)")


def iter_items(args: argparse.Namespace) -> Iterator[Item | tuple[str, Exception]]:
    """The kernels the selection arguments name, in order; ``(name, error)`` for a workload
    whose kernel could not be built (the benchmark prints it and goes on)."""
    from workloads import family, workload_list

    if args.kernels:
        import polars as pl

        from steptp.leir import parse

        df = pl.read_parquet(args.kernels)
        if "raise_ok" in df.columns:
            df = df.filter(pl.col("raise_ok"))
        rows = list(df.iter_rows(named=True))[:args.limit] if args.limit else \
            list(df.iter_rows(named=True))
        for r in rows:
            name = r.get("name") or r["kernel_id"]
            try:
                yield Item(f"{name}"[:40], r["kernel_id"], parse(r["leir"]))
            except Exception as e:  # noqa: BLE001
                yield (name, e)
        return
    if args.workloads:
        names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    elif args.list:
        names = list(workload_list(args.list))
    else:
        names = selected(args.families, None, None)
    if args.limit:
        names = names[:args.limit]
    for name in names:
        try:
            kid, prog, module, inputs = workload_kernel(name, args.size)
        except Exception as e:  # noqa: BLE001
            yield (name, e)
            continue
        yield Item(name, kid, prog, module, inputs, family(name))


TORCH = "<torch eager>"       # PyTorch eager at the evaluator's thread count
TORCH_1 = "<torch eager, 1>"  # and on one thread: on a loaded machine OpenMP's barrier makes
                              # two-thread eager slower than one (a 512 matmul: 16 vs 3.5 ms)


def retime(ev, programs: list[str], item: Item | None = None, rounds: int = 5) -> list:
    """Re-time LEIR/TVMScript ``programs`` interleaved and uncached (same protocol, same thread
    count), plus PyTorch eager on ``item``'s module in the same rounds when ``item`` has one (at
    the evaluator's thread count and on one thread): one Timing (or None) per program, then
    the two torch timings when timed. Report the faster torch timing (the stricter baseline)."""
    from steptp.measure.significance import interleaved, uncached_timer
    from steptp.measure.timing import torch_eager_baseline

    timer = uncached_timer(ev.target, ev.config)

    def time_fn(p: str):
        if p is TORCH or p is TORCH_1:
            try:
                return torch_eager_baseline(item.module, item.inputs,
                                            num_threads=ev.num_threads if p is TORCH else 1,
                                            config=ev.config)
            except Exception:  # noqa: BLE001 - an op torch cannot run here: no baseline
                return None
        return timer(p)

    torch = item is not None and item.module is not None
    progs = list(programs) + ([TORCH, TORCH_1] if torch else [])
    try:
        return interleaved(time_fn, progs, rounds=rounds)
    finally:
        timer.close()


def torch_best(ts: list, n_programs: int, num_threads: int) -> tuple[float, int]:
    """(the faster PyTorch eager median, its thread count: 0 = none) from ``retime``'s list."""
    got = [(t.median_s, k) for t, k in zip(ts[n_programs:], (num_threads, 1)) if t is not None]
    if not got:
        return float("nan"), 0
    sec, k = min(got)
    return sec, k


def curve_summary(curve: list[dict], budget: int, seconds: float) -> dict[str, float]:
    """The best-so-far curve in four figures: the share of the final best speedup reached at
    25% and 50% of the measurements and at 25% / 50% of the wall budget, and the measurement
    count and wall time at which the final best was first reached."""
    if not curve:
        return {}
    final = curve[-1]["best_speedup"]

    def share(key: str, lim: float) -> float:
        got = [pt["best_speedup"] for pt in curve if pt[key] <= lim]
        return (max(got) if got else 1.0) / final

    first = next(pt for pt in curve if pt["best_speedup"] >= final)
    return {"meas25": share("measurements", 0.25 * budget),
            "meas50": share("measurements", 0.5 * budget),
            "wall25": share("elapsed_s", 0.25 * seconds),
            "wall50": share("elapsed_s", 0.5 * seconds),
            "best_at_meas": first["measurements"], "best_at_s": first["elapsed_s"],
            "last_s": curve[-1]["elapsed_s"]}


def print_curves(rows: list[dict], budget: int, seconds: float) -> None:
    """The best-so-far table of a benchmark's rows (each with a ``curve``)."""
    print(f"# best-so-far (share of the final best speedup; budget {budget} measurements, "
          f"{seconds:g} s):")
    print(f"#   {'workload':24s} {'@25%m':>6s} {'@50%m':>6s} {'@25%s':>6s} {'@50%s':>6s} "
          f"{'best at':>8s} {'best s':>7s} {'last s':>7s}")
    for r in rows:
        c = curve_summary(r.get("curve") or [], budget, seconds)
        if c:
            print(f"#   {r['workload']:24s} {c['meas25']:6.2f} {c['meas50']:6.2f} "
                  f"{c['wall25']:6.2f} {c['wall50']:6.2f} {c['best_at_meas']:8.0f} "
                  f"{c['best_at_s']:7.0f} {c['last_s']:7.0f}")
