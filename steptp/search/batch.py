"""Search many kernels and write the ``steps`` and ``trajectories`` tables (atomic parquet
writes through ``records.write_table``), plus ``curves.json`` (best-so-far per kernel)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from ..records import StepRecord, TrajectoryRecord, table, write_table, write_text_atomic
from .kernel import search_kernel
from .run import Budget, SearchResult


def load_kernels(path: str | Path) -> list[tuple[str, str]]:
    """(kernel_id, LEIR text) of every kernel that raised to LEIR, from a kernels table."""
    import polars as pl

    df = pl.read_parquet(path)
    if "raise_ok" in df.columns:
        df = df.filter(pl.col("raise_ok"))
    return [(r["kernel_id"], r["leir"]) for r in df.select("kernel_id", "leir").iter_rows(named=True)]


def search_many(kernels: Iterable[tuple[str, str]], policy: str = "beam",
                budget: Budget = Budget(), seed: int = 0, out: str | Path | None = None,
                evaluator=None, on_kernel: Optional[Callable[[str, SearchResult], None]] = None,
                on_progress=None, policy_kwargs: dict[str, Any] | None = None,
                strategies=None) -> dict[str, SearchResult]:
    """Search each (kernel_id, LEIR text); write the tables to ``out`` after each kernel (so an
    interrupted run keeps what it finished)."""
    from ..leir import parse
    from .evaluator import default_evaluator
    from .policies import make_policy

    own = evaluator is None
    ev = evaluator or default_evaluator()
    results: dict[str, SearchResult] = {}
    steps: list[StepRecord] = []
    trajs: list[TrajectoryRecord] = []
    try:
        for kid, text in kernels:
            pol = make_policy(policy, **(policy_kwargs or {}))
            res = search_kernel(parse(text), kid, pol, budget, seed, ev, strategies=strategies,
                                on_progress=on_progress, return_result=True)
            results[kid] = res
            steps.extend(res.steps)
            if res.trajectory is not None:
                trajs.append(res.trajectory)
            if out is not None:
                write(out, steps, trajs, results, budget)
            if on_kernel is not None:
                on_kernel(kid, res)
    finally:
        if own:
            ev.close()
    return results


def write(out: str | Path, steps: list[StepRecord], trajs: list[TrajectoryRecord],
          results: dict[str, SearchResult], budget: Budget) -> None:
    out = Path(out)
    write_table(table(steps, StepRecord), out / "steps.parquet")
    write_table(table(trajs, TrajectoryRecord), out / "trajectories.parquet")
    curves = {kid: {"curve": r.curve, "fractions": r.fractions(budget.measurements),
                    "measurements": r.measurements, "verifications": r.verifications,
                    "wall_s": r.wall_s, "error": r.error} for kid, r in results.items()}
    write_text_atomic(out / "curves.json", json.dumps(curves, indent=1, default=_nan))


def _nan(x):
    return None if isinstance(x, float) and math.isnan(x) else str(x)


def geomean(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


__all__ = ["load_kernels", "search_many", "write", "geomean"]
