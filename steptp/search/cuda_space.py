"""The CUDA search space: states that can be timed on a GPU, i.e. bound to blocks and threads.

An unbound nest does not build for CUDA at all, so a GPU state is only timed once every
top-level nest has a ``blockIdx``/``threadIdx`` loop. ``bind_all`` gives the *bound but
unoptimized* form of a kernel (each nest's outer loop on ``blockIdx.x``, the next on
``threadIdx.x`` where that is legal and within the thread limit): the GPU baseline.
``cuda_candidates`` are the one-step GPU candidates of a kernel: every legal application of a
GPU-capable strategy to the bound baseline that leaves it bound, plus every strategy applied to
the unbound kernel and then bound (a split before binding turns one loop into blocks x threads),
deduplicated by canonical text, in a deterministic order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..leir import ast as A
from ..strategies import registry
from ..strategies.base import Site

#: Binding choices tried per nest, best first.
_BINDINGS = (["blockIdx.x", "threadIdx.x"], ["blockIdx.x"], ["threadIdx.x"])


def _nest_bound(stmt) -> bool:
    while isinstance(stmt, A.Loop):
        if stmt.kind in A.THREAD_KINDS:
            return True
        if len(stmt.body) != 1:
            return False
        stmt = stmt.body[0]
    return False


def is_bound(program: A.Program) -> bool:
    """Every top-level statement is a nest with a thread-bound loop in its perfect band."""
    return bool(program.body) and all(_nest_bound(s) for s in program.body)


def bind_all(program: A.Program) -> A.Program | None:
    """Bind every unbound top-level nest (see the module docstring); None when some nest
    cannot be bound."""
    strat = registry.get("loop_binding")
    for k, s in enumerate(program.body):
        if _nest_bound(s):
            continue
        if not (isinstance(s, A.Loop) and s.kind == "serial"):
            return None
        site = next((st for st in strat.sites(program) if tuple(st.path) == (k,)), None)
        if site is None:
            return None
        for axes in _BINDINGS:
            if strat.check(program, site, {"axes": axes}).ok:
                program = strat.rewrite(program, site, {"axes": axes})
                break
        else:
            return None
    return program


@dataclass(frozen=True)
class CudaCandidate:
    program: A.Program
    strategy: str
    site: Site | None
    params: dict
    exactness: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.strategy}{self.params}" if self.params else self.strategy


def cuda_candidates(program: A.Program, seed: int = 0, max_per_site: int | None = 2,
                    limit: int | None = None) -> list[CudaCandidate]:
    """One-step GPU candidates of ``program`` (bound, buildable in principle), deduplicated."""
    base = bind_all(program)
    if base is None:
        return []
    seen = {registry.canonical(base)}
    out: list[CudaCandidate] = []

    def keep(prog, c):
        if prog is None or not is_bound(prog):
            return
        text = registry.canonical(prog)
        if text in seen:
            return
        seen.add(text)
        out.append(CudaCandidate(prog, c.strategy, c.site, dict(c.params), c.exactness, text))

    for c in registry.candidates(base, target="gpu", seed=seed, max_per_site=max_per_site):
        keep(c.program, c)
    for c in registry.candidates(program, target="gpu", seed=seed, max_per_site=max_per_site):
        if c.strategy == "loop_binding":
            continue
        keep(bind_all(c.program), c)
    return out[:limit] if limit is not None else out


__all__ = ["CudaCandidate", "bind_all", "cuda_candidates", "is_bound"]
