"""Compilation targets: the host CPU through LLVM now, CUDA GPUs later.

A ``Target`` is a small frozen value (JSON-able, hashable, with a stable ``key`` for caches) that
turns into a ``tvm.target.Target`` on demand. TVM 0.27 only accepts dict targets, and the wheel's
default LLVM triple (``x86_64-conda-linux-gnu``) refuses ``mcpu=native``, so a CPU target always
carries an explicit triple and cpu name.

Host CPU detection. LLVM's own host detection (``llvm_get_system_cpu``) trusts the CPUID model
number, which hypervisors often fake: the Sapphire Rapids machines this project runs on report
model 167 and LLVM calls them ``rocketlake``, although the CPU flags list AMX and AVX512-FP16. So
on x86 the cpu name is chosen from the feature flags in ``/proc/cpuinfo``: the first tier whose
required flags are all present (``sapphirerapids``, ``graniterapids``, ``znver4``, then the generic
``x86-64-v4/v3/v2`` levels, then ``x86-64``). Every tier names only features the host has, so the
code it produces never hits an illegal instruction. Elsewhere LLVM's host name is used, and
``generic`` when nothing is known.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from typing import Any

# (LLVM cpu name, vendor or None, /proc/cpuinfo flags that must all be present), best first.
_X86_TIERS: tuple[tuple[str, str | None, frozenset[str]], ...] = (
    ("graniterapids", "GenuineIntel", frozenset({
        "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "avx512_fp16", "avx512_bf16",
        "avx512_vnni", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"})),
    ("sapphirerapids", "GenuineIntel", frozenset({
        "amx_tile", "amx_bf16", "amx_int8", "avx512_fp16", "avx512_bf16", "avx512_vnni",
        "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512ifma", "avx512vbmi",
        "avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq"})),
    ("znver4", "AuthenticAMD", frozenset({
        "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_bf16",
        "avx512_vnni", "avx512ifma", "avx512vbmi", "avx512_vbmi2", "avx512_bitalg",
        "avx512_vpopcntdq"})),
    ("x86-64-v4", None, frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl",
                                   "avx2", "fma", "bmi1", "bmi2", "movbe", "f16c", "abm"})),
    ("x86-64-v3", None, frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "movbe", "f16c", "abm",
                                   "xsave"})),
    ("x86-64-v2", None, frozenset({"sse4_2", "sse4_1", "ssse3", "popcnt", "cx16"})),
    ("x86-64", None, frozenset()),
)

DEFAULT_CPU_TRIPLE = "x86_64-linux-gnu"
DEFAULT_CUDA_ARCH = "sm_90"


def _read_cpuinfo() -> tuple[str | None, frozenset[str]]:
    """(vendor_id, flags) of the first processor in /proc/cpuinfo; (None, {}) if unreadable."""
    vendor, flags = None, frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and vendor is None:
                    vendor = value.strip()
                elif key == "flags":
                    flags = frozenset(value.split())
                    break
    except OSError:
        pass
    return vendor, flags


def detect_x86_cpu(vendor: str | None, flags: frozenset[str]) -> str:
    """The best LLVM cpu name whose features the host flags cover (pure; testable)."""
    for name, want_vendor, need in _X86_TIERS:
        if want_vendor is not None and vendor != want_vendor:
            continue
        if need <= flags:
            return name
    return "x86-64"


def _llvm_valid(cpu: str, triple: str) -> bool:
    try:
        from tvm.target import codegen

        return bool(codegen.llvm_is_valid_cpu(cpu, triple))
    except Exception:  # noqa: BLE001 - an LLVM without the query: trust the name
        return True


def _host_triple() -> str:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return DEFAULT_CPU_TRIPLE
    if machine in ("aarch64", "arm64"):
        return "aarch64-linux-gnu"
    return f"{machine}-linux-gnu"


def detect_host_cpu() -> tuple[str, str]:
    """(mtriple, mcpu) for the machine this runs on; never raises."""
    triple = _host_triple()
    if triple.startswith("x86_64"):
        vendor, flags = _read_cpuinfo()
        for name, want_vendor, need in _X86_TIERS:  # an older LLVM may not know a newer name
            if (want_vendor is None or vendor == want_vendor) and need <= flags \
                    and _llvm_valid(name, triple):
                return triple, name
        return triple, "x86-64"
    try:
        from tvm.target import codegen

        cpu = str(codegen.llvm_get_system_cpu())
        if cpu and _llvm_valid(cpu, triple):
            return triple, cpu
    except Exception:  # noqa: BLE001
        pass
    return triple, "generic"


def _host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Target:
    """A compilation target. ``kind`` is ``llvm`` (CPU) or ``cuda``.

    CPU fields: ``mtriple``, ``mcpu``, ``num_cores``. CUDA fields: ``arch`` (``sm_90``) and the
    host CPU (``mtriple``/``mcpu``) that compiles the launch code.
    """

    kind: str
    mtriple: str | None = None
    mcpu: str | None = None
    num_cores: int | None = None
    arch: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("llvm", "cuda"):
            raise ValueError(f"unknown target kind {self.kind!r}; use 'llvm' or 'cuda'")
        if self.kind == "cuda" and not self.arch:
            raise ValueError("a cuda target needs an arch such as 'sm_90'")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def host_cpu(cls, num_cores: int | None = None) -> "Target":
        """The machine this runs on, with an explicit triple and detected cpu name."""
        triple, cpu = detect_host_cpu()
        return cls("llvm", mtriple=triple, mcpu=cpu, num_cores=num_cores or _host_cores())

    @classmethod
    def cpu(cls, mcpu: str = "x86-64", mtriple: str = DEFAULT_CPU_TRIPLE,
            num_cores: int | None = None) -> "Target":
        return cls("llvm", mtriple=mtriple, mcpu=mcpu, num_cores=num_cores)

    @classmethod
    def cuda(cls, arch: str = DEFAULT_CUDA_ARCH) -> "Target":
        triple, cpu = detect_host_cpu()
        return cls("cuda", mtriple=triple, mcpu=cpu, arch=arch)

    # ------------------------------------------------------------------ views
    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.kind == "llvm"

    @property
    def key(self) -> str:
        """A stable string naming everything that changes generated code (for caches)."""
        if self.kind == "cuda":
            return f"cuda-{self.arch}-host-{self.mtriple}-{self.mcpu}"
        return f"llvm-{self.mtriple}-{self.mcpu}-c{self.num_cores or 0}"

    def _llvm_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": "llvm", "mtriple": self.mtriple or DEFAULT_CPU_TRIPLE,
                             "mcpu": self.mcpu or "x86-64"}
        if self.kind == "llvm" and self.num_cores:
            d["num-cores"] = int(self.num_cores)
        return d

    def tvm_dict(self) -> dict[str, Any]:
        """The dict form TVM accepts (without the host for CUDA)."""
        if self.kind == "cuda":
            return {"kind": "cuda", "arch": self.arch}
        return self._llvm_dict()

    def to_tvm(self):
        """A ``tvm.target.Target`` (CUDA targets carry the host CPU as their host)."""
        import tvm

        if self.kind == "cuda":
            return tvm.target.Target(self.tvm_dict(), host=self._llvm_dict())
        return tvm.target.Target(self.tvm_dict())

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Target":
        known = {"kind", "mtriple", "mcpu", "num_cores", "arch"}
        extra = set(d) - known
        if extra:
            raise ValueError(f"unknown target fields {sorted(extra)}")
        return cls(**d)

    def __str__(self) -> str:
        return self.key
