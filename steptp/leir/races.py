"""Races of ``parallel`` loops: two different iterations of the loop touching one element of a
tensor, at least one of them writing it, for the same iteration of the loops outside it.

A race hides from verification runs (a race that loses an update only sometimes is still wrong,
and one thread never loses one), so the verifier looks for it statically, at any size:

* symbolically, with the dependence test (``leir.deps``: the subscripts'
  affine forms, Banerjee bounds, GCD, exact sums): a dependence the parallel loop carries is a
  race. It is sound (it never misses one), and conservative where it cannot decide: a subscript
  that is not affine (a gather, ``//``, ``%``) gives no equation, so a write through it counts
  as a possible race. It ignores ``if`` guards, so a guarded statement may look racy when it
  is not;
* exactly, by enumerating each statement under the loop over its iteration domain (guards
  applied), when the loop's statements have at most ``LIMIT`` points in all. Where it can run
  it decides (it is exact); the symbolic test decides the rest, so nothing above a size passes
  unchecked.

A ``local`` buffer each iteration overwrites before reading is private to it (``leir.private``:
TVM allocates it inside the loop) and takes no part in either test.
"""

from __future__ import annotations

import itertools
import math
from typing import Collection

import numpy as np

from . import ast as A
from . import deps as D
from .analysis import _eval_np, affine, statements
from .printer import format_stmt
from .private import private_to

LIMIT = 4_000_000


def _fmt(tensor: str, idx) -> str:
    return f"{tensor}[{', '.join(str(int(i)) for i in idx)}]"


def parallel_races(program: A.Program) -> list[str]:
    """One sentence per racing parallel loop; [] when none races."""
    return [why for _, why in racing_loops(program)]


def racing_loops(program: A.Program) -> list[tuple[tuple[int, ...], str]]:
    """The path of each parallel loop that races (or may), with the sentence saying why."""
    infos = statements(program)
    shapes = {t.name: t.shape for t in program.params + program.intermediates}
    loop_paths = {}
    for si in infos:
        for lp, path in zip(si.loops, si.loop_paths):
            if lp.kind == "parallel":
                loop_paths.setdefault(path, lp)
    out = []
    for path, loop in sorted(loop_paths.items()):
        under = [si for si in infos if path in si.loop_paths]
        private = private_to(program, path)
        why = _race_under(loop, path, under, shapes, private)
        if why is UNDECIDED:
            why = symbolic_race(program, path, private)
        if why:
            out.append((tuple(path), why))
    return out


#: ``_race_under``'s answer when it cannot enumerate (too many points, or a subscript it cannot
#: evaluate): the symbolic test decides then.
UNDECIDED = "undecided"


def symbolic_race(program: A.Program, path, private: Collection[str] = frozenset()) -> str | None:
    """A sentence naming a race of the parallel loop at ``path`` by the dependence test (any
    size; possible races included), or None when no two of its iterations can conflict."""
    path = tuple(path)
    loop = A.node_at(program, path)
    v = loop.var
    accs = [a for a in D.collect_under(program, path) if a.tensor not in private]
    for a, b in D.conflicting_pairs(accs):
        common = D.common_loops(a, b)
        level = next((k for k, lp in enumerate(a.loops) if lp.path == path), None)
        if level is None or level >= len(common) or _separated(program, a, b, v):
            continue
        for d in ("<", ">"):
            vec = ["="] * level + [d] + ["*"] * (len(common) - level - 1)
            if D.feasible(a, b, common, vec):
                return _symbolic_reason(a, b, v)
    return None


def _separated(program: A.Program, a, b, v: str) -> bool:
    """Does some dimension keep two different iterations of ``v`` apart whatever the other
    loops do? ``c*v + r`` against ``c*v' + r'`` with ``r, r'`` free of ``v``: equal only if
    ``c*(v - v') = r' - r``, impossible when ``r' - r`` stays within ``(-|c|, |c|)``. This
    settles the subscripts the affine test gives up on, e.g. a fused loop's
    ``i*16 + jk//4`` (``jk//4`` in [0, 3]) or a gather in another dimension, and those whose
    rest only an ``if`` bounds (a split's tail guard ``j_o*3 + j_i < 4``, which the affine test
    ignores). Bounds of the other loops are taken independently for the two accesses, which
    can only widen them."""
    if len(a.exprs) != len(b.exprs):
        return False
    ga, gb = _guards_at(program, a.stmt), _guards_at(program, b.stmt)
    for ea, eb in zip(a.exprs, b.exprs):
        sa, sb = _split_var(ea, v, a.loops, ga), _split_var(eb, v, b.loops, gb)
        if sa is None or sb is None or sa[0] != sb[0] or sa[0] == 0:
            continue
        c, (la, ha) = sa[0], sa[1]
        lb, hb = sb[1]
        if -abs(c) < lb - ha and hb - la < abs(c):
            return True
    return False


