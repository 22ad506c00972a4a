"""Real step records for tests and demos: bundled example kernels, a registry strategy applied,
plausible timings. Nothing here is measured; use it only where a measured dataset is not needed."""

from __future__ import annotations

from .. import examples
from .. import strategies as S
from ..leir import format_program, parse
from ..records import StepRecord, Timing


def make_step(kernel: str, strategy: str, site: dict, params: dict, speedup: float = 1.0,
              before_s: float = 2.4e-5, spread: float = 0.02, step_index: int = 0,
              target: str = "llvm -mcpu=generic", program=None) -> StepRecord:
    """Apply ``strategy`` to the bundled example ``kernel`` (or to ``program``, a parsed LEIR
    program then named ``kernel``) and wrap the result in a StepRecord."""
    p = program if program is not None else parse(examples.text(kernel))
    new = S.apply(p, strategy, site, params)
    s = S.get(strategy)
    after_s = before_s / speedup
    return StepRecord(
        trajectory_id=f"sample-{kernel}", step_index=step_index, kernel_id=kernel,
        before_leir=format_program(p), after_leir=format_program(new), strategy=strategy,
        family=s.family, exactness=s.exactness_for(p, S.Site.from_json(site), params),
        site=site, params=params, outcome="improved" if speedup > 1 + spread else "not_improved",
        verified=True, max_abs_err=0.0,
        before=Timing(median_s=before_s, min_s=before_s * 0.97, spread=spread, repeats=5, number=20),
        after=Timing(median_s=after_s, min_s=after_s * 0.97, spread=spread, repeats=5, number=20),
        step_speedup=speedup, cumulative_speedup=speedup, target=target, fingerprint="sample")


def sample_steps(limit_per_kernel: int = 6) -> list[StepRecord]:
    """Several steps over every bundled kernel (the registry's candidates, varied speedups)."""
    out = []
    speedups = (1.6, 0.99, 1.02, 0.85, 1.25, 1.0)
    for kernel in examples.names():
        p = parse(examples.text(kernel))
        for n, c in enumerate(S.candidates(p, max_per_site=1)[:limit_per_kernel]):
            out.append(make_step(kernel, c.strategy, c.site.to_json(), dict(c.params),
                                 speedup=speedups[n % len(speedups)], step_index=n))
    return out


__all__ = ["make_step", "sample_steps"]
