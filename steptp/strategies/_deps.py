"""Data-dependence tests for the loop strategies: sound (never misses a dependence), conservative
(may report one that cannot happen).

Every array access is collected with its enclosing loops. For two accesses to the same tensor, at
least one a write, we ask whether some pair of their statement instances touches the same element
under a **direction vector** over the loops they share: ``<`` (the first access's iteration is
earlier), ``=`` or ``>``, and ``*`` (any). Each subscript that is affine in the loop variables gives
one equation; a direction vector is infeasible as soon as one equation has no solution over the
reals (Banerjee bounds: the extreme values of ``a*x - b*y`` over the polygon the direction cuts
out of the iteration box) or over the integers (the GCD test). Subscripts that are not affine
(gathers, ``//``, ``%``) give no equation, so they can only add dependences, never hide one.
``feasible`` then settles an equation those tests leave open by enumerating its sums exactly
when they are few (``EXACT_WORK``): ``16*i_o + i_t`` under ``i_t < i_t'`` spans 0 in the interval
test but never reaches it. ``directions`` (reorders, interchanges) uses the interval and GCD
tests only, so it may still report such a vector.
``if`` guards only shrink iteration domains and are ignored, again on the safe side. One
non-affine shape is understood: a pair of subscripts ``q // M + f, q % M + g`` (a collapsed loop,
``loop_collapse``) gives the extra equation ``q + M*f + g == index[d]*M + index[d+1]`` of the
other access, which holds whenever the two touch the same element.

A reduction ``X[i] += e`` reads and writes ``X[i]``; a scalar tensor's single element is touched
by every instance.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator, Sequence

from ..leir import ast as A
from ..leir.analysis import affine
from ..leir.layout import Affine, collapsed_dims, linear
from ..leir.nav import Path

DIRS = ("<", "=", ">")


@dataclass(frozen=True)
class LoopRef:
    path: Path
    var: str
    extent: int


@dataclass(frozen=True)
class Access:
    tensor: str
    index: tuple[Affine | None, ...]
    write: bool
    loops: tuple[LoopRef, ...]
    stmt: Path          # the path of the statement (assignment or if) the access belongs to
    text: str           # for messages, e.g. "T0[i] += ..."
    reduction: bool = False
    collapsed: tuple[tuple[int, int, Affine], ...] = ()   # collapsed_dims of the subscripts


def collect(body: Sequence[A.Stmt], base: Path = (), loops: tuple[LoopRef, ...] = ()) -> list[Access]:
    """Every access of a statement list (paths relative to the program root via ``base``)."""
    from ..leir.printer import format_expr, format_stmt

    out: list[Access] = []

    def reads_of(e: object, loops_, path, text) -> None:
        for n in A.walk(e):
            if isinstance(n, A.Load):
                out.append(Access(n.tensor, tuple(affine(i) for i in n.index), False, loops_, path,
                                  text, collapsed=_collapsed(n.index)))

    for k, s in enumerate(body):
        p = base + (k,)
        if isinstance(s, A.Loop):
            out.extend(collect(s.body, p, loops + (LoopRef(p, s.var, s.extent),)))
        elif isinstance(s, A.If):
            reads_of(s.cond, loops, p, f"if {format_expr(s.cond)}")
            out.extend(collect(s.body, p, loops))
        else:
            text = format_stmt(s).strip()
            for i in s.index:
                reads_of(i, loops, p, text)
            reads_of(s.value, loops, p, text)
            idx = tuple(affine(i) for i in s.index)
            col = _collapsed(s.index)
            if s.is_reduction:
                out.append(Access(s.tensor, idx, False, loops, p, text, True, col))
            out.append(Access(s.tensor, idx, True, loops, p, text, s.is_reduction, col))
    return out


def _collapsed(index) -> tuple[tuple[int, int, Affine], ...]:
    if all(isinstance(i, (A.Var, A.Const)) for i in index):
        return ()
    return tuple(collapsed_dims(index))


def _combined(x: Access, d: int, m: int) -> Affine | None:
    """``x``'s subscripts ``d, d+1`` as ``index[d]*m + index[d+1]`` (an affine form), or None."""
    for dd, mm, comb in x.collapsed:
        if dd == d and mm == m:
            return comb
    if d + 1 < len(x.index) and x.index[d] is not None and x.index[d + 1] is not None:
        return linear((m, x.index[d]), (1, x.index[d + 1]))
    return None