def _guards_at(program: A.Program, path) -> list[tuple[dict[str, int], int, int]]:
    """The affine guards around the statement at ``path`` as ``(coef, lo, hi)``: where it runs,
    ``lo <= sum(coef[u] * u) <= hi`` (an unbounded side is +-inf)."""
    out = []
    for k in range(1, len(path)):
        node = A.node_at(program, tuple(path[:k]))
        if not isinstance(node, A.If):
            continue
        conds, todo = [], [node.cond]
        while todo:
            e = todo.pop()
            if isinstance(e, A.Binary) and e.op == "and":
                todo += [e.lhs, e.rhs]
            else:
                conds.append(e)
        for e in conds:
            if not (isinstance(e, A.Binary) and e.op in ("<", "<=", ">", ">=")):
                continue
            la, ra = affine(e.lhs), affine(e.rhs)
            if la is None or ra is None:
                continue
            coef = dict(la[0])
            for u, x in ra[0].items():
                coef[u] = coef.get(u, 0) - x
            coef = {u: x for u, x in coef.items() if x}
            k0 = ra[1] - la[1]      # sum(coef*u) OP k0
            lo, hi = {"<": (-math.inf, k0 - 1), "<=": (-math.inf, k0),
                      ">": (k0 + 1, math.inf), ">=": (k0, math.inf)}[e.op]
            if coef:
                out.append((coef, lo, hi))
    return out


def _affine_bounds(coef: dict[str, int], ranges, guards) -> tuple[float, float] | None:
    """Bounds of ``sum(coef[u] * u)`` over the box ``ranges``, tightened by each guard whose
    form is part of it (``coef`` = guard + remainder)."""
    def box(f):
        lo = hi = 0
        for u, x in f.items():
            if u not in ranges:
                return None
            lo += min(x * ranges[u][0], x * ranges[u][1])
            hi += max(x * ranges[u][0], x * ranges[u][1])
        return lo, hi

    best = box(coef)
    if best is None:
        return None
    lo, hi = best
    for gc, glo, ghi in guards:
        if any(coef.get(u) != x for u, x in gc.items()):
            continue
        rest = box({u: x for u, x in coef.items() if u not in gc})
        part = box(gc)
        if rest is None or part is None:
            continue
        plo, phi = max(part[0], glo), min(part[1], ghi)
        lo, hi = max(lo, rest[0] + plo), min(hi, rest[1] + phi)
    return lo, hi


def _split_var(e: A.Expr, v: str, loops, guards=()) -> tuple[int, tuple[float, float]] | None:
    """``e`` as ``c*v + r``: (c, bounds of r over the other loops and the guards), or None when
    ``v`` appears other than in such a term or ``r`` cannot be bounded (a load, a variable of
    no loop)."""
    from .analysis import interval

    terms: list[tuple[int, A.Expr]] = []

    def flat(x: A.Expr, sign: int) -> None:
        if isinstance(x, A.Binary) and x.op in ("+", "-"):
            flat(x.lhs, sign)
            flat(x.rhs, sign if x.op == "+" else -sign)
        elif isinstance(x, A.Unary) and x.op == "-":
            flat(x.operand, -sign)
        else:
            terms.append((sign, x))

    flat(e, 1)
    ranges = {lp.var: (0, lp.extent - 1) for lp in loops if lp.var != v}
    c, lo, hi = 0, 0, 0
    rest: dict[str, int] = {}
    for sign, t in terms:
        f = affine(t)
        if v in A.free_vars(t):
            if f is None or set(f[0]) != {v}:
                return None
            c += sign * f[0][v]
            lo, hi = lo + sign * f[1], hi + sign * f[1]
            continue
        if f is not None:       # affine terms are bounded together, so guards can apply
            for u, x in f[0].items():
                rest[u] = rest.get(u, 0) + sign * x
            lo, hi = lo + sign * f[1], hi + sign * f[1]
            continue
        r = interval(t, ranges, strict=True)
        if r is None:
            return None
        lo, hi = (lo + r[0], hi + r[1]) if sign > 0 else (lo - r[1], hi - r[0])
    r = _affine_bounds({u: x for u, x in rest.items() if x}, ranges, guards)
    if r is None:
        return None
    return c, (lo + r[0], hi + r[1])


