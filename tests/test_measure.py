"""The measurement layer: isolated workers, timing, fingerprint, cache, Measurer, RPC, torch.

Everything is real: TVM builds, worker subprocesses that really segfault, abort or spin, a real
SQLite file, a real tvm.rpc tracker and server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import threading
import time

import pytest

pytest.importorskip("tvm")

from steptp.leir import parse  # noqa: E402
from steptp.measure import MeasureConfig, Measurer, measure  # noqa: E402
from steptp.measure.cache import Cache, program_hash  # noqa: E402
from steptp.measure.fingerprint import Fingerprint, current  # noqa: E402
from steptp.measure.runner.base import VerifyJob  # noqa: E402
from steptp.measure.runner.local import device_lock  # noqa: E402
from steptp.measure.timing import calibrate, summarize, torch_eager_baseline  # noqa: E402
from steptp.measure.worker import WorkerPool  # noqa: E402
from steptp.records import Timing  # noqa: E402
from steptp.tir.target import Target  # noqa: E402

MATMUL = """kernel matmul(A: f32[32,32], B: f32[32,32]) -> C: f32[32,32]
  for i in 32, j in 32:
    for k in 32:
      C[i,j] += A[i,k] * B[k,j]
"""

MATMUL_SPLIT = """kernel matmul(A: f32[32,32], B: f32[32,32]) -> C: f32[32,32]
  for io in 4, ii in 8:
    for k in 32:
      for j in 32 vectorized:
        C[io*8+ii,j] += A[io*8+ii,k] * B[k,j]
"""

# The same matmul with other names: the same canonical program, so the same cache entry.
MATMUL_RENAMED = MATMUL.replace("A", "X").replace("B", "Y").replace("C[", "Z[") \
    .replace("-> C", "-> Z")

# A real crash: a gather whose index (a valid 0..15 from random_inputs) is scaled far outside
# the 16-element buffer; TVM does not bounds-check, so the load segfaults.
CRASH = """kernel gather_far(A: f32[16], I: i32[16]) -> B: f32[16]
  for i in 16:
    B[i] = A[I[i] * 400000000]
"""

# A real hang: 10^13 float additions (not reassociable, so LLVM cannot fold the loop away).
HANG = """kernel spin(A: f32[4]) -> C: f32[4]
  for i in 100000, j in 100000, k in 1000:
    C[0] += A[0]