def subscript_pairs(a: Access, b: Access) -> list[tuple[Affine | None, Affine | None]]:
    """The subscript equations of two accesses of one tensor: one per dimension, plus one per
    collapsed pair of either (``collapsed_dims``)."""
    out = list(zip(a.index, b.index))
    for d, m in dict.fromkeys([(d, m) for d, m, _ in a.collapsed + b.collapsed]):
        out.append((_combined(a, d, m), _combined(b, d, m)))
    return out


def collect_under(program: A.Program, path: Path) -> list[Access]:
    """The accesses of the statement at ``path`` and everything inside it."""
    from ..leir.nav import chain

    ch = chain(program, path)
    if ch is None:
        return []
    loops = []
    for q, s in zip(range(len(path)), ch):
        if isinstance(s, A.Loop):
            loops.append(LoopRef(tuple(path[:q + 1]), s.var, s.extent))
    node = ch[-1]
    if isinstance(node, A.Loop):
        return collect(node.body, tuple(path), tuple(loops))
    return _collect_single(node, tuple(path), tuple(loops))


def _collect_single(node: A.Stmt, path: Path, loops: tuple[LoopRef, ...]) -> list[Access]:
    accs = collect((node,), (), loops)
    # re-root the statement paths: collect() numbered the node as (0,)
    out = []
    for a in accs:
        out.append(Access(a.tensor, a.index, a.write, a.loops, path + a.stmt[1:], a.text, a.reduction,
                          a.collapsed))
    return out


# ----------------------------------------------------------------------------- feasibility
def _term_range(a: int, b: int, n: int, d: str) -> tuple[float, float] | None:
    """Bounds of ``a*x - b*y`` for ``x, y`` in ``[0, n-1]`` under direction ``d`` (None: the
    direction is impossible, e.g. ``<`` on a loop of extent 1)."""
    hi = n - 1
    if d == "=":
        pts = [(0, 0), (hi, hi)]
    elif d == "<":
        if n < 2:
            return None
        pts = [(0, 1), (0, hi), (hi - 1, hi)]
    elif d == ">":
        if n < 2:
            return None
        pts = [(1, 0), (hi, 0), (hi, hi - 1)]
    else:
        pts = [(0, 0), (0, hi), (hi, 0), (hi, hi)]
    vals = [a * x - b * y for x, y in pts]
    return min(vals), max(vals)


def _free_terms(ca: dict[str, int], cb: dict[str, int], a_common: set[str], b_common: set[str],
                a_ext: dict[str, int], b_ext: dict[str, int]) -> tuple[int, int, list[int]]:
    """The range and the coefficients that the loops outside the shared ones add to the
    difference of two subscripts (``a``'s terms minus ``b``'s, each loop free)."""
    lo = hi = 0
    coefs: list[int] = []
    for v, c in ca.items():
        if v not in a_common:
            n = a_ext[v]
            lo += min(0, c * (n - 1))
            hi += max(0, c * (n - 1))
            coefs.append(c)
    for v, c in cb.items():
        if v not in b_common:
            n = b_ext[v]
            lo -= max(0, c * (n - 1))
            hi -= min(0, c * (n - 1))
            coefs.append(c)
    return lo, hi, coefs


def _solvable(lo: int, hi: int, g: int, const: int) -> bool:
    """May ``const + sum(c_i * x_i)`` be 0, given that it lies in ``[lo, hi]`` (``const``
    included) and the ``c_i`` have GCD ``g`` (0: no free terms)? Both tests are necessary
    conditions only: when in doubt, a dependence is assumed."""
    if lo > 0 or hi < 0:
        return False
    return const == 0 if g == 0 else const % g == 0


#: work bound of the exact check below (values enumerated per subscript equation)
EXACT_WORK = 20_000


def _term_values(a: int, b: int, n: int, d: str) -> set[int] | None:
    """Every value of ``a*x - b*y`` for ``x, y`` in ``[0, n-1]`` under direction ``d``; None
    when that takes more than ``EXACT_WORK`` pairs."""
    if n > EXACT_WORK:
        return None
    if d == "=":
        return {(a - b) * t for t in range(n)}
    if a == b:
        ks = range(-(n - 1), 0) if d == "<" else range(1, n) if d == ">" else range(-(n - 1), n)
        return {a * k for k in ks}
    if n * n > EXACT_WORK:
        return None
    return {a * x - b * y for x in range(n) for y in range(n)
            if (d == "*" or (x < y if d == "<" else x > y))}