def _symbolic_reason(a, b, v: str) -> str:
    t = a.tensor
    subs = a.index + b.index
    if any(f is None for f in subs):
        why = ("a subscript is not affine, so which elements each iteration touches cannot be "
               "told apart: a possible race, refused")
    elif not any(v in f[0] for f in subs):
        why = (f"no subscript of {t} depends on {v}, so every iteration touches the same "
               f"elements: {t} is shared by the loop's iterations (a buffer private to each "
               f"iteration is declared `local` and overwritten whole inside the loop first)")
    else:
        why = f"the subscripts of {t} meet for two different values of {v}"
    pair = f"`{a.text}`" if a.text == b.text else f"`{a.text}` and `{b.text}`"
    return (f"parallel loop {v}: two different iterations may touch the same element of {t} "
            f"({pair}, one of them writing it): {why}")


def _groups(K: np.ndarray) -> tuple[np.ndarray, int]:
    """``np.unique(K, axis=1, return_inverse=True)``'s inverse (the same group numbers: columns
    in lexicographic order) and the group count. ``np.unique`` along an axis sorts a void view
    of the columns, 30x slower than ``lexsort`` of the rows (21 s of 22 on rmsnorm's
    parallel row loop, 2M points)."""
    n = K.shape[1]
    order = np.lexsort(K[::-1])
    srt = K[:, order]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    new[1:] = np.any(srt[:, 1:] != srt[:, :-1], axis=0)
    ids = np.cumsum(new) - 1
    group = np.empty(n, dtype=np.int64)
    group[order] = ids
    return group, int(ids[-1]) + 1 if n else 0


def _race_under(loop: A.Loop, path, under, shapes, private: frozenset[str] = frozenset()
                ) -> str | None:
    """The race found by enumeration, None when there is none, ``UNDECIDED`` when it cannot
    enumerate."""
    v = loop.var
    tid = {name: k for k, name in enumerate(sorted(shapes))}
    total = sum(math.prod(lp.extent for lp in si.loops) for si in under)
    exact = total <= LIMIT
    keys: list[np.ndarray] = []
    meta = []  # per chunk: (tensor, stmt, v values, write flags)
    for si in under:
        if not exact:
            break
        depth = si.loop_paths.index(path)
        outer = si.loops[:depth]
        grids = np.meshgrid(*[np.arange(lp.extent, dtype=np.int64) for lp in si.loops],
                            indexing="ij")
        env = {lp.var: g.ravel() for lp, g in zip(si.loops, grids)}
        n = int(np.prod([lp.extent for lp in si.loops]))
        mask = np.ones(n, dtype=bool)
        try:
            with np.errstate(all="ignore"):
                for g in si.guards:
                    mask &= np.broadcast_to(np.asarray(_eval_np(g, env), dtype=bool), (n,))
            okey = np.zeros(n, dtype=np.int64)
            for lp in outer:
                okey = okey * lp.extent + env[lp.var]
            accesses = [(si.stmt.tensor, si.stmt.index, True)]
            accesses += [(ld.tensor, ld.index, False) for ld in A.loads(si.stmt.value)]
            if si.stmt.is_reduction:
                accesses.append((si.stmt.tensor, si.stmt.index, False))
            for tensor, index, write in accesses:
                if tensor in private:   # each iteration has its own copy (``leir.private``)
                    continue
                shape = shapes.get(tensor, ())
                flat = np.zeros(n, dtype=np.int64)
                for d, sub in zip(shape, index):
                    flat = flat * d + np.broadcast_to(np.asarray(_eval_np(sub, env),
                                                                 dtype=np.int64), (n,))
                keys.append(np.stack([np.full(n, tid[tensor], dtype=np.int64),
                                      flat, okey])[:, mask])
                meta.append((tensor, index, si.stmt, env[v][mask], np.full(int(mask.sum()),
                                                                            write)))
        except (ValueError, KeyError, TypeError):
            exact = False
    if not exact:
        return UNDECIDED
    if not keys:
        return None
    K = np.concatenate(keys, axis=1)
    V = np.concatenate([m[3] for m in meta])
    W = np.concatenate([m[4] for m in meta])
    group, g = _groups(K)
    vmin = np.full(g, np.iinfo(np.int64).max)
    vmax = np.full(g, np.iinfo(np.int64).min)
    np.minimum.at(vmin, group, V)
    np.maximum.at(vmax, group, V)
    has_w = np.zeros(g, dtype=bool)
    np.logical_or.at(has_w, group, W)
    bad = has_w & (vmin != vmax)
    if not bad.any():
        return None
    b = int(np.flatnonzero(bad)[0])
    pos = int(np.flatnonzero(group == b)[0])
    # which access that is, for the message
    start = 0
    for tensor, index, stmt, vv, _w in meta:
        if pos < start + len(vv):
            break
        start += len(vv)
    shape = shapes.get(tensor, ())
    elem = np.unravel_index(int(K[1, pos]), shape) if shape else ()
    return (f"parallel loop {v}: iterations {v}={int(vmin[b])} and {v}={int(vmax[b])} both touch "
            f"{_fmt(tensor, elem)}, and one of them writes it (`{stmt.tensor}[...] {stmt.op} ...`)")


