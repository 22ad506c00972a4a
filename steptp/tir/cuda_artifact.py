"""CUDA artifacts: a thread-bound LEIR candidate built here, run on a GPU machine without TVM.

An artifact is two files named by its id: ``<id>.cu`` (the CUDA source TVM's codegen wrote) and
``<id>.json`` (everything a launcher needs: the kernels in launch order, each with its grid and
block extents, dynamic shared memory and argument list; the buffers with shapes and dtypes). The
runner (``steptp/gpu_runner/runner.py``) reads only these files; nothing in them needs TVM.

Global intermediates. A LEIR intermediate in ``global`` scope that lives inside one thread-bound
nest would be allocated inside the kernel, which CUDA cannot do; so for the build every global
intermediate becomes an extra trailing parameter (a *workspace*): the runner allocates it (with
garbage, as TVM's workspace allocator would) and never compares it. Launches then take only
pointers, so the host function reduces to a list of kernel launches, which is what the JSON
holds; a host-side allocation or a non-pointer kernel argument is refused with a clear error.

Limits (``CudaLimits``): threads per block, block and grid extents, and shared memory per block
(static + dynamic), with sm_90 (H100/H200) defaults; a launch beyond them is a ``LimitError``.
The artifact is deterministic: the id hashes the canonical LEIR text and the target key, and the
JSON is written with sorted keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import tvm
import importlib
from tvm import tirx

from ..leir import ast as A
from .build import BuildError, _short_msg, _walk_stmts
from .lower import lower
from .target import Target

#: Bumped whenever the artifact's JSON layout changes (the runner refuses other versions).
ARTIFACT_VERSION = 1


class LimitError(BuildError):
    """A launch exceeds the device limits (threads per block, grid extents, shared memory)."""


@dataclass(frozen=True)
class CudaLimits:
    """Per-block and per-grid limits of the target GPU. Defaults: sm_90 (H100/H200): 1024
    threads per block, block extents (1024, 1024, 64), grid (2**31-1, 65535, 65535), 227 KiB of
    shared memory per block (48 KiB without the opt-in attribute for dynamic shared memory)."""

    max_threads_per_block: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_shared_bytes: int = 227 * 1024

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CudaLimits":
        known = {"max_threads_per_block", "max_block", "max_grid", "max_shared_bytes"}
        extra = set(d) - known
        if extra:
            raise ValueError(f"unknown CUDA limit fields {sorted(extra)}; known: {sorted(known)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


_AXES = ("x", "y", "z")


def _dtype_bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    bits = int("".join(ch for ch in dtype if ch.isdigit()) or 8)
    return max(1, bits // 8)


def with_workspaces(program: A.Program) -> tuple[A.Program, list[str]]:
    """``program`` with every global intermediate moved to the end of its outputs; and their
    names (the workspaces)."""
    ws = tuple(t for t in program.intermediates if t.scope == "global")
    if not ws:
        return program, []
    rest = tuple(t for t in program.intermediates if t.scope != "global")
    return replace(program, outputs=program.outputs + ws, intermediates=rest), [t.name for t in ws]


_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\) \{')


def without_restrict_on_read_back(source: str) -> str:
    """``source`` with ``__restrict__`` dropped from every parameter of each kernel that loads,
    in a conditional, from a buffer it stores to. TVM marks every parameter ``__restrict__``
    (``tirx.noalias``), and nvcc 13 may then turn ``where(c, T1[x], T2[x])`` into a select
    between the two addresses loaded through the read-only path (``ld.global.nc``), which does not see the thread's own
    earlier store to ``T2[x]``: on an H200 a linear+LeakyReLU with its negative branch split into
    a workspace returned the workspace's stale contents for every negative element, still with
    ``__restrict__`` dropped from ``T2`` alone (the select's other address, ``T1``, kept it), and
    exact results with it dropped from every parameter. Only such kernels lose it: an
    accumulation that reads its buffer back in place keeps it (dropped there too, the H200's
    matmul baseline ran 88 us against 18, its accumulator no longer in a register)."""
    out = source
    for m in _KERNEL.finditer(source):
        name, params = m.group(1), m.group(2)
        depth, end = 1, m.end()
        while depth and end < len(source):
            depth += {"{": 1, "}": -1}.get(source[end], 0)
            end += 1
        body = source[m.end():end]
        for ptr in re.findall(r"__restrict__ (\w+)", params):
            stores = re.search(rf"\b{ptr}\[[^\]]*\] = ", body)
            # read back in a conditional (see the docstring: not an accumulation in place)
            if stores and re.search(rf"condval = {ptr}\[|\? {ptr}\[|: {ptr}\[", body):
                # the prototype and the definition of this kernel alike
                out = re.sub(rf"\b({name}\([^)]*\))",
                             lambda h: h.group(1).replace("__restrict__ ", ""), out)
                break
    return out


def _tvm_build():
    # ``tvm.tirx.build`` is the function; its module holds the split/codegen helpers
    return importlib.import_module("tvm.tirx.build")


def _int(x) -> int:
    if isinstance(x, int):
        return x
    if isinstance(x, tirx.IntImm):
        return int(x.value)
    raise BuildError(f"launch parameter {x} is not a constant")


def _shared_bytes(func: tirx.PrimFunc) -> int:
    """Static shared memory a device function allocates."""
    total = 0
    for s in _walk_stmts(func.body):
        if isinstance(s, tirx.AllocBuffer) and str(s.buffer.scope()) in ("shared", "shared.dyn"):
            n = 1
            for e in s.buffer.shape:
                n *= _int(e)
            total += n * _dtype_bytes(str(s.buffer.dtype))
    return total


def _launches(host: tirx.PrimFunc, device: dict[str, tirx.PrimFunc]) -> list[dict[str, Any]]:
    """The kernel launches of the host function, in program order."""
    calls: list[Any] = []
    for s in _walk_stmts(host.body):
        if isinstance(s, tirx.AllocBuffer):
            raise BuildError(f"the host code allocates {s.buffer.name}; only launches of kernels "
                             f"on parameters are supported")
        if isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call) and \
                getattr(s.value.op, "name", "") == "tirx.call_ffi_kernel":
            calls.append(s.value)
    out = []
    for c in calls:
        name = str(c.args[0].value) if isinstance(c.args[0], tvm.ir.StringImm) else str(c.args[0])
        dfunc = device[name]
        n_args = len(dfunc.params)
        args = []
        for a in c.args[1:1 + n_args]:
            if isinstance(a, tvm.ir.Call) and getattr(a.op, "name", "") == "tirx.buffer_data":
                args.append(str(a.args[0].name))
            elif isinstance(a, tirx.Var) and "handle" in str(a.dtype):
                args.append(str(a.name))
            else:
                raise BuildError(f"kernel {name}: argument {a} is not a buffer pointer")
        tags = [str(t) for t in c.attrs.launch_params]
        values = [_int(v) for v in c.args[1 + n_args:]]
        if len(values) != len(tags):
            raise BuildError(f"kernel {name}: {len(values)} launch values for tags {tags}")
        grid, block, dyn = [1, 1, 1], [1, 1, 1], 0
        for t, v in zip(tags, values):
            if t.startswith("blockIdx."):
                grid[_AXES.index(t[-1])] = v
            elif t.startswith("threadIdx."):
                block[_AXES.index(t[-1])] = v
            elif "dyn_shared" in t:
                dyn = v
            else:
                raise BuildError(f"kernel {name}: unknown launch parameter {t}")
        out.append({"name": name, "args": args, "grid": grid, "block": block,
                    "dynamic_shared_bytes": dyn, "static_shared_bytes": _shared_bytes(dfunc)})
    return out


def check_limits(launches: list[dict[str, Any]], limits: CudaLimits) -> None:
    """Raise ``LimitError`` naming the first launch beyond ``limits``."""
    for ln in launches:
        threads = ln["block"][0] * ln["block"][1] * ln["block"][2]
        if threads > limits.max_threads_per_block:
            raise LimitError(f"kernel {ln['name']}: {threads} threads per block "
                             f"({'x'.join(map(str, ln['block']))}), more than "
                             f"{limits.max_threads_per_block}")
        for what, ext, lim in (("block", ln["block"], limits.max_block),
                               ("grid", ln["grid"], limits.max_grid)):
            for ax, e, m in zip(_AXES, ext, lim):
                if e > m:
                    raise LimitError(f"kernel {ln['name']}: {what} extent {e} along {ax}, "
                                     f"more than {m}")
        shared = ln["static_shared_bytes"] + ln["dynamic_shared_bytes"]
        if shared > limits.max_shared_bytes:
            raise LimitError(f"kernel {ln['name']}: {shared} bytes of shared memory per block, "
                             f"more than {limits.max_shared_bytes}")


@dataclass(frozen=True)
class CudaArtifact:
    """A built candidate: ``meta`` (the JSON) and ``source`` (the ``.cu`` text)."""

    id: str
    meta: dict[str, Any]
    source: str

    def write(self, directory: str | os.PathLike) -> Path:
        """Write ``<id>.cu`` then ``<id>.json`` (each through a temp file and a rename, the JSON
        last, so a reader that sees the JSON sees a complete source); return the JSON path."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / f"{self.id}.cu", self.source)
        return _atomic_write(d / f"{self.id}.json",
                             json.dumps(self.meta, sort_keys=True, indent=1) + "\n")


def _atomic_write(path: Path, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def artifact_id(canonical_leir: str, target: Target) -> str:
    blob = f"v{ARTIFACT_VERSION}\n{target.key}\n{canonical_leir}"
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def build_artifact(program: A.Program | str, target: Target | None = None,
                   limits: CudaLimits | None = None) -> CudaArtifact:
    """Build a thread-bound LEIR program for a CUDA ``target`` into a ``CudaArtifact``.

    Raises ``LowerError``/``LeirTypeError`` for programs that do not lower, ``BuildError`` when
    TVM refuses (an unbound nest, say), ``LimitError`` beyond ``limits``."""
    from ..leir import parse
    from ..leir.canon import canonical_text

    target = target or Target.cuda()
    if not target.is_gpu:
        raise ValueError(f"a CUDA artifact needs a cuda target, not {target.key}")
    limits = limits or CudaLimits()
    prog = parse(program) if isinstance(program, str) else program
    canon = canonical_text(prog)
    built_prog, workspaces = with_workspaces(prog)
    func = lower(built_prog, target).with_attr("global_symbol", "main")
    try:
        mod = tvm.IRModule({"main": func})
        mod = tvm.tirx.transform.BindTarget(target.to_tvm())(mod)
        pipeline, _, finalize_device = tvm.tirx.get_tir_pipeline("default")
        mod = pipeline(mod)
        host_mod, device_mods = _tvm_build().split_host_device_mods(mod)
        if len(device_mods) != 1:
            raise BuildError(f"expected one CUDA device module, got {len(device_mods)} (is every "
                             f"nest bound to blockIdx/threadIdx?)")
        (dev_target, dev_mod), = device_mods.items()
        dev_mod = finalize_device()(dev_mod)
        source = without_restrict_on_read_back(
            _tvm_build().codegen_build(dev_mod, dev_target).inspect_source())
    except BuildError:
        raise
    except Exception as e:  # noqa: BLE001 - TVM raises several error classes
        raise BuildError(f"TVM could not build the kernel for {target.key}: "
                         f"{type(e).__name__}: {_short_msg(e)}") from e
    device = {gv.name_hint: f for gv, f in dev_mod.functions.items()}
    launches = _launches(host_mod["main"], device)
    if not launches:
        raise BuildError("the program launches no kernel")
    # host arguments are named after the tensors (A, D) or a view of them (A_1): map back
    names = [t.name for t in built_prog.params]
    for ln in launches:
        ln["args"] = [_param_of(a, names) for a in ln["args"]]
    check_limits(launches, limits)
    buffers = []
    for i, t in enumerate(built_prog.params):
        role = ("input" if i < len(prog.inputs) else
                "workspace" if t.name in workspaces else "output")
        buffers.append({"name": t.name, "shape": list(t.shape), "dtype": t.tvm_dtype,
                        "role": role})
    aid = artifact_id(canon, target)
    meta = {"artifact_version": ARTIFACT_VERSION, "id": aid, "kernel": prog.name,
            "target": target.to_dict(), "arch": target.arch, "limits": limits.to_dict(),
            "source": f"{aid}.cu",
            "source_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(), "buffers": buffers, "launches": launches,
            "leir": canon}
    return CudaArtifact(aid, meta, source)


def _param_of(var_name: str, names: list[str]) -> str:
    if var_name in names:
        return var_name
    base, _, suffix = var_name.rpartition("_")
    if base in names and suffix.isdigit():
        return base
    raise BuildError(f"kernel argument {var_name} is not a parameter ({', '.join(names)})")


__all__ = ["ARTIFACT_VERSION", "CudaArtifact", "CudaLimits", "LimitError", "artifact_id",
           "build_artifact", "check_limits", "with_workspaces"]
