"""The bodies of the release stages that the CLI (``dvc repro``) and the Prefect tasks share, so
both entry points run the same code on the same settings (``steptp.params``): which kernels are
searched and how, how CoT is written per trajectory."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .records import KernelRecord, StepRecord, TrajectoryRecord


def extract(zoo: str, size: str = "tiny", jobs: int = 1, check: bool = True, **kw: Any):
    """The extraction result (``steptp.zoo.extract.ExtractResult``) of a zoo."""
    from .zoo import extract as X

    return X.extract(X.refs_for_zoo(zoo, size=size), jobs=jobs, check=check, **kw)


def select_kernels(kernels: Sequence[KernelRecord], max_kernels: int | None) -> list[KernelRecord]:
    """Kernels worth searching: raised and checked; the heaviest first (weight, then FLOPs), at
    most ``max_kernels``; ties broken by id, so the choice is deterministic."""
    ok = [k for k in kernels if k.raise_ok]
    ok.sort(key=lambda k: (-k.weight, -k.flops, k.kernel_id))
    return ok[:max_kernels] if max_kernels else ok


def measurement_cache(max_age_s: float | None = None, clock_offset_s: float = 0.0,
                      not_before: float | None = None):
    """The measurement cache at its default place, reusing timings at most ``max_age_s`` old and
    made no earlier than ``not_before`` (a nightly: the start of its night), by a clock
    ``clock_offset_s`` ahead of the wall clock (``steptp.params.Build``)."""
    import time

    from .measure.cache import Cache

    return Cache(max_age_s=max_age_s, not_before=not_before,
                 clock=(lambda: time.time() + clock_offset_s))


def search_one(kernel: KernelRecord, policy: str, measurements: int, seconds: float, seed: int,
               threads: int | None = None, max_actions: int | None = None, *,
               max_age_s: float | None = None, clock_offset_s: float = 0.0,
               not_before: float | None = None, on_progress: Callable | None = None
               ) -> tuple[list[StepRecord], list[TrajectoryRecord]]:
    """Search one kernel; its steps, and its trajectory (none when the baseline failed)."""
    from .search import Budget, default_evaluator, search_kernel

    ev = default_evaluator(num_threads=threads, cache=measurement_cache(max_age_s, clock_offset_s, not_before))
    try:
        steps, traj = search_kernel(kernel.leir, kernel.kernel_id, policy, Budget(measurements, seconds),
                                    seed, ev, max_actions=max_actions, on_progress=on_progress)
    finally:
        ev.close()
    return list(steps), [traj] if traj is not None else []


def by_trajectory(steps: Sequence[StepRecord]) -> list[tuple[str, list[StepRecord]]]:
    """Steps grouped per trajectory (sorted by id), each group in step order."""
    groups: dict[str, list[StepRecord]] = {}
    for s in steps:
        groups.setdefault(s.trajectory_id, []).append(s)
    return [(tid, sorted(groups[tid], key=lambda s: s.step_index)) for tid in sorted(groups)]


def make_writer(writer: str, cache_dir: str | None = None):
    """None = the template writer (offline, deterministic); ``anthropic`` = the LLM writer (reads
    ANTHROPIC_API_KEY; responses cached under ``cache_dir``)."""
    if writer == "template":
        return None
    if writer == "anthropic":
        from .cot.anthropic_writer import AnthropicWriter

        return AnthropicWriter(cache_dir=cache_dir)
    raise ValueError(f"unknown cot writer {writer!r}: use template or anthropic")


def cot_one(steps: list[StepRecord], writer: str, seed: int, max_retries: int = 2,
            cache_dir: str | None = None, hardware: str = "host"
            ) -> tuple[list[StepRecord], dict[str, Any]]:
    """The CoT of one trajectory's steps (validated, the template writer as the fallback).
    Unverified steps are passed through untouched. ``hardware``: the CPU the reasoning describes,
    ``host`` (this machine, where the steps were timed) or ``generic``."""
    from .cot.facts import GENERIC, Hardware
    from .cot.run import write_cot
    from .curate.core import step_key

    # a search's rows form a tree: many rows share (trajectory_id, step_index); key by step_key
    todo = [s for s in steps if s.verified]
    hw = Hardware.current() if hardware == "host" else GENERIC
    done, summary = write_cot(todo, make_writer(writer, cache_dir), max_retries=max_retries,
                              seed=seed, hardware=hw)
    by_key = {step_key(s): s for s in done}
    return [by_key.get(step_key(s), s) for s in steps], summary


__all__ = ["by_trajectory", "cot_one", "extract", "make_writer", "measurement_cache", "search_one",
           "select_kernels"]
