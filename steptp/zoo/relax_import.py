"""PyTorch module -> Relax -> fused, unscheduled TIR PrimFuncs (the kernels Step-TP records start
from). The recipe is the one in ``shared/notes/tvm-0.27.md``: ``torch.export`` →
``from_exported_program`` → DispatchSortScan (under the target), LegalizeOps,
AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR, DeadCodeElimination.

Scan and sort operators (``cumsum``, ``cumprod``, ``sort``, ``topk``) are not legalized by
``LegalizeOps``; TVM lowers them in ``relax.backend.DispatchSortScan``, which needs a target
context, so that pass runs first under the extraction target (the host CPU by default).

Converters. ``steptp.zoo.converters`` supplies converters for ATen operators the TVM frontend
lacks or converts into kernels the raise cannot read (``max.dim``/``min.dim``/``topk(k=1)`` as
reductions with indices, ``amax``/``amin``, ``prod.dim_int``, ``conv_transpose3d``, ...); they
take precedence over TVM's in both modes.

Unsupported operators. With ``unsupported="opaque"`` (what extraction uses) an ATen operator that
the TVM frontend has no converter for, or whose converter fails, is imported as an opaque
``relax.call_pure_packed("steptp.unsupported.<op>", ...)`` call with the operator's output
shapes and dtypes (from ``torch.export``'s fake tensors). It yields no kernel, the rest of the
model imports and fuses around it, and every such operator is listed in the returned
:class:`ImportReport` (operator, error, how many nodes). ``unsupported="raise"`` fails instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax

__all__ = ["ImportReport", "UnsupportedOp", "import_module", "primfuncs", "fused_primfuncs",
           "call_counts", "OPAQUE_PREFIX"]

#: packed-function name prefix of the opaque calls that stand for unsupported operators
OPAQUE_PREFIX = "steptp.unsupported."


@dataclass
class UnsupportedOp:
    """One ATen operator the import could not convert (``count`` graph nodes)."""

    op: str
    error: str
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "error": self.error, "count": self.count}


@dataclass
class ImportReport:
    """What the import could not convert (empty when everything was supported)."""

    unsupported: list[UnsupportedOp] = field(default_factory=list)
    unlegalized: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unsupported and not self.unlegalized

    def add(self, op: str, error: str) -> None:
        for u in self.unsupported:
            if u.op == op and u.error == error:
                u.count += 1
                return
        self.unsupported.append(UnsupportedOp(op, error))


def _host_target() -> dict[str, Any]:
    from steptp.tir.target import Target

    return Target.host_cpu().tvm_dict()


def _fake_sinfo(val: Any):
    """Relax type (struct info) of a torch.export fake value (tensor, or tuple/list of them)."""
    import torch

    if isinstance(val, torch.Tensor):
        dtype = str(val.dtype).replace("torch.", "")
        return relax.TensorType([int(d) for d in val.shape], dtype)
    if isinstance(val, (tuple, list)):
        return relax.TupleType([_fake_sinfo(v) for v in val])
    raise TypeError(f"no static tensor value ({type(val).__name__})")


def _opaque_converter(op: str, original, report: ImportReport):
    """A converter that tries ``original`` (None: the frontend has none) and otherwise emits an
    opaque packed call with the node's output struct info."""

    def convert(node, importer):
        if original is not None:
            try:
                return original(node)
            except Exception as e:  # noqa: BLE001 - reported, the node becomes opaque
                error = f"converter failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        else:
            error = "no TVM converter for this ATen operator"
        sinfo = _fake_sinfo(node.meta.get("val"))
        args = []

        def collect(a):
            if isinstance(a, (list, tuple)):
                for x in a:
                    collect(x)
            elif hasattr(a, "op") and a in importer.env:
                v = importer.env[a]
                if isinstance(v, relax.Expr) and isinstance(getattr(v, "ty", None), relax.TensorType):
                    args.append(v)

        for a in node.args:
            collect(a)
        report.add(op, error[:300])
        call = relax.call_pure_packed(OPAQUE_PREFIX + op, *args, ty_args=sinfo)
        return importer.block_builder.emit(call)

    return convert


