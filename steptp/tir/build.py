"""The one place that talks to TVM to build and run kernels.

``build`` compiles a PrimFunc (or a LEIR program, lowered first) for a ``Target``; ``run`` calls
it on NumPy inputs and returns the outputs, which it allocates pre-filled with NaN (floats) or a
sentinel (integers: the dtype's minimum, or maximum for unsigned; ``False`` for bool) so that an
element the kernel never writes shows up; ``time`` wraps TVM's ``time_evaluator``.

Which parameters are outputs: for a LEIR program, its declared outputs; for a bare PrimFunc, the
parameters some statement stores into (``signature``). Inputs are passed in parameter order,
skipping outputs; outputs come back in parameter order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

import tvm
from tvm import tirx

from ..leir import ast as A
from .lower import LowerError, lower
from .target import Target


class BuildError(RuntimeError):
    """TVM refused to compile a kernel (the message carries TVM's reason)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: name, shape, NumPy/TVM dtype name, and whether it is written."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "is_output": self.is_output}


@functools.lru_cache(maxsize=1)
def default_target() -> Target:
    return Target.host_cpu()


# ---------------------------------------------------------------------------- IR walking
def _children(node) -> list:
    """Sub-statements of a TIR statement (enough for the statements TVM's builders make)."""
    out = []
    for attr in ("body", "then_case", "else_case", "block", "init"):
        v = getattr(node, attr, None)
        if v is not None and isinstance(v, tirx.Stmt):
            out.append(v)
    seq = getattr(node, "seq", None)
    if seq is not None:
        out.extend(seq)
    return out


def _walk_stmts(stmt):
    stack = [stmt]
    while stack:
        s = stack.pop()
        yield s
        stack.extend(reversed(_children(s)))


def written_buffers(func: tirx.PrimFunc) -> list:
    """Buffers stored into anywhere in ``func`` (by BufferStore or a block's write regions)."""
    found = []
    for s in _walk_stmts(func.body):
        if isinstance(s, tirx.BufferStore):
            found.append(s.buffer)
        writes = getattr(s, "writes", None)
        if writes is not None and type(s).__name__ == "SBlock":
            found.extend(r.source for r in writes)
    return found


def thread_bound_loops(func: tirx.PrimFunc) -> list[tuple[str, str]]:
    """(loop variable name, thread tag) of every thread-binding loop in ``func``."""
    out = []
    for s in _walk_stmts(func.body):
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.THREAD_BINDING:
            tag = s.thread_binding.thread_tag if s.thread_binding is not None else "?"
            out.append((s.loop_var.name, str(tag)))
    return out


def _as_int(x) -> int:
    if isinstance(x, int):
        return x
    if isinstance(x, tirx.IntImm):
        return int(x.value)
    raise BuildError(f"symbolic shape {x} is not supported")


def signature(func: tirx.PrimFunc) -> tuple[Param, ...]:
    """Name, static shape, dtype and output flag of each parameter of ``func``, in order."""
    written = written_buffers(func)
    params = []
    for p in func.params:
        if not hasattr(p, "shape"):
            raise BuildError(f"parameter {p} is not a buffer; only buffer parameters are supported")
        is_out = any(p.same_as(w) for w in written)
        params.append(Param(str(p.name), tuple(_as_int(d) for d in p.shape), str(p.dtype), is_out))
    return tuple(params)


def program_signature(program: A.Program) -> tuple[Param, ...]:
    return tuple(Param(t.name, t.shape, t.tvm_dtype, i >= len(program.inputs))
                 for i, t in enumerate(program.params))


# ---------------------------------------------------------------------------- build
@dataclass
class Built:
    """A compiled kernel: the PrimFunc, its target and signature, TVM's executable and the
    callable module (``built.module["main"]``)."""

    func: tirx.PrimFunc
    target: Target
    params: tuple[Param, ...]
    executable: Any = field(repr=False)
    _module: Any = field(default=None, repr=False)

    @property
    def module(self):
        """The runtime module to call (JIT-linked on first use)."""
        if self._module is None:
            self._module = self.executable.jit()
        return self._module

    @property
    def inputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_output)

    @property
    def outputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_output)

    @property
    def device(self):
        return tvm.cuda(0) if self.target.is_gpu else tvm.cpu(0)

    def source(self, fmt: str = "") -> str:
        """Generated code: the CUDA source for GPU targets, else the host module's LLVM IR
        (``fmt="asm"`` for assembly)."""
        mod = self.executable.mod
        if self.target.is_gpu:
            for m in _imported(mod):
                if str(m.kind) == "cuda":
                    return m.inspect_source()
            raise BuildError("the build has no CUDA module")
        return mod.inspect_source(fmt) if fmt else mod.inspect_source()


def _imported(mod) -> list:
    out, stack = [], [mod]
    while stack:
        m = stack.pop()
        out.append(m)
        stack.extend(list(m.imports))
    return out


