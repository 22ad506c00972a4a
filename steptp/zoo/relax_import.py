"""PyTorch module -> Relax -> fused, unscheduled TIR PrimFuncs (the kernels Step-TP records start
from). The recipe is the one in ``shared/notes/tvm-0.27.md``: ``torch.export`` →
``from_exported_program`` → LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR,
DeadCodeElimination.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax


def import_module(module: Any, example_args: tuple) -> tuple[tvm.IRModule, dict]:
    """Export ``module`` with ``torch.export`` and return the legalized and fused Relax IRModule
    together with the detached parameters (``{function_name: [tensors]}``)."""
    import torch  # imported lazily: torch is an optional extra

    with torch.no_grad():
        ep = torch.export.export(module.eval(), tuple(example_args))
    from tvm.relax.frontend.torch import from_exported_program

    mod = from_exported_program(ep, keep_params_as_input=True)
    mod, params = relax.frontend.detach_params(mod)
    seq = tvm.transform.Sequential([
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ])
    mod = seq(mod)
    return mod, params


def primfuncs(mod: tvm.IRModule) -> list[tuple[str, tvm.tirx.PrimFunc]]:
    """The PrimFuncs of an IRModule as ``(name, func)``, sorted by name (deterministic)."""
    out = [(gv.name_hint, f) for gv, f in mod.functions.items()
           if isinstance(f, tvm.tirx.PrimFunc)]
    return sorted(out, key=lambda x: x[0])


def fused_primfuncs(module: Any, example_args: tuple,
                    return_module: bool = False):
    """The fused PrimFuncs of a PyTorch module, as ``[(name, PrimFunc), ...]`` sorted by name.

    With ``return_module=True`` returns ``(kernels, irmodule)`` where ``irmodule`` is the
    legalized and fused Relax module (its ``main`` calls the kernels).
    """
    mod, _params = import_module(module, example_args)
    kernels = primfuncs(mod)
    return (kernels, mod) if return_module else kernels