def import_module(module: Any, example_args: tuple, target: dict[str, Any] | None = None,
                  unsupported: str = "raise", report: ImportReport | None = None
                  ) -> tuple[tvm.IRModule, dict]:
    """Export ``module`` with ``torch.export`` and return the legalized and fused Relax IRModule
    together with the detached parameters (``{function_name: [tensors]}``).

    ``unsupported``: ``"raise"`` (an unsupported operator fails the import) or ``"opaque"``
    (it becomes an opaque call, listed in ``report``; see the module docstring).
    """
    import torch  # imported lazily: torch is an optional extra

    if unsupported not in ("raise", "opaque"):
        raise ValueError(f"unsupported={unsupported!r}: use 'raise' or 'opaque'")
    with torch.no_grad():
        ep = torch.export.export(module.eval(), tuple(example_args))

    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    from steptp.zoo import converters

    ep = ep.run_decompositions()
    importer = ExportedProgramImporter()
    names = sorted({n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"})
    if unsupported == "raise":
        custom = {n: f for n in names if (f := converters.bind(n, importer)) is not None}
        custom = {n: (lambda f: lambda node, _imp: f(node))(f) for n, f in custom.items()}
    else:
        report = report if report is not None else ImportReport()
        custom = {n: _opaque_converter(n, converters.bind(n, importer)
                                       or importer.convert_map.get(n), report) for n in names}
    mod = importer.from_exported_program(ep, True, False, False, custom)
    mod, params = relax.frontend.detach_params(mod)
    with tvm.target.Target(target or _host_target()):
        mod = relax.backend.DispatchSortScan()(mod)
    seq = tvm.transform.Sequential([
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ])
    mod = seq(mod)
    if report is not None:
        report.unlegalized = sorted(_unlegalized_ops(mod))
    return mod, params


def _unlegalized_ops(mod: tvm.IRModule) -> set[str]:
    """Relax operators left in the module that have no TIR implementation."""
    allowed = {"relax.call_tir", "relax.call_pure_packed", "relax.call_packed",
               "relax.null_value", "relax.builtin.stop_lift_params"}
    found: set[str] = set()
    for _gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue

        def visit(expr):
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
                name = expr.op.name
                if name not in allowed and not name.startswith(("relax.memory", "relax.vm")):
                    found.add(name)

        relax.analysis.post_order_visit(func.body, visit)
    return found


def primfuncs(mod: tvm.IRModule) -> list[tuple[str, tvm.tirx.PrimFunc]]:
    """The PrimFuncs of an IRModule as ``(name, func)``, sorted by name (deterministic)."""
    out = [(gv.name_hint, f) for gv, f in mod.functions.items()
           if isinstance(f, tvm.tirx.PrimFunc)]
    return sorted(out, key=lambda x: x[0])


def call_counts(mod: tvm.IRModule) -> dict[str, int]:
    """How many times each PrimFunc is called (``call_tir`` sites) in the Relax functions of
    ``mod`` -- the static number of launches of that kernel per forward pass."""
    counts: dict[str, int] = {}
    for _gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue

        def visit(expr):
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                    and expr.op.name == "relax.call_tir" and expr.args \
                    and isinstance(expr.args[0], tvm.ir.GlobalVar):
                name = expr.args[0].name_hint
                counts[name] = counts.get(name, 0) + 1

        relax.analysis.post_order_visit(func.body, visit)
    return counts


def fused_primfuncs(module: Any, example_args: tuple,
                    return_module: bool = False):
    """The fused PrimFuncs of a PyTorch module, as ``[(name, PrimFunc), ...]`` sorted by name.

    With ``return_module=True`` returns ``(kernels, irmodule)`` where ``irmodule`` is the
    legalized and fused Relax module (its ``main`` calls the kernels).
    """
    mod, _params = import_module(module, example_args)
    kernels = primfuncs(mod)
    return (kernels, mod) if return_module else kernels