"""

FAST = dict(min_repeat_ms=5, repeats=5, remeasure_tries=1, timeout_s=5)


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory):
    return tmp_path_factory.mktemp("measure") / "cache.sqlite"


@pytest.fixture(scope="module")
def lockdir(tmp_path_factory):
    return tmp_path_factory.mktemp("locks")


@pytest.fixture(scope="module")
def measurer(cache_path, lockdir):
    m = Measurer(None, MeasureConfig(**FAST), cache=cache_path, jobs=2, lock_directory=lockdir)
    yield m
    m.close()


def _sane(t: Timing) -> None:
    assert t.median_s > 0 and t.min_s > 0 and t.min_s <= t.median_s
    assert math.isfinite(t.spread) and t.spread >= 0
    assert t.repeats >= 5 and t.number >= 1


# ---------------------------------------------------------------------------- fingerprint
def test_fingerprint_is_stable_and_sensitive():
    a = current(Target.host_cpu(), num_threads=2)
    b = current(Target.host_cpu(), num_threads=2)
    assert isinstance(a, Fingerprint) and a.id == b.id and len(a.id) == 16
    assert a.cpu_model and a.cpu_flags_count > 0 and len(a.cpu_flags_hash) == 16
    assert a.cpu_count >= 1 and 1 <= a.cpu_affinity <= a.cpu_count
    assert a.tvm_version.startswith("0.") and a.llvm_version.isdigit()
    assert a.target == Target.host_cpu().to_dict() and a.num_threads == 2
    assert current(Target.host_cpu(), num_threads=1).id != a.id
    assert current(Target.cpu("x86-64", num_cores=1), num_threads=2).id != a.id
    assert a.model_copy(update={"cpu_model": "another cpu"}).id != a.id
    assert set(a.to_dict()) >= {"id", "cpu_model", "gpu_name", "gpu_driver"}


# ---------------------------------------------------------------------------- worker pool
def test_worker_pool_survives_abort_exit_memory_and_hang():
    with WorkerPool(1, num_threads=1, timeout_s=2.0) as pool:
        r = pool.run("ping", {"echo": 7})
        assert r.ok and r.value["echo"] == 7 and r.value["tvm_num_threads"] == "1"
        first_pid = r.value["pid"]
        r = pool.run("selftest", {"mode": "abort"})
        assert r.status == "crash" and "worker crashed (signal 6, SIGABRT)" in r.reason
        r = pool.run("selftest", {"mode": "memory"})  # a Python error: the worker survives
        assert r.status == "error" and r.reason.startswith("MemoryError")
        r = pool.run("ping", {})
        assert r.ok and r.value["pid"] != first_pid  # restarted after the abort
        r = pool.run("selftest", {"mode": "exit", "code": 3})
        assert r.status == "crash" and r.reason.startswith("worker exited with code 3")
        # Stuck in C code holding the GIL (catastrophic regex backtracking): the deadline is
        # kept by the parent, so this is caught too (tvm's PopenPoolExecutor misses it).
        r = pool.run("selftest", {"mode": "gil_hang"})  # (after a restart: not counted)
        assert r.status == "timeout" and r.reason == "timeout after 2.0 s"
        assert 2.0 <= r.wall_s < 4
        assert pool.starts == 3  # first start + restarts after abort and exit
        with pytest.raises(KeyError, match="unknown worker task"):
            pool.run("no-such-task", {})
        procs = [w.proc for w in pool.workers]
    assert all(w.proc is None for w in pool.workers)
    assert all(p is None or p.poll() is not None for p in procs)


# ---------------------------------------------------------------------------- timing
def test_measure_in_process_is_sane_for_leir_and_tvmscript():
    from steptp.tir.lower import lower

    cfg = MeasureConfig(**FAST)
    t = measure(MATMUL, None, cfg)
    _sane(t)
    assert t.number >= 10  # a ~1 us kernel, repeats of >= 5 ms: calibrated well above 1
    script = lower(parse(MATMUL)).script()
    t2 = measure(script, None, cfg)  # the same kernel as TVMScript text
    _sane(t2)
    assert 0.1 < t2.median_s / t.median_s < 10  # (loose: shared, loaded CI machines)


def test_calibrate_reaches_min_repeat_ms():
    calls = []

    def fast(n):  # 1 us per call plus a 10 us fixed overhead per timing
        calls.append(n)
        return 1e-6 + 1e-5 / n

    n = calibrate(fast, 50, 10**6)
    assert n * fast(n) >= 0.05 * 0.8 and calls[:4] == [1, 10, 100, 1000]
    calls.clear()
    assert calibrate(lambda n: calls.append(n) or 1.0, 50, 10**6) == 1 and calls == [1]
    assert calibrate(fast, 0, 10**6) == 1


def test_summarize_and_config():
    t = summarize([1.0, 1.0, 1.0, 1.0, 2.0], number=3, max_spread=0.1)
    assert t.median_s == 1.0 and t.min_s == 1.0 and t.spread == 0.0 and not t.noisy
    t = summarize([1.0, 2.0, 3.0, 4.0, 5.0], number=1, max_spread=0.1)
    assert t.spread == pytest.approx(2.0 / 3.0) and t.noisy
    with pytest.raises(ValueError):
        MeasureConfig(repeats=3)
    assert MeasureConfig().num_threads == len(os.sched_getaffinity(0))
    assert MeasureConfig(timeout_s=1).hash == MeasureConfig(timeout_s=99).hash
    assert MeasureConfig(repeats=9).hash != MeasureConfig().hash


# ---------------------------------------------------------------------------- Measurer
def test_time_many_reports_crash_and_hang_and_times_the_rest(measurer):
    out = measurer.time_many([MATMUL, CRASH, MATMUL_SPLIT, HANG, "kernel broken("])
    ok1, crash, ok2, hang, bad = out
    assert ok1.status == "ok" and not ok1.cached
    _sane(ok1.timing)
    assert ok2.status == "ok"
    _sane(ok2.timing)
    assert crash.timing is None and crash.status == "crash"
    assert crash.reason.startswith("worker crashed (signal 11, SIGSEGV)")
    assert hang.timing is None and hang.status == "timeout"
    assert hang.reason == "timeout after 5.0 s"
    assert bad.status == "error" and "LeirSyntaxError" in bad.reason
    assert ok1.fingerprint == measurer.fingerprint.id


def test_verify_many_reports_crash_and_hang_and_verifies_the_rest(measurer):
    wrong = MATMUL_SPLIT.replace("* B[k,j]", "* B[k,j] * 1.01")
    out = measurer.verify_many([(MATMUL, MATMUL_SPLIT), (MATMUL, wrong),
                                (CRASH, CRASH, "exact"), (HANG, HANG)])
    good, bad, crash, hang = out
    assert good.status == "ok" and good.passed and good.result.max_abs_err < 1e-4
    assert bad.status == "ok" and not bad.passed and "differ beyond" in bad.reason
    assert crash.status == "crash" and not crash.passed
    assert crash.reason.startswith("worker crashed (signal 11")
    assert hang.status == "timeout" and hang.reason == "timeout after 5.0 s"


def test_cache_hits_do_not_run_workers(measurer):
    # Runs after the two tests above (same module-scoped Measurer and cache).
    if measurer.stats["time_runs"] == 0:
        measurer.time_many([MATMUL, MATMUL_SPLIT])
        measurer.verify_many([(MATMUL, MATMUL_SPLIT)])
    runs = dict(measurer.stats)
    tasks = sum(p.tasks_run for p in (measurer._verify_pool, measurer._time_pool) if p)
    first = measurer.time_many([MATMUL, MATMUL_RENAMED, MATMUL_SPLIT])
    assert [o.cached for o in first] == [True, True, True]
    assert first[0].timing == first[1].timing
    v = measurer.verify_many([(MATMUL, MATMUL_SPLIT), (MATMUL_RENAMED, MATMUL_SPLIT)])
    assert all(o.cached and o.passed for o in v)
    # Crashes and timeouts are not cached: they may be transient.
    assert measurer.stats["time_runs"] == runs["time_runs"]
    assert measurer.stats["verify_runs"] == runs["verify_runs"]
    assert sum(p.tasks_run for p in (measurer._verify_pool, measurer._time_pool) if p) == tasks
    assert program_hash(MATMUL) == program_hash(MATMUL_RENAMED)


def test_fingerprint_change_misses_the_cache(measurer, cache_path, lockdir):
    if measurer.stats["time_runs"] == 0:
        measurer.time_many([MATMUL])
        measurer.verify_many([(MATMUL, MATMUL_SPLIT)])
    fp = measurer.fingerprint
    other = fp.model_copy(update={"cpu_model": "a different cpu"})
    cache = Cache(cache_path)
    vkey = (program_hash(MATMUL), program_hash(MATMUL_SPLIT), measurer.target.key)
    vcfg = VerifyJob(MATMUL, MATMUL_SPLIT).config_hash
    assert cache.get_verification(*vkey, fp.id, vcfg)["passed"] is True
    assert cache.get_verification(*vkey, other.id, vcfg) is None
    with Measurer(None, MeasureConfig(**FAST), cache=cache_path, jobs=1, fingerprint=other,
                  lock_directory=lockdir) as m2:
        t = m2.time_many([MATMUL])[0]
        assert not t.cached and t.status == "ok" and t.fingerprint == other.id
        assert m2.stats["time_runs"] == 1 and m2.worker_starts == 1
        assert m2.time_many([MATMUL])[0].cached  # now cached under the new fingerprint too
    # Another measurement config is another cache entry as well.
    cfg = MeasureConfig(**{**FAST, "repeats": 6})
    assert cache.get_timing(program_hash(MATMUL), measurer.target.key, fp.id, cfg.hash) is None
    assert cache.get_timing(program_hash(MATMUL), measurer.target.key, fp.id,
                            measurer.config.hash) is not None


# ---------------------------------------------------------------------------- cache
def _write_rows(path: str, who: int, n: int) -> None:
    c = Cache(path)
    for i in range(n):
        c.put_timing(f"p{who}-{i}", "t", "fp", "cfg",
                     {"median_s": 1.0, "min_s": 1.0, "spread": 0.0, "repeats": 5, "number": 1})
        c.put_verification("b", f"a{who}-{i}", "t", "fp", "cfg", {"passed": True})


def test_cache_is_safe_for_concurrent_writers(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_rows, args=(path, w, 40)) for w in range(4)]
    threads = [threading.Thread(target=_write_rows, args=(path, 10 + w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for t in threads:
        t.join(60)
    c = Cache(path)
    assert c.counts() == {"timings": 240, "verifications": 240}
    assert c.get_timing("p3-39", "t", "fp", "cfg")["repeats"] == 5
    assert c.get_timing("p3-39", "t", "other-fp", "cfg") is None


def test_cache_location_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPTP_CACHE", str(tmp_path / "x" / "env.sqlite"))
    assert Cache().path == tmp_path / "x" / "env.sqlite"
    assert (tmp_path / "x" / "env.sqlite").exists()
    monkeypatch.delenv("STEPTP_CACHE")
    monkeypatch.chdir(tmp_path)
    assert Cache().path == tmp_path / ".steptp" / "cache.sqlite"


def test_device_lock_serializes(tmp_path):
    order = []

    def hold(tag):
        with device_lock("cpu", tmp_path):
            order.append(f"{tag}+")
            time.sleep(0.2)
            order.append(f"{tag}-")

    ts = [threading.Thread(target=hold, args=(k,)) for k in "ab"]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert order in (["a+", "a-", "b+", "b-"], ["b+", "b-", "a+", "a-"])


# ---------------------------------------------------------------------------- PyTorch baseline
def test_torch_eager_baseline():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU())
    x = torch.randn(16, 64, generator=g)
    t = torch_eager_baseline(model, [x], num_threads=1, config=MeasureConfig(**FAST))
    _sane(t)
    assert torch.get_num_threads() == before


# ---------------------------------------------------------------------------- RPC
@contextlib.contextmanager
def rpc_fleet(key: str, servers: int = 1, ports: tuple[int, int] = (19190, 19300)):
    """A TVM RPC tracker and ``servers`` device servers of ``key`` on 127.0.0.1, registered
    (each server process inherits TVM_NUM_THREADS=1)."""
    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    old = os.environ.get("TVM_NUM_THREADS")
    os.environ["TVM_NUM_THREADS"] = "1"
    procs = []
    try:
        tracker = Tracker(host="127.0.0.1", port=ports[0], port_end=ports[0] + 100, silent=True)
        procs.append(tracker)
        for _ in range(servers):
            procs.append(rpc.Server(host="127.0.0.1", port=ports[1], port_end=ports[1] + 100,
                                    tracker_addr=("127.0.0.1", tracker.port), key=key,
                                    silent=True))
        deadline = time.monotonic() + 60
        while True:
            info = rpc.connect_tracker("127.0.0.1", tracker.port).summary()["queue_info"]
            if info.get(key, {}).get("free", 0) >= servers:
                break
            assert time.monotonic() < deadline, f"the RPC servers never registered: {info}"
            time.sleep(0.1)
        yield tracker
    finally:
        if old is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = old
        for p in reversed(procs):
            p.terminate()


@pytest.fixture(scope="module")
def rpc_device():
    with rpc_fleet("steptp-test") as tracker:
        yield tracker


@pytest.mark.slow
def test_rpc_backend_on_loopback(rpc_device, tmp_path, lockdir):
    from steptp.measure.runner.rpc import RPCBackend

    backend = RPCBackend("127.0.0.1", rpc_device.port, key="steptp-test")
    cfg = MeasureConfig(**{**FAST, "timeout_s": 30})
    with Measurer(None, cfg, cache=tmp_path / "rpc.sqlite", backend=backend,
                  lock_directory=lockdir) as m:
        assert m.fingerprint.machine == "rpc:steptp-test"
        ok, after = m.time_many([MATMUL, MATMUL_SPLIT])
        assert ok.status == "ok" and after.status == "ok", (ok.reason, after.reason)
        _sane(ok.timing)
        _sane(after.timing)
        # The kernel crashes the remote session; the client sees the session die. (Crash last
        # and alone: tvm.rpc.Server stops serving after a session crashes, see
        # steptp.measure.runner.rpc, and in one batch with the others the speed-of-light check after
        # it would calibrate the peaks on the dead server: a minute of session timeouts.)
        (crash,) = m.time_many([CRASH])
        assert crash.timing is None and crash.status == "error"
        assert "the remote session died" in crash.reason
        assert m.time_many([MATMUL])[0].cached
    bad = RPCBackend("127.0.0.1", rpc_device.port, key="no-such-device",
                     session_timeout_s=5)
    with Measurer(None, MeasureConfig(**{**FAST, "timeout_s": 8}), cache=None, backend=bad) as m:
        out = m.time_many([MATMUL])[0]
        assert out.timing is None and out.status in ("error", "timeout")


def test_verification_cache_key_follows_the_comparison_rule(monkeypatch):
    # a verdict cached under an older comparison rule (or other tolerances) must not be reused
    from steptp.measure.runner import base
    from steptp.measure.verify import RULE_VERSION, TOLERANCES

    job = base.VerifyJob(before="kernel k(A: f32[4]) -> B: f32[4]\n  B[i] = A[i]\n",
                         after="kernel k(A: f32[4]) -> B: f32[4]\n  B[i] = A[i]\n",
                         exactness="reassociation")
    h = job.config_hash
    monkeypatch.setattr(base, "RULE_VERSION", RULE_VERSION + 1)
    assert job.config_hash != h
    monkeypatch.setattr(base, "RULE_VERSION", RULE_VERSION)
    assert job.config_hash == h
    monkeypatch.setitem(base.TOLERANCES, "reassociation",
                        {**TOLERANCES["reassociation"], "f32": (1e-3, 1e-3)})
    assert job.config_hash != h
