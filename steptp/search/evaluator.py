"""What the search needs from measurement: verify a candidate, time a program.

    ev = default_evaluator()                       # the Measurer when available, else in-process
    v = ev.verify(original_text, candidate_text, "exact")   # -> VerifyOutcome (ok, outcome, reason)
    t = ev.time(candidate_text)                              # -> TimingOutcome (a Timing or why not)

The outcomes are the runners' (``steptp.measure.runner.base``); a failure always has a reason,
and the search reads a step's word from ``outcome``. Two implementations:

* :class:`MeasurerEvaluator` wraps ``steptp.measure.runner.local.Measurer`` (isolated workers with
  timeouts, the SQLite cache, serialized timing under a device lock); the default;
* :class:`InProcessEvaluator` builds and runs in this process on top of ``measure.verify``
  (comparison and inputs) and ``measure.timing.measure`` (``tir.build.time`` with warm-up,
  calibration, repeats and spread). It caches the reference outputs of each original kernel, so
  verifying many candidates of one slow unscheduled kernel runs the reference once per seed.

Both set ``TVM_NUM_THREADS`` to the core count for timing (unless the caller set it) and report
the thread count and a fingerprint id with every timing.
"""

from __future__ import annotations

import os
import time as _time
from typing import Any, Optional, Protocol, Sequence

import numpy as np

from ..measure.runner.base import TimingOutcome, VerifyOutcome
from ..measure.verify import VerifyResult
from ..records import Timing


class Evaluator(Protocol):
    """The protocol the search is written against."""

    target: Any
    num_threads: int
    fingerprint: str

    def verify(self, original: str, candidate: str, exactness: str) -> VerifyOutcome: ...

    def time(self, program: str) -> TimingOutcome: ...

    def time_fresh(self, program: str) -> Optional[Timing]: ...   # a full, uncached timing

    # An evaluator with ``early_stop = True`` also takes ``time(program, slower_than=timing)``:
    # it may end a timing whose first repeats are clearly slower than ``timing``
    # (``SignificanceRule.clearly_slower``) and says so (``stopped_early``). One with
    # ``hints = True`` takes ``time(program, hint_s=seconds)``: about the seconds per call
    # (the timing starts its calibration from it; its protocol is unchanged otherwise).

    def close(self) -> None: ...


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def set_threads(num_threads: int | None = None) -> int:
    """Set ``TVM_NUM_THREADS`` (default: the core count) unless it is already set; return it."""
    cur = os.environ.get("TVM_NUM_THREADS")
    if cur and cur.isdigit() and num_threads is None:
        return int(cur)
    n = int(num_threads or _cores())
    os.environ["TVM_NUM_THREADS"] = str(n)
    return n


def search_config(num_threads: int, min_repeat_ms: float = 20.0, repeats: int = 5,
                  timeout_s: float = 60.0):
    """The timing protocol the search uses: shorter repeats than the dataset default (the search
    measures many candidates), at least 5 repeats, remeasured when noisy."""
    from ..measure.timing import MeasureConfig

    return MeasureConfig(min_repeat_ms=min_repeat_ms, repeats=repeats, num_threads=num_threads,
                         timeout_s=timeout_s, remeasure_tries=1)