_CHECK_LIMIT = 1 << 20     # (thread, element) pairs enumerated per access of a local buffer


class _Unit:
    """A thread nest of a block (its outermost threadIdx loop) or a statement outside them,
    with the statements it runs and, for each, the loops around it inside the kernel."""

    def __init__(self, loose: bool):
        self.loose = loose
        self.axes: set[str] = set()
        self.stmts: list[tuple[A.Assign, tuple[A.Loop, ...]]] = []

    def writes(self) -> set[str]:
        return {s.tensor for s, _ in self.stmts}

    def touches(self) -> set[str]:
        return self.writes() | {ld.tensor for s, _ in self.stmts for ld in A.loads(s.value)}


def thread_races(program: A.Program) -> list[str]:
    """What a GPU block's threads would race on, read off its structure; [] when nothing.

    Every thread of a block runs the whole kernel body, and TVM puts ``__syncthreads`` only
    around shared memory. So in a kernel (a top-level nest) with threadIdx loops:
    (1) a statement outside them, or in a nest that lacks one of the block's thread axes, that
    writes shared or global memory is run by many threads at once;
    (2) a global tensor one thread nest writes and another nest, or a statement outside the
    nests, reads or writes has no barrier between them;
    (3) a ``local`` buffer is each thread's own: a thread may read only elements it wrote itself
    (enumerated over the loops of each subscript), else it reads another thread's private copy.
    """
    scope = {t.name: t.scope for t in program.intermediates}
    out: list[str] = []
    for k, top in enumerate(program.body):
        units: list[_Unit] = []

        def walk(s, unit: _Unit | None, loops: tuple) -> None:
            if isinstance(s, A.Loop):
                if unit is None and s.kind in A.THREAD_AXES:
                    unit = _Unit(loose=False)
                    units.append(unit)
                if unit is not None and s.kind in A.THREAD_AXES:
                    unit.axes.add(s.kind)
                for b in s.body:
                    walk(b, unit, loops + (s,))
            elif isinstance(s, A.If):
                for b in s.body:
                    walk(b, unit, loops)
            elif unit is None:
                u = _Unit(loose=True)
                u.stmts.append((s, loops))
                units.append(u)
            else:
                unit.stmts.append((s, loops))

        walk(top, None, ())
        nests = [u for u in units if not u.loose]
        if not nests:
            continue
        block = set().union(*(u.axes for u in nests))
        why = _loose_write(units, block, scope, k) or _passed_global(units, scope, k) \
            or _private_reads(units, scope, k)
        if why:
            out.append(why)
    return out


