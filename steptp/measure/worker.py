"""Isolated worker processes: a kernel that hangs or crashes costs one candidate, not the run.

A ``WorkerPool`` keeps up to ``size`` long-lived worker processes (``python -m
steptp.measure.worker``). Each one imports TVM once (about 3.5 s) and then runs tasks one at a
time. A task is a name from ``TASKS`` (``"verify"``, ``"time"``, ``"rpc_time"``, ...) and a payload
of plain data (program text, target dict, config dict); the answer is plain data too. Nothing of
TVM ever crosses the process boundary (pickling TIR objects is fragile with tvm-ffi).

Failure handling is done by the parent, never trusted to the worker:

* hang: the parent waits on the worker's pipe with a deadline; past ``timeout_s`` it SIGKILLs the
  worker's whole process group and reports ``"timeout after 10.0 s"``. (A watchdog thread inside
  the worker, as in ``tvm.support.popen_pool``, only fires if the stuck code releases the GIL.)
* crash: the pipe closes; the parent reaps the worker and reports ``"worker crashed (signal 11,
  SIGSEGV)"`` or ``"worker exited with code 3"``, with the last line the worker wrote on stderr.
* a Python exception in the task (``MemoryError``, a build error): the worker survives and
  reports it; status ``"error"``.

A killed or crashed worker is restarted lazily for the next task. Workers get their
environment (``TVM_NUM_THREADS`` above all) from the parent at spawn time, so it is set before
TVM is imported; they die with their parent (``PR_SET_PDEATHSIG``).

Protocol: 4-byte little-endian length + pickle, on two dedicated pipes (stdout/stderr of the
worker go to a log file, so a kernel that prints cannot corrupt the channel).
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

# Task name -> "module:function". The function takes the payload dict and returns plain data.
TASKS: dict[str, str] = {
    "verify": "steptp.measure.runner.tasks:verify_task",
    "time": "steptp.measure.runner.tasks:time_task",
    "build_verify": "steptp.measure.runner.tasks:build_verify_task",
    "time_built": "steptp.measure.runner.tasks:time_built_task",
    "rpc_time": "steptp.measure.runner.rpc:rpc_time_task",
    "ping": "steptp.measure.worker:ping_task",
    "parse_leir": "steptp.measure.worker:parse_task",
    # kernel extraction (steptp.zoo.extract): one workload scan, one raise check
    "extract_scan": "steptp.zoo.extract:scan_task",
    "extract_check": "steptp.zoo.extract:check_task",
    # Test-only entry point: misbehaves on purpose (abort, segfault, exit, hang, MemoryError) so
    # the tests exercise the failure paths through exactly the machinery real tasks use.
    "selftest": "steptp.measure.worker:selftest_task",
}

_HEADER = struct.Struct("<Q")
_READY = "steptp-worker-ready"


class WorkerError(RuntimeError):
    """A worker could not be started."""


@dataclass
class WorkerResult:
    """The outcome of one task. ``status``: ok | error (the task raised) | timeout | crash."""

    status: str
    value: Any = None
    reason: str | None = None
    wall_s: float = 0.0
    traceback: str | None = field(default=None, repr=False)
    worker: int | None = None       # which worker of its pool ran it

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ---------------------------------------------------------------------------- worker side
def ping_task(payload: dict) -> dict:
    return {"pid": os.getpid(), "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
            "echo": payload.get("echo"),
            "modules": sorted(m for m in payload.get("modules", ()) if sys.modules.get(m))}


def parse_task(payload: dict) -> dict:
    """Parse (and ``check``) LEIR text: ``{"program": Program}``, or the syntax error's
    ``(message, line, column)``, or the check's ``(line, column, message)`` problems."""
    from ..leir import check
    from ..leir.check import LeirCheckError
    from ..leir.parser import MAX_BYTES, MAX_DEPTH, LeirSyntaxError, parse

    try:
        prog = parse(payload["text"], payload.get("max_bytes") or MAX_BYTES,
                     payload.get("max_depth") or MAX_DEPTH)
        if payload.get("check", True):
            check(prog)
    except LeirSyntaxError as e:
        return {"syntax": (e.detail, e.line, e.column)}
    except LeirCheckError as e:
        return {"check": [(p.line, p.column, p.message) for p in e.problems]}
    return {"program": prog}


