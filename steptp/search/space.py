"""The action space of the search: every (strategy, site, params) the catalog offers at a state.

``actions(program)`` is ``strategies.candidates`` (deterministic given the seed) plus, for long
loop bands, the structured reorders a scheduler needs and the registry's sampled 24
permutations may miss: moving one loop of the band to any other position (e.g. the reduction
loop of a tiled matmul between the tile loops and the point loops). These are ordinary
``loop_reorder`` applications (the strategy checks their legality and applies them); only the
choice of ``order`` is the search's, and an order that moves only loops of one iteration is not
offered (``_moves_unit_loops_only``).

It adds the register tilings a CPU schedule starts from: ``loop_tiling`` with ``point="inner"``
of the loop the output is unit-stride in (the column: one, two or four vector registers, or a
divisor of the row filling half to all of one register, see ``column_tiles``) and one other
spatial loop above it (the rows, a factor in ``ROW_TILES``; a tile whose accumulators need more
than ``REGISTERS - 4`` vector registers spills every update and is not offered unless it spans
the whole row loop), over a reduction (the registry samples a few of the many divisor pairs and
may miss these); and the cache tiles over such a register tile (``_cache_tilings``: an outer row
loop and the reduction tiled with their point loops right above the tile's rows, a block of the
operand the rows share kept in L1). Results that unroll one statement more than
``MAX_UNROLLED`` times are dropped (their compile time explodes).
"""

from __future__ import annotations

import math
from typing import Iterable

from ..leir import ast as A
from ..leir.analysis import ITEMSIZE, affine
from ..leir.ast import iter_stmts, node_at
from ..leir.layout import layout_forms
from ..leir.nav import (band, enclosing_loops, perfect_nest, reduction_axes, statement_instances, tensors_read,
                        tensors_written)
from ..strategies.loops import MAX_UNROLL
from ..analysis.cost_model import L1_BYTES, REGISTERS, _cores
from ..analysis.tiles import (VECTOR_BYTES, lanes_of, reduction_right_inside, rows_between, tile_row,
                              vars_of)
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


def _tiling_bands(program: A.Program, min_loops: int):
    """``(site, its band's loops)`` of every ``loop_tiling`` site of ``min_loops`` or more."""
    for site in get("loop_tiling").sites(program):
        loops = _band(program, site)
        if len(loops) >= min_loops:
            yield site, loops


def _register_tilings(program: A.Program, existing: set[str]) -> list[Candidate]:
    s = get("loop_tiling")
    out: list[Candidate] = []
    base = canonical(program)
    for site, loops in _tiling_bands(program, 3):
        stmt = _single_assign(loops[-1])
        if stmt is None or stmt.op == "=":
            continue
        lhs_vars = vars_of(stmt.index)
        lanes = lanes_of(program, stmt.tensor)
        # the column loop: the one the output is unit-stride in (it becomes the vector loop)
        shape = program.tensors[stmt.tensor].shape
        unit = [lp for lp in loops if lp.var in lhs_vars and _unit_stride(stmt, lp.var, shape)]
        if not unit:
            continue
        b = unit[-1]
        for a in loops[:loops.index(b)]:
            if a.var not in lhs_vars:
                continue
            # an operand every row of the tile reads alike (B of C[i,j] += A[i,k] * B[k,j])
            shared_by_rows = any(a.var not in vars_of(ld.index) for ld in A.loads(stmt.value))
            for fb in column_tiles(b.extent, lanes):
                for fa in ROW_TILES:
                    if a.extent % fa or fa > a.extent:
                        continue
                    # the cost model's limit too: two operands and the addresses need a few.
                    # A tile over the whole row loop stays offered when an operand is the same
                    # for every row: that operand is then streamed once (an 8-row matmul:
                    # MetaSchedule's 8x64 tile, spills and all, beat our 4x64 tiles that read
                    # the 16 MB B twice by 2x)
                    if fa * math.ceil(fb / lanes) > REGISTERS - 4 \
                            and not (fa == a.extent and shared_by_rows):
                        continue
                    _offer(out, s, program, site,
                           {"loops": [a.var, b.var], "factors": [fa, fb], "point": "inner"},
                           base, existing)
    return out