def _exactly_solvable(const: int, terms: list[set[int]]) -> bool | None:
    """Is ``const + t_1 + ... + t_k == 0`` for some ``t_i`` in ``terms[i]``? None when the
    reachable sums outgrow ``EXACT_WORK`` (then only the necessary tests above decide)."""
    reach = {const}
    for vals in sorted(terms, key=len):
        if len(reach) * len(vals) > EXACT_WORK:
            return None
        reach = {r + v for r in reach for v in vals}
    return 0 in reach


def _exact_terms(ca, cb, common, dirs, a_common, b_common, a_ext, b_ext) -> list[set[int]] | None:
    terms: list[set[int]] = []
    for (va, vb, n), d in zip(common, dirs):
        x, y = ca.get(va, 0), cb.get(vb, 0)
        if x == 0 and y == 0:
            continue
        vals = _term_values(x, y, n, d)
        if vals is None:
            return None
        terms.append(vals)
    for coef, common_, ext, sign in ((ca, a_common, a_ext, 1), (cb, b_common, b_ext, -1)):
        for v, c in coef.items():
            if v not in common_:
                if ext[v] > EXACT_WORK:
                    return None
                terms.append({sign * c * t for t in range(ext[v])})
    return terms


def feasible(a: Access, b: Access, common: Sequence[tuple[str, str, int]], dirs: Sequence[str]) -> bool:
    """May an instance of ``a`` and an instance of ``b`` touch the same element when the shared
    loops ``common`` — triples (variable in a, variable in b, extent) — relate by ``dirs``?
    Loops of ``a`` or ``b`` not in ``common`` range freely and independently."""
    if a.tensor != b.tensor:
        return False
    for d, (_, _, n) in zip(dirs, common):
        if d in "<>" and n < 2:
            return False
    a_common = {va for va, _, _ in common}
    b_common = {vb for _, vb, _ in common}
    a_ext = {lp.var: lp.extent for lp in a.loops}
    b_ext = {lp.var: lp.extent for lp in b.loops}
    for fa, fb in subscript_pairs(a, b):
        if fa is None or fb is None:
            continue
        ca, cb = fa[0], fb[0]
        if any(v not in a_ext for v in ca) or any(v not in b_ext for v in cb):
            continue  # a variable we cannot bound: no information
        lo = hi = fa[1] - fb[1]
        coefs: list[int] = []
        for (va, vb, n), d in zip(common, dirs):
            x, y = ca.get(va, 0), cb.get(vb, 0)
            r = _term_range(x, y, n, d)
            if r is None:
                return False
            lo += r[0]
            hi += r[1]
            coefs.extend([x - y] if d == "=" else [x, y])
        flo, fhi, fcoefs = _free_terms(ca, cb, a_common, b_common, a_ext, b_ext)
        lo += flo
        hi += fhi
        coefs.extend(fcoefs)
        g = 0
        for c in coefs:
            g = math.gcd(g, abs(c))
        if not _solvable(lo, hi, g, fa[1] - fb[1]):
            return False
        # the interval and GCD tests miss digits: i_o*16 + i_i with i_i < i_i' and i_o free
        # spans 0, but no two different i_i meet; the exact sums see it when they are few
        terms = _exact_terms(ca, cb, common, dirs, a_common, b_common, a_ext, b_ext)
        if terms is not None and _exactly_solvable(fa[1] - fb[1], terms) is False:
            return False
    return True


def common_loops(a: Access, b: Access) -> list[tuple[str, str, int]]:
    out = []
    for la, lb in zip(a.loops, b.loops):
        if la.path != lb.path:
            break
        out.append((la.var, lb.var, la.extent))
    return out


def conflicting_pairs(accs: Sequence[Access], accs2: Sequence[Access] | None = None
                      ) -> Iterator[tuple[Access, Access]]:
    """Pairs of accesses to the same tensor with at least one write (within one list: unordered
    pairs including each write with itself; across two lists: every cross pair)."""
    if accs2 is None:
        for i, a in enumerate(accs):
            for b in accs[i:]:
                if a.tensor == b.tensor and (a.write or b.write):
                    yield a, b
    else:
        for a in accs:
            for b in accs2:
                if a.tensor == b.tensor and (a.write or b.write):
                    yield a, b


