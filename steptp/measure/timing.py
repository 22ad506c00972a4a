"""Timing one kernel: build once, warm up, calibrate, repeat, summarize, remeasure when noisy.

``measure(program, target, config)`` runs in the calling process; the ``Measurer`` runs it in an
isolated worker (``steptp.measure.runner.local``;
``runner.local.measure_isolated`` for one-off use). The protocol:

1. build the kernel once (LEIR text, a LEIR ``Program``, TVMScript text or a PrimFunc) and make
   seeded inputs (``random_inputs(kernel, config.seed)``);
2. warm up: ``config.warmup`` plain runs (JIT link, caches, page faults);
3. calibrate ``number`` (calls averaged per repeat) so that one repeat lasts at least
   ``min_repeat_ms``: grow ``number`` tenfold until a repeat lasts a tenth of that, then scale;
4. ``repeats`` (>= 5) repeats with TVM's ``time_evaluator``; median, min, and
   spread = interquartile range / median;
5. spread above ``max_spread``: measure again, up to ``remeasure_tries`` more times, keeping the
   attempt with the smallest spread; still above: ``noisy=True``.

A caller that knows about how long one call takes (``hint_s``: a search passes the measured time
of the candidate's parent or of its last timed sibling) skips steps 2 and 3 (``hinted``):
``number`` comes from the hint. A hint of at least ``HINT_SURE x min_repeat_ms`` means one
call per repeat, and the attempt starts at once (``time_evaluator`` discards its first call:
that is the warm-up; ``config.warmup`` above 1 adds the other plain runs first). Otherwise one
call is timed first (with ``number`` above 1): when ``number`` of them would last over
``HINT_SLACK x min_repeat_ms`` (a hint far too fast, e.g. a sibling 1000x faster), step 3 goes on
from that call, so a wrong hint never runs one check for longer than the timeout. That probe
call is spared when the caller knows how long one call of this very module lasted (``call_s``:
the worker that verified it timed its verification runs, on one thread) and ``number`` of them
would last at most ``PROBE_FREE x min_repeat_ms``: the check is then bounded without it. A sure
hint that this call time contradicts (one call lasted under ``0.8 x min_repeat_ms``: a slow
parent's time, a child far faster) gives way to the call time, so that repeats of one call are
not timed in full only to be thrown away. Then one check
repeat at that ``number`` (its discarded first call the warm-up) confirms it:

* the check lasts ``0.8 x min_repeat_ms`` to ``HINT_SLACK x min_repeat_ms`` (or ``number`` is
  1 and it lasts at least ``0.8 x min_repeat_ms``): it is kept as the first of the attempt's
  repeats, which then goes on as in step 4;
* shorter (the kernel is faster than the hint): step 3 goes on from the check's measurement,
  and the run that confirms its ``number`` counts as the first repeat when it lasts
  ``0.8 x`` to ``HINT_SLACK x min_repeat_ms`` (so does the one after a probe call far too slow);
* longer, with ``number`` above 1 (slower than the hint): ``number`` is recomputed from the
  check's per-call time (fewer calls per repeat; the check was the warm-up).

Whatever the hint, a finished hinted timing whose median repeat lasted under
``0.8 x min_repeat_ms`` (``median x number``) is thrown away: step 3 goes on from its median
per call (the kernel is warm by then), and step 4 times it again (the run that confirms the
new ``number`` is its first repeat when it lasts ``0.8`` to ``HINT_SLACK x min_repeat_ms``). A wrong hint costs time,
never a too-short repeat.

A caller that only needs to know whether a program beats a reference (a search, against its
best time so far) may pass ``stop``: the first attempt then times ``EARLY_REPEATS`` repeats
first, and when ``stop`` says those already show the program slower than the reference (the
rule: ``SignificanceRule.clearly_slower``) the timing ends there, a ``Timing`` of the repeats it
had (``repeats`` says how many; its spread is theirs). Otherwise the attempt goes on to the
full ``repeats``, as if it had not been split.

The unscheduled baseline of a kernel is simply ``measure`` of its unscheduled program.
``torch_eager_baseline`` times a PyTorch module in eager mode with the same protocol and thread
count.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time as _time
from typing import Any, Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..lru import LRU
from ..records import Timing
from .fingerprint import available_cores
from .programs import MeasureError, is_tvmscript, load_kernel  # noqa: F401 - re-exported


class MeasureConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    min_repeat_ms: float = Field(50.0, ge=0, description="a repeat lasts at least this long")
    repeats: int = Field(7, ge=5, description="timed repeats per attempt (at least 5)")
    max_spread: float = Field(0.1, gt=0, description="IQR/median above this is noisy")
    remeasure_tries: int = Field(2, ge=0, description="extra attempts when noisy")
    num_threads: int = Field(default_factory=available_cores, ge=1,
                             description="TVM_NUM_THREADS (and torch threads) when timing")
    timeout_s: float = Field(60.0, gt=0, description="per kernel: build + warm-up + timing")
    warmup: int = Field(1, ge=0, description="untimed runs before calibration")
    seed: int = 0
    max_number: int = Field(1_000_000, ge=1)

    @field_validator("num_threads", mode="before")
    @classmethod
    def _default_threads(cls, v):
        return available_cores() if v is None else v

    def key_fields(self) -> dict[str, Any]:
        """The fields that change a timing (not the timeout)."""
        return self.model_dump(exclude={"timeout_s"})

    @property
    def hash(self) -> str:
        blob = json.dumps(self.key_fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


# ---------------------------------------------------------------------------- statistics
def summarize(per_call_s: Sequence[float], number: int, max_spread: float) -> Timing:
    """A ``Timing`` of per-call seconds (one value per repeat)."""
    xs = np.asarray(list(per_call_s), dtype=np.float64)
    if xs.size == 0:
        raise MeasureError("no timing results")
    med = float(np.median(xs))
    q1, q3 = np.percentile(xs, [25, 75])
    spread = float((q3 - q1) / med) if med > 0 else math.inf
    return Timing(median_s=med, min_s=float(xs.min()), spread=spread, repeats=int(xs.size),
                  number=int(number), noisy=not (spread <= max_spread))


def calibrate(run: Callable[[int], float], min_repeat_ms: float, max_number: int,
              measured: tuple[int, float] | None = None,
              kept: list[float] | None = None) -> int:
    """``number`` such that ``number`` calls last at least ``min_repeat_ms``; ``run(n)`` returns
    the seconds per call of ``n`` calls. ``measured``: ``(n, seconds per call)`` of a run
    already made (a hint's check), where the search for ``number`` goes on from. ``kept``: when
    given, the seconds per call of the last check run are appended to it when that run was at
    the returned ``number`` and lasted ``0.8`` to ``HINT_SLACK x min_repeat_ms`` (a repeat by
    the rule a hint's check follows: the kernel ran warm before it)."""
    target_s = min_repeat_ms / 1000.0
    if target_s <= 0:
        return 1
    n = 1
    while True:
        if measured is not None:
            n, per_call = measured[0], max(measured[1], 1e-9)
            measured = None
        else:
            per_call = max(run(n), 1e-9)
        total = per_call * n
        if total >= target_s / 10 or n >= max_number:
            break
        n = min(n * 10, max_number)
    number = int(min(max_number, max(1, math.ceil(target_s / per_call))))
    if number <= n and total >= 0.8 * target_s:
        return number  # already measured at (about) this number: a slow kernel
    for _ in range(3):  # check the extrapolation (per-call overhead shrinks as number grows)
        per_call = max(run(number), 1e-9)
        if per_call * number >= 0.8 * target_s or number >= max_number:
            if kept is not None and 0.8 * target_s <= per_call * number <= HINT_SLACK * target_s:
                kept.append(per_call)
            break
        number = int(min(max_number, math.ceil(target_s / per_call)))
    return number


#: a hint's check repeat may last up to this many ``min_repeat_ms`` and still count as a repeat
HINT_SLACK = 2.5
#: a hint this many ``min_repeat_ms`` long or longer times one call per repeat without a check
#: (a kernel that turns out faster than ``0.8 x min_repeat_ms`` fails the final check)
HINT_SURE = 2.0
#: a check whose ``number`` calls of the verified module would last at most this many
#: ``min_repeat_ms`` (by the verification's own call time) runs without a probe call first: a
#: hint too fast then costs at most that long a check, never one past the timeout
PROBE_FREE = 10.0


def _one_repeat(time_repeats: Callable[[int, int], list[float]]) -> Callable[[int], float]:
    """``run(n)`` for ``calibrate``: the seconds per call of one repeat of ``n`` calls."""
    return lambda n: float(time_repeats(n, 1)[0])


def hinted(time_repeats: Callable[[int, int], list[float]], hint_s: float,
           min_repeat_ms: float, max_number: int,
           call_s: float | None = None,
           phases: dict[str, float] | None = None) -> tuple[int, list[float]]:
    """``number`` from ``hint_s`` (seconds per call), confirmed by one check repeat (see the
    module docstring): ``(number, repeats at it already measured)`` (the check, when it
    counts, else none). ``call_s``: how long one call of this module took elsewhere (its
    verification's runs), which may spare the probe call (``phases["hint_probe"]``: 1 when
    one was made)."""
    target_s = min_repeat_ms / 1000.0
    if target_s <= 0:
        return 1, []
    known_call = call_s is not None and call_s > 0 and math.isfinite(call_s)
    if hint_s >= HINT_SURE * target_s and known_call and call_s < 0.8 * target_s:
        # this module's own verification run was faster than a repeat (on one thread, buffer
        # copies included): the slow parent's time would make repeats of one call too short
        # and the whole attempt would be timed again, so its run is the hint (and checked)
        hint_s = call_s
    if hint_s >= HINT_SURE * target_s:
        return 1, []
    number = int(min(max_number, max(1, math.ceil(target_s / max(hint_s, 1e-9)))))
    run = _one_repeat(time_repeats)
    known = known_call and call_s * number <= PROBE_FREE * target_s
    if number > 1 and not known:
        # one call first: a hint far too fast (a sibling 1000x faster) would make the check
        # run number x the true per-call time, past the timeout, inside the device lock
        probe = max(run(1), 1e-9)
        if phases is not None:
            phases["hint_probe"] = 1
        if probe * number > HINT_SLACK * target_s:
            kept: list[float] = []
            return calibrate(run, min_repeat_ms, max_number, measured=(1, probe), kept=kept), kept
    per_call = max(run(number), 1e-9)
    total = per_call * number
    if total < 0.8 * target_s and number < max_number:
        # the calibration's own last check, when it passes, is the first repeat (as the
        # hint's check would have been)
        kept = []
        return calibrate(run, min_repeat_ms, max_number, measured=(number, per_call),
                         kept=kept), kept
    if number > 1 and total > HINT_SLACK * target_s:
        # per-call overhead only shrinks as calls are added, so fewer calls at this per-call
        # time still last at least the target
        return int(max(1, math.ceil(target_s / per_call))), []
    return number, [per_call]


#: repeats a timing that may stop early (``stop``) has before it may stop
EARLY_REPEATS = 3


def repeat_until_quiet(time_repeats: Callable[[int, int], list[float]], number: int,
                       config: MeasureConfig,
                       stop: Callable[[Timing], bool] | None = None,
                       first: Sequence[float] = ()) -> Timing:
    """Attempts of ``config.repeats`` repeats until spread <= max_spread (or tries run out);
    the attempt with the smallest spread wins. ``stop``: see the module docstring (only the
    first attempt may stop early). ``first``: repeats at ``number`` already measured (a hint's
    check), the first attempt's first ones."""

    def more(have: list[float], upto: int) -> list[float]:
        n = upto - len(have)
        return have + (list(time_repeats(number, n)) if n > 0 else [])

    best: Timing | None = None
    for attempt in range(1 + config.remeasure_tries):
        pre = list(first) if attempt == 0 else []
        if stop is not None and attempt == 0 and config.repeats > EARLY_REPEATS:
            head = more(pre, EARLY_REPEATS)
            t = summarize(head, number, config.max_spread)
            if stop(t):
                return t
            t = summarize(more(head, config.repeats), number, config.max_spread)
        else:
            t = summarize(more(pre, config.repeats), number, config.max_spread)
        if best is None or t.spread < best.spread:
            best = t
        if not t.noisy:
            break
    assert best is not None
    return best


def timed(time_repeats: Callable[[int, int], list[float]], run: Callable[[], Any],
          config: MeasureConfig, stop: Callable[[Timing], bool] | None = None,
          hint_s: float | None = None, phases: dict[str, float] | None = None,
          call_s: float | None = None) -> Timing:
    """Steps 2-5 of the protocol for a kernel given as ``time_repeats(number, repeats)``
    (seconds per call of each repeat, ``time_evaluator``'s results) and ``run()`` (one plain
    call, the warm-up); see ``measure``."""
    t0 = _time.perf_counter()
    first: list[float] = []
    if hint_s is not None and hint_s > 0 and math.isfinite(hint_s):
        for _ in range(config.warmup - 1):  # time_evaluator's discarded first call is one
            run()
        number, first = hinted(time_repeats, hint_s, config.min_repeat_ms, config.max_number,
                               call_s, phases)
    else:
        hint_s = None
        for _ in range(config.warmup):
            run()
        number = calibrate(_one_repeat(time_repeats), config.min_repeat_ms,
                           config.max_number)
    if phases is not None:  # a kept check repeat is measurement, not preparation
        phases["prepare_s"] = phases.get("prepare_s", 0.0) + _time.perf_counter() - t0 \
            - sum(first) * number
    t = repeat_until_quiet(time_repeats, number, config, stop, first)
    if (hint_s is not None and number < config.max_number
            and t.median_s * number < 0.8 * config.min_repeat_ms / 1000.0):
        # too short (a sure hint, or a check slower than the calls after it): calibrated again
        # from what the attempt measured (the kernel ran warm for all its repeats), timed again
        if phases is not None:
            phases["hint_fallback"] = 1
        # its confirming run is the first repeat when it lasts the target (as after a hint)
        kept: list[float] = []
        number = calibrate(_one_repeat(time_repeats), config.min_repeat_ms,
                           config.max_number, measured=(number, t.median_s), kept=kept)
        t = repeat_until_quiet(time_repeats, number, config, stop, kept)
    return t


#: Timing inputs by ``verify.inputs_key``: the candidates of one kernel take the same seeded
#: inputs (a few ms to draw, inside the device lock), read-only (``tir.build`` copies them to
#: the device). Bounded.
MAX_INPUTS = 4
_INPUTS: "LRU[list[np.ndarray]]" = LRU(MAX_INPUTS)


def _inputs(kernel, seed: int) -> list[np.ndarray]:
    from .verify import inputs_key, random_inputs

    key = inputs_key(kernel, seed)
    hit = _INPUTS.get(key)
    if hit is None:
        hit = random_inputs(kernel, seed)
        for x in hit:
            x.setflags(write=False)
        _INPUTS.put(key, hit)
    return hit


def _resolve(target, config):
    from ..tir import build as B
    from ..tir.target import Target

    if isinstance(target, dict):
        target = Target.from_dict(target)
    return target or B.default_target(), config or MeasureConfig()


def measure(program: Any, target=None, config: MeasureConfig | None = None,
            built=None, phases: dict[str, float] | None = None,
            stop: Callable[[Timing], bool] | None = None,
            hint_s: float | None = None, call_s: float | None = None) -> Timing:
    """Build ``program`` once for ``target`` and time it (see the module docstring); ``built``:
    time this module compiled from ``program`` instead of building again. Runs in this
    process: use ``Measurer`` (or ``runner.local.measure_isolated``) for untrusted kernels.
    ``phases``: filled with the seconds of steps 1-3 (``prepare_s``; ``hint_fallback``: 1
    when a hinted timing was redone in full; ``hint_probe``: 1 when its check needed a probe
    call first); ``stop``: may end the first attempt after
    ``EARLY_REPEATS`` repeats; ``hint_s``: about the seconds per call (``hinted``);
    ``call_s``: how long one call of ``built`` took when it was verified (``hinted``)."""
    from ..tir import build as B

    target, config = _resolve(target, config)
    t0 = _time.perf_counter()
    kernel = load_kernel(program)
    if built is None:
        try:
            built = B.build(kernel, target)
        except Exception as e:  # noqa: BLE001
            raise MeasureError(f"build failed: {e}") from e
    inputs = _inputs(kernel, config.seed)
    if phases is not None:
        phases["prepare_s"] = _time.perf_counter() - t0
    return timed(lambda n, r: list(B.time(built, inputs, number=n, repeat=r).results),
                 lambda: B.run(built, inputs), config, stop, hint_s, phases, call_s)


# ---------------------------------------------------------------------------- PyTorch
def torch_eager_baseline(workload_module, inputs: Sequence[Any], num_threads: int | None = None,
                         config: MeasureConfig | None = None) -> Timing:
    """Time ``workload_module(*inputs)`` in PyTorch eager mode (``torch.no_grad``, eval mode)
    with ``torch.set_num_threads(num_threads)`` (default: ``config.num_threads``), by the same
    warm-up / calibrate / repeat / remeasure protocol as ``measure``. The thread count is
    restored afterwards."""
    import torch

    config = config or MeasureConfig()
    threads = int(num_threads or config.num_threads)
    args = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    was_training = getattr(workload_module, "training", False)
    if hasattr(workload_module, "eval"):
        workload_module.eval()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            def per_call(n: int) -> float:
                t0 = _time.perf_counter()
                for _ in range(n):
                    workload_module(*args)
                return (_time.perf_counter() - t0) / n

            if config.warmup < 1:   # eager mode always gets one warm-up call
                workload_module(*args)
            return timed(lambda n, r: [per_call(n) for _ in range(r)],
                         lambda: workload_module(*args), config)
    finally:
        torch.set_num_threads(old_threads)
        if was_training and hasattr(workload_module, "train"):
            workload_module.train()


def env_threads() -> int | None:
    v = os.environ.get("TVM_NUM_THREADS")
    return int(v) if v and v.isdigit() else None