#: reduction blocks of a cache tile: the block of the shared operand (reduction block x the
#: column's width) should fit in half of L1 with room for the rows' operand
CACHE_BLOCKS = (32, 64, 128, 256)


def _cache_tilings(program: A.Program, existing: set[str]) -> list[Candidate]:
    """Cache tiles over a register tile: ``loop_tiling`` (point inner, ``above`` the tile's
    row loop) of an outer spatial loop ``s`` and the reduction loop ``r`` above a register
    tile, so a block of the operand that does not depend on ``s`` (B of ``C[i,j] += A[i,k] *
    B[k,j]``: ``r``'s block by the tile's columns) stays in L1 while several row tiles use it
    (MetaSchedule's multi-level SSRSRS tiling). The block must fit in half of L1, and the
    strip a row tile walks must not (else it stays in L1 anyway); without the cache tile,
    a 4x64 tile of a 256x1024x512 matmul streams the whole 2 MiB of B from L2 for every 4 rows
    (1.67 ms; tiled 8 row tiles by 64 of k, 1.14 ms; MetaSchedule 1.33)."""
    s_ = get("loop_tiling")
    out: list[Candidate] = []
    base = canonical(program)
    for site, loops in _tiling_bands(program, 4):
        nest = perfect_nest(loops[0])
        if nest is None or not nest[1].is_reduction:
            continue
        all_loops, stmt = nest
        lhs = vars_of(stmt.index)
        shape = program.tensors[stmt.tensor].shape
        col = all_loops[-1]
        if col.var not in lhs or not _unit_stride(stmt, col.var, shape):
            continue
        row = all_loops[-2]
        if row not in loops or row.var not in lhs or row.extent > max(ROW_TILES):
            continue
        lanes = lanes_of(program, stmt.tensor)
        if col.extent < lanes // 2:
            continue
        item = ITEMSIZE.get(program.tensors[stmt.tensor].dtype, 4)
        above = loops.index(row)
        loads = A.loads(stmt.value)
        for ri, r in enumerate(loops[:above]):
            # the strip a row tile walks (the reduction by the tile's columns) must overflow
            # half of L1 for a block of it to be worth keeping: a 64^3 matmul's B is 16 KiB,
            # L1-resident whatever the order
            if r.var in lhs or r.extent * col.extent * item <= L1_BYTES // 2:
                continue
            for s in loops[:ri]:
                if s.var not in lhs or s.extent < 4:
                    continue
                # the operand the rows share: read along r, alike for every s
                shared = [ld for ld in loads
                          if s.var not in vars_of(ld.index) and r.var in vars_of(ld.index)]
                if not shared:
                    continue
                for fr in CACHE_BLOCKS:
                    if r.extent % fr or fr >= r.extent or fr * col.extent * item > L1_BYTES // 2:
                        continue
                    for fs in ROW_TILES:
                        if s.extent % fs or fs >= s.extent:
                            continue
                        _offer(out, s_, program, site,
                               {"loops": [s.var, r.var], "factors": [fs, fr], "point": "inner",
                                "above": row.var}, base, existing)
    return out


def finished_tilings(program: A.Program) -> list[A.Program]:
    """The register tilings the search offers at ``program`` (``loop_tiling``, point loops
    inner), each with its innermost point loop vectorized where that is legal: what an enabling
    move (``loop_collapse``) is worth to the cost model two steps on."""
    out: list[A.Program] = []
    vec = get("loop_vectorization")
    for c in _register_tilings(program, set()):
        out.append(c.program)
        col = c.params["loops"][1]   # the column's point loop: itself, or ``_split``'s col_i
        for p, lp in iter_stmts(c.program.body):
            if isinstance(lp, A.Loop) and (lp.var == col or lp.var.startswith(col + "_i")) \
                    and all(isinstance(b, A.Assign) for b in lp.body):
                site = Site.make(p, [lp.var])
                if vec.check(c.program, site, {}).ok:
                    out.append(vec.rewrite(c.program, site, {}))
    return out


