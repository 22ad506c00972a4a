"""The runner of this machine, THE entry point other stages call to verify and time kernels:
``Measurer`` (the ``base.Runner`` interface; its requests and outcomes are ``base``'s).

    with Measurer(target, MeasureConfig(), cache=True, jobs=4) as m:
        verdicts = m.verify_many([(before_leir, after_leir, "exact"), ...])
        timings = m.time_many([leir_text, ...])

* every request consults the cache first (``steptp.measure.cache``) and reports ``cached=True``
  when it was answered from it; duplicates within one call are run once;
* misses run in isolated workers (``steptp.measure.worker``) with timeouts, so a hanging or
  crashing kernel is one failed outcome with a reason and the others go on;
* build once: a candidate is compiled once, in one of ``jobs`` workers, verified there (with one
  TVM thread; the reference outputs of a kernel are computed once per worker and seed), and
  its timing is sent to that same worker, which times the module it already holds with
  ``config.num_threads`` threads (``steptp.measure.runner.tasks``); a program nobody verified
  here is built by the worker that times it;
* timings on one machine are serialized even across processes and Measurers: a timing holds
  the per-device file lock (``<lock dir>/<device>.lock``) exclusively, and compilation plus
  verification hold it shared, so they run in parallel with each other but never on the cores
  during a timing (``device_lock``). With an ``RPCBackend`` (``runner.rpc``) the timing runs
  on a remote device (the tracker hands each device to one timing at a time) and local work
  takes no lock;
* only real answers are cached: verdicts the verifier reached and successful timings; a timeout
  or crash is not (it may be transient) and is retried next time.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from ...lru import LRU
from ...records import Timing
from ...tir.target import Target
from ..cache import Cache, program_hash
from ..fingerprint import Fingerprint, current
from ..programs import MeasureError
from ..timing import MeasureConfig
from ..verify import DEFAULT_SEEDS, VerifyResult, tolerance
from ..worker import WorkerError, WorkerPool, WorkerResult, current_shelf
from .base import TimingOutcome, VerifyJob, VerifyOutcome


# ---------------------------------------------------------------------------- device lock
def lock_dir() -> Path:
    env = os.environ.get("STEPTP_LOCK_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / "steptp-locks"


def device_name(target: Target) -> str:
    return "cuda0" if target.is_gpu else "cpu"


@contextmanager
def device_lock(name: str, directory: Path | None = None, shared: bool = False) -> Iterator[None]:
    """Hold the lock of device ``name``: exclusive (a timing: blocks every other holder on this
    machine) or ``shared`` (compilation and verification: any number at once, but never during
    a timing). A turnstile (``<name>.gate``) keeps a waiting timing from being starved by a
    stream of shared holders: once a timing waits, new shared holders queue behind it."""
    d = Path(directory) if directory is not None else lock_dir()
    d.mkdir(parents=True, exist_ok=True)
    gate = os.open(d / f"{name}.gate", os.O_RDWR | os.O_CREAT, 0o666)
    fd = os.open(d / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
        os.close(gate)


# ---------------------------------------------------------------------------- the service
#: ``_canonical_leir`` of texts: a search's texts are canonical already, and each is stored
#: once per timing (a parse of a few ms on the search process's thread). Bounded.
_CANONICAL: "LRU[str]" = LRU(256)


def _canonical_leir(program: Any, ph: str) -> str | None:
    """The canonical LEIR text stored with a timing (what a cost model trains on); None for
    TVMScript, whose features the cost model cannot read."""
    if not ph.startswith("leir:"):
        return None
    from ...leir import ast as A
    from ...leir import parse
    from ...leir.canon import canonical_text

    if isinstance(program, A.Program):
        return canonical_text(program)
    hit = _CANONICAL.get(program)
    if hit is None:
        hit = _CANONICAL.put(program, canonical_text(parse(program)))
    return hit


def _open_cache(cache) -> Cache | None:
    if cache is None or cache is False:
        return None
    if cache is True:
        return Cache()
    if isinstance(cache, Cache):
        return cache
    return Cache(cache)


class Measurer:
    """Verify and time kernels for ``target`` with ``config``; see the module docstring.

    ``cache``: a ``Cache``, a path, ``True`` (the default location) or ``None``/``False`` (no
    cache). ``jobs``: parallel verification workers. ``backend``: ``None`` (this machine) or an
    ``RPCBackend`` (time on a remote device through a TVM RPC tracker; verification stays
    local). ``verify_timeout_s``: per verification (default ``config.timeout_s``).
    ``prestart``: start the compile/verify workers at once, in the background (``prestart``).
    """

    def __init__(self, target: Target | dict | None = None, config: MeasureConfig | None = None,
                 cache: Any = True, jobs: int = 1, backend=None,
                 verify_timeout_s: float | None = None, fingerprint: Fingerprint | None = None,
                 memory_limit_mb: int | None = None, lock_directory: str | os.PathLike | None = None,
                 speed_of_light: bool = True, peaks=None, prestart: bool = False):
        if isinstance(target, dict):
            target = Target.from_dict(target)
        if target is None:
            from ...tir.build import default_target

            target = default_target()
        self.target: Target = target
        self.config = config or MeasureConfig()
        self.cache = _open_cache(cache)
        self.jobs = max(1, int(jobs))
        self.backend = backend
        self.verify_timeout_s = verify_timeout_s or self.config.timeout_s
        self.memory_limit_mb = memory_limit_mb
        self.lock_directory = Path(lock_directory) if lock_directory else None
        self._fingerprint = fingerprint
        self.speed_of_light = speed_of_light
        self._peaks = peaks
        self._recalibrated = peaks is not None  # given peaks are the caller's: never re-measured
        self._verify_pool: WorkerPool | None = None
        self._time_pool: WorkerPool | None = None
        self._shelf = current_shelf()   # inside ``reuse_workers``: pools come from and go back to it
        self._pool_lock = threading.Lock()
        self.stats = {"verify_runs": 0, "verify_hits": 0, "time_runs": 0, "time_hits": 0,
                      "compile_s": 0.0, "verify_s": 0.0, "reference_s": 0.0, "time_s": 0.0,
                      "lock_wait_s": 0.0, "rebuilds": 0, "time_prepare_s": 0.0,
                      "time_calls_s": 0.0, "stopped_early": 0, "hinted": 0,
                      "hint_fallbacks": 0, "hint_probes": 0}
        self._held: dict[str, tuple[int, str]] = {}   # program hash -> (worker, text it built)
        self._stats_lock = threading.Lock()
        self._nested = threading.local()
        if prestart and backend is None:
            self.prestart()

    def prestart(self) -> None:
        """Start the compile/verify workers now, in the background (each imports TVM, about
        3.5 s), so that their start-up overlaps what the caller does before its first request
        (a search generates its first candidates); a request waits for a worker still starting.
        A worker that cannot start is reported by the request that needs it."""
        pool = self._pool("verify")

        def start() -> None:
            try:
                pool.prestart_all()
            except Exception:  # noqa: BLE001 - closed meanwhile, or cannot start: the request says
                pass

        threading.Thread(target=start, name="steptp-prestart", daemon=True).start()

    # ------------------------------------------------------------------ identity
    @property
    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            if self.backend is not None:
                self._fingerprint = self.backend.fingerprint(self.target, self.config.num_threads)
            else:
                self._fingerprint = current(self.target, self.config.num_threads)
        return self._fingerprint

    @property
    def local_fingerprint(self) -> Fingerprint:
        """The fingerprint verification is keyed by (always this machine)."""
        if self.backend is None:
            return self.fingerprint
        return current(self.target, 1)

    # ------------------------------------------------------------------ pools
    def _pool(self, kind: str) -> WorkerPool:
        with self._pool_lock:
            if kind == "verify":
                if self._verify_pool is None:
                    # started with the timing thread count: a worker verifies with one thread
                    # and times (what it built) with all of them (steptp.measure.runner.tasks)
                    self._verify_pool = self._new_pool(self.jobs, self.verify_timeout_s)
                return self._verify_pool
            if self._time_pool is None:
                self._time_pool = self._new_pool(1, self.config.timeout_s)
            return self._time_pool

    def _new_pool(self, size: int, timeout_s: float) -> WorkerPool:
        # measurement tasks never import torch (``worker.STEPTP_WORKER_WITHOUT``)
        pool = WorkerPool(size, num_threads=self.config.num_threads, timeout_s=timeout_s,
                          memory_limit_mb=self.memory_limit_mb,
                          env={"STEPTP_WORKER_WITHOUT": "torch"})
        if self._shelf is not None:
            kept = self._shelf.take(pool.key)
            if kept is not None:
                pool.close()   # never started a worker: nothing to stop
                return kept
        return pool

    @property
    def worker_starts(self) -> int:
        return sum(p.starts for p in (self._verify_pool, self._time_pool) if p is not None)

    # ------------------------------------------------------------------ verification
    def verify_many(self, pairs: Sequence[Any], together: bool = False) -> list[VerifyOutcome]:
        """Verify each pair: a ``VerifyJob``, a dict of its fields, or a tuple ``(before,
        after)`` / ``(before, after, exactness)`` of LEIR (or TVMScript) texts, ``after`` being
        the candidate. Results in input order. ``together``: the uncached ones take the device
        lock's shared side once, as a group, so that no timing slips in between them and they
        all run on the cores at once (each taking its own hold could leave one verifying alone
        before a timing and the other alone after it)."""
        jobs = [self._as_job(p) for p in pairs]
        out: list[VerifyOutcome | None] = [None] * len(jobs)
        fp = self.local_fingerprint.id
        keys: list[tuple | None] = [None] * len(jobs)
        todo: dict[tuple, list[int]] = {}
        for i, job in enumerate(jobs):
            try:
                tolerance(job.exactness, "f32")
                key = (program_hash(job.before), program_hash(job.after), self.target.key, fp,
                       job.config_hash)
            except Exception as e:  # noqa: BLE001 - a program that does not parse
                out[i] = VerifyOutcome(result=VerifyResult(
                    passed=False, exactness=job.exactness, target=self.target.key,
                    reason=f"{type(e).__name__}: {e}"), status="error")
                continue
            keys[i] = key
            hit = self.cache.get_verification(*key) if self.cache is not None else None
            if hit is not None:
                self.stats["verify_hits"] += 1
                out[i] = VerifyOutcome(result=VerifyResult(**hit), cached=True)
            else:
                todo.setdefault(key, []).append(i)
        if todo:
            groups = list(todo.items())
            payloads = [{"before": jobs[idx[0]].before, "after": jobs[idx[0]].after,
                         "exactness": jobs[idx[0]].exactness, "seeds": list(jobs[idx[0]].seeds),
                         "target": self.target.to_dict(), "verify_threads": 1}
                        for _, idx in groups]
            pool = self._pool("verify")
            group = together and len(payloads) > 1 and pool.size > 1 and self.backend is None
            with self._group_hold(group):
                if len(payloads) <= 1 or pool.size == 1:
                    results = [self._build_verify(p, locked=group) for p in payloads]
                else:
                    # each on its own idle worker: a free-worker pick per thread let a quick
                    # first verification finish and take worker 0 again before the second
                    # thread started (on a loaded machine the batch then ran on one worker)
                    free = pool.idle()
                    pins = [free[k] if k < len(free) else None for k in range(len(payloads))]
                    with ThreadPoolExecutor(max_workers=min(pool.size, len(payloads))) as ex:
                        results = list(ex.map(
                            lambda pw: self._build_verify(pw[0], locked=group, worker=pw[1]),
                            zip(payloads, pins)))
            for (key, idx), r in zip(groups, results):
                job = jobs[idx[0]]
                if r.ok:
                    res = VerifyResult(**r.value["result"])
                    if r.value.get("kept"):
                        with self._stats_lock:
                            self._held[key[1]] = (r.worker, job.after)
                    if self.cache is not None:
                        self.cache.put_verification(*key, res.model_dump())
                    oc = VerifyOutcome(result=res, wall_s=r.wall_s)
                else:
                    oc = VerifyOutcome(result=VerifyResult(
                        passed=False, exactness=job.exactness, target=self.target.key,
                        reason=r.reason), status=r.status, wall_s=r.wall_s)
                for i in idx:
                    out[i] = oc
        return out  # type: ignore[return-value]

    @contextmanager
    def _group_hold(self, hold: bool) -> Iterator[None]:
        if not hold:
            yield
            return
        t0 = time.monotonic()
        with device_lock(device_name(self.target), self.lock_directory, shared=True):
            with self._stats_lock:
                self.stats["lock_wait_s"] += time.monotonic() - t0
            yield

    def _build_verify(self, payload: dict, locked: bool = False,
                      worker: int | None = None) -> WorkerResult:
        """One ``build_verify`` task, holding the device lock shared (no timing meanwhile);
        ``locked``: the caller holds it for a group (taking it again here could deadlock
        behind a timing waiting at the turnstile); ``worker``: on that worker (else a free one)."""
        pool = self._pool("verify")
        t0 = time.monotonic()
        if self.backend is not None or locked:
            r = pool.run("build_verify", payload, worker=worker)
        else:
            with device_lock(device_name(self.target), self.lock_directory, shared=True):
                waited = time.monotonic() - t0
                r = pool.run("build_verify", payload, worker=worker)
            with self._stats_lock:
                self.stats["lock_wait_s"] += waited
        with self._stats_lock:
            self.stats["verify_runs"] += 1
            if r.ok:
                for k in ("compile_s", "verify_s", "reference_s"):
                    self.stats[k] += float(r.value.get(k, 0.0))
        return r

    @staticmethod
    def _as_job(p: Any) -> VerifyJob:
        if isinstance(p, VerifyJob):
            return p
        if isinstance(p, dict):
            return VerifyJob(**{**p, "seeds": tuple(p.get("seeds", DEFAULT_SEEDS))})
        if isinstance(p, (tuple, list)) and len(p) in (2, 3):
            return VerifyJob(*p)
        raise TypeError("a verification is a VerifyJob, a dict, or (before, after[, exactness])")

    def verify(self, before: str, after: str, exactness: str = "exact") -> VerifyOutcome:
        return self.verify_many([(before, after, exactness)])[0]

    # ------------------------------------------------------------------ timing
    @property
    def peaks(self):
        """The machine's calibrated peaks (``steptp.measure.roofline``), measured on first use."""
        if self._peaks is None:
            from ..roofline import load_or_calibrate

            self._peaks = load_or_calibrate(self, self._roofline_dir()) or False
        return self._peaks or None

    def _roofline_dir(self):
        return self.cache.path.parent if self.cache is not None else None

    def _judge_speed(self, program: str, oc: TimingOutcome) -> TimingOutcome:
        """A timing below the speed of light is kept, marked suspect, with the reason. Before
        the first such verdict the peaks are calibrated again (the saved calibration may have
        been taken on a busy machine)."""
        from ..roofline import load_or_calibrate, suspect_reason

        why = suspect_reason(program, oc.timing.median_s, self.peaks)
        if why is not None and not self._recalibrated:
            self._recalibrated = True
            self._peaks = load_or_calibrate(self, self._roofline_dir(), fresh=True,
                                            keep=self.peaks) or self._peaks
            why = suspect_reason(program, oc.timing.median_s, self.peaks)
        if why is None:
            return oc
        return oc.model_copy(update={"timing": oc.timing.model_copy(update={"suspect": True}),
                                     "status": "suspect", "reason": why})

    def time_many(self, programs: Sequence[str], check_speed_of_light: bool | None = None,
                  use_cache: bool = True, stop_if_slower_than: Timing | None = None,
                  rule=None, hints: Sequence[float | None] | None = None
                  ) -> list[TimingOutcome]:
        """Time each program (LEIR or TVMScript text), one at a time on the device. Results in
        input order; a failure is a ``TimingOutcome`` with ``timing=None`` and a ``reason``; a
        timing below the machine's speed of light has ``status="suspect"`` and
        ``timing.suspect``. ``stop_if_slower_than``: a reference timing; a program whose first
        repeats are already clearly slower than it (``rule.clearly_slower``, ``rule`` a
        ``SignificanceRule``, default the default rule) stops there (``stopped_early``, its
        ``timing.repeats`` the repeats it had) and is not cached: the next caller may need
        its full timing. Local timings only (an RPC device times in full). ``hints``: per
        program, about its seconds per call (or None), which lets the timing skip its
        calibration (``timing.hinted``: a wrong hint costs time, never a too-short repeat);
        local timings only."""
        check = self.speed_of_light if check_speed_of_light is None else check_speed_of_light
        t0 = time.monotonic()
        stop = None
        if stop_if_slower_than is not None:
            # plain data for the worker, which applies the rule (``tasks._stop``); the rule's
            # module imports this one, so it is not imported here
            stop = {"timing": stop_if_slower_than.model_dump(),
                    "rule": rule.model_dump() if rule is not None else {}}
        out = self._time_many(programs, use_cache, stop, hints)
        if check and any(o.ok for o in out):
            outer = getattr(self._nested, "on", False)
            self._nested.on = True   # a calibration of the peaks times through here too
            try:
                out = [self._judge_speed(p, o) if o.ok else o for p, o in zip(programs, out)]
            finally:
                self._nested.on = outer
        if not getattr(self._nested, "on", False):
            with self._stats_lock:
                self.stats["time_calls_s"] += time.monotonic() - t0
        return out

    def _time_many(self, programs: Sequence[str], use_cache: bool = True,
                   stop: dict | None = None,
                   hints: Sequence[float | None] | None = None) -> list[TimingOutcome]:
        cache = self.cache if use_cache else None
        fp = self.fingerprint.id
        chash = self.config.hash
        out: list[TimingOutcome | None] = [None] * len(programs)
        todo: dict[str, list[int]] = {}
        for i, prog in enumerate(programs):
            try:
                ph = program_hash(prog)
            except Exception as e:  # noqa: BLE001
                out[i] = TimingOutcome(status="error", reason=f"{type(e).__name__}: {e}",
                                       fingerprint=fp)
                continue
            hit = (cache.get_timing(ph, self.target.key, fp, chash)
                   if cache is not None else None)
            if hit is not None:
                self.stats["time_hits"] += 1
                out[i] = TimingOutcome(program_hash=ph, timing=Timing(**hit), cached=True,
                                       fingerprint=fp)
            else:
                todo.setdefault(ph, []).append(i)
        for ph, idx in todo.items():
            r = self._time_one(programs[idx[0]], ph, stop,
                               hints[idx[0]] if hints is not None else None)
            stopped = r.ok and bool(r.value.get("stopped_early"))
            if stopped and r.worker is not None and not r.value.get("rebuilt"):
                with self._stats_lock:  # that worker kept the module for a full timing
                    self._held[ph] = (r.worker, programs[idx[0]])
            with self._stats_lock:
                self.stats["time_runs"] += 1
                if r.ok:
                    self.stats["time_s"] += float(r.value.get("seconds", r.wall_s))
                    self.stats["time_prepare_s"] += float(r.value.get("prepare_s", 0.0))
                    self.stats["rebuilds"] += int(bool(r.value.get("rebuilt")))
                    self.stats["stopped_early"] += int(stopped)
                    self.stats["hint_fallbacks"] += int(r.value.get("hint_fallback", 0))
                    self.stats["hint_probes"] += int(r.value.get("hint_probe", 0))
            if r.ok:
                timing = Timing(**r.value["timing"])
                if cache is not None and not stopped:
                    cache.put_timing(ph, self.target.key, fp, chash, timing.model_dump(),
                                     leir=_canonical_leir(programs[idx[0]], ph))
                oc = TimingOutcome(program_hash=ph, timing=timing, fingerprint=fp,
                                   wall_s=r.wall_s, stopped_early=stopped)
            else:
                oc = TimingOutcome(program_hash=ph, status=r.status, reason=r.reason,
                                   fingerprint=fp, wall_s=r.wall_s)
            for i in idx:
                out[i] = oc
        return out  # type: ignore[return-value]

    def _time_one(self, program: str, ph: str | None = None,
                  stop: dict | None = None, hint_s: float | None = None) -> WorkerResult:
        payload = {"program": program, "target": self.target.to_dict(),
                   "config": self.config.model_dump()}
        if stop is not None:
            payload["stop_if_slower_than"] = stop
        if self.backend is not None:
            payload["backend"] = self.backend.to_dict()
            return self._pool("time").run("rpc_time", payload)
        pool = self._pool("verify")
        with self._stats_lock:
            held = self._held.pop(ph, None) if ph is not None else None
        worker = None
        if held is not None:
            worker, payload["program"] = held  # the text that worker built the module from
        if hint_s is not None:
            payload["hint_s"] = float(hint_s)
            with self._stats_lock:
                self.stats["hinted"] += 1
        try:
            # start-up is not measurement: outside the lock, and every worker at once (the
            # first timing of a run is its baseline's; the verifications that follow need them)
            pool.prestart(worker) if worker is not None else pool.prestart_all()
        except WorkerError as e:
            return WorkerResult("crash", reason=str(e))
        t0 = time.monotonic()
        with device_lock(device_name(self.target), self.lock_directory):
            with self._stats_lock:
                self.stats["lock_wait_s"] += time.monotonic() - t0
            return pool.run("time_built", payload, timeout_s=self.config.timeout_s, worker=worker)

    def time(self, program: str) -> TimingOutcome:
        return self.time_many([program])[0]

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        for p in (self._verify_pool, self._time_pool):
            if p is not None:
                if self._shelf is not None:
                    self._shelf.put(p)
                else:
                    p.close()
        self._verify_pool = self._time_pool = None

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def measure_isolated(program: str, target=None, config: MeasureConfig | None = None) -> Timing:
    """``measure`` in a fresh isolated worker (for one-off use; ``Measurer`` reuses workers)."""
    with Measurer(target, config, cache=None) as m:
        out = m.time_many([program])[0]
    if out.timing is None:
        raise MeasureError(out.reason or "measurement failed")
    return out.timing


__all__ = ["Measurer", "measure_isolated", "device_lock", "device_name", "lock_dir"]
