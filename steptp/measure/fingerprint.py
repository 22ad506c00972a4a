"""Hardware fingerprint: what a timing was measured on.

A timing is only comparable with timings of the same fingerprint: the same CPU model and feature
flags, the same cores visible to the process, the same TVM and LLVM, the same target and thread
count, the same GPU and driver. ``Fingerprint.id`` is a short stable hash of all of it; the
measurement cache keys on it, so a changed machine (or TVM, or thread count) misses the cache.

Host names, clock speeds, uptime and other things that change without changing the code or its
speed class are left out on purpose.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from ..tir.target import Target


class Fingerprint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    machine: str                      # platform.machine(): x86_64, aarch64, ...
    cpu_model: str                    # /proc/cpuinfo "model name" (or platform.processor())
    cpu_vendor: str = ""
    cpu_flags_hash: str               # sha256 of the sorted flag list, 16 hex digits
    cpu_flags_count: int
    cpu_count: int                    # os.cpu_count()
    cpu_affinity: int                 # len(os.sched_getaffinity(0)): cores this process may use
    tvm_version: str
    llvm_version: str
    target: dict[str, Any]            # Target.to_dict()
    num_threads: int                  # TVM_NUM_THREADS the measurements use
    gpu_name: Optional[str] = None
    gpu_driver: Optional[str] = None

    @property
    def id(self) -> str:
        """A short stable hash of every field (16 hex digits)."""
        blob = json.dumps(self.model_dump(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {**self.model_dump(), "id": self.id}


def _cpuinfo() -> tuple[str, str, list[str]]:
    """(model name, vendor, flags) of the first processor in /proc/cpuinfo."""
    model, vendor, flags = "", "", []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.split()
                if not line.strip() and model:  # end of the first processor block
                    break
    except OSError:
        pass
    return model or platform.processor() or "unknown", vendor, sorted(set(flags))


def flags_hash(flags: list[str]) -> str:
    return hashlib.sha256(" ".join(sorted(set(flags))).encode("utf-8")).hexdigest()[:16]


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cache_sizes() -> dict[str, int]:
    """Data-cache sizes in bytes (``{"L1": ..., "L2": ..., "L3": ...}``) of CPU 0 from sysfs;
    missing levels are absent. Not part of ``Fingerprint.id``: they follow from the CPU model
    (already in it), and adding them would invalidate every cached measurement."""
    out: dict[str, int] = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for e in entries:
        if not e.startswith("index"):
            continue
        try:
            with open(f"{base}/{e}/level") as f:
                level = int(f.read().strip())
            with open(f"{base}/{e}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{e}/size") as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:].upper(), 1)
        try:
            n = int(size.rstrip("KkMmGg")) * scale
        except ValueError:
            continue
        out.setdefault(f"L{level}", n)
    return out


def vector_bits() -> int:
    """Width of the widest SIMD register the CPU flags advertise (bits)."""
    _, _, flags = _cpuinfo()
    fs = set(flags)
    if "avx512f" in fs:
        return 512
    if "avx2" in fs or "avx" in fs:
        return 256
    if fs & {"sse2", "neon", "asimd"} or platform.machine() in ("aarch64", "arm64"):
        return 128
    return 64


def available_cores() -> int:
    """Cores this process may run on (the default measurement thread count)."""
    return _affinity()


@functools.lru_cache(maxsize=1)
def tvm_versions() -> tuple[str, str]:
    """(TVM version, LLVM version) as strings; "" when unknown."""
    try:
        import tvm

        tvm_v = str(tvm.__version__)
    except Exception:  # noqa: BLE001
        return "", ""
    llvm_v = ""
    try:
        from tvm.target import codegen

        llvm_v = str(int(codegen.llvm_version_major()))
    except Exception:  # noqa: BLE001 - a TVM without LLVM
        try:
            llvm_v = str(tvm.support.libinfo().get("LLVM_VERSION", ""))
        except Exception:  # noqa: BLE001
            llvm_v = ""
    return tvm_v, llvm_v


@functools.lru_cache(maxsize=1)
def gpu_info() -> tuple[Optional[str], Optional[str]]:
    """(GPU name, driver version) of GPU 0 via nvidia-smi; (None, None) without one."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None, None
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    line = out.strip().splitlines()[0] if out.strip() else ""
    if not line:
        return None, None
    name, _, driver = line.partition(",")
    return name.strip() or None, driver.strip() or None


def current(target: Target | None = None, num_threads: int | None = None) -> Fingerprint:
    """The fingerprint of this machine for ``target`` (default: the host CPU) measured with
    ``num_threads`` TVM threads (default: the cores available)."""
    if target is None:
        from ..tir.build import default_target

        target = default_target()
    model, vendor, flags = _cpuinfo()
    tvm_v, llvm_v = tvm_versions()
    gpu_name, gpu_driver = gpu_info()
    return Fingerprint(
        machine=platform.machine(), cpu_model=model, cpu_vendor=vendor,
        cpu_flags_hash=flags_hash(flags), cpu_flags_count=len(flags),
        cpu_count=os.cpu_count() or 1, cpu_affinity=_affinity(),
        tvm_version=tvm_v, llvm_version=llvm_v, target=target.to_dict(),
        num_threads=int(num_threads or available_cores()),
        gpu_name=gpu_name, gpu_driver=gpu_driver)
