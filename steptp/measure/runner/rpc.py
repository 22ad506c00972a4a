"""Timing on a remote device through TVM RPC (a tracker and ``tvm.rpc`` servers).

The kernel is built here for the device's target, exported as a shared library
(``ex.export_library``), uploaded to a server the tracker hands out for ``key``, loaded there, and
timed with the remote ``time_evaluator`` by the same warm-up / calibrate / repeat / remeasure
protocol as local timing. The whole exchange runs in an isolated worker (task ``rpc_time``) with
the measurement timeout, so a remote hang or a dropped connection costs one candidate.

    backend = RPCBackend("127.0.0.1", 9190, key="rasp4")
    with Measurer(Target.cpu("cortex-a72", "aarch64-linux-gnu"), cfg, backend=backend) as m:
        m.time_many([...])

The tracker hands one session per server at a time, so timings on one remote device are
serialized by the tracker itself. A kernel that crashes the remote session is reported as an
error ("the remote session died ..."); note that ``tvm.rpc.Server``'s listen loop exits after a
session dies abnormally, so run remote servers under a supervisor that restarts them (until then
requests for that key wait, and time out). The remote hardware cannot be introspected over RPC: its
fingerprint is the RPC key + target + TVM/LLVM versions + thread count (name keys by device
model).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ...records import Timing
from ...tir.target import Target
from ..fingerprint import Fingerprint, tvm_versions
from ..programs import MeasureError, load_kernel
from ..timing import MeasureConfig, timed


@dataclass(frozen=True)
class RPCBackend:
    """Where remote devices are: a tracker address and the device key to request."""

    tracker_host: str
    tracker_port: int
    key: str
    priority: int = 1
    session_timeout_s: float = 120.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RPCBackend":
        return cls(**d)

    def fingerprint(self, target: Target, num_threads: int) -> Fingerprint:
        tvm_v, llvm_v = tvm_versions()
        return Fingerprint(machine=f"rpc:{self.key}", cpu_model=f"rpc-key:{self.key}",
                           cpu_flags_hash="", cpu_flags_count=0, cpu_count=0, cpu_affinity=0,
                           tvm_version=tvm_v, llvm_version=llvm_v, target=target.to_dict(),
                           num_threads=int(num_threads))

    def session(self):
        """A remote session from the tracker (blocks until a server for ``key`` is free)."""
        from tvm import rpc

        tracker = rpc.connect_tracker(self.tracker_host, self.tracker_port)
        return tracker.request(self.key, priority=self.priority,
                               session_timeout=self.session_timeout_s)


def rpc_measure(program: Any, target: Target | dict | None, config: MeasureConfig | None,
                backend: RPCBackend) -> Timing:
    """Build ``program`` here, run and time it on a remote device of ``backend`` (in this
    process; ``Measurer(backend=...)`` isolates it in a worker)."""
    import tvm

    from ...tir import build as B
    from ..verify import random_inputs

    config = config or MeasureConfig()
    if isinstance(target, dict):
        target = Target.from_dict(target)
    target = target or B.default_target()
    kernel = load_kernel(program)
    try:
        built = B.build(kernel, target)
    except Exception as e:  # noqa: BLE001
        raise MeasureError(f"build failed: {e}") from e
    inputs = random_inputs(kernel, config.seed)
    with tempfile.TemporaryDirectory(prefix="steptp-rpc-") as d:
        name = f"steptp_kernel_{os.getpid()}_{time.monotonic_ns()}.so"
        path = os.path.join(d, name)
        built.executable.export_library(path)
        try:
            remote = backend.session()
        except Exception as e:  # noqa: BLE001
            raise MeasureError(f"no remote device for key {backend.key!r} at "
                               f"{backend.tracker_host}:{backend.tracker_port}: {e}") from e
        remote.upload(path)
        try:
            rlib = remote.load_module(name)
            dev = remote.cuda(0) if target.is_gpu else remote.cpu(0)
            it = iter(inputs)
            args = []
            for p in built.params:
                if p.is_output:
                    x = np.full(p.shape, B.fill_value(p.dtype), dtype=B.np_dtype(p.dtype))
                else:
                    x = np.array(next(it), order="C", copy=True)
                args.append(tvm.runtime.tensor(x, dev))
            def warm_up() -> None:
                rlib["main"](*args)
                dev.sync()

            def repeats(n: int, r: int) -> list[float]:
                return [float(x) for x in
                        rlib.time_evaluator("main", dev, number=n, repeat=r)(*args).results]

            return timed(repeats, warm_up, config)
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            if "kShutdown" in msg or "connection" in msg.lower():
                raise MeasureError(f"the remote session died while running the kernel (the "
                                   f"kernel crashed the server?): {msg.splitlines()[0][:300]}"
                                   ) from e
            raise
        finally:
            try:
                remote.remove(name)
            except Exception:  # noqa: BLE001 - the session may be gone
                pass


def rpc_time_task(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point (``TASKS["rpc_time"]``)."""
    t0 = time.perf_counter()
    timing = rpc_measure(payload["program"], payload.get("target"),
                         MeasureConfig(**payload["config"]),
                         RPCBackend.from_dict(payload["backend"]))
    return {"timing": timing.model_dump(), "seconds": time.perf_counter() - t0}
