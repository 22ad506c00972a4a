"""Search throughput, honestly counted: unique candidates built, verified and timed per core-hour.

    .venv/bin/python benchmarks/throughput.py              # default-size matmul + conv, budget 64
    .venv/bin/python benchmarks/throughput.py --policy random --jobs 1
    .venv/bin/python benchmarks/throughput.py --dask 2 --skip-local   # 1 vs 2 Dask workers
    .venv/bin/python benchmarks/throughput.py --lock-check # what the device lock buys
    .venv/bin/python benchmarks/throughput.py --core-check # or could a dedicated core do it?
    .venv/bin/python benchmarks/throughput.py --bookkeeping # the search thread alone

What counts: a candidate (one canonical program) that was built, verified (passed) and timed IN
THIS RUN. Reported apart: verification or timing answered from the cache, duplicates (a program
the search already evaluated under another text), failed builds, failed verifications, timeouts,
crashes. Each run uses a fresh measurement cache (``--cache PATH`` to reuse one and see hits).

Per stage (seconds): search bookkeeping (the search thread outside the evaluator: candidate
generation, ranking, records), compile and verification runs (summed over the workers, which
run in parallel), reference runs (once per kernel and seed per worker), timing (serialized
under the device lock), lock waits, and the evaluator's wall time as the search saw it.

As a release does, the searches of one run share their measurement workers
(``steptp.measure.worker.reuse_workers``; ``--fresh-workers``: each search starts its own), and
with ``--early-stop`` a candidate's timing may stop after its first repeats when they are
clearly slower than its parent's time (the row's ``before``); stopped timings are counted
(they were built, verified and timed here) and reported apart. ``--bookkeeping`` digests the steps
taken with and without verify-ahead offers: equal digests, equal decisions.

A core-hour is wall time times the cores this process may run on (``sched_getaffinity``): the
run occupies them all (compile/verify workers, then the timing threads). The machine may be
shared (other processes compete for the same cores; the load average is printed): the figure is
what this run got. Also printed: the CPU time this run's processes really used, and the figure
per CPU core-hour used (in a Dask pass, summed over the searches, each measured in its worker).

``--dask N``: the same kernels as independent searches on a ``dask.distributed`` LocalCluster,
first with 1 worker then with N (each worker: one search at a time with its own Measurer of one
compile/verify worker; timings serialized across all of them by the device lock). Printed: the
compile+verify rate, unique candidates per second of wall time not spent timing, and its scaling
from 1 to N workers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _search_common import selected, workload_kernel  # noqa: E402


def _hash(text: str) -> str:
    from steptp.measure.cache import program_hash

    try:
        return program_hash(text)
    except Exception:  # noqa: BLE001 - a candidate that does not parse: its text is its identity
        import hashlib

        return "text:" + hashlib.sha256(text.encode()).hexdigest()


class Counting:
    """The search's evaluator, counting what each call cost and how it ended."""

    def __init__(self, inner):
        self.inner = inner
        self.wait_s = 0.0
        self.verdicts: list[tuple[str, str]] = []   # (program hash, outcome)
        self.timings: list[tuple[str, str, bool]] = []  # (program hash, outcome, cached)
        self._verified: set[str] = set()
        self.reasons: dict[str, int] = {}
        # (worker seconds of the timing, its median / the best median timed before it)
        self.timing_profile: list[tuple[float, float]] = []
        self._best: float | None = None
        self.stopped = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def verify(self, original, candidate, exactness):
        t0 = time.perf_counter()
        v = self.inner.verify(original, candidate, exactness)
        self.wait_s += time.perf_counter() - t0
        ph = _hash(candidate)
        self.verdicts.append((ph, v.outcome))
        if v.outcome not in ("ok", "failed_verify"):
            why = f"verify {v.outcome}: {v.reason[:120]}"
            self.reasons[why] = self.reasons.get(why, 0) + 1
        if v.ok:
            self._verified.add(ph)
        return v

    def time(self, program, **kw):
        t0 = time.perf_counter()
        t = self.inner.time(program, **kw)
        self.wait_s += time.perf_counter() - t0
        ph = _hash(program)
        if ph in self._verified:  # a candidate (the baseline is timed without a verification)
            self.timings.append((ph, t.outcome, bool(getattr(t, "cached", False))))
            self.stopped += bool(getattr(t, "stopped_early", False))
            if t.timing is not None and self._best is not None:
                self.timing_profile.append((t.wall_s, t.timing.median_s / self._best))
        if t.timing is not None:
            self._best = min(self._best or t.timing.median_s, t.timing.median_s)
        if t.outcome != "ok":
            why = f"timing {t.outcome}: {t.reason[:120]}"
            self.reasons[why] = self.reasons.get(why, 0) + 1
        return t