# ============================================================================ in-process
class InProcessEvaluator:
    """Verify and time in this process (no isolation: a crashing kernel takes the process down).
    Reference outputs are cached per original text."""

    name = "inprocess"

    def __init__(self, target=None, config=None, seeds: Sequence[int] | None = None,
                 num_threads: int | None = None, early_stop: bool = False):
        from ..tir.build import default_target

        self.early_stop = bool(early_stop)
        self.num_threads = set_threads(num_threads)
        self.target = target or default_target()
        self.config = config or search_config(self.num_threads)
        from ..measure.verify import DEFAULT_SEEDS

        self.seeds = tuple(DEFAULT_SEEDS if seeds is None else seeds)
        self._refs: dict[str, list[tuple[list[np.ndarray], list[np.ndarray]]]] = {}
        self._fp: str | None = None
        self._built: tuple[str, Any] | None = None   # the last candidate built by verify

    @property
    def fingerprint(self) -> str:
        if self._fp is None:
            try:
                from ..measure.fingerprint import current

                self._fp = current(self.target, self.num_threads).id
            except Exception:  # noqa: BLE001 - the fingerprint is informative only
                self._fp = f"{self.target.key}-t{self.num_threads}"
        return self._fp

    def _reference(self, original: str):
        ref = self._refs.get(original)
        if ref is None:
            from ..leir import parse
            from ..measure.verify import random_inputs
            from ..tir import build as B

            prog = parse(original)
            built = B.build(prog, self.target)
            ref = []
            for s in self.seeds:
                ins = random_inputs(prog, s)
                ref.append((ins, B.run(built, ins)))
            self._refs[original] = ref
        return ref

    def verify(self, original: str, candidate: str, exactness: str) -> VerifyOutcome:
        """The verdict as an isolated worker reports it (a program that does not build, a
        static problem, a wrong or failing run: a verdict that did not pass)."""
        from ..leir import parse
        from ..measure.verify import judge, static_problem
        from ..tir import build as B

        t0 = _time.perf_counter()

        def verdict(passed: bool, reason: str | None = None, abs_err: float = 0.0,
                    rel_err: float = 0.0) -> VerifyOutcome:
            return VerifyOutcome(result=VerifyResult(
                passed=passed, exactness=exactness, max_abs_err=abs_err, max_rel_err=rel_err,
                reason=reason, target=self.target.key), wall_s=_time.perf_counter() - t0)

        try:
            ref = self._reference(original)
            ref_prog = parse(original)
            ref_sig = B.program_signature(ref_prog)
        except Exception as e:  # noqa: BLE001
            return verdict(False, f"reference does not build: {e}")
        try:
            prog = parse(candidate)
            problem = static_problem(B.program_signature(prog), ref_sig, prog, self.target)
            if problem:
                return verdict(False, problem)
            built = B.build(prog, self.target)
            self._built = (candidate, built)
        except Exception as e:  # noqa: BLE001
            return verdict(False, f"candidate does not build: {type(e).__name__}: {e}"[:2000])
        refs = [(seed, ins, want) for seed, (ins, want) in zip(self.seeds, ref)]
        results = judge(built, refs, exactness, ref_prog, self.target, stop_at_first=True,
                        cand_prog=prog)
        worst_abs = max((r.max_abs_err for r in results), default=0.0)
        worst_rel = max((r.max_rel_err for r in results), default=0.0)
        bad = next((r for r in results if not r.passed), None)
        if bad is not None:
            return verdict(False, f"seed {bad.seed}: {bad.reason}", worst_abs, worst_rel)
        return verdict(True, None, worst_abs, worst_rel)

    def time(self, program: str, slower_than: Optional[Timing] = None) -> TimingOutcome:
        """``measure.timing``'s protocol (warm-up, calibration, repeats, remeasure when noisy),
        reusing the module ``verify`` just built for the same text; ``slower_than``: stop early
        when the first repeats are clearly slower than it."""
        from ..leir import parse
        from ..measure.significance import SignificanceRule
        from ..measure.timing import measure
        from ..tir import build as B

        t0 = _time.perf_counter()
        cfg = self.config
        try:
            prog = parse(program)
            if self._built is not None and self._built[0] == program:
                built = self._built[1]
            else:
                built = B.build(prog, self.target)
        except Exception as e:  # noqa: BLE001
            return TimingOutcome(status="error", reason=f"{type(e).__name__}: {e}"[:2000],
                                 wall_s=_time.perf_counter() - t0)
        try:
            stop = None
            if slower_than is not None:
                rule = SignificanceRule()
                stop = lambda part: rule.clearly_slower(slower_than, part)  # noqa: E731
            t = measure(prog, self.target, cfg, built=built, stop=stop)
        except Exception as e:  # noqa: BLE001
            return TimingOutcome(status="crash", reason=f"{type(e).__name__}: {e}"[:2000],
                                 wall_s=_time.perf_counter() - t0)
        finally:
            self._built = None
        return TimingOutcome(timing=t, wall_s=_time.perf_counter() - t0,
                             stopped_early=slower_than is not None and t.repeats < cfg.repeats)

    def time_fresh(self, program: str) -> Optional[Timing]:
        """A full timing, never a cached one (every call here times): for re-timing side by
        side (``measure.significance.interleaved``); None when it failed."""
        return self.time(program).timing

    def close(self) -> None:
        self._refs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ============================================================================ measurer service
