"""Checks that a workload goes through TVM: export + import (``import_check``) and whole-model
numerics (``whole_model_check``).

``whole_model_check`` compiles the *unfused original* Relax module (parameters bound as constants,
``from_exported_program(ep, keep_params_as_input=False)``) for the host CPU with ``tvm.compile``,
runs it with ``relax.VirtualMachine`` and compares every output with PyTorch eager on the seeded
example inputs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from steptp.zoo._base import Workload


def _workload(w: Workload | str) -> Workload:
    if isinstance(w, Workload):
        return w
    from steptp.zoo import workloads

    return workloads.get(w)


def export(module: torch.nn.Module, inputs: tuple) -> "torch.export.ExportedProgram":
    with torch.no_grad():
        return torch.export.export(module.eval(), tuple(inputs))


def to_relax(ep, keep_params_as_input: bool = False):
    """``from_exported_program`` with steptp's own converters (``steptp.zoo.converters``, the
    same the extraction uses); the Relax IRModule (parameters bound unless asked otherwise)."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    from steptp.zoo import converters

    ep = ep.run_decompositions()
    importer = ExportedProgramImporter()
    names = {n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"}
    custom = {}
    for n in sorted(names):
        f = converters.bind(n, importer)
        if f is not None:
            custom[n] = (lambda f: lambda node, _importer: f(node))(f)
    return importer.from_exported_program(ep, keep_params_as_input, False, False, custom)


@dataclass
class ImportResult:
    name: str
    size: str
    dtype: str
    export_s: float
    import_s: float
    legalize_s: float
    n_primfuncs: int
    mod: Any = field(default=None, repr=False)

    @property
    def total_s(self) -> float:
        return self.export_s + self.import_s + self.legalize_s


def import_check(workload: Workload | str, size: str = "tiny", dtype: str = "float32",
                 keep_mod: bool = False) -> ImportResult:
    """Build, ``torch.export``, ``from_exported_program`` and ``LegalizeOps``; raises on failure.

    Sort and scan operators (``cumsum``, ``cumprod``, ``topk``, ...) are not legalized by
    ``LegalizeOps``: TVM lowers them in ``relax.backend.DispatchSortScan``, which needs a target,
    so :func:`legalize` runs that pass under the host target first (``tvm.compile`` does the same).

    Also fails when legalization leaves a Relax operator call without a TIR implementation
    (``call_tir`` is the only thing ``main`` may call besides tuple/shape plumbing).
    """
    import tvm

    w = _workload(workload)
    module, inputs = w.build(size, dtype)
    t0 = time.perf_counter()
    ep = export(module, inputs)
    t1 = time.perf_counter()
    mod = to_relax(ep, keep_params_as_input=True)
    t2 = time.perf_counter()
    mod = legalize(mod)
    t3 = time.perf_counter()
    leftover = _unlegalized_ops(mod)
    if leftover:
        raise RuntimeError(f"{w.name}: LegalizeOps left Relax operators {sorted(leftover)}")
    n = sum(1 for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    return ImportResult(w.name, size, dtype, t1 - t0, t2 - t1, t3 - t2, n,
                        mod if keep_mod else None)


def legalize(mod, target: dict[str, Any] | None = None):
    """``DispatchSortScan`` (under the host target) then ``LegalizeOps``."""
    import tvm
    from tvm import relax

    with tvm.target.Target(target or host_target()):
        mod = relax.backend.DispatchSortScan()(mod)
    return relax.transform.LegalizeOps()(mod)


_ALLOWED_CALLS = {"relax.call_tir", "relax.call_pure_packed", "relax.call_packed",
                  "relax.null_value", "relax.builtin.stop_lift_params"}


def _unlegalized_ops(mod) -> set[str]:
    from tvm import relax

    found: set[str] = set()
    for _gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue

        def visit(expr):
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm_ir_op()):
                name = expr.op.name
                if name not in _ALLOWED_CALLS and not name.startswith("relax.memory") \
                        and not name.startswith("relax.vm"):
                    found.add(name)

        relax.analysis.post_order_visit(func.body, visit)
    return found


def tvm_ir_op():
    import tvm

    return tvm.ir.Op


# ----------------------------------------------------------------------------- target
def host_target() -> dict[str, Any]:
    """The LLVM target dict for this machine: ``steptp.tir.target.Target.host_cpu()`` when that
    module is available, otherwise x86-64-v3 (AVX2 hosts) or x86-64 with an explicit triple."""
    try:
        from steptp.tir.target import Target

        t = Target.host_cpu()
        d = t.tvm_dict()
        if isinstance(d, dict) and d.get("kind") == "llvm":
            return d
    except Exception:  # noqa: BLE001 - fall back to the local detection below
        pass
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    cpu = "x86-64-v3" if {"avx2", "fma", "f16c"} <= flags else "x86-64"
    return {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": cpu}


# ----------------------------------------------------------------------------- whole model
@dataclass
class CheckResult:
    name: str
    size: str
    dtype: str
    passed: bool
    max_abs_err: float
    max_rel_err: float
    n_outputs: int
    rtol: float
    atol: float
    compile_s: float
    run_s: float
    target: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _flatten_torch(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    if hasattr(out, "to_tuple"):  # transformers ModelOutput
        out = out.to_tuple()
    leaves, _ = tree_flatten(out)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _flatten_tvm(out: Any) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, (list, tuple)) or (hasattr(out, "__len__") and hasattr(out, "__getitem__")):
        res: list[np.ndarray] = []
        for x in out:
            res.extend(_flatten_tvm(x))
        return res
    return [np.asarray(out)]


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.cpu().numpy()


def _tvm_input(x: Any, dev):
    import tvm

    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            # numpy has no bfloat16: hand TVM the tensor through DLPack
            return tvm.runtime.from_dlpack(x.contiguous())
        return tvm.runtime.tensor(x.detach().contiguous().numpy(), dev)
    return x


def whole_model_check(workload: Workload | str, size: str = "tiny", rtol: float = 1e-3,
                      atol: float = 1e-4, dtype: str = "float32",
                      target: dict[str, Any] | None = None) -> CheckResult:
    """Compile the whole workload with TVM on the CPU and compare it with PyTorch eager.

    ``passed`` means every output has the PyTorch shape and satisfies
    ``|tvm - torch| <= atol + rtol * |torch|`` elementwise (integer outputs must match exactly).
    ``max_rel_err`` is ``max |tvm - torch| / max(|torch|, atol)`` over all outputs. Failures to
    export, import or compile are reported in ``error`` with ``passed=False``, not raised.
    """
    import tvm
    from tvm import relax

    w = _workload(workload)
    target = dict(target or host_target())
    module, inputs = w.build(size, dtype)
    res = CheckResult(w.name, size, dtype, False, float("inf"), float("inf"), 0, rtol, atol,
                      0.0, 0.0, target)
    try:
        with torch.no_grad():
            expected = _flatten_torch(module(*inputs))
        ep = export(module, inputs)
        mod = to_relax(ep, keep_params_as_input=False)
        t0 = time.perf_counter()
        ex = tvm.compile(mod, target=tvm.target.Target(target))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        t1 = time.perf_counter()
        dev = tvm.cpu()
        args = [_tvm_input(x, dev) for x in inputs if isinstance(x, torch.Tensor)]
        out = vm["main"](*args)
        t2 = time.perf_counter()
        got = _flatten_tvm(out)
    except Exception as e:  # noqa: BLE001 - reported in the result
        res.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
        return res
    res.compile_s, res.run_s = t1 - t0, t2 - t1
    res.n_outputs = len(expected)
    if len(got) != len(expected):
        res.error = f"output count differs: tvm {len(got)} vs torch {len(expected)}"
        return res
    max_abs, max_rel, ok = 0.0, 0.0, True
    for e_t, g in zip(expected, got):
        e = _to_numpy(e_t)
        g = np.asarray(g)
        if g.dtype.kind == "V" or str(g.dtype) == "bfloat16":  # ml_dtypes bfloat16
            g = g.astype(np.float32)
        if tuple(e.shape) != tuple(g.shape):
            res.error = f"shape differs: tvm {tuple(g.shape)} vs torch {tuple(e.shape)}"
            return res
        if e.dtype.kind in "iub":
            diff = np.abs(e.astype(np.int64) - g.astype(np.int64))
            ok = ok and bool((diff == 0).all())
            d = float(diff.max()) if diff.size else 0.0
            max_abs, max_rel = max(max_abs, d), max(max_rel, d)
            continue
        e64, g64 = e.astype(np.float64), g.astype(np.float64)
        if not (np.isfinite(e64) == np.isfinite(g64)).all():
            ok = False
        fin = np.isfinite(e64) & np.isfinite(g64)
        diff = np.abs(e64 - g64)[fin]
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(np.abs(e64[fin]), atol)).max()))
            ok = ok and bool((diff <= atol + rtol * np.abs(e64[fin])).all())
    res.max_abs_err, res.max_rel_err, res.passed = max_abs, max_rel, ok
    return res