def _access_key(a: Access) -> tuple:
    """What ``feasible`` reads of an access: its tensor, affine subscripts and loop extents."""
    return (a.tensor,
            tuple(None if f is None else (tuple(sorted(f[0].items())), f[1]) for f in a.index),
            tuple((d, m, tuple(sorted(f[0].items())), f[1]) for d, m, f in a.collapsed),
            tuple((lp.var, lp.extent) for lp in a.loops))


#: ``directions`` answers, keyed on what they depend on. The search re-derives the dependences
#: of the same loop nests in every candidate program (a tiled band's siblings, the untouched
#: statements of a rewrite), which dominated its bookkeeping; bounded so a nightly run's
#: memory stays flat.
_DIRECTIONS: OrderedDict[tuple, tuple[tuple[str, ...], ...]] = OrderedDict()
_DIRECTIONS_SIZE = 8192


def directions(a: Access, b: Access, common: Sequence[tuple[str, str, int]],
               fixed: dict[int, str] | None = None, free_from: int | None = None) -> list[tuple[str, ...]]:
    """Feasible direction vectors over ``common``: levels in ``fixed`` are pinned, levels at or
    after ``free_from`` stay ``*``, the others are refined to ``< = >`` (hierarchically)."""
    key = (_access_key(a), _access_key(b), tuple(tuple(c) for c in common),
           tuple(sorted((fixed or {}).items())), free_from)
    hit = _DIRECTIONS.get(key)
    if hit is not None:
        _DIRECTIONS.move_to_end(key)
        return list(hit)
    out = _directions(a, b, common, fixed, free_from)
    _DIRECTIONS[key] = tuple(out)
    if len(_DIRECTIONS) > _DIRECTIONS_SIZE:
        _DIRECTIONS.popitem(last=False)
    return out


def _prepare(a: Access, b: Access, common: Sequence[tuple[str, str, int]]) -> list[tuple] | None:
    """``feasible``'s work that does not depend on the direction vector, done once per pair:
    for each informative subscript pair, its constant, the bounds and GCD coefficients the
    loops outside ``common`` contribute, and per shared level the term range and coefficients
    under each direction. None: different tensors (never feasible)."""
    if a.tensor != b.tensor:
        return None
    a_common = {va for va, _, _ in common}
    b_common = {vb for _, vb, _ in common}
    a_ext = {lp.var: lp.extent for lp in a.loops}
    b_ext = {lp.var: lp.extent for lp in b.loops}
    subs = []
    for fa, fb in subscript_pairs(a, b):
        if fa is None or fb is None:
            continue
        ca, cb = fa[0], fb[0]
        if any(v not in a_ext for v in ca) or any(v not in b_ext for v in cb):
            continue
        const = fa[1] - fb[1]
        lo, hi, coefs = _free_terms(ca, cb, a_common, b_common, a_ext, b_ext)
        g_free = 0
        for c in coefs:
            g_free = math.gcd(g_free, abs(c))
        levels = []
        for va, vb, n in common:
            x, y = ca.get(va, 0), cb.get(vb, 0)
            per = {}
            for d in ("<", "=", ">", "*"):
                r = _term_range(x, y, n, d)
                g = abs(x - y) if d == "=" else math.gcd(abs(x), abs(y))
                per[d] = None if r is None else (r[0], r[1], g)
            levels.append(per)
        subs.append((const, lo, hi, g_free, levels))
    return subs


def _feasible_prepared(subs: list[tuple] | None, common: Sequence[tuple[str, str, int]],
                       dirs: Sequence[str]) -> bool:
    """``feasible(a, b, common, dirs)`` from ``_prepare(a, b, common)``."""
    if subs is None:
        return False
    for d, (_, _, n) in zip(dirs, common):
        if d in "<>" and n < 2:
            return False
    for const, lo, hi, g, levels in subs:
        lo += const
        hi += const
        for per, d in zip(levels, dirs):
            r = per[d]
            if r is None:
                return False
            lo += r[0]
            hi += r[1]
            g = math.gcd(g, r[2])
        if not _solvable(lo, hi, g, const):
            return False
    return True


