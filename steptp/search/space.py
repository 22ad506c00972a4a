"""The action space of the search: every (strategy, site, params) the catalog offers at a state.

``actions(program)`` is ``strategies.candidates`` (deterministic given the seed) plus, for long
loop bands, the structured reorders a scheduler needs and the registry's sampled 24
permutations may miss: moving one loop of the band to any other position (e.g. the reduction
loop of a tiled matmul between the tile loops and the point loops), and the register tilings
a CPU schedule starts from: ``loop_tiling`` with ``point="inner"`` of the loop the output is
unit-stride in (the column: one, two or four vector registers, or a divisor of the row filling
half to all of one register, see ``column_tiles``) and one other
spatial loop above it (the rows, a factor in ``ROW_TILES``), over a reduction (the registry
samples a few of the many divisor pairs and may miss these). Results that unroll one
statement more than ``MAX_UNROLLED`` times are dropped (their compile time explodes). These are ordinary ``loop_reorder`` applications (the strategy checks
their legality and applies them); only the choice of ``order`` is the search's.
"""

from __future__ import annotations

import math
from typing import Iterable

from ..leir import ast as A
from ..leir.analysis import ITEMSIZE, affine
from ..strategies._ir import band
from ..strategies import Candidate, IllegalRewrite, Site, candidates, canonical, get

LONG_BAND = 4   # bands with more loops than this get the structured reorders
MAX_UNROLLED = 512   # statement instances an unrolled nest may expand to (compile time explodes)


MAX_UNROLLED_OVER_LOOPS = 64   # copies of an unrolled nest that still holds a long serial loop


def unrolled_size(program: A.Program) -> int:
    """The largest number of statement copies unrolling expands one statement into (the product
    of the extents of the unrolled loops around it)."""
    return _unrolled(program)[0]


def unrolled_over_loops(program: A.Program) -> int:
    """The most copies unrolling makes of a serial loop longer than a vector register (LLVM
    vectorizes each copy with its own checks and remainder: 64, 256 and 512 copies of a
    64-long loop compiled in 4, 62 and 448 s)."""
    return _unrolled(program)[1]


def _unrolled(program: A.Program) -> tuple[int, int]:
    worst = over = 1

    def visit(body, k):
        nonlocal worst, over
        for s in body:
            if isinstance(s, A.Loop):
                if s.kind == "serial" and s.extent > 16:
                    over = max(over, k)
                visit(s.body, k * s.extent if s.kind == "unrolled" else k)
            elif isinstance(s, A.If):
                visit(s.body, k)
            else:
                worst = max(worst, k)

    visit(program.body, 1)
    return worst, over


def _structured_orders(names: list[str]) -> list[list[str]]:
    """Every order that moves exactly one loop of the band to another position (innermost and
    outermost first)."""
    n = len(names)
    out: list[list[str]] = []
    for k, v in enumerate(names):
        rest = names[:k] + names[k + 1:]
        for pos in [n - 1, 0] + list(range(1, n - 1)):
            order = rest[:pos] + [v] + rest[pos:]
            if order != names and order not in out:
                out.append(order)
    return out


def _extra_reorders(program: A.Program, existing: set[str]) -> list[Candidate]:
    s = get("loop_reorder")
    out: list[Candidate] = []
    base = canonical(program)
    for site in s.sites(program):
        names = list(site.loops)
        if math.factorial(len(names)) - 1 <= 24 or len(names) <= LONG_BAND - 1:
            continue
        for order in _structured_orders(names):
            _offer(out, s, program, site, {"order": order}, base, existing)
    return out


def _offer(out: list[Candidate], s, program: A.Program, site: Site, params: dict, base: str,
           existing: set[str]) -> None:
    """Append the candidate of ``s`` at ``site`` with ``params`` when it is legal and new."""
    if not s.check(program, site, params).ok:
        return
    try:
        new = s.rewrite(program, site, params)
    except IllegalRewrite:
        return
    text = canonical(new)
    if text == base or text in existing:
        return
    existing.add(text)
    out.append(Candidate(s.name, site, params, new, s.exactness_for(program, site, params), text))