def selftest_task(payload: dict) -> Any:
    """Misbehave as ``payload["mode"]`` says (tests only)."""
    mode = payload.get("mode", "ok")
    if mode == "ok":
        return payload.get("value", "ok")
    if mode == "abort":
        os.abort()
    if mode == "segv":
        import ctypes

        ctypes.string_at(0)  # a real SIGSEGV
    if mode == "exit":
        os._exit(int(payload.get("code", 3)))
    if mode == "hang":
        while True:
            pass
    if mode == "gil_hang":  # stuck in C code that holds the GIL: no in-process watchdog can fire
        import re

        return bool(re.match(r"(a+)+$", "a" * 64 + "b"))
    if mode == "sleep":
        time.sleep(float(payload.get("seconds", 1.0)))
        return "slept"
    if mode == "memory":
        return len(bytearray(1 << 60))  # MemoryError
    if mode == "raise":
        raise ValueError(payload.get("message", "selftest error"))
    raise ValueError(f"unknown selftest mode {mode!r}")


def _resolve(task: str) -> Callable[[dict], Any]:
    spec = TASKS.get(task)
    if spec is None:
        raise KeyError(f"unknown worker task {task!r}; known: {', '.join(sorted(TASKS))}")
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


def _die_with_parent() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the EOF on the pipe still ends the loop
        pass