def run_search(name: str, size: str, policy: str, budget: int, seconds: float, jobs: int,
               cache: str | None, run_dir: str, seed: int = 0, early_stop: bool = False,
               ahead_after_timing: int | None = None) -> dict:
    """One kernel search with a fresh Measurer and cache (in ``run_dir``, whose roofline
    calibration the searches of one run share); its honest counts and stage seconds."""
    from steptp.search import Budget, search_kernel
    from steptp.search.evaluator import MeasurerEvaluator

    kid, prog, _, _ = workload_kernel(name, size)
    with tempfile.TemporaryDirectory(prefix="cache-", dir=run_dir) as d:
        db = cache or os.path.join(run_dir, f"{os.path.basename(d)}.sqlite")
        try:
            inner = MeasurerEvaluator(cache=db, jobs=jobs, early_stop=early_stop)
        except TypeError:  # older code (no early stop), measured by the same benchmark
            inner = MeasurerEvaluator(cache=db, jobs=jobs)
        print(f"# {name}: {type(inner.measurer).__module__} from "
              f"{os.path.dirname(sys.modules['steptp'].__file__)}", flush=True)
        if ahead_after_timing is not None:
            inner.ahead_after_timing = ahead_after_timing
        ev = Counting(inner)
        cpu0 = _cpu_s()
        try:
            t0 = time.perf_counter()
            res = search_kernel(prog, kid, policy, Budget(budget, seconds), seed, ev,
                                return_result=True)
            wall = time.perf_counter() - t0
            # .get: the same benchmark also measures older code (no stage seconds, no prefetch)
            st = {k: 0 for k in ("compile_s", "verify_s", "reference_s", "time_s",
                                 "lock_wait_s", "rebuilds", "time_prepare_s", "time_calls_s",
                                 "hinted", "hint_fallbacks", "hint_probes")}
            st.update(inner.measurer.stats)
            pre = {"submitted": 0, "used": 0, "batches": 0}
            pre.update(getattr(inner, "prefetch_stats", {}))
        finally:
            inner.close()  # reaps the workers (inside reuse_workers: hands them on)
        cpu = _cpu_s() - cpu0
    seen: set[str] = set()
    c = {"verify_calls": len(ev.verdicts), "duplicates": 0, "failed_build": 0,
         "failed_verify": 0, "timeout": 0, "crashed": 0, "timing_failed": 0, "timing_cached": 0}
    for ph, status in ev.verdicts:
        if ph in seen:
            c["duplicates"] += 1
        seen.add(ph)
        if status != "ok":
            c[status if status in c else "crashed"] += 1
    unique = set()
    for ph, status, cached in ev.timings:
        if status != "ok":
            c["timing_failed"] += 1
        elif cached:
            c["timing_cached"] += 1
        else:
            unique.add(ph)
    c.update(unique=len(unique), wall_s=wall, cpu_s=cpu, wait_s=ev.wait_s,
             bookkeeping_s=wall - ev.wait_s,
             verify_hits=st["verify_hits"], time_hits=st["time_hits"],
             compile_s=st["compile_s"], verify_s=st["verify_s"], reference_s=st["reference_s"],
             time_s=st["time_s"], lock_wait_s=st["lock_wait_s"], rebuilds=st["rebuilds"],
             time_prepare_s=st["time_prepare_s"], time_calls_s=st["time_calls_s"],
             hinted=st["hinted"], hint_fallbacks=st["hint_fallbacks"],
             hint_probes=st["hint_probes"],
             prefetched=pre["submitted"], prefetch_used=pre["used"], batches=pre["batches"],
             stopped_early=ev.stopped, retimed=getattr(res, "retimed", 0),
             slow_timings=sum(1 for _, r in ev.timing_profile if r > 2),
             slow_timing_s=sum(w for w, r in ev.timing_profile if r > 2), name=name,
             reasons=ev.reasons,
             measurements=res.measurements, best_speedup=(res.baseline.median_s / res.best.seconds
                                                           if res.best is not None else None))
    return c


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and its reaped children (the workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _add(total: dict, c: dict) -> None:
    for why, n in c.get("reasons", {}).items():
        total.setdefault("reasons", {})[why] = total.get("reasons", {}).get(why, 0) + n
    for k, v in c.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "best_speedup":
            total[k] = total.get(k, 0) + v


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _report(total: dict, cores: int, wall: float, label: str) -> None:
    core_h = wall * cores / 3600
    print(f"# {label}: {total['unique']} unique candidates built, verified and timed in "
          f"{wall:.0f} s on {cores} cores = {total['unique'] / core_h:.0f} per core-hour")
    if total.get("cpu_s"):
        print(f"#   CPU time this run got: {total['cpu_s']:.0f} core-s of the {wall * cores:.0f} "
              f"it held = {total['unique'] / (total['cpu_s'] / 3600):.0f} per CPU core-hour used "
              f"(the rest went to other processes or idle waits)")
    print(f"#   apart: {total['verify_hits']} verdicts and {total['time_hits']} timings from the "
          f"cache, {total['duplicates']} duplicates, {total['failed_build']} failed builds, "
          f"{total['failed_verify']} failed verifications, {total['timeout']} timeouts, "
          f"{total['crashed']} crashes, {total['timing_failed']} failed timings; "
          f"{total['prefetched']} verified in {total['batches']} batches ahead of or with the "
          f"search's call ({total['prefetch_used']} used), {total['rebuilds']} timings had to "
          f"rebuild")
    for why, n in sorted(total.get("reasons", {}).items(), key=lambda kv: -kv[1])[:4]:
        print(f"#     {n} x {why}")
    print(f"#   seconds: search bookkeeping {total['bookkeeping_s']:.1f}, compile "
          f"{total['compile_s']:.1f}, verification runs {total['verify_s']:.1f}, reference runs "
          f"{total['reference_s']:.1f}, timing {total['time_s']:.1f}, device-lock waits "
          f"{total['lock_wait_s']:.1f} (worker sums; the search waited {total['wait_s']:.1f} "
          f"in the evaluator)")
    print(f"#   timing: {total['time_prepare_s']:.1f} s of it warm-up and calibration "
          f"({total.get('hinted', 0)} timings calibrated from a parent's or sibling's time, "
          f"{total.get('hint_fallbacks', 0)} of them timed again in full, "
          f"{total.get('hint_probes', 0)} checked with a probe call first); the timing calls took "
          f"{total['time_calls_s']:.1f} s in all (lock waits, the speed-of-light check and the "
          f"cache included)")
    print(f"#   {total.get('stopped_early', 0)} timings stopped early (their first repeats clearly "
          f"slower than their parent's time), {total.get('retimed', 0)} of those states timed "
          f"again in full before the search expanded them")
    print(f"#   timings of candidates over 2x the best time so far: {total['slow_timings']}, "
          f"{total['slow_timing_s']:.1f} s of the timing calls' wall")


def _dask_pass(names, args, n_workers: int, run_dir: str) -> tuple[dict, float]:
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(n_workers, timeout=120)
        t0 = time.perf_counter()
        futs = [client.submit(run_search, n, args.size, args.policy, args.budget, args.seconds,
                              1, None, run_dir, pure=False) for n in names]
        results = client.gather(futs)
        wall = time.perf_counter() - t0
    total: dict = {}
    for r in results:
        _add(total, r)
    return total, wall


LOCK_KERNEL = """kernel mm(A: f32[256,256], B: f32[256,256]) -> C: f32[256,256]
  for i in 256 parallel:
    for k in 256:
      for j in 256 vectorized:
        C[i,j] += A[i,k] * B[k,j]
"""


def _load(lock_dir: str, seconds: float) -> None:
    """Compile+verify load (2 workers, a fresh candidate each round so nothing is cached),
    taking the device lock in ``lock_dir``."""
    from steptp.measure import MeasureConfig, Measurer

    ref = LOCK_KERNEL.replace(" parallel", "").replace(" vectorized", "")
    with Measurer(None, MeasureConfig(num_threads=_cores()), cache=None, jobs=2,
                  lock_directory=lock_dir) as m:
        end, i = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            cands = [LOCK_KERNEL.replace("C[i,j] += A[i,k] * B[k,j]",
                                         f"C[i,j] += A[i,k] * B[k,j] * {1 + (i + d) * 1e-9!r}")
                     for d in range(2)]
            m.verify_many([(ref, c, "algebraic") for c in cands])
            i += 2


def lock_check(rounds: int = 5) -> None:
    """What the device lock buys: the same kernel timed alone, beside compile/verify load that
    takes the lock (it pauses during each timing), and beside the same load ignoring it."""
    import subprocess

    from steptp.measure import MeasureConfig, Measurer
    from steptp.search.evaluator import search_config

    lock = tempfile.mkdtemp(prefix="steptp-lock-")
    other = tempfile.mkdtemp(prefix="steptp-lock-other-")
    cfg = search_config(_cores())
    with Measurer(None, cfg, cache=None, lock_directory=lock, speed_of_light=False) as m:
        m.time_many([LOCK_KERNEL])  # worker start-up

        def medians() -> list[float]:
            return [m.time_many([LOCK_KERNEL], use_cache=False)[0].timing.median_s * 1e3
                    for _ in range(rounds)]

        rows = [("alone", medians())]
        for label, d in (("beside compile/verify that takes the lock", lock),
                         ("beside compile/verify that ignores it", other)):
            bg = subprocess.Popen([sys.executable, __file__, "--_load", d, "600"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(8)  # its workers started and verifying
                rows.append((label, medians()))
            finally:
                bg.kill()
                bg.wait()
    import statistics

    base = statistics.median(rows[0][1])
    for label, xs in rows:
        med = statistics.median(xs)
        print(f"# lock check: {label:45s} median {med:7.3f} ms ({med / base:4.2f}x alone), "
              f"per round {', '.join(f'{x:.2f}' for x in xs)}")


def core_check(rounds: int = 7) -> None:
    """The other way the issue allows: time on a dedicated core set. A serial kernel (one thread)
    is timed pinned to the first core, alone and beside compile/verify load pinned to the other
    cores (it ignores the device lock, as a dedicated set would let it). Near 1.0x, serial
    timings could overlap compilation; far above it, the cores share what a timing needs (a
    hyperthread sibling, a host that overcommits, the memory bus) and the lock stays."""
    import statistics
    import subprocess

    from steptp.measure import Measurer
    from steptp.search.evaluator import search_config

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("# core check: needs at least 2 cores")
        return
    mine, rest = cpus[0], cpus[1:]
    serial = LOCK_KERNEL.replace(" parallel", "")
    stream = ("kernel add(A: f32[4194304], B: f32[4194304]) -> C: f32[4194304]\n"
              "  for io in 262144, ii in 16 vectorized:\n"
              "    C[io*16+ii] = A[io*16+ii] + B[io*16+ii]\n")
    os.sched_setaffinity(0, {mine})   # the timing worker inherits it
    other = tempfile.mkdtemp(prefix="steptp-lock-other-")
    with Measurer(None, search_config(1), cache=None, speed_of_light=False,
                  lock_directory=tempfile.mkdtemp(prefix="steptp-lock-")) as m:
        for name, kernel in (("serial 256^3 matmul", serial), ("streaming add, 48 MiB", stream)):
            m.time_many([kernel])

            def medians() -> list[float]:
                return [m.time_many([kernel], use_cache=False)[0].timing.median_s * 1e3
                        for _ in range(rounds)]

            alone = medians()
            bg = subprocess.Popen(["taskset", "-c", ",".join(map(str, rest)), sys.executable,
                                   __file__, "--_load", other, "600"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(8)  # its workers started and verifying
                beside = medians()
            finally:
                bg.kill()
                bg.wait()
            a, b = statistics.median(alone), statistics.median(beside)
            print(f"# core check: {name:22s} on core {mine}: alone {a:.3f} ms, beside compile/verify "
                  f"on cores {','.join(map(str, rest))} {b:.3f} ms ({b / a:.2f}x); per round "
                  f"{', '.join(f'{x:.2f}' for x in alone)} | {', '.join(f'{x:.2f}' for x in beside)}")


class _Replay:
    """Answers without building anything, from the program text alone: a verdict and a timing
    derived from its SHA-256. Only for ``--bookkeeping``: it isolates the search's own thread
    (candidate generation, ranking, records), and equal texts always get equal answers, so two
    versions of the search code must take the same steps (printed as a digest)."""

    target = "cpu"
    num_threads = 1
    fingerprint = "replay"

    @staticmethod
    def _h(text: str) -> int:
        import hashlib

        return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)

    def verify(self, original, candidate, exactness):
        from steptp.measure.runner.base import VerifyOutcome
        from steptp.measure.verify import VerifyResult

        ok = self._h(candidate) % 7 != 0
        return VerifyOutcome(result=VerifyResult(passed=ok, exactness=exactness, reason=""))

    def time(self, program):
        from steptp.records import Timing
        from steptp.measure.runner.base import TimingOutcome

        m = 1e-3 * (0.3 + (self._h(program) % 1000) / 1000)
        return TimingOutcome(timing=Timing(median_s=m, min_s=m * 0.98, spread=0.01, repeats=5,
                                           number=1))

    def close(self):
        pass


class _ReplayAhead(_Replay):
    """``_Replay`` that also takes the search's verify-ahead offers (and does nothing with
    them): its digest must equal ``_Replay``'s (verifying ahead changes no decision)."""

    prefetch_depth = 2

    def __init__(self):
        self.offered = 0

    def prefetch(self, original, items):
        self.offered += len(items)


def bookkeeping(names, size: str, policy: str, budget: int) -> None:
    """The search thread alone (``_Replay`` evaluator): CPU seconds per kernel, and a digest of
    the steps taken (strategy, site, params, result text, outcome) to compare code versions."""
    import hashlib
    import json

    from steptp.search import Budget, search_kernel

    for name in names:
        kid, prog, _, _ = workload_kernel(name, size)
        for ev in (_Replay(), _ReplayAhead()):
            c0, t0 = time.process_time(), time.perf_counter()
            res = search_kernel(prog, kid, policy, Budget(budget, 1e9), 0, ev,
                                return_result=True)
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            d = hashlib.sha256()
            for st in res.steps:
                d.update(json.dumps([st.step_index, st.strategy, st.site, st.params,
                                     st.after_leir, st.outcome], sort_keys=True,
                                    default=str).encode())
            how = (f", verifying ahead ({ev.offered} offers)" if isinstance(ev, _ReplayAhead)
                   else "")
            print(f"{name:16s} bookkeeping {cpu:6.1f} CPU s ({wall:6.1f} s wall), "
                  f"{len(res.steps)} steps, steps digest {d.hexdigest()[:16]}{how}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--families", default="matmul,conv")
    ap.add_argument("--workloads", default="matmul_square,conv2d",
                    help="operator workloads (the heaviest kernel of each is searched)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--size", default="default")
    ap.add_argument("--budget", type=int, default=64, help="timed candidates per kernel")
    ap.add_argument("--seconds", type=float, default=300.0, help="wall budget per kernel")
    ap.add_argument("--policy", default="beam")
    ap.add_argument("--jobs", type=int, default=_cores(),
                    help="compile/verify workers of the Measurer (default: the cores)")
    ap.add_argument("--cache", default=None, help="a measurement cache to reuse (default: fresh)")
    ap.add_argument("--ahead-after-timing", type=int, default=None, metavar="N",
                    help="candidates verified ahead right after each timing (default: a batch, "
                         "one per worker; 0: none)")
    ap.add_argument("--early-stop", action="store_true",
                    help="let a timing whose first repeats are clearly slower than its parent's "
                         "time stop there (default: every candidate timed in full)")
    ap.add_argument("--fresh-workers", action="store_true",
                    help="start each search's measurement workers anew (default: the searches "
                         "of the run share them, as a release's searches do)")
    ap.add_argument("--dask", type=int, default=0, metavar="N",
                    help="also run on a LocalCluster of 1 then N workers and print the scaling")
    ap.add_argument("--skip-local", action="store_true", help="only the --dask comparison")
    ap.add_argument("--lock-check", action="store_true",
                    help="only: time one kernel alone, beside compile/verify load that takes the "
                         "device lock, and beside load that ignores it")
    ap.add_argument("--core-check", action="store_true",
                    help="only: a serial kernel timed pinned to one core, alone and beside "
                         "compile/verify load pinned to the other cores (could timings use a "
                         "dedicated core set instead of the lock?)")
    ap.add_argument("--bookkeeping", action="store_true",
                    help="only: the search thread alone, against a stand-in evaluator that "
                         "answers from the program text (CPU seconds, and a digest of the steps "
                         "taken: equal digests = equal search decisions)")
    ap.add_argument("--_load", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._load:
        _load(args._load[0], float(args._load[1]))
        return
    if args.bookkeeping:
        bookkeeping(selected(args.families, args.workloads, args.limit), args.size, args.policy,
                    args.budget)
        return
    if args.lock_check:
        lock_check()
        return
    if args.core_check:
        core_check()
        return

    from steptp.search.evaluator import set_threads

    set_threads(None)
    names = selected(args.families, args.workloads, args.limit)
    cores = _cores()
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(a shared machine: other processes compete for the {cores} cores)")
    run_dir = tempfile.mkdtemp(prefix="steptp-throughput-")
    # this run's own device lock (set before any Dask worker is spawned: they inherit it), so
    # its timings wait for each other, not for other projects' on this machine
    os.environ.setdefault("STEPTP_LOCK_DIR", os.path.join(run_dir, "locks"))
    if not args.skip_local:
        from contextlib import nullcontext

        from steptp.measure.worker import reuse_workers

        total: dict = {}
        wall = 0.0
        cpu0 = _cpu_s()
        with nullcontext() if args.fresh_workers else reuse_workers():
            for name in names:
                c = run_search(name, args.size, args.policy, args.budget, args.seconds,
                               args.jobs, args.cache, run_dir,
                               early_stop=args.early_stop,
                               ahead_after_timing=args.ahead_after_timing)
                _add(total, c)
                wall += c["wall_s"]
                print(f"{name:16s} {c['unique']:3d} unique verified+timed of "
                      f"{c['verify_calls']:3d} verified; {c['wall_s']:6.1f} s (bookkeeping "
                      f"{c['bookkeeping_s']:.1f}, compile {c['compile_s']:.1f}, verify "
                      f"{c['verify_s']:.1f}, reference {c['reference_s']:.1f}, timing "
                      f"{c['time_s']:.1f}); best {c['best_speedup'] or float('nan'):.2f}x",
                      flush=True)
        # the workers the searches shared were reaped at the end of the block: the CPU time of
        # the whole pass (a search's own figure misses the workers it handed on)
        total["cpu_s"] = _cpu_s() - cpu0
        _report(total, cores, wall, f"{args.policy}, size {args.size}, budget {args.budget}, "
                                    f"jobs {args.jobs}")
    if args.dask:
        rates = {}
        for n in (1, args.dask):
            t, wall = _dask_pass(names, args, n, run_dir)
            cv_wall = max(1e-9, wall - t["time_s"])
            rates[n] = t["unique"] / cv_wall
            _report(t, cores, wall, f"LocalCluster of {n} worker(s)")
            print(f"#   compile+verify (and search bookkeeping): {t['unique']} candidates in "
                  f"{cv_wall:.1f} s of wall time outside timings = {rates[n]:.2f} per s",
                  flush=True)
        print(f"# compile+verify scaling, {args.dask} workers over 1: "
              f"{rates[args.dask] / rates[1]:.2f}x (timings serialized in both)")
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