def _directions(a: Access, b: Access, common: Sequence[tuple[str, str, int]],
                fixed: dict[int, str] | None = None, free_from: int | None = None
                ) -> list[tuple[str, ...]]:
    """The hierarchical refinement: a prefix is extended only while the vector it starts
    (the rest pinned by ``fixed`` or ``*``) is feasible. Each subscript equation's bounds and
    GCD are sums over the levels, so they are carried down the recursion for the prefix and
    precomputed for every suffix: one test costs O(equations), not O(equations x levels)
    (``_feasible_prepared`` of the whole vector, the same integers summed in another order;
    ``feasible``'s exact enumeration is not applied here)."""
    fixed = fixed or {}
    n = len(common)
    stop = n if free_from is None else free_from
    out: list[tuple[str, ...]] = []
    subs = _prepare(a, b, common)
    if subs is None:
        return out
    tail = [fixed.get(j, "*") for j in range(n)]
    # per suffix k: is a pinned/free entry at or after k impossible (``<``/``>`` on extent 1),
    # and per equation the bounds, GCD and impossibility the suffix adds
    bad = [False] * (n + 1)
    for j in range(n - 1, -1, -1):
        bad[j] = bad[j + 1] or (tail[j] in "<>" and common[j][2] < 2)
    suffix = []
    for const, lo, hi, g, levels in subs:
        t_lo, t_hi, t_g, t_none = [0] * (n + 1), [0] * (n + 1), [0] * (n + 1), [False] * (n + 1)
        for j in range(n - 1, -1, -1):
            r = levels[j][tail[j]]
            if r is None:
                t_none[j] = True
            else:
                t_lo[j], t_hi[j] = t_lo[j + 1] + r[0], t_hi[j + 1] + r[1]
                t_g[j] = math.gcd(t_g[j + 1], r[2])
            t_none[j] = t_none[j] or t_none[j + 1]
        suffix.append((t_lo, t_hi, t_g, t_none))

    def feasible_at(k: int, state: list[tuple[int, int, int]]) -> bool:
        if bad[k]:
            return False
        for (const, _, _, _, _), (t_lo, t_hi, t_g, t_none), (plo, phi, pg) in \
                zip(subs, suffix, state):
            if t_none[k] or not _solvable(plo + t_lo[k], phi + t_hi[k],
                                          math.gcd(pg, t_g[k]), const):
                return False
        return True

    def go(prefix: list[str], state: list[tuple[int, int, int]]) -> None:
        k = len(prefix)
        if not feasible_at(k, state):
            return
        if k >= stop:
            out.append(tuple(prefix) + tuple(tail[k:]))
            return
        for d in ((fixed[k],) if k in fixed else DIRS):
            if d in "<>" and common[k][2] < 2:
                continue   # the vector with d here is infeasible: go would return at once
            nxt = []
            for _, _, _, _, levels in subs:
                r = levels[k][d]
                if r is None:
                    break
                nxt.append(r)
            else:
                go(prefix + [d], [(plo + r[0], phi + r[1], math.gcd(pg, r[2]))
                                  for (plo, phi, pg), r in zip(state, nxt)])

    go([], [(lo + const, hi + const, g) for const, lo, hi, g, _ in subs])
    return out


def carried_by(accs: Sequence[Access], loop_path: Path) -> tuple[Access, Access, tuple[str, ...]] | None:
    """A witness that the loop at ``loop_path`` carries a dependence (two conflicting instances
    in different iterations of it, within one iteration of every enclosing loop), or None."""
    for a, b in conflicting_pairs(accs):
        common = common_loops(a, b)
        level = next((k for k, lp in enumerate(a.loops) if lp.path == loop_path), None)
        if level is None or level >= len(common):
            continue
        for d in ("<", ">"):
            vec = ["="] * level + [d] + ["*"] * (len(common) - level - 1)
            if feasible(a, b, common, vec):
                return a, b, tuple(vec)
    return None


def lex_sign(vec: Sequence[str]) -> int:
    for d in vec:
        if d == "<":
            return 1
        if d == ">":
            return -1
        if d == "*":
            return 0  # unknown
    return 0


def flip(vec: Sequence[str]) -> tuple[str, ...]:
    return tuple({"<": ">", ">": "<"}.get(d, d) for d in vec)


def fmt_vec(vec: Sequence[str]) -> str:
    return "(" + ",".join(vec) + ")"


__all__ = ["Access", "LoopRef", "collect", "collect_under", "feasible", "common_loops",
           "conflicting_pairs", "directions", "carried_by", "lex_sign", "flip", "fmt_vec"]