def _read_exact(f, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _send(f, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_HEADER.pack(len(data)) + data)
    f.flush()


def _worker_main(rfd: int, wfd: int) -> None:
    os.environ["STEPTP_IN_WORKER"] = "1"  # this process is a measurement worker (verify.threaded_problem)
    if os.environ.get("STEPTP_WORKER_SANDBOX"):
        # untrusted code (problem files): contained while the process is single-threaded;
        # the death signal is set after, as a change of user clears it
        from steptp.measure.sandbox import enter

        print(f"steptp worker sandbox: {enter()}", file=sys.stderr, flush=True)
    _die_with_parent()
    reader = os.fdopen(rfd, "rb", buffering=0)
    writer = os.fdopen(wfd, "wb")
    limit = os.environ.get("STEPTP_WORKER_MEMORY_MB")
    preload = os.environ.get("STEPTP_WORKER_PRELOAD", "steptp.tir.build")
    for mod in filter(None, os.environ.get("STEPTP_WORKER_WITHOUT", "").split(",")):
        # a module this worker's tasks never need, kept out: TVM's FFI imports torch when it
        # is installed (about 1.5 s of a 4 s start-up); an import of it raises ImportError
        sys.modules[mod] = None  # type: ignore[assignment]
    for mod in filter(None, preload.split(",")):
        importlib.import_module(mod)  # TVM once, before the first deadline starts
    growth = os.environ.get("STEPTP_WORKER_MEMORY_GROWTH_MB")
    if growth:
        # what the task may add to the worker as started: its imports (``steptp.measure``
        # brings TVM, hundreds of MB of address space) vary with the build, its task does not
        with open("/proc/self/statm") as f:
            now = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = str((now >> 20) + int(growth))
    if limit:
        import resource

        n = int(limit) << 20
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    _send(writer, _READY)
    while True:
        head = _read_exact(reader, _HEADER.size)
        if head is None:
            return  # the parent closed the pipe
        body = _read_exact(reader, _HEADER.unpack(head)[0])
        if body is None:
            return
        task, payload = pickle.loads(body)
        try:
            value = _resolve(task)(payload)
            msg = {"status": "ok", "value": value}
        except BaseException as e:  # noqa: BLE001 - MemoryError, SystemExit, ... cost one task
            msg = {"status": "error", "reason": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()}
            if isinstance(e, MemoryError):
                msg["reason"] = f"MemoryError: {e}" if str(e) else "MemoryError"
        try:
            _send(writer, msg)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            _send(writer, {"status": "error", "reason": f"result is not plain data: {e}"})


# ---------------------------------------------------------------------------- parent side
def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"SIG{n}"


_SPAWNER: ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawn(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (a ``Popen``) on one thread that lives as long as this process. The death
    signal (``PR_SET_PDEATHSIG``) fires when the THREAD that started a worker exits, not the
    process: a worker started from a short-lived thread (a ``ThreadPoolExecutor`` of one
    ``verify_many`` call) was SIGKILLed as soon as that call returned."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steptp-spawner")
    return _SPAWNER.submit(fn).result()


class Worker:
    """One worker process, restarted on demand. Not thread-safe: one task at a time."""

    def __init__(self, env: dict[str, str] | None = None, startup_timeout_s: float = 120.0):
        self.env = dict(env or {})
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self._reader = None
        self._writer = None
        self._log = None
        self.starts = 0
        self.tasks_run = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.alive():
            return
        self.kill()
        env = {**os.environ, **self.env}
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        p_r, c_w = os.pipe()
        c_r, p_w = os.pipe()
        self._log = tempfile.TemporaryFile(prefix="steptp-worker-")
        try:
            log = self._log
            self.proc = _spawn(lambda: subprocess.Popen(
                [sys.executable, "-m", "steptp.measure.worker", str(c_r), str(c_w)],
                pass_fds=(c_r, c_w), env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, start_new_session=True))
        finally:
            os.close(c_r)
            os.close(c_w)
        self._reader = os.fdopen(p_r, "rb", buffering=0)
        self._writer = os.fdopen(p_w, "wb")
        self.starts += 1
        status, msg = self._recv(self.startup_timeout_s)
        if status != "ok" or msg != _READY:
            reason = msg if status != "ok" else f"unexpected greeting {msg!r}"
            self.kill()
            raise WorkerError(f"the measurement worker did not start: {reason}")

    def _stderr_tail(self, limit: int = 400) -> str:
        if self._log is None:
            return ""
        try:
            self._log.flush()
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - 4000))
            lines = [ln.strip() for ln in self._log.read().decode("utf-8", "replace").splitlines()
                     if ln.strip() and not ln.lstrip().startswith("File ")]
        except (OSError, ValueError):
            return ""
        return lines[-1][:limit] if lines else ""

    def _exit_reason(self) -> str:
        rc = None
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._killpg()
                rc = self.proc.wait(timeout=10)
        if rc is None:
            why = "worker crashed"
        elif rc < 0:
            why = f"worker crashed (signal {-rc}, {_signal_name(-rc)})"
        else:
            why = f"worker exited with code {rc}"
        tail = self._stderr_tail()
        return f"{why}: {tail}" if tail else why

    def _recv(self, timeout: float | None) -> tuple[str, Any]:
        """("ok", message) | ("timeout", None) | ("crash", reason)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self._reader.fileno()
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return "timeout", None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                break
        head = _read_exact(self._reader, _HEADER.size)
        body = _read_exact(self._reader, _HEADER.unpack(head)[0]) if head else None
        if body is None:
            return "crash", self._exit_reason()
        return "ok", pickle.loads(body)

    def call(self, task: str, payload: dict, timeout_s: float | None) -> WorkerResult:
        """Run one task; never raises for a misbehaving task (only if no worker can start)."""
        if task not in TASKS:
            raise KeyError(f"unknown worker task {task!r}; known: {', '.join(sorted(TASKS))}")
        self.start()
        t0 = time.monotonic()
        try:
            _send(self._writer, (task, payload))
        except (BrokenPipeError, OSError):
            return WorkerResult("crash", reason=self._exit_reason(),
                                wall_s=time.monotonic() - t0)
        status, msg = self._recv(timeout_s)
        wall = time.monotonic() - t0
        self.tasks_run += 1
        if status == "timeout":
            self.kill()
            return WorkerResult("timeout", reason=f"timeout after {float(timeout_s):.1f} s",
                                wall_s=wall)
        if status == "crash":
            self.kill()
            return WorkerResult("crash", reason=msg, wall_s=wall)
        return WorkerResult(msg["status"], value=msg.get("value"), reason=msg.get("reason"),
                            wall_s=wall, traceback=msg.get("traceback"))

    def _killpg(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker leads its own session
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except OSError:
            pass

    def kill(self) -> None:
        """Stop the worker (SIGKILL to its process group) and release its pipes."""
        for f in (self._writer, self._reader):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self._reader = self._writer = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self._killpg()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self._log is not None:
            try:
                self._log.close()
            except OSError:
                pass
            self._log = None

    def close(self) -> None:
        """Ask the worker to exit (EOF on its pipe), then make sure it has."""
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError:
                pass
            self._writer = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


class WorkerPool:
    """Up to ``size`` isolated workers running tasks in parallel, each with ``timeout_s``.

    ``num_threads`` becomes ``TVM_NUM_THREADS`` (and ``OMP_NUM_THREADS``) in every worker;
    ``memory_limit_mb`` caps each worker's address space (RLIMIT_AS) so a runaway allocation is a
    ``MemoryError`` of one task. Use as a context manager, or call ``close``.
    """

    def __init__(self, size: int = 1, num_threads: int = 1, timeout_s: float = 60.0,
                 env: dict[str, str] | None = None, memory_limit_mb: int | None = None,
                 startup_timeout_s: float = 120.0):
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.size = size
        self.timeout_s = timeout_s
        wenv = {"TVM_NUM_THREADS": str(int(num_threads)), "OMP_NUM_THREADS": str(int(num_threads))}
        if memory_limit_mb:
            wenv["STEPTP_WORKER_MEMORY_MB"] = str(int(memory_limit_mb))
        wenv.update(env or {})
        self.workers = [Worker(wenv, startup_timeout_s) for _ in range(size)]
        #: what makes two pools interchangeable (``WorkerShelf``)
        self.key = (size, float(timeout_s), tuple(sorted(wenv.items())), float(startup_timeout_s))
        self._busy = [False] * size
        self._cond = threading.Condition()
        self._closed = False
        self._lock = threading.Lock()

    def _take(self, worker: int | None) -> int:
        with self._cond:
            while True:
                if worker is not None:
                    if not self._busy[worker]:
                        break
                else:
                    free = self.idle()
                    if free:
                        worker = free[0]
                        break
                self._cond.wait()
            self._busy[worker] = True
            return worker

    def _give(self, i: int) -> None:
        with self._cond:
            self._busy[i] = False
            self._cond.notify_all()

    def idle(self) -> list[int]:
        """The workers no task holds now (a background start holds its worker). Callable with
        ``_cond`` held (a re-entrant lock)."""
        with self._cond:
            return [i for i, b in enumerate(self._busy) if not b]

    def prestart(self, worker: int | None = None) -> None:
        """Start worker ``worker`` (or a free one) now if it is idle and not running, so that a
        task sent under a lock does not wait for a start-up; a busy worker is left alone.
        Raises ``WorkerError`` when it cannot start."""
        with self._cond:
            free = self.idle()
            if worker is not None:
                free = [worker] if worker in free else []
            if not free:
                return
            i = free[0]
            self._busy[i] = True
        try:
            self.workers[i].start()
        finally:
            self._give(i)

    def prestart_all(self) -> None:
        """Start every idle worker that is not running, all at once (their TVM imports overlap),
        so that none starts later in the middle of a batch. Raises ``WorkerError``."""
        idle = [i for i, w in enumerate(self.workers) if not w.alive()]
        if len(idle) <= 1:
            for i in idle:
                self.prestart(i)
            return
        with ThreadPoolExecutor(max_workers=len(idle)) as ex:
            for f in [ex.submit(self.prestart, i) for i in idle]:
                f.result()

    def run(self, task: str, payload: dict, timeout_s: float | None = None,
            worker: int | None = None) -> WorkerResult:
        """Run ``task`` on a free worker, or on worker number ``worker`` (waiting for it: it
        holds what an earlier task left there, e.g. a built module)."""
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        i = self._take(worker)
        w = self.workers[i]
        try:
            try:
                r = w.call(task, payload, self.timeout_s if timeout_s is None else timeout_s)
            except WorkerError as e:
                r = WorkerResult("crash", reason=str(e))
            r.worker = i
            return r
        finally:
            self._give(i)

    def map(self, task: str, payloads: Sequence[dict], timeout_s: float | None = None
            ) -> list[WorkerResult]:
        """Run ``task`` on every payload, up to ``size`` at a time; results in input order."""
        payloads = list(payloads)
        if len(payloads) <= 1 or self.size == 1:
            return [self.run(task, p, timeout_s) for p in payloads]
        with ThreadPoolExecutor(max_workers=min(self.size, len(payloads))) as ex:
            return list(ex.map(lambda p: self.run(task, p, timeout_s), payloads))

    @property
    def starts(self) -> int:
        """How many worker processes were started so far (restarts included)."""
        return sum(w.starts for w in self.workers)

    @property
    def tasks_run(self) -> int:
        return sum(w.tasks_run for w in self.workers)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for w in self.workers:
            w.close()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


_PARSE_POOLS: dict[int, "WorkerPool"] = {}
_PARSE_LOCK = threading.Lock()


def parse_in_worker(text: str, timeout_s: float = 10.0, memory_mb: int = 1024,
                    max_bytes: int | None = None, max_depth: int | None = None,
                    check: bool = True):
    """``leir.parse`` (and ``leir.check`` unless ``check`` is False) of untrusted text, such as a
    model's reply, in a worker process under a time limit and a memory limit (RLIMIT_AS: the
    worker's address space as started plus ``memory_mb``), as builds run: a reply that parses
    for minutes or exhausts memory costs one reply. Returns the
    ``Program``; raises ``LeirSyntaxError`` (positioned, as ``parse`` does; also for the time
    limit, the memory limit and a crash, unpositioned) or ``LeirCheckError``. Workers (one per
    ``memory_mb``, without TVM) are started once per process and reused."""
    from ..leir.check import LeirCheckError, Problem
    from ..leir.parser import LeirSyntaxError

    with _PARSE_LOCK:
        pool = _PARSE_POOLS.get(int(memory_mb))
        if pool is None or pool._closed:
            pool = _PARSE_POOLS[int(memory_mb)] = WorkerPool(
                1, num_threads=1, timeout_s=timeout_s,
                env={"STEPTP_WORKER_PRELOAD": "steptp.leir",
                     "STEPTP_WORKER_MEMORY_GROWTH_MB": str(int(memory_mb))})
    r = pool.run("parse_leir", {"text": text, "max_bytes": max_bytes, "max_depth": max_depth,
                                "check": check}, timeout_s=timeout_s)
    if r.ok:
        v = r.value
        if "program" in v:
            return v["program"]
        if "syntax" in v:
            detail, line, column = v["syntax"]
            raise LeirSyntaxError(detail, line, column, text if line is not None else None)
        from ..leir import ast as A

        raise LeirCheckError([Problem(A.Pos(ln, col) if ln is not None else None, msg)
                              for ln, col, msg in v["check"]])
    if r.status == "timeout":
        raise LeirSyntaxError(f"not parsed within {float(timeout_s):g} s (the time limit of "
                              f"parsing a reply)")
    # a worker that met its address-space limit may fail every allocation after: restart it
    i = pool._take(r.worker)
    try:
        pool.workers[i].kill()
    finally:
        pool._give(i)
    if r.reason and "MemoryError" in r.reason:   # raised in the task, or killed the worker
        raise LeirSyntaxError(f"parsing ran out of its {int(memory_mb)} MB (the memory limit of "
                              f"parsing a reply; {r.status}: {r.reason})")
    # a worker that meets its limit while Python reports the error may die before it names
    # it (its last line on stderr was "Exception ignored in:" on a loaded machine)
    raise LeirSyntaxError(f"the parsing worker failed, perhaps at its {int(memory_mb)} MB memory "
                          f"limit: {r.reason}")


class WorkerShelf:
    """Worker pools handed back by their owner (a ``Measurer`` that closed) for the next owner
    that needs an interchangeable one (``WorkerPool.key``): a run of many kernel searches starts
    its workers (about 3.5 s of TVM import each) once, not once per search. What a worker keeps
    between tasks is keyed by everything it depends on (``steptp.measure.runner.tasks``), so a
    reused worker answers as a fresh one would. ``close`` stops the pools still on the shelf."""

    def __init__(self):
        self._pools: list[WorkerPool] = []
        self._lock = threading.Lock()
        self.closed = False
        self.reused = 0

    def take(self, key) -> "WorkerPool | None":
        with self._lock:
            for i, p in enumerate(self._pools):
                if p.key == key and not p._closed:
                    self.reused += 1
                    return self._pools.pop(i)
        return None

    def put(self, pool: "WorkerPool") -> None:
        with self._lock:
            if not self.closed and not pool._closed:
                self._pools.append(pool)
                return
        pool.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            pools, self._pools = self._pools, []
        for p in pools:
            p.close()


_SHELF: WorkerShelf | None = None


def current_shelf() -> WorkerShelf | None:
    """The shelf of the innermost ``reuse_workers`` block, if any."""
    return _SHELF


class reuse_workers:
    """``with reuse_workers():`` Measurers created inside hand their worker pools to one shelf
    when they close and take them from it when they start (process-wide, so searches running in
    threads share it); at the end of the block the workers left are stopped. Nested blocks
    share the outer shelf."""

    def __enter__(self) -> WorkerShelf:
        global _SHELF
        self._outer = _SHELF
        if _SHELF is None:
            _SHELF = WorkerShelf()
        return _SHELF

    def __exit__(self, *exc) -> None:
        global _SHELF
        if self._outer is None and _SHELF is not None:
            shelf, _SHELF = _SHELF, None
            shelf.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m steptp.measure.worker READ_FD WRITE_FD")
    try:
        _worker_main(int(sys.argv[1]), int(sys.argv[2]))
    except (KeyboardInterrupt, BrokenPipeError):
        pass