def build(kernel: tirx.PrimFunc | A.Program | str, target: Target | None = None) -> Built:
    """Compile a PrimFunc, a LEIR program or LEIR text for ``target`` (default: the host CPU)."""
    target = target or default_target()
    if isinstance(kernel, (A.Program, str)):
        prog = kernel if isinstance(kernel, A.Program) else _parse(kernel)
        func = lower(prog, target)
        params = program_signature(prog)
    elif isinstance(kernel, tirx.PrimFunc):
        func = kernel
        params = signature(func)
    elif isinstance(kernel, tvm.IRModule):
        func = kernel["main"]
        params = signature(func)
    else:
        raise TypeError(f"cannot build a {type(kernel).__name__}")
    if not target.is_gpu:
        bound = thread_bound_loops(func)
        if bound:
            name, tag = bound[0]
            raise LowerError(f"loop '{name}' is bound to {tag}, but the target {target.key} is a "
                             f"CPU (LLVM) target without GPU threads")
    func = func.with_attr("global_symbol", "main")
    try:
        ex = tvm.compile(tvm.IRModule({"main": func}), target=target.to_tvm())
    except Exception as e:  # noqa: BLE001 - TVM raises several error classes
        raise BuildError(f"TVM could not build the kernel for {target.key}: "
                         f"{type(e).__name__}: {_short_msg(e)}") from e
    return Built(func, target, params, ex)


def _parse(text: str) -> A.Program:
    from ..leir import parse

    return parse(text)


def _short_msg(e: Exception, limit: int = 2000) -> str:
    msg = str(e).strip()
    return msg if len(msg) <= limit else msg[:limit] + " ..."


# ---------------------------------------------------------------------------- run
def np_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype of a TVM dtype name (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def is_float_dtype(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def fill_value(dtype: str):
    """What outputs are pre-filled with so that unwritten elements are visible."""
    if is_float_dtype(dtype):
        return np.nan
    if dtype == "bool":
        return False
    info = np.iinfo(np.dtype(dtype))
    return info.max if info.min == 0 else info.min


def _fill_for(dtype: str, fill):
    if fill is None:
        return fill_value(dtype)
    return fill(dtype) if callable(fill) else fill


def _to_device(x: np.ndarray, dev):
    return tvm.runtime.tensor(np.array(x, order="C", copy=True), dev)  # 0-d stays 0-d


def _check_inputs(built: Built, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    ins = built.inputs
    if len(inputs) != len(ins):
        raise ValueError(f"the kernel takes {len(ins)} inputs "
                         f"({', '.join(p.name for p in ins)}), got {len(inputs)}")
    out = []
    for p, x in zip(ins, inputs):
        x = np.asarray(x)
        if tuple(x.shape) != p.shape:
            raise ValueError(f"input {p.name}: shape {tuple(x.shape)}, expected {p.shape}")
        if x.dtype != np_dtype(p.dtype):
            raise ValueError(f"input {p.name}: dtype {x.dtype}, expected {p.dtype}")
        out.append(x)
    return out


def _args(built: Built, inputs: Sequence[np.ndarray], fill=None) -> tuple[list, list]:
    """``fill``: None (``fill_value``), a value, a function of the dtype name, or a list with
    one array per output (the buffers' exact previous contents)."""
    dev = built.device
    it = iter(_check_inputs(built, inputs))
    per_output = iter(fill) if isinstance(fill, (list, tuple)) else None
    args, outs = [], []
    for p in built.params:
        if p.is_output:
            if per_output is not None:
                init = np.asarray(next(per_output), dtype=np_dtype(p.dtype)).reshape(p.shape)
            else:
                init = np.full(p.shape, _fill_for(p.dtype, fill), dtype=np_dtype(p.dtype))
            t = _to_device(init, dev)
            outs.append(t)
        else:
            t = _to_device(next(it), dev)
        args.append(t)
    return args, outs


def run(built: Built, inputs: Sequence[np.ndarray], fill=None) -> list[np.ndarray]:
    """Run the kernel once on ``inputs`` (the non-output parameters, in order); return the
    outputs in parameter order, allocated pre-filled with ``fill_value`` (or ``fill``: a value,
    or a function of the TVM dtype name)."""
    args, outs = _args(built, inputs, fill)
    built.module["main"](*args)
    if built.target.is_gpu:
        built.device.sync()
    return [o.numpy() for o in outs]


def run_with_inputs(built: Built, inputs: Sequence[np.ndarray], fill=None
                    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``run``, also returning the input buffers as they are after the call (a kernel that
    writes to an input shows it here)."""
    args, outs = _args(built, inputs, fill)
    built.module["main"](*args)
    if built.target.is_gpu:
        built.device.sync()
    ins = [a for a, p in zip(args, built.params) if not p.is_output]
    return [o.numpy() for o in outs], [a.numpy() for a in ins]


@dataclass(frozen=True)
class Timing:
    """Seconds per call: mean and median over ``repeat`` measurements, and each of them."""

    mean: float
    median: float
    results: tuple[float, ...]
    number: int
    repeat: int

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "median": self.median, "results": list(self.results),
                "number": self.number, "repeat": self.repeat}


def time(built: Built, inputs: Sequence[np.ndarray], number: int = 10, repeat: int = 3,
         min_repeat_ms: int = 0) -> Timing:
    """Time the kernel with TVM's ``time_evaluator`` (each result averages ``number`` calls)."""
    args, _ = _args(built, inputs)
    f = built.module.time_evaluator("main", built.device, number=number, repeat=repeat,
                                    min_repeat_ms=min_repeat_ms)
    r = f(*args)
    return Timing(float(r.mean), float(r.median), tuple(float(x) for x in r.results),
                  number, repeat)
