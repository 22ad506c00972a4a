"""What the isolated workers run (``steptp.measure.worker.TASKS``): plain data in, plain data out.

Payloads carry program text (LEIR or TVMScript), a target dict (``Target.to_dict()``) and config
dicts; results are ``model_dump()`` dicts. No TVM object crosses a process boundary.

``build_verify`` and ``time_built`` are what the ``Measurer`` sends: the first compiles a
candidate and verifies it, keeping the built module (and the kernel's reference outputs) in the
worker; the second, sent to that same worker, times the module it holds. ``verify`` and
``time`` are the self-contained one-shot forms.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import Any

from ...tir.target import Target


def _target(d: dict[str, Any] | None) -> Target:
    if d is None:
        from ...tir.build import default_target

        return default_target()
    return Target.from_dict(d)


def verify_task(payload: dict[str, Any]) -> dict[str, Any]:
    """``verify(candidate=after, reference=before)`` -> ``VerifyResult.model_dump()``."""
    from ..programs import load_kernel
    from ..verify import DEFAULT_SEEDS, verify

    t0 = time.perf_counter()
    res = verify(load_kernel(payload["after"]), load_kernel(payload["before"]),
                 exactness=payload.get("exactness", "exact"), target=_target(payload.get("target")),
                 seeds=tuple(payload.get("seeds", DEFAULT_SEEDS)))
    return {"result": res.model_dump(), "seconds": time.perf_counter() - t0}


def time_task(payload: dict[str, Any]) -> dict[str, Any]:
    """``measure(program)`` -> ``{"timing": Timing.model_dump(), "num_threads": ..., ...}``."""
    from ..timing import MeasureConfig, measure

    t0 = time.perf_counter()
    config = MeasureConfig(**payload["config"])
    timing = measure(payload["program"], _target(payload.get("target")), config)
    return {"timing": timing.model_dump(), "seconds": time.perf_counter() - t0,
            "tvm_num_threads": os.environ.get("TVM_NUM_THREADS")}


# ---------------------------------------------------------------------------- build once
# What a worker keeps between tasks: the reference side of each kernel it verified against
# (built once, run once per seed) and the candidates it built, so that a candidate's timing runs
# the very module its verification ran (``Measurer`` sends the timing to the worker that holds
# it). Bounded: a kernel search has one reference; a few candidates wait for their timing.
# Keyed by everything they depend on (text, target, seeds): a worker reused by the next
# search (``worker.reuse_workers``) answers as a fresh one would.
_REFERENCES: "OrderedDict[tuple, Any]" = OrderedDict()
_BUILT: "OrderedDict[tuple[str, str], tuple[Any, Any, float | None]]" = OrderedDict()
MAX_REFERENCES = 4
MAX_BUILT = 16


def _threads(n: int) -> None:
    """Resize TVM's thread pool: one thread while verifying (other workers verify on the other
    cores), the timing thread count while timing. The pool can shrink below, and grow back up
    to, the ``TVM_NUM_THREADS`` the worker started with."""
    import tvm_ffi

    tvm_ffi.get_global_func("runtime.config_threadpool")(1, int(n))


def _remember(cache: OrderedDict, key, value, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def build_verify_task(payload: dict[str, Any]) -> dict[str, Any]:
    """Build the candidate ``after`` once, verify it against ``before`` (whose reference outputs
    this worker computes once per seed), keep the built module for its timing. Returns the
    ``VerifyResult`` dump and the seconds of each stage (``reference_s``: 0 when reused)."""
    from ...leir import ast as A
    from ...tir import build as B
    from ..programs import load_kernel
    from ..verify import DEFAULT_SEEDS, References, VerifyResult, _params_of, static_problem, verify

    _threads(int(payload.get("verify_threads", 1)))
    target = _target(payload.get("target"))
    seeds = tuple(payload.get("seeds", DEFAULT_SEEDS))
    exactness = payload.get("exactness", "exact")
    t0 = time.perf_counter()
    key = (payload["before"], target.key, seeds)
    refs = _REFERENCES.get(key)
    ref_s = 0.0
    cand = load_kernel(payload["after"])
    if refs is None:
        try:
            refs = References(load_kernel(payload["before"]), target, seeds).compute(
                cand if not isinstance(cand, str) else None)
        except Exception as e:  # noqa: BLE001
            res = VerifyResult(passed=False, exactness=exactness, target=target.key,
                               reason=f"reference does not build: {type(e).__name__}: {e}")
            return {"result": res.model_dump(), "compile_s": 0.0, "verify_s": 0.0,
                    "reference_s": time.perf_counter() - t0, "kept": False}
        ref_s = time.perf_counter() - t0
        _remember(_REFERENCES, key, refs, MAX_REFERENCES)
    else:
        _REFERENCES.move_to_end(key)
    t1 = time.perf_counter()
    built = None
    try:
        problem = static_problem(_params_of(cand), refs.sig,
                                 cand if isinstance(cand, A.Program) else None, target)
    except Exception:  # noqa: BLE001 - verify() reports a bad signature in its own words
        problem = "signature"
    if problem is None:
        try:
            built = B.build(cand, target)
        except Exception:  # noqa: BLE001 - verify() reports the build failure in its own words
            built = None
    t2 = time.perf_counter()
    runs: list[float] = []
    res = verify(cand, None, exactness, target, seeds, references=refs, built=built,
                 run_seconds=runs)
    t3 = time.perf_counter()
    kept = built is not None and res.passed
    if kept:
        # with the fastest verification run: about one call of this module (on the verifying
        # thread count), which bounds a hinted timing's check without a probe call
        _remember(_BUILT, (payload["after"], target.key),
                  (cand, built, min(runs) if runs else None), MAX_BUILT)
    return {"result": res.model_dump(), "compile_s": t2 - t1, "verify_s": t3 - t2,
            "reference_s": ref_s, "kept": kept}


def _stop(spec: dict[str, Any] | None):
    """``measure``'s ``stop`` from plain data: ``{"timing": reference Timing dump, "rule":
    SignificanceRule fields}``."""
    if not spec:
        return None
    from ...records import Timing
    from ..significance import SignificanceRule

    ref = Timing(**spec["timing"])
    rule = SignificanceRule(**spec.get("rule", {}))
    return lambda partial: rule.clearly_slower(ref, partial)


def time_built_task(payload: dict[str, Any]) -> dict[str, Any]:
    """Time ``program`` with the module ``build_verify_task`` built for it in this worker (built
    again when this worker does not hold it: restarted, or evicted); ``hint_s``: about its
    seconds per call (``timing.hinted``)."""
    from ..timing import MeasureConfig, measure

    config = MeasureConfig(**payload["config"])
    _threads(config.num_threads)
    t0 = time.perf_counter()
    key = (payload["program"], _target(payload.get("target")).key)
    held = _BUILT.pop(key, None)
    phases: dict[str, float] = {}
    stop = _stop(payload.get("stop_if_slower_than"))
    timing = measure(held[0] if held else payload["program"], _target(payload.get("target")),
                     config, built=held[1] if held else None, phases=phases, stop=stop,
                     hint_s=payload.get("hint_s"), call_s=held[2] if held else None)
    stopped = stop is not None and timing.repeats < config.repeats
    if stopped and held is not None:
        _remember(_BUILT, key, held, MAX_BUILT)  # its full timing may follow: keep the module
    return {"timing": timing.model_dump(), "seconds": time.perf_counter() - t0,
            "prepare_s": phases.get("prepare_s", 0.0), "stopped_early": stopped,
            "hint_fallback": int(phases.get("hint_fallback", 0)),
            "hint_probe": int(phases.get("hint_probe", 0)),
            "rebuilt": held is None, "tvm_num_threads": os.environ.get("TVM_NUM_THREADS")}