def _loose_write(units, block, scope, k) -> str | None:
    for u in units:
        if not u.loose and u.axes == block:
            continue
        for s, _ in u.stmts:
            if scope.get(s.tensor) == "local":
                continue
            if u.loose:
                return (f"`{_line(s)}` lies outside the threadIdx loops of kernel {k}: every "
                        f"thread of the block runs it, so they all write {s.tensor} at once")
            missing = ", ".join(sorted(block - u.axes))
            return (f"`{_line(s)}` is under no {missing} loop in kernel {k}, whose block has "
                    f"one: every thread along it runs it, so they all write {s.tensor} at once")
    return None


def _passed_global(units, scope, k) -> str | None:
    for a, ua in enumerate(units):
        if ua.loose:
            continue
        written = {t for t in ua.writes() if scope.get(t, "global") == "global"}
        for b, ub in enumerate(units):
            if a == b:
                continue
            both = sorted(written & ub.touches())
            if both:
                where = ("a statement outside the nests" if ub.loose else "another")
                return (f"{both[0]} is written by one thread nest of kernel {k} and used by "
                        f"{where}: nothing orders global memory between them (stage it in "
                        f"shared memory, or split the kernel)")
    return None


def _private_reads(units, scope, k) -> str | None:
    """Rule (3): per local tensor, the elements each thread writes and reads."""
    locals_ = sorted({t for u in units for t in u.touches() if scope.get(t) == "local"})
    for t in locals_:
        # a thread is its values on the block's axes; an access whose subscript does not
        # move with an axis is made by every thread along it (its key leaves that axis out)
        written: dict = {}
        reads = []
        for u in units:
            for s, loops in u.stmts:
                accs = [(s.index, True)] if s.tensor == t else []
                accs += [(ld.index, False) for ld in A.loads(s.value) if ld.tensor == t]
                if s.tensor == t and s.is_reduction:
                    accs.append((s.index, False))
                for index, write in accs:
                    pts = thread_elements(index, loops)
                    if pts is None:
                        return (f"the local buffer {t} of kernel {k} is indexed in a way whose "
                                f"per-thread elements cannot be enumerated: refused")
                    if write:
                        for who, el in pts:
                            written.setdefault(who, set()).add(el)
                    else:
                        reads.append((s, pts))
        shared_w = written.get((), set())
        for s, pts in reads:
            for who, el in pts:
                if el in shared_w or el in written.get(who, ()):
                    continue
                if any(el in els and _covers(w, who) for w, els in written.items()):
                    continue
                return (f"`{_line(s)}` reads {t}[{', '.join(map(str, el))}] of the local "
                        f"buffer {t} in a thread that never wrote it (each thread of kernel {k} "
                        f"has its own copy; another thread wrote that element in its own)")
    return None


def _covers(writer: tuple, reader: tuple) -> bool:
    """Does a write keyed ``writer`` (axis values it fixes) happen in the thread ``reader``?"""
    return set(writer) <= set(reader)


def thread_elements(index, loops, fixed: Collection[str] = ()) -> list | None:
    """(thread key, element) for each point of the loops an affine subscript uses: the key is
    the sorted (axis, value) pairs of its thread-bound loops. Variables in ``fixed`` are held
    at 0; None when the subscript is not affine, uses another variable, or has more than
    ``_CHECK_LIMIT`` points."""
    forms = [affine(i) for i in index]
    if any(f is None for f in forms):
        return None
    used = {v for f in forms for v in f[0]}
    mine = [lp for lp in loops if lp.var in used]
    if any(v not in {lp.var for lp in loops} and v not in fixed for v in used):
        return None
    count = 1
    for lp in mine:
        count *= lp.extent
    if count > _CHECK_LIMIT:
        return None
    out = []
    for point in itertools.product(*(range(lp.extent) for lp in mine)):
        env = dict(zip((lp.var for lp in mine), point))
        el = tuple(sum(c * env.get(v, 0) for v, c in f[0].items()) + f[1] for f in forms)
        who = tuple(sorted((lp.kind, env[lp.var]) for lp in mine if lp.kind in A.THREAD_KINDS))
        out.append((who, el))
    return out


def _line(s: A.Assign) -> str:
    return format_stmt(s).strip().split("\n")[0]