class MeasurerEvaluator:
    """The search protocol on top of ``steptp.measure.runner.local.Measurer`` (isolated workers,
    timeouts, cache)."""

    name = "measurer"

    def __init__(self, target=None, config=None, cache: Any = True, jobs: int = 1,
                 num_threads: int | None = None, seeds: Sequence[int] | None = None,
                 backend=None, early_stop: bool = False):
        from ..measure.runner.local import Measurer
        from ..tir.build import default_target

        self.num_threads = set_threads(num_threads)
        self.target = target or default_target()
        self.config = config or search_config(self.num_threads)
        from ..measure.verify import DEFAULT_SEEDS

        self.seeds = tuple(DEFAULT_SEEDS if seeds is None else seeds)
        self.jobs = max(1, int(jobs))
        self.measurer = Measurer(self.target, self.config, cache=cache, jobs=self.jobs,
                                 backend=backend, prestart=True)
        #: the search may ask a timing to stop once clearly slower than its parent's (local
        #: only). Off by default: a stopped timing is never cached, so a rebuild on the same
        #: cache would time those candidates again and could decide differently (the cache's
        #: exact rerun is what a nightly rebuild relies on); and it saves about a tenth of the
        #: timing stage (README, "Early stop"), not enough to give that up
        self.early_stop = bool(early_stop) and backend is None
        #: the search may pass ``time(..., hint_s=)``: a timing's calibration starts from it
        self.hints = backend is None
        # candidates verified ahead (``prefetch``): a batch of up to ``jobs`` candidates the
        # search will probably verify next compiles and verifies on all workers at once (one
        # shared hold of the device lock, so no timing splits the batch); the next batch is
        # sent once that one is done, so a timing never waits behind more than one batch
        self.prefetch_depth = self.jobs if self.jobs > 1 else 0
        #: how many of a state's next candidates go out right after each of its timings
        self.ahead_after_timing = self.prefetch_depth
        self._pending: dict[tuple[str, str, str], tuple[Any, int]] = {}
        self._ready: dict[tuple[str, str, str], tuple[Any, int]] = {}
        self._executor = None
        self.prefetch_stats = {"submitted": 0, "used": 0, "batches": 0}

    @property
    def fingerprint(self) -> str:
        return self.measurer.fingerprint.id

    def prefetch(self, original: str, items: Sequence[tuple[str, str]]) -> list[str]:
        """Start verifying ``(candidate, exactness)`` pairs of ``original`` in the background, in
        the order given (the search's expected order; the first may be the very candidate it
        verifies next); a later ``verify`` of the same pair takes the result. At most one batch
        of ``prefetch_depth`` is in flight. Verdicts do not depend on when they were computed,
        so this changes no result, only when the work happens. Returns the candidates it
        took (sent now): the search offers the others again, and these no more."""
        if self.prefetch_depth <= 0:
            return []
        from concurrent.futures import ThreadPoolExecutor

        from ..measure.runner.base import VerifyJob

        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steptp-prefetch")
        wanted = {(original, cand, exactness) for cand, exactness in items}
        for key in [k for k, (f, _) in self._pending.items() if k not in wanted and f.done()]:
            # a finished verdict the search did not ask for (yet): kept aside, bounded, so it
            # neither blocks new work nor is lost if the search comes back to it
            self._ready[key] = self._pending.pop(key)
            while len(self._ready) > 64:
                self._ready.pop(next(iter(self._ready)))
        if any(not f.done() for f, _ in self._pending.values()):
            return []  # one batch at a time: the next one goes when this one is done
        keys = []
        for cand, exactness in items:
            key = (original, cand, exactness)
            if key in self._pending or key in self._ready or key in keys:
                continue
            keys.append(key)
            if len(keys) >= self.prefetch_depth:
                break
        if not keys:
            return []
        jobs = [VerifyJob(o, c, e, self.seeds) for o, c, e in keys]
        fut = self._executor.submit(self.measurer.verify_many, jobs, True)
        for i, key in enumerate(keys):
            self._pending[key] = (fut, i)
        self.prefetch_stats["submitted"] += len(keys)
        self.prefetch_stats["batches"] += 1
        return [c for _, c, _ in keys]

    def verify(self, original: str, candidate: str, exactness: str) -> VerifyOutcome:
        from ..measure.runner.base import VerifyJob

        key = (original, candidate, exactness)
        ahead = self._pending.pop(key, None) or self._ready.pop(key, None)
        if ahead is not None:
            self.prefetch_stats["used"] += 1
            oc = ahead[0].result()[ahead[1]]
        else:
            oc = self.measurer.verify_many([VerifyJob(original, candidate, exactness,
                                                      self.seeds)])[0]
        if oc.ok or oc.reason:
            return oc
        why = oc.status if oc.status != "ok" else "verification failed"
        return oc.model_copy(update={"result": oc.result.model_copy(update={"reason": why})})

    def time(self, program: str, slower_than: Optional[Timing] = None,
             hint_s: Optional[float] = None) -> TimingOutcome:
        """``hint_s``: about the program's seconds per call (a parent's or sibling's time),
        which spares the timing its calibration (``measure.timing.hinted``)."""
        oc = self.measurer.time_many([program], stop_if_slower_than=slower_than
                                     if self.early_stop else None,
                                     hints=[hint_s] if self.hints else None)[0]
        if oc.status == "suspect":
            # never a step's timing: the search builds on none (``outcome``: suspect_timing)
            return oc.model_copy(update={"timing": None, "reason": oc.reason or "suspect timing"})
        if oc.timing is not None:
            return oc
        return oc.model_copy(update={"reason": oc.reason or oc.status})

    def time_fresh(self, program: str) -> Optional[Timing]:
        """A full timing that never answers from (or writes to) the cache: for re-timing side by
        side (``measure.significance.interleaved``); None when it failed or was suspect."""
        oc = self.measurer.time_many([program], use_cache=False)[0]
        return oc.timing if oc.status != "suspect" else None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self._pending.clear()
        self._ready.clear()
        self.measurer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def default_evaluator(target=None, config=None, kind: str = "auto", cache: Any = True,
                      num_threads: int | None = None, jobs: int = 1, backend=None) -> Evaluator:
    """``kind``: ``auto`` (the Measurer service when it imports, else in-process), ``measurer``
    or ``inprocess``. ``jobs``: compile/verify workers of the Measurer; ``backend``: an
    ``RPCBackend`` (timings on a device fleet)."""
    if kind in ("auto", "measurer"):
        try:
            return MeasurerEvaluator(target, config, cache=cache, num_threads=num_threads,
                                     jobs=jobs, backend=backend)
        except ImportError:
            if kind == "measurer":
                raise
    return InProcessEvaluator(target, config, num_threads=num_threads)


__all__ = ["Evaluator", "InProcessEvaluator", "MeasurerEvaluator", "default_evaluator",
           "search_config", "set_threads"]
