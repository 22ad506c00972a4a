"""Shared helpers of the search benchmarks: the main kernel of an operator workload."""

from __future__ import annotations

import math


def workload_kernel(name: str, size: str = "default"):
    """(kernel_id, LEIR program, module, inputs) of the heaviest fused kernel (most flops) of an
    operator-suite workload, raised to canonical LEIR."""
    from steptp.leir.analysis import flops
    from steptp.leir.canon import canonicalize
    from steptp.search.run import kernel_id_of
    from steptp.tir.raise_ import raise_primfunc
    from steptp.zoo import workloads as W
    from steptp.zoo.relax_import import fused_primfuncs

    w = W.get(name)
    module, inputs = w.build(size)
    best = None
    for kname, f in fused_primfuncs(module, inputs):
        try:
            prog, _ = canonicalize(raise_primfunc(f, kname))
        except Exception:  # noqa: BLE001 - kernels LEIR cannot express are skipped
            continue
        fl = flops(prog)
        if best is None or fl > best[0]:
            best = (fl, prog)
    if best is None:
        raise RuntimeError(f"{name}: no kernel raised to LEIR")
    prog = best[1]
    return kernel_id_of(prog), prog, module, inputs


def selected(families: str, names: str | None, limit: int | None) -> list[str]:
    from steptp.zoo import workloads as W

    if names:
        return [n.strip() for n in names.split(",") if n.strip()]
    fams = {f.strip() for f in families.split(",")}
    out = [w.name for w in W.suite("ops") if w.family in fams]
    return out[:limit] if limit else out


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
