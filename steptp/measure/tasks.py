"""What the isolated workers run (``steptp.measure.worker.TASKS``): plain data in, plain data out.

Payloads carry program text (LEIR or TVMScript), a target dict (``Target.to_dict()``) and config
dicts; results are ``model_dump()`` dicts. No TVM object crosses a process boundary.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..tir.target import Target


def _target(d: dict[str, Any] | None) -> Target:
    if d is None:
        from ..tir.build import default_target

        return default_target()
    return Target.from_dict(d)


def verify_task(payload: dict[str, Any]) -> dict[str, Any]:
    """``verify(candidate=after, reference=before)`` -> ``VerifyResult.model_dump()``."""
    from .timing import load_kernel
    from .verify import DEFAULT_SEEDS, verify

    t0 = time.perf_counter()
    res = verify(load_kernel(payload["after"]), load_kernel(payload["before"]),
                 exactness=payload.get("exactness", "exact"), target=_target(payload.get("target")),
                 seeds=tuple(payload.get("seeds", DEFAULT_SEEDS)))
    return {"result": res.model_dump(), "seconds": time.perf_counter() - t0}


def time_task(payload: dict[str, Any]) -> dict[str, Any]:
    """``measure(program)`` -> ``{"timing": Timing.model_dump(), "num_threads": ..., ...}``."""
    from .timing import MeasureConfig, measure

    t0 = time.perf_counter()
    config = MeasureConfig(**payload["config"])
    timing = measure(payload["program"], _target(payload.get("target")), config)
    return {"timing": timing.model_dump(), "seconds": time.perf_counter() - t0,
            "tvm_num_threads": os.environ.get("TVM_NUM_THREADS")}