ROW_TILES = (2, 4, 8, 16)   # rows of a register tile
VECTOR_BYTES = 64           # one AVX-512 register; the column tile is half of one to four of them


def _register_tilings(program: A.Program, existing: set[str]) -> list[Candidate]:
    s = get("loop_tiling")
    out: list[Candidate] = []
    base = canonical(program)
    for site in s.sites(program):
        loops = _band(program, site)
        if len(loops) < 3:
            continue
        stmt = _single_assign(loops[-1])
        if stmt is None or stmt.op == "=":
            continue
        lhs_vars = {v for e in stmt.index for v in _vars(e)}
        lanes = max(1, VECTOR_BYTES // ITEMSIZE.get(program.tensors[stmt.tensor].dtype, 4))
        # the column loop: the one the output is unit-stride in (it becomes the vector loop)
        unit = [lp for lp in loops if lp.var in lhs_vars and _unit_stride(stmt, lp.var)]
        if not unit:
            continue
        b = unit[-1]
        for a in loops[:loops.index(b)]:
            if a.var not in lhs_vars:
                continue
            for fb in column_tiles(b.extent, lanes):
                for fa in ROW_TILES:
                    if a.extent % fa or fa >= a.extent:
                        continue
                    _offer(out, s, program, site,
                           {"loops": [a.var, b.var], "factors": [fa, fb], "point": "inner"},
                           base, existing)
    return out


def column_tiles(extent: int, lanes: int) -> list[int]:
    """Column factors of a register tile over a loop of ``extent``: one to four whole vector
    registers, and the divisors that fill one register partly (half to all of its lanes; e.g.
    14 of 16 lanes when the row has 56 elements and 16 does not divide it). Widths that are
    neither leave LLVM a vector it splits badly (a 28-wide f32 loop ran 15x slower than 14 on
    a 56-wide conv row), so they are not offered."""
    partial = [d for d in range(max(2, lanes // 2), lanes) if extent % d == 0]
    whole = [k * lanes for k in (1, 2, 4) if extent % (k * lanes) == 0]
    return [f for f in sorted(set(partial + whole)) if f < extent]


def _unit_stride(stmt: A.Assign, var: str) -> bool:
    """Does ``var`` index the last dimension of the output with coefficient 1 (and no other)?"""
    forms = [affine(e) for e in stmt.index]
    if not forms or any(f is None for f in forms):
        return False
    return forms[-1][0].get(var) == 1 and all(var not in f[0] for f in forms[:-1])


def _band(program: A.Program, site: Site) -> list[A.Loop]:
    return band(program, site.path)


def _single_assign(loop: A.Loop) -> A.Assign | None:
    return loop.body[0] if len(loop.body) == 1 and isinstance(loop.body[0], A.Assign) else None


def _vars(e) -> set[str]:
    return set(A.free_vars(e))


def actions(program: A.Program, target: str = "cpu", seed: int = 0,
            strategies: Iterable[str] | None = None) -> list[Candidate]:
    """Every legal, non-trivial action at ``program`` in a deterministic order (registry order,
    then the structured reorders); each result text appears once."""
    strat = list(strategies) if strategies is not None else None
    cands = candidates(program, strategy=strat, target=target, seed=seed)
    seen: set[str] = set()
    out: list[Candidate] = []
    for c in cands:
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    if strat is None or "loop_reorder" in strat:
        out.extend(_extra_reorders(program, seen))
    if target == "cpu" and (strat is None or "loop_tiling" in strat):
        out.extend(_register_tilings(program, seen))
    return [c for c in out if _compiles_quickly(c.program)]


def _compiles_quickly(program: A.Program) -> bool:
    copies, over_loops = _unrolled(program)
    return copies <= MAX_UNROLLED and over_loops <= MAX_UNROLLED_OVER_LOOPS


__all__ = ["actions", "Site"]