def stages_tile_accumulators(program: A.Program, c: Candidate) -> bool:
    """Is ``c`` a register tile's accumulators moved into a ``local`` buffer small enough for
    the vector registers: ``cache_read_write`` (mode write) of a reduction's tensor at the loop
    right around its reduction loops? Inside a parallel loop, only a local buffer keeps them in
    registers (``cost_model._register_tile``); outside one, it is what LLVM did already.

    Under a cache tile (a row loop between the reduction loops), the buffer holds every row
    tile's accumulators, and it may fill half of L1 instead, as MetaSchedule's cache-write stage
    above its reduction tiles does: a 256x1024x512 matmul's 4x64 tile cache-tiled (16 row tiles
    by 64 of k) timed 4.4-4.6 ms serial against 2.9-3.1 uncached, 1.9 with its 16 KiB block
    staged, and parallel 0.94-0.98 ms against 1.51-1.55 uncached and staged (3 interleaved
    rounds on 2 cores)."""
    if c.strategy != "cache_read_write" or c.site.get("mode") != "write" \
            or c.params.get("scope") != "local":
        return False
    nest = reduction_right_inside(program, tuple(c.site.path))
    if nest is None or nest[1].tensor != c.site.get("tensor"):
        return False
    loops, _, lhs = nest
    new = [t for t in c.program.intermediates if t.name not in program.tensors]
    if len(new) != 1:
        return False
    limit = L1_BYTES // 2 if rows_between(loops, lhs) else (REGISTERS - 4) * VECTOR_BYTES
    return new[0].size * ITEMSIZE[new[0].dtype] <= limit


def unrolls_window(program: A.Program, c: Candidate) -> bool:
    """Is ``c`` a small window unrolled whole: ``loop_unrolling`` that leaves a loop inside
    another and every loop inside it unrolled, at most ``MAX_UNROLL`` statement instances,
    where the loops are a window: reduction axes of every statement inside (a pooling's taps),
    or a producer of what a later statement beside it only reads (a padding copy computed at
    each output) whose innermost loops would fill less than half a vector register? A tile of
    an elementwise nest is no window, nor a reduction tile whose spatial point loop is inside
    its reduction loop: their innermost loop is for vectorizing (unrolling it first left an
    elementwise add without a vector loop); nor is the fill or copy-out of a staged register
    tile (the later statements update the accumulators the fill writes)."""
    if c.strategy != "loop_unrolling" or len(c.site.path) < 2:
        return False
    loop = node_at(c.program, tuple(c.site.path))
    if not isinstance(loop, A.Loop):
        return False
    inner = [x for x in A.walk(loop) if isinstance(x, A.Loop)]
    if len(inner) < 2 or any(x.kind != "unrolled" for x in inner) \
            or statement_instances(loop) > MAX_UNROLL:
        return False
    stmts = [st for st in A.walk(loop) if isinstance(st, A.Assign)]
    if stmts and all(len(reduction_axes(st, inner)) == len(inner) for st in stmts):
        return True
    parent = node_at(program, tuple(c.site.path[:-1]))
    if not isinstance(parent, A.Loop):
        return False
    later = parent.body[c.site.path[-1] + 1:]
    read = {t for st in later for t in tensors_read(st)}
    updated = {t for st in later for t in tensors_written(st)}
    produced = [t for t in tensors_written(loop) if t in read and t not in updated]
    if not produced:
        return False
    lanes = min(lanes_of(program, t) for t in produced)
    return all(x.extent < lanes // 2 for x in inner if not any(isinstance(b, A.Loop) for b in x.body))


def unrolls_tile_rows(program: A.Program, c: Candidate) -> bool:
    """Is ``c`` the row loop of a staged register tile unrolled: ``loop_unrolling`` (not
    ``inner``) of a serial loop whose body is one vectorized loop of updates of a ``local``
    buffer that read their own element (``T0[j_i,l_i] = T0[j_i,l_i] + ...``), the loop indexing
    that buffer (a row of the tile, not a reduction axis), with at most ``REGISTERS - 4``
    vector registers of accumulators? MetaSchedule's auto-unroll writes such rows out on every
    trial; LLVM leaves a 16-row loop rolled, each row's accumulator is then reloaded per update,
    and loads the rows share (a grouped conv's input row, the same for the 4 channels of a
    group) are made again for every row: conv2d_grouped's 16x14 tile 347 us rolled, 239
    unrolled; a dilated conv's 4105 -> 3913; the other held-out tiles within 3%."""
    if c.strategy != "loop_unrolling" or c.params.get("inner"):
        return False
    return tile_row(program, node_at(program, tuple(c.site.path)))


def column_tiles(extent: int, lanes: int) -> list[int]:
    """Column factors of a register tile over a loop of ``extent``: one to four whole vector
    registers, and the divisors that fill one register partly (half to all of its lanes; e.g.
    14 of 16 lanes when the row has 56 elements and 16 does not divide it). Widths that are
    neither leave LLVM a vector it splits badly (a 28-wide f32 loop ran 15x slower than 14 on
    a 56-wide conv row), so they are not offered. A row that is itself such a width is its own
    column (the whole loop becomes the point loop: a 16-wide f32 row is one register)."""
    partial = [d for d in range(max(2, lanes // 2), lanes) if extent % d == 0]
    whole = [k * lanes for k in (1, 2, 4) if extent % (k * lanes) == 0]
    return [f for f in sorted(set(partial + whole)) if f <= extent]


def _unit_stride(stmt: A.Assign, var: str, shape: tuple[int, ...] | None = None) -> bool:
    """Does ``var`` index the last dimension of the output with coefficient 1 (and no other)?
    With the output's ``shape``, a collapsed pair ``x//M, x%M`` over a last dimension of ``M``
    counts as one dimension indexed by ``x``."""
    forms = layout_forms(stmt.index, shape)[0] if shape is not None \
        else [affine(e) for e in stmt.index]
    if not forms or any(f is None for f in forms):
        return False
    return forms[-1][0].get(var) == 1 and all(var not in f[0] for f in forms[:-1])


def _band(program: A.Program, site: Site) -> list[A.Loop]:
    return band(program, site.path)


def _single_assign(loop: A.Loop) -> A.Assign | None:
    return loop.body[0] if len(loop.body) == 1 and isinstance(loop.body[0], A.Assign) else None


def collapse_reason(program: A.Program, site: Site, cores: int | None = None) -> str | None:
    """Why the search offers ``loop_collapse`` of the nest ``a, b`` at ``site`` (None: it
    does not). Two rules, neither keyed on a shape:

    * **vector**: ``b`` is the unit-stride loop of every access below it that uses ``a`` or
      ``b`` (the last subscript is ``b`` plus loops of extent one, the one before it ``a`` plus
      such loops, over dimensions of ``b``'s and any extent), so the collapsed loop walks memory
      contiguously; and whole vector registers divide the collapsed extent but not ``b``'s
      (a 56-wide row is 3 1/2 AVX-512 registers, 56x56 is 196 of them);
    * **parallel**: ``a`` is an outermost loop that writes a different element in each
      iteration (it is a spatial loop of every statement below), its extent is not a multiple
      of the cores and below ``PARALLEL_WORK`` per core, and the collapsed extent is either a
      multiple of the cores or at least ``PARALLEL_WORK`` per core (better balance).
    """
    outer = node_at(program, site.path)
    if not isinstance(outer, A.Loop) or len(outer.body) != 1 or not isinstance(outer.body[0], A.Loop):
        return None
    inner = outer.body[0]
    a, b = outer.var, inner.var
    stmts = [s for _, s in iter_stmts(inner.body) if isinstance(s, A.Assign)]
    if not stmts:
        return None
    unit_ext = {lp.var for _, lp in iter_stmts(inner.body) if isinstance(lp, A.Loop) and lp.extent == 1}
    if _vector_collapse(program, stmts, a, b, outer.extent, inner.extent, unit_ext):
        return "vector"
    cores = cores or _cores()
    if (not enclosing_loops(program, site.path) and outer.extent % cores
            and outer.extent < PARALLEL_WORK * cores
            and all(a in vars_of(st.index) and b in vars_of(st.index) for st in stmts)):
        n = outer.extent * inner.extent
        if n % cores == 0 or n >= PARALLEL_WORK * cores:
            return "parallel"
    return None


PARALLEL_WORK = 8   # iterations per core below which an outer loop balances poorly


def _vector_collapse(program, stmts, a, b, na, nb, unit_ext) -> bool:
    lanes = None
    for st in stmts:
        if b not in vars_of(st.index):
            return False
        accs = [(st.tensor, st.index)] + [(ld.tensor, ld.index) for ld in A.loads(st.value)]
        for t, idx in accs:
            used = vars_of(idx)
            if not used & {a, b}:
                continue
            forms = [affine(e) for e in idx]
            shape = program.tensors[t].shape
            if len(idx) < 2 or any(f is None for f in forms[-2:]) or shape[-1] != nb:
                return False
            last, prev = forms[-1][0], forms[-2][0]
            if last.get(b) != 1 or set(last) - {b} - unit_ext or forms[-1][1] != 0:
                return False
            if prev.get(a) != 1 or set(prev) - {a} - unit_ext or forms[-2][1] != 0:
                return False
            if any(f is None or a in f[0] or b in f[0] for f in forms[:-2]):
                return False
        n = lanes_of(program, st.tensor)
        lanes = n if lanes is None else max(lanes, n)
    return lanes is not None and nb % lanes != 0 and (na * nb) % lanes == 0


def _finished_nest(program: A.Program, site: Site) -> bool:
    """Is the nest at ``site`` in its final shape (its innermost loop vectorized, or unrolled:
    a pooling window's taps)? The search moves an epilogue into a producer
    (``reverse_compute_at``) only then: the move breaks the perfect nest that tiling and
    reordering need, so it is a finishing move."""
    node = node_at(program, site.path)
    while isinstance(node, A.Loop) and len(node.body) == 1 and isinstance(node.body[0], A.Loop):
        node = node.body[0]
    return isinstance(node, A.Loop) and node.kind in ("vectorized", "unrolled")


def actions(program: A.Program, target: str = "cpu", seed: int = 0,
            strategies: Iterable[str] | None = None) -> list[Candidate]:
    """Every legal, non-trivial action at ``program`` in a deterministic order (registry order,
    then the structured reorders); each result text appears once."""
    strat = list(strategies) if strategies is not None else None
    cands = candidates(program, strategy=strat, target=target, seed=seed)
    seen: set[str] = set()
    out: list[Candidate] = []
    for c in cands:
        if c.strategy == "loop_collapse" and collapse_reason(program, c.site) is None:
            continue
        if c.strategy == "reverse_compute_at" and not _finished_nest(program, c.site):
            continue
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    if strat is None or "loop_reorder" in strat:
        out.extend(_extra_reorders(program, seen))
    if target == "cpu" and (strat is None or "loop_tiling" in strat):
        out.extend(_register_tilings(program, seen))
        out.extend(_cache_tilings(program, seen))
    return [c for c in out
            if _compiles_quickly(c.program) and not _moves_unit_loops_only(program, c)]


def _moves_unit_loops_only(program: A.Program, c: Candidate) -> bool:
    """A reorder that keeps the order of every loop with more than one iteration: the same
    schedule in another text. A held-out max pool's search measured 8 such moves of its batch
    loop ``i in 1``, and one, taken, put ``i`` innermost, where the window's accumulator could
    no longer be staged and the finish vectorized it (96 us where other runs ended at 51-55)."""
    if c.strategy != "loop_reorder":
        return False
    extent = {lp.var: lp.extent for lp in _band(program, c.site)}
    real = lambda names: [v for v in names if extent.get(v, 2) > 1]  # noqa: E731
    order = list(c.params["order"])
    return real(order) == real(list(c.site.loops)[:len(order)])


def _compiles_quickly(program: A.Program) -> bool:
    copies, over_loops = _unrolled(program)
    return copies <= MAX_UNROLLED and over_loops <= MAX_UNROLLED_OVER_LOOPS


__all__ = ["actions", "Site", "unrolls_window"]
