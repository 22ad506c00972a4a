"""The loop family: split, tiling, reorder, fusion, collapse, unrolling, parallelization, vectorization,
GPU binding, reduction factorization (rfactor) and compute_at.

Sites name loops by path and variable (``{"path": [0, 1], "loops": ["j"]}``); parameters are small
JSON dicts (``{"factor": 4}``, ``{"order": ["j", "i"]}``). Legality comes from the dependence
tests of ``_deps`` (sound: a dependence the test cannot rule out counts as present) plus
structural rules, and every refusal says why.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from ..leir import ast as A
from ..leir.printer import format_stmt
from ..leir.private import private_to
from ..leir.races import thread_races
from . import _deps as D
from ._memo import IdentityMemo
from ..leir.analysis import affine
from ..leir.ast import iter_stmts, node_at
from ..leir.nav import (Path, band, chain, enclosing_loops, perfect_nest, reduction_axes, replace_at,
                        statement_instances, tensors_read, tensors_written)
from ._ir import affine_expr, all_names, fresh_name, fresh_tensor, subst_expr, subst_stmt
from .base import OK, Site, Strategy, Verdict, refuse
from .registry import register

MAX_UNROLL = 64          # longest loop unrolled
MAX_VECTOR = 64          # widest vector (lanes); wider than MAX_PARTIAL_VECTOR: powers of two
MAX_PARTIAL_VECTOR = 16  # any width up to one AVX-512 register of f32 (a masked operation; 14-wide
                         # conv rows verified exact and ran 1.15x faster than 8-wide ones)
MAX_THREADS = 1024       # threads per block on every CUDA GPU we target
MAX_PERMUTATIONS = 24    # reorder choices enumerated per band before sampling kicks in


# ============================================================================ shared helpers
def _loop_site(program: A.Program, site: Site, kinds: tuple[str, ...] | None = ("serial",)
               ) -> tuple[A.Loop | None, Verdict]:
    """Resolve a single-loop site; a refusal when the path does not name the given loop."""
    node = node_at(program, site.path)
    if not isinstance(node, A.Loop):
        return None, refuse(f"no loop at path {list(site.path)}")
    if site.loops and site.loops[0] != node.var:
        return None, refuse(f"the loop at path {list(site.path)} is {node.var}, not {site.loops[0]}")
    if kinds is not None and node.kind not in kinds:
        return None, refuse(f"loop {node.var} is already {node.kind}")
    return node, OK


def _stmt_text(a: D.Access) -> str:
    return f"`{a.text}`"


def _dep_kind(a: D.Access, b: D.Access) -> str:
    if a.write and b.write:
        return "write-after-write"
    return "read-after-write" if a.write else "write-after-read"


def _carried_reason(program: A.Program, path: Path, loop: A.Loop, what: str,
                    private: frozenset[str] = frozenset()) -> Verdict:
    """Refuse ``what`` (e.g. "parallelize") when the loop carries a dependence (none through the
    buffers in ``private``: each iteration has its own copy)."""
    accs = D.collect_under(program, tuple(path))
    if private:
        accs = [a for a in accs if a.tensor not in private]
    w = D.carried_by(accs, tuple(path))
    if w is None:
        return OK
    a, b, vec = w
    for x in (a, b):
        if x.reduction and x.write:
            stmt = node_at(program, x.stmt)
            if isinstance(stmt, A.Assign):
                axes = reduction_axes(stmt, enclosing_loops(program, x.stmt))
                if loop.var in axes:
                    return refuse(f"cannot {what} {loop.var}: it is a reduction axis of "
                                  f"{_stmt_text(x)} (every iteration updates the same {x.tensor} "
                                  f"element)")
    if lex_first_is_b(vec):
        a, b = b, a  # report the dependence from the earlier instance to the later one
    if a.stmt == b.stmt and a.write and b.write:
        return refuse(f"cannot {what} {loop.var}: different iterations of it write the same "
                      f"{a.tensor} element in {_stmt_text(a)}")
    vec = D.flip(vec) if D.lex_sign(vec) < 0 else vec
    return refuse(f"cannot {what} {loop.var}: it carries a {_dep_kind(a, b)} dependence on "
                  f"{a.tensor} from {_stmt_text(a)} in one iteration to {_stmt_text(b)} in a later "
                  f"one (direction {D.fmt_vec(vec)})")


def lex_first_is_b(vec: Sequence[str]) -> bool:
    """In a witness vector relating a's iteration to b's, does b run first?"""
    return D.lex_sign(vec) < 0


def _kinds_around(program: A.Program, path: Path) -> tuple[list[str], list[str]]:
    """Kinds of the loops enclosing ``path`` and of the loops inside the statement there."""
    outer = [lp.kind for lp in enclosing_loops(program, path)]
    node = node_at(program, path)
    inner = [s.kind for _, s in iter_stmts(node.body) if isinstance(s, A.Loop)] \
        if isinstance(node, (A.Loop, A.If)) else []
    return outer, inner


def _is_band_start(program: A.Program, path: Path) -> bool:
    if len(path) < 2:
        return True
    parent = node_at(program, path[:-1])
    return not (isinstance(parent, A.Loop) and parent.kind == "serial" and len(parent.body) == 1)


def _split(program: A.Program, path: Path, factor: int) -> tuple[A.Program, str, str]:
    """Split the loop at ``path`` by ``factor`` (outer first); a guard when it does not divide."""
    loop = node_at(program, path)
    assert isinstance(loop, A.Loop)
    used = all_names(program)
    outer = fresh_name(f"{loop.var}_o", used)
    inner = fresh_name(f"{loop.var}_i", used | {outer})
    n, f = loop.extent, factor
    idx = affine_expr({outer: f, inner: 1}, 0)
    body = tuple(subst_stmt(s, {loop.var: idx}) for s in loop.body)
    if n % f:
        body = (A.If(A.Binary("<", idx, A.const(n)), body),)
    new = A.Loop(outer, -(-n // f), loop.kind, (A.Loop(inner, f, "serial", body),))
    return replace_at(program, path, [new]), outer, inner


def _divisors(n: int) -> list[int]:
    return [f for f in range(2, n) if n % f == 0]


# ----------------------------------------------------------------------------- reorder core
def _named_band(program: A.Program, path: Path, names: Sequence[str]) -> list[A.Loop] | None:
    loops = band(program, path)
    if len(loops) < len(names) or [lp.var for lp in loops[:len(names)]] != list(names):
        return None
    return loops[:len(names)]


def _reorder_verdict(program: A.Program, path: Path, names: Sequence[str], order: Sequence[str]
                     ) -> Verdict:
    return _reorder_analysis(program, path, names, order)[0]


def _reorder_analysis(program: A.Program, path: Path, names: Sequence[str], order: Sequence[str]
                      ) -> tuple[Verdict, bool]:
    """Is permuting the perfectly nested band ``names`` (at ``path``) into ``order`` legal, and
    does it regroup a floating-point reduction (the result is then exact only up to rounding)?

    For every pair of conflicting accesses inside the band and every feasible direction vector
    (outer loops equal, band loops refined), the permuted vector must stay lexicographically
    positive: the first non-``=`` entry, read in the new loop order, must still point from the
    earlier instance to the later one.

    One exception: the accumulator of a reduction ``X[..] op= e`` depends on itself across its
    reduction axes only; when a direction vector is ``=`` on every other loop (the same element,
    so the same spatial iteration), the updates of that element may be reordered because ``op``
    is associative and commutative, and the identity initialisation still happens first (every
    reduction axis runs from 0). Reordering a float ``+=``/``*=`` that way is a reassociation.
    """
    loops = _named_band(program, path, names)
    if loops is None:
        return refuse(f"loops {list(names)} are not a perfectly nested serial band at path "
                      f"{list(path)}"), False
    if sorted(order) != sorted(names) or len(set(order)) != len(order):
        return refuse(f"order {list(order)} is not a permutation of {list(names)}"), False
    perm = [list(names).index(v) for v in order]
    reassoc = False
    for dep in _band_dependences(program, tuple(path), tuple(names)):
        a, b, common, o, m, red_axes, float_sum = dep.a, dep.b, dep.common, dep.o, dep.m, \
            dep.red_axes, dep.float_sum
        for vec in dep.vecs:
            bv = vec[o:o + m]
            s = D.lex_sign(bv)
            if s == 0:
                continue  # same band iteration: the body's own order decides, unchanged
            src_dst = bv if s > 0 else D.flip(bv)
            new = tuple(src_dst[k] for k in perm)
            if D.lex_sign(new) > 0:
                continue
            if red_axes is not None and all(d == "=" or v in red_axes
                                            for d, (v, _, _) in zip(vec, common)):
                reassoc = reassoc or float_sum
                continue
            first, second = (a, b) if s > 0 else (b, a)
            return refuse(
                f"reordering ({','.join(names)}) -> ({','.join(order)}) reverses the "
                f"{_dep_kind(first, second)} dependence on {a.tensor} from {_stmt_text(first)} "
                f"to {_stmt_text(second)}: direction {D.fmt_vec(src_dst)} over "
                f"({','.join(names)}) becomes {D.fmt_vec(new)}"), False
    return OK, reassoc


@dataclass(frozen=True)
class _BandDep:
    """One conflicting access pair of a band and its feasible direction vectors (outer loops
    pinned to ``=``; band loops refined; for a reduction's self-pair every level refined)."""

    a: D.Access
    b: D.Access
    common: tuple
    o: int
    m: int
    red_axes: frozenset | None
    float_sum: bool
    vecs: tuple


_BAND_DEPS = IdentityMemo(512)
_TILE_PLANS = IdentityMemo(512)


def _band_dependences(program: A.Program, path: Path, names: tuple[str, ...]) -> tuple[_BandDep, ...]:
    """The dependences of the band ``names`` at ``path``; they do not depend on the order asked
    about, so every ordering of one band (and check / exactness of one candidate) shares them."""
    return _BAND_DEPS.get(program, ("band", path, names),
                          lambda: _compute_band_dependences(program, path, names))


def _compute_band_dependences(program: A.Program, path: Path, names: tuple[str, ...]
                              ) -> tuple[_BandDep, ...]:
    inner_path = tuple(path) + (0,) * (len(names) - 1)
    accs = D.collect_under(program, inner_path)
    o = len(enclosing_loops(program, path))
    m = len(names)
    out = []
    for a, b in D.conflicting_pairs(accs):
        common = D.common_loops(a, b)
        if len(common) < o + m:
            continue  # cannot happen: every access is inside the band
        fixed = {k: "=" for k in range(o)}
        red_axes: frozenset | None = None
        float_sum = False
        if a.stmt == b.stmt and a.reduction and b.reduction:
            stmt = node_at(program, a.stmt)
            red_axes = frozenset(reduction_axes(stmt, enclosing_loops(program, a.stmt)))
            float_sum = stmt.op in ("+=", "*=") and \
                program.tensor(stmt.tensor).dtype in A.FLOAT_DTYPES
        free_from = None if red_axes is not None else o + m
        vecs = tuple(D.directions(a, b, common, fixed=fixed, free_from=free_from))
        out.append(_BandDep(a, b, tuple(common), o, m, red_axes, float_sum, vecs))
    return tuple(out)


def _reorder(program: A.Program, path: Path, names: Sequence[str], order: Sequence[str]) -> A.Program:
    loops = _named_band(program, path, names)
    assert loops is not None
    by_var = {lp.var: lp for lp in loops}
    body = loops[-1].body
    for v in reversed(list(order)):
        lp = by_var[v]
        body = (A.Loop(lp.var, lp.extent, lp.kind, body),)
    return replace_at(program, path, list(body))


def _band_sites(program: A.Program, min_len: int = 2) -> list[Site]:
    out = []
    for p, s in iter_stmts(program.body):
        if isinstance(s, A.Loop) and s.kind == "serial" and _is_band_start(program, p):
            loops = band(program, p)
            if len(loops) >= min_len:
                out.append(Site.make(p, [lp.var for lp in loops]))
    return out


# ============================================================================ strategies
@register
class LoopSplit(Strategy):
    name = "loop_split"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Split `for i in N` by a factor f into `for i_o in ceil(N/f), i_i in f` with "
                   "i = i_o*f + i_i; a guard `if i_o*f+i_i < N` keeps a non-dividing split exact.")

    def sites(self, program, analysis=None):
        return [Site.make(p, [s.var]) for p, s in iter_stmts(program.body)
                if isinstance(s, A.Loop) and s.kind == "serial" and s.extent >= 3]

    def params(self, program, site, rng=None):
        loop = node_at(program, site.path)
        if not isinstance(loop, A.Loop):
            return []
        n = loop.extent
        fs = _divisors(n)
        tail = next((f for f in (3, 5, 7) if f < n and n % f), None)
        if tail is not None:
            fs.append(tail)
        return [{"factor": f} for f in fs]

    def check(self, program, site, params):
        loop, v = _loop_site(program, site)
        if loop is None:
            return v
        f = params.get("factor")
        if not isinstance(f, int) or isinstance(f, bool):
            return refuse("factor must be an integer")
        if not 2 <= f < loop.extent:
            return refuse(f"factor {f} must be in [2, {loop.extent - 1}] for loop {loop.var} "
                          f"of extent {loop.extent}")
        return OK

    def rewrite(self, program, site, params):
        return _split(program, site.path, int(params["factor"]))[0]


def _nth_permutation(items: Sequence[str], index: int) -> list[str]:
    """The ``index``-th permutation of ``items`` in ``itertools.permutations`` order."""
    pool, out = list(items), []
    for k in range(len(pool), 0, -1):
        f = math.factorial(k - 1)
        q, index = divmod(index, f)
        out.append(pool.pop(q))
    return out


@register
class LoopReorder(Strategy):
    name = "loop_reorder"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    inverse = "loop_reorder"
    description = ("Permute a perfectly nested band of serial loops; legal iff every dependence "
                   "direction vector stays lexicographically positive.")

    def sites(self, program, analysis=None):
        return _band_sites(program)

    def params(self, program, site, rng=None):
        # the permutations are indexed, never listed: an 11-loop band has 40 million
        names = list(site.loops)
        count = math.factorial(len(names)) - 1    # every order but the identity
        if count <= MAX_PERMUTATIONS:
            keep = range(count)
        elif rng is None:
            keep = range(MAX_PERMUTATIONS)
        else:
            keep = sorted(rng.sample(range(count), MAX_PERMUTATIONS))
        return [{"order": _nth_permutation(names, k + 1)} for k in keep]

    def check(self, program, site, params):
        order = params.get("order")
        if not isinstance(order, (list, tuple)) or not all(isinstance(v, str) for v in order):
            return refuse("order must be a list of loop variables")
        if len(order) < 2:
            return refuse("a reorder needs at least two loops")
        # the band named by the site may be longer than the permuted prefix
        names = list(site.loops)[:len(order)]
        return _reorder_verdict(program, site.path, names, order)

    def exactness_for(self, program, site, params):
        order = list(params.get("order") or ())
        v, reassoc = _reorder_analysis(program, site.path, list(site.loops)[:len(order)], order)
        return "reassociation" if v.ok and reassoc else "exact"

    def rewrite(self, program, site, params):
        order = list(params["order"])
        return _reorder(program, site.path, list(site.loops)[:len(order)], order)


@register
class LoopTiling(Strategy):
    name = "loop_tiling"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Tile two adjacent loops of a band: split each by its factor and move the "
                   "inner halves inside, `for i_o, j_o, i_i, j_i`. Factors must divide. With "
                   "`\"point\": \"inner\"` the point loops go below the rest of the band "
                   "(`for i_o, j_o, k, i_i, j_i`: a register tile of a reduction, the multi-level "
                   "tiling of CPU matmul schedules); then the two loops need not be adjacent "
                   "(`for f, y, x, c` tiled on f, x: `for f_o, y, x_o, c, f_i, x_i`), and one "
                   "factor may be its loop's whole extent (that loop moves inside unsplit). "
                   "`\"above\": v` (with point inner) puts the point loops right above loop `v` "
                   "of the band instead: a cache tile over a register tile (`for i_o, j_o, k_o, "
                   "i_m, k_i, i_i, j_i`: a block of B reused by several rows of tiles).")

    def sites(self, program, analysis=None):
        return _band_sites(program)

    def params(self, program, site, rng=None):
        loops = band(program, site.path)
        out = []
        for a, b in zip(loops, loops[1:]):
            for fa in _divisors(a.extent):
                for fb in _divisors(b.extent):
                    out.append({"loops": [a.var, b.var], "factors": [fa, fb]})
        return out

    def _plan(self, program, site, params) -> tuple[Verdict, Any]:
        # check, exactness_for and rewrite of one candidate each need the plan
        try:
            key = ("tile", tuple(site.path), tuple(site.loops), json.dumps(params, sort_keys=True))
        except (TypeError, ValueError):
            return self._make_plan(program, site, params)
        return _TILE_PLANS.get(program, key, lambda: self._make_plan(program, site, params))

    def _make_plan(self, program, site, params) -> tuple[Verdict, Any]:
        names, factors = params.get("loops"), params.get("factors")
        if (not isinstance(names, (list, tuple)) or len(names) != 2
                or not isinstance(factors, (list, tuple)) or len(factors) != 2):
            return refuse("params need loops [a, b] and factors [fa, fb]"), None
        point = params.get("point", "adjacent")
        if point not in ("adjacent", "inner"):
            return refuse(f"point must be 'adjacent' or 'inner', not {point!r}"), None
        loops = band(program, site.path)
        vars_ = [lp.var for lp in loops]
        if site.loops and vars_[:len(site.loops)] != list(site.loops):
            return refuse(f"no serial band {list(site.loops)} at path {list(site.path)}"), None
        if names[0] not in vars_ or names[1] not in vars_ \
                or vars_.index(names[1]) <= vars_.index(names[0]):
            return refuse(f"{names[0]} and {names[1]} are not two loops of the band "
                          f"({', '.join(vars_)}), outer first"), None
        k, kb = vars_.index(names[0]), vars_.index(names[1])
        if kb != k + 1 and point != "inner":
            return refuse(f"{names[0]} and {names[1]} are not adjacent loops of the band "
                          f"({', '.join(vars_)}); only point='inner' tiles loops apart"), None
        la, lb = loops[k], loops[kb]
        # with point='inner' a whole loop may be a point loop (factor = its extent: a 16-wide
        # row is one vector register, so the column of the tile is the row itself)
        hi = (lambda lp: lp.extent) if point == "inner" else (lambda lp: lp.extent - 1)
        for lp, f in ((la, factors[0]), (lb, factors[1])):
            if not isinstance(f, int) or isinstance(f, bool) or not 2 <= f <= hi(lp):
                return refuse(f"tile factor {f} for {lp.var} must be in [2, {hi(lp)}]"), None
            if lp.extent % f:
                return refuse(f"tile factor {f} does not divide the extent {lp.extent} of "
                              f"{lp.var} (use loop_split for a guarded split)"), None
        whole_a, whole_b = factors[0] == la.extent, factors[1] == lb.extent
        if whole_a and whole_b:
            return refuse(f"both factors equal the extents of {la.var} and {lb.var}: that is "
                          f"a loop_reorder"), None
        between = [lp.var for lp in loops[k + 1:kb]]
        rest = [lp.var for lp in loops[kb + 1:]]
        if point == "inner" and not rest:
            return refuse(f"no loop of the band lies below {names[1]}: 'inner' would equal "
                          f"'adjacent'"), None
        # ``above``: the point loops go right above that loop of the band, not below all of
        # it (a cache tile over a register tile: for i_o, j_o, k_o, i_m, k_i, i_i, j_i)
        above = params.get("above")
        cut = len(rest)
        if above is not None:
            if point != "inner":
                return refuse("'above' places the point loops of a tile with point 'inner'"), None
            if above not in rest:
                return refuse(f"'above' must name a loop of the band below {names[1]} "
                              f"({', '.join(rest) or 'none'}), not {above!r}"), None
            cut = rest.index(above)
            if cut == 0 and not between:
                return refuse(f"the point loops right above {above}, the loop after "
                              f"{names[1]}: that is the 'adjacent' tiling"), None
        ra, rb = rest[:cut], rest[cut:]
        pa = tuple(site.path) + (0,) * k
        if point == "inner" and (whole_a or whole_b):
            if whole_a:
                p2, bo, bi = _split(program, pa + (0,) * (1 + len(between)), factors[1])
                names2 = [la.var, *between, bo, bi, *rest]
                order = [*between, bo, *ra, la.var, bi, *rb]
            else:
                p2, ao, ai = _split(program, pa, factors[0])
                names2 = [ao, ai, *between, lb.var, *rest]
                order = [ao, *between, *ra, ai, lb.var, *rb]
            v, reassoc = _reorder_analysis(p2, pa, names2, order)
            if not v.ok:
                return refuse(f"tiling {names[0]},{names[1]} is illegal: {v.reason}"), None
            return OK, (p2, pa, names2, order, reassoc)
        p1, ao, ai = _split(program, pa, factors[0])
        # b sits len(between) levels below a's inner half
        p2, bo, bi = _split(p1, pa + (0,) * (2 + len(between)), factors[1])
        if point == "inner":
            names2 = [ao, ai, *between, bo, bi, *rest]
            order = [ao, *between, bo, *ra, ai, bi, *rb]
        else:
            names2, order = [ao, ai, bo, bi], [ao, bo, ai, bi]
        v, reassoc = _reorder_analysis(p2, pa, names2, order)
        if not v.ok:
            return refuse(f"tiling {names[0]},{names[1]} is illegal: {v.reason}"), None
        return OK, (p2, pa, names2, order, reassoc)

    def exactness_for(self, program, site, params):
        v, plan = self._plan(program, site, params)
        return "reassociation" if v.ok and plan[-1] else "exact"

    def check(self, program, site, params):
        return self._plan(program, site, params)[0]

    def rewrite(self, program, site, params):
        v, plan = self._plan(program, site, params)
        p2, pa, names, order, _ = plan
        return _reorder(p2, pa, names, order)


@register
class LoopFusion(Strategy):
    name = "loop_fusion"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Merge two adjacent sibling loops of the same extent into one; legal iff no "
                   "instance of the second body depends on a later iteration of the first.")

    def sites(self, program, analysis=None):
        out = []

        def scan(body, base):
            for k in range(len(body) - 1):
                a, b = body[k], body[k + 1]
                if (isinstance(a, A.Loop) and isinstance(b, A.Loop) and a.extent == b.extent
                        and a.kind == "serial" and b.kind == "serial"):
                    out.append(Site.make(base + (k,), [a.var, b.var]))

        scan(program.body, ())
        for p, s in iter_stmts(program.body):
            if isinstance(s, (A.Loop, A.If)):
                scan(s.body, p)
        return out

    def check(self, program, site, params):
        first, v = _loop_site(program, site)
        if first is None:
            return v
        p2 = tuple(site.path[:-1]) + (site.path[-1] + 1,)
        second = node_at(program, p2)
        if not isinstance(second, A.Loop):
            return refuse(f"the statement after loop {first.var} is not a loop")
        if len(site.loops) > 1 and site.loops[1] != second.var:
            return refuse(f"the loop after {first.var} is {second.var}, not {site.loops[1]}")
        if second.kind != "serial":
            return refuse(f"loop {second.var} is {second.kind}")
        if first.extent != second.extent:
            return refuse(f"extents differ: {first.var} in {first.extent}, "
                          f"{second.var} in {second.extent}")
        acc1 = D.collect_under(program, tuple(site.path))
        acc2 = D.collect_under(program, p2)
        o = len(enclosing_loops(program, site.path))
        for a, b in D.conflicting_pairs(acc1, acc2):
            outer = D.common_loops(a, b)[:o]
            common = outer + [(a.loops[o].var, b.loops[o].var, first.extent)]
            vec = ["="] * o + [">"]
            if not D.feasible(a, b, common, vec):
                continue
            if a.write and a.reduction:
                stmt = node_at(program, a.stmt)
                axes = reduction_axes(stmt, enclosing_loops(program, a.stmt))
                if first.var in axes:
                    return refuse(f"the first loop reduces {a.tensor} over {first.var} "
                                  f"({_stmt_text(a)}); the second reads or writes it "
                                  f"({_stmt_text(b)}) before the reduction is complete")
            return refuse(f"fusing {first.var} and {second.var} would reverse the "
                          f"{_dep_kind(a, b)} dependence on {a.tensor}: iteration {first.var}=x of "
                          f"{_stmt_text(a)} must precede iteration {second.var}=y<x of "
                          f"{_stmt_text(b)}")
        return OK

    def rewrite(self, program, site, params):
        first = node_at(program, site.path)
        p2 = tuple(site.path[:-1]) + (site.path[-1] + 1,)
        second = node_at(program, p2)
        bound2 = {s.var for _, s in iter_stmts(second.body) if isinstance(s, A.Loop)}
        bound1 = {s.var for _, s in iter_stmts(first.body) if isinstance(s, A.Loop)}
        var = first.var
        if var != second.var and var in bound2:
            var = fresh_name(first.var, all_names(program))
        if second.var in bound1 and var == second.var:  # pragma: no cover - var is first.var
            var = fresh_name(first.var, all_names(program))
        b1 = tuple(subst_stmt(s, {first.var: A.Var(var)}) for s in first.body) \
            if var != first.var else first.body
        b2 = tuple(subst_stmt(s, {second.var: A.Var(var)}) for s in second.body) \
            if var != second.var else second.body
        fused = A.Loop(var, first.extent, "serial", b1 + b2)
        prog = replace_at(program, p2, [])
        return replace_at(prog, site.path, [fused])


@register
class LoopCollapse(Strategy):
    name = "loop_collapse"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Collapse two perfectly nested serial loops `for i in N: for j in M` into one "
                   "`for i_j in N*M` with i = i_j // M, j = i_j % M (iterations run in the same "
                   "order). One long loop gives a vector or a parallel loop a length whole "
                   "registers or cores divide (a 56x56 image row pair is 3136 = 196 x 16 lanes).")

    def sites(self, program, analysis=None):
        return [Site.make(p, [s.var, s.body[0].var]) for p, s in iter_stmts(program.body)
                if _collapsible(s)]

    def params(self, program, site, rng=None):
        return [{}]

    def check(self, program, site, params):
        outer, v = _loop_site(program, site)
        if outer is None:
            return v
        if len(outer.body) != 1 or not isinstance(outer.body[0], A.Loop):
            return refuse(f"loop {outer.var} does not hold exactly one loop: only a perfect "
                          f"nest collapses")
        inner = outer.body[0]
        if len(site.loops) > 1 and site.loops[1] != inner.var:
            return refuse(f"the loop inside {outer.var} is {inner.var}, not {site.loops[1]}")
        if inner.kind != "serial":
            return refuse(f"loop {inner.var} is already {inner.kind}")
        if outer.extent < 2 or inner.extent < 2:
            return refuse(f"loop {outer.var if outer.extent < 2 else inner.var} has extent 1: "
                          f"nothing to collapse")
        # a reduction's axes are the loops absent from its left-hand side: one loop over a
        # spatial and a reduction axis would be neither (its init would run every iteration)
        for p, st in iter_stmts(inner.body, tuple(site.path) + (0,)):
            if isinstance(st, A.Assign) and st.is_reduction:
                axes = reduction_axes(st, enclosing_loops(program, p))
                if (outer.var in axes) != (inner.var in axes):
                    red, sp = (outer, inner) if outer.var in axes else (inner, outer)
                    return refuse(f"{red.var} is a reduction axis of `{format_stmt(st).strip()}` "
                                  f"and {sp.var} is not: a collapsed loop would be neither")
        return OK

    def rewrite(self, program, site, params):
        outer = node_at(program, site.path)
        inner = outer.body[0]
        var = fresh_name(f"{outer.var}_{inner.var}", all_names(program))
        m = inner.extent
        x = A.Var(var)
        sub = {outer.var: A.Binary("//", x, A.const(m)), inner.var: A.Binary("%", x, A.const(m))}
        body = tuple(subst_stmt(b, sub) for b in inner.body)
        return replace_at(program, site.path, [A.Loop(var, outer.extent * m, "serial", body)])


def _collapsible(s) -> bool:
    return (isinstance(s, A.Loop) and s.kind == "serial" and len(s.body) == 1
            and isinstance(s.body[0], A.Loop) and s.body[0].kind == "serial"
            and s.extent >= 2 and s.body[0].extent >= 2)


class _KindChange(Strategy):
    """Shared shape of unrolling / parallelization / vectorization: one loop changes kind."""

    kind = ""
    verb = ""

    def params(self, program, site, rng=None):
        return [{}]

    def rewrite(self, program, site, params):
        loop = node_at(program, site.path)
        return replace_at(program, site.path, [replace(loop, kind=self.kind)])


@register
class LoopUnrolling(_KindChange):
    name = "loop_unrolling"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    kind = "unrolled"
    description = (f"Mark a serial loop of extent 2..{MAX_UNROLL} `unrolled`; with `inner`, "
                   f"also every serial loop inside it, when the loop's body then runs at most "
                   f"{MAX_UNROLL} statement instances: a small window (a pooling or stencil "
                   f"iteration's reduction, its padding copy) becomes straight-line code, as "
                   f"MetaSchedule's auto-unroll makes it.")

    def sites(self, program, analysis=None):
        return [Site.make(p, [s.var]) for p, s in iter_stmts(program.body)
                if isinstance(s, A.Loop) and s.kind == "serial" and 2 <= s.extent <= MAX_UNROLL]

    def params(self, program, site, rng=None):
        loop = node_at(program, site.path)
        if isinstance(loop, A.Loop) and any(isinstance(s, A.Loop) and s.kind == "serial"
                                            for _, s in iter_stmts(loop.body)):
            return [{}, {"inner": True}]
        return [{}]

    def check(self, program, site, params):
        loop, v = _loop_site(program, site)
        if loop is None:
            return v
        if not 2 <= loop.extent <= MAX_UNROLL:
            return refuse(f"cannot unroll {loop.var}: extent {loop.extent} is outside "
                          f"[2, {MAX_UNROLL}]")
        outer, inner = _kinds_around(program, site.path)
        if "vectorized" in outer:
            return refuse(f"cannot unroll {loop.var}: it is inside a vectorized loop")
        if params.get("inner"):
            if "serial" not in inner:
                return refuse(f"loop {loop.var} holds no serial loop to unroll with it")
            bad = [k for k in inner if k not in ("serial", "unrolled")]
            if bad:
                return refuse(f"cannot unroll the loops inside {loop.var}: one is {bad[0]}")
            n = statement_instances(loop)
            if n > MAX_UNROLL:
                return refuse(f"unrolling {loop.var} and the loops inside it would write out "
                              f"{n} statement instances, more than {MAX_UNROLL}")
        return OK

    def rewrite(self, program, site, params):
        loop = node_at(program, site.path)
        if params.get("inner"):
            return replace_at(program, site.path, [_unroll_all(loop)])
        return super().rewrite(program, site, params)


def _unroll_all(node):
    """``node`` with every serial loop in it (itself included) marked unrolled."""
    if isinstance(node, A.Loop):
        return replace(node, kind="unrolled" if node.kind == "serial" else node.kind,
                       body=tuple(_unroll_all(b) for b in node.body))
    if isinstance(node, A.If):
        return replace(node, body=tuple(_unroll_all(b) for b in node.body))
    return node


@register
class LoopParallelization(_KindChange):
    name = "loop_parallelization"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu"})
    kind = "parallel"
    description = ("Run a serial loop's iterations on CPU threads; illegal on a reduction or "
                   "scan axis or any loop that carries a dependence, and when nested in or "
                   "around another parallel loop.")

    def sites(self, program, analysis=None):
        out = []
        for p, s in iter_stmts(program.body):
            if isinstance(s, A.Loop) and s.kind == "serial" and s.extent >= 2:
                outer, _ = _kinds_around(program, p)
                if all(k == "serial" for k in outer):
                    out.append(Site.make(p, [s.var]))
        return out

    def check(self, program, site, params):
        loop, v = _loop_site(program, site)
        if loop is None:
            return v
        outer, inner = _kinds_around(program, site.path)
        bad = [k for k in outer if k != "serial"]
        if bad:
            return refuse(f"cannot parallelize {loop.var}: it is inside a {bad[0]} loop")
        bad = [k for k in inner if k == "parallel" or k.startswith(("blockIdx", "threadIdx"))]
        if bad:
            return refuse(f"cannot parallelize {loop.var}: it contains a {bad[0]} loop")
        # a local staging buffer each iteration overwrites before reading (a register tile's
        # accumulators, cache_read_write) is allocated per iteration, so per thread
        return _carried_reason(program, site.path, loop, "parallelize",
                               private_to(program, tuple(site.path)))


@register
class LoopVectorization(_KindChange):
    name = "loop_vectorization"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    kind = "vectorized"
    description = (f"Mark an innermost loop whose body is one assignment `vectorized`; the "
                   f"extent must be in [2, {MAX_PARTIAL_VECTOR}] or a power of two up to "
                   f"{MAX_VECTOR}, and the loop must carry no dependence (so no reduction over "
                   f"it).")

    def sites(self, program, analysis=None):
        return [Site.make(p, [s.var]) for p, s in iter_stmts(program.body)
                if isinstance(s, A.Loop) and s.kind == "serial"
                and len(s.body) == 1 and isinstance(s.body[0], A.Assign)]

    def check(self, program, site, params):
        loop, v = _loop_site(program, site)
        if loop is None:
            return v
        if any(isinstance(b, A.Loop) for _, b in iter_stmts(loop.body)):
            return refuse(f"cannot vectorize {loop.var}: it is not an innermost loop")
        if not all(isinstance(b, A.Assign) for b in loop.body):
            return refuse(f"cannot vectorize {loop.var}: its body has a guard")
        if len(loop.body) > 1:
            # TVM 0.27's LLVM vectorizer miscompiles a vectorized loop holding several blocks
            # (one writing an intermediate the next reads gave wrong results); fission first.
            return refuse(f"cannot vectorize {loop.var}: its body holds {len(loop.body)} statements; "
                          f"split them into their own loops first (operator_fission / loop fission)")
        n = loop.extent
        if n < 2:
            return refuse(f"cannot vectorize {loop.var}: it has {n} iteration, one lane")
        if not (n <= MAX_PARTIAL_VECTOR or (n <= MAX_VECTOR and n & (n - 1) == 0)):
            # wider odd widths become vectors LLVM splits badly (28 lanes ran 15x slower than 14)
            return refuse(f"cannot vectorize {loop.var}: extent {n} is neither in "
                          f"[2, {MAX_PARTIAL_VECTOR}] nor a power of two up to {MAX_VECTOR}; "
                          f"split it first")
        outer, _ = _kinds_around(program, site.path)
        if "vectorized" in outer:
            return refuse(f"cannot vectorize {loop.var}: it is inside a vectorized loop")
        st = loop.body[0]
        if st.is_reduction and loop.var not in {v for i in st.index for v in A.free_vars(i)}:
            # the lowering's own rule (tir.lower): whatever the dependence test concludes, lanes
            # of a loop absent from the left-hand side would all update one element (found by
            # the coverage benchmark: a candidate the test passed did not lower)
            return refuse(f"cannot vectorize {loop.var}: it is a reduction axis of "
                          f"`{format_stmt(st).strip()}` (every lane would update the same "
                          f"{st.tensor} element)")
        return _carried_reason(program, site.path, loop, "vectorize")


_BLOCK_AXES, _THREAD_AXES = A.BLOCK_KINDS, A.THREAD_AXES


def _inside_block(program: A.Program, path: Path) -> bool:
    """A nested loop a block's threads can be bound at: every loop around it is blockIdx-bound
    or serial, at least one blockIdx (so a serial loop between the grid and the threads, the
    k_o of a staged tile, is run by every thread of the block)."""
    around = enclosing_loops(program, path)
    return (len(path) > 1 and any(lp.kind in _BLOCK_AXES for lp in around)
            and all(lp.kind in _BLOCK_AXES + ("serial", "unrolled") for lp in around))


def _thread_reduction(program: A.Program, path: Path, loop: A.Loop) -> str | Verdict | None:
    """When ``loop`` is a reduction axis of the statement it holds, the tensor the block's
    threads would reduce together (TVM lowers a threadIdx-bound reduction axis to a cross-thread
    reduction); a refusal when TVM cannot; None when it is no reduction axis."""
    stmts = [x for _, x in iter_stmts(loop.body) if isinstance(x, A.Assign)]
    red = [x for x in stmts if x.is_reduction
           and loop.var not in {v for i in x.index for v in A.free_vars(i)}]
    if not red:
        return None
    x = red[0]
    lhs = {v for i in x.index for v in A.free_vars(i)}
    spatial = [lp.var for _, lp in iter_stmts(loop.body) if isinstance(lp, A.Loop)
               and lp.var in lhs]
    if spatial:
        return refuse(f"cannot bind {loop.var} to threads: it is a reduction axis of "
                      f"`{format_stmt(x).strip()}` with {spatial[0]} inside it (a cross-thread "
                      f"reduction combines one element per thread)")
    if len(stmts) != 1:
        return refuse(f"cannot bind {loop.var} to threads: it is a reduction axis of "
                      f"`{format_stmt(x).strip()}` beside other statements (a cross-thread "
                      f"reduction takes the statement alone)")
    if x.op not in ("+=", "*="):
        return refuse(f"cannot bind {loop.var} to threads: TVM's cross-thread reduction matches "
                      f"no reducer for `{x.op}` with LEIR's identity (`-inf`/`inf`) in "
                      f"`{format_stmt(x).strip()}`")
    if any(isinstance(n, A.Load) and n.tensor == x.tensor for n in A.walk(x.value)) or any(
            isinstance(n, A.Load) and n.tensor == x.tensor for i in x.index for n in A.walk(i)):
        return refuse(f"`{format_stmt(x).strip()}` reads {x.tensor} itself")
    return x.tensor


def _across_threads(program: A.Program, path: Path, bound: Sequence[A.Loop]) -> Verdict:
    """Inside a block, a serial loop between the blocks and the threads (``k_o``) runs in every
    thread with no barrier between its iterations: two threads must not touch one element in
    any two of them, one writing. ``_carried_reason`` only looks within one iteration."""
    around = enclosing_loops(program, path)
    last_block = max((k for k, lp in enumerate(around) if lp.kind in _BLOCK_AXES), default=-1)
    if last_block + 1 >= len(around):
        return OK
    top = tuple(path[:last_block + 2])      # the outermost serial loop inside the blocks
    mine = {tuple(path) + (0,) * k for k in range(len(bound))}
    depth = len(top)
    accs = D.collect_under(program, top)
    for a, b in D.conflicting_pairs(accs):
        common = D.common_loops(a, b)
        levels = [k for k, (lp, _) in enumerate(zip(a.loops, common)) if lp.path in mine]
        if not levels:
            continue
        for k in levels:
            for d in ("<", ">"):
                vec = []
                for j, lp in enumerate(a.loops[:len(common)]):
                    if j == k:
                        vec.append(d)
                    elif lp.path in mine or len(lp.path) < depth:
                        vec.append("=" if j < k or len(lp.path) < depth else "*")
                    else:
                        vec.append("*")
                if D.feasible(a, b, common, vec):
                    var = a.loops[k].var
                    return refuse(f"threads of {var} would touch one element of {a.tensor} "
                                  f"(`{a.text}` and `{b.text}`) in different iterations of "
                                  f"{around[last_block + 1].var}, which runs in every thread "
                                  f"with no barrier between its iterations")
    return OK


@register
class LoopBinding(Strategy):
    name = "loop_binding"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"gpu"})
    description = ("Bind the outer loops of a top-level nest to GPU blocks and threads "
                   "(`blockIdx.x`, then `threadIdx.x`; a tiled band `i_o, j_o, i_i, j_i` to "
                   "`blockIdx.y, blockIdx.x, threadIdx.y, threadIdx.x`), or a serial nest inside "
                   "the blocks (under a `k_o` loop) to threads; each bound loop must carry no "
                   "dependence, and a block has at most 1024 threads and one extent per axis. "
                   "A reduction axis of one `+=`/`*=` statement may go to threadIdx: the block's "
                   "threads reduce together (TVM's cross-thread reduction; a reassociation).")

    def exactness_for(self, program, site, params):
        loops = band(program, site.path)
        path: Path = tuple(site.path)
        for a, lp in zip(params.get("axes") or (), loops):
            if a in _THREAD_AXES and isinstance(_thread_reduction(program, path, lp), str):
                return "reassociation"
            path = path + (0,)
        return "exact"

    def sites(self, program, analysis=None):
        out = []
        for k, s in enumerate(program.body):
            if isinstance(s, A.Loop) and s.kind == "serial":
                loops = band(program, (k,))
                out.append(Site.make((k,), [lp.var for lp in loops[:2]]))
        for p, s in iter_stmts(program.body):
            if isinstance(s, A.Loop) and s.kind == "serial" and _inside_block(program, p):
                loops = band(program, p)
                out.append(Site.make(p, [lp.var for lp in loops[:2]]))
        return out

    def params(self, program, site, rng=None):
        loops = band(program, site.path)
        if len(site.path) > 1:
            out = []
            if loops and loops[0].extent <= MAX_THREADS:
                out.append({"axes": ["threadIdx.x"]})
            if len(loops) >= 2 and loops[0].extent * loops[1].extent <= MAX_THREADS:
                out.append({"axes": ["threadIdx.y", "threadIdx.x"]})
            return out
        out = [{"axes": ["blockIdx.x"]}]
        if len(loops) >= 2 and loops[1].extent <= MAX_THREADS:
            out.append({"axes": ["blockIdx.x", "threadIdx.x"]})
        if loops and loops[0].extent <= MAX_THREADS:
            out.append({"axes": ["threadIdx.x"]})
        if len(loops) >= 2:
            out.append({"axes": ["blockIdx.y", "blockIdx.x"]})
        if len(loops) >= 4 and loops[2].extent * loops[3].extent <= MAX_THREADS:
            out.append({"axes": ["blockIdx.y", "blockIdx.x", "threadIdx.y", "threadIdx.x"]})
        return out

    def check(self, program, site, params):
        axes = params.get("axes")
        if not isinstance(axes, (list, tuple)) or not axes or not all(
                a in A.THREAD_KINDS for a in axes):
            return refuse(f"axes must be a list of {', '.join(A.THREAD_KINDS)}")
        if len(set(axes)) != len(axes):
            return refuse("each thread axis may be bound once")
        nested = len(site.path) > 1
        if nested and not _inside_block(program, tuple(site.path)):
            return refuse("only a top-level loop nest, or a nest inside blockIdx loops (and "
                          "serial ones), can be bound to the GPU grid")
        if nested and not all(a in _THREAD_AXES for a in axes):
            return refuse("inside the blocks only threadIdx axes can be bound")
        loops = band(program, site.path)
        if not loops:
            return refuse(f"no serial loop at path {list(site.path)}")
        if site.loops and site.loops[0] != loops[0].var:
            return refuse(f"the loop at path {list(site.path)} is {loops[0].var}")
        if len(axes) > len(loops):
            return refuse(f"{len(axes)} axes but only {len(loops)} perfectly nested serial loops")
        seen_thread = False
        for a in axes:
            if a.startswith("threadIdx"):
                seen_thread = True
            elif seen_thread:
                return refuse("blockIdx loops must enclose threadIdx loops")
        nest = node_at(program, site.path)
        kinds = [s.kind for _, s in iter_stmts(nest.body) if isinstance(s, A.Loop)]
        bound = [k for k in kinds if k in A.THREAD_KINDS or k == "parallel"]
        if bound:
            return refuse(f"the nest already contains a {bound[0]} loop")
        threads = 1
        for a, lp in zip(axes, loops):
            if a in _THREAD_AXES:
                threads *= lp.extent
        if threads > MAX_THREADS:
            return refuse(f"{threads} threads per block: more than {MAX_THREADS}")
        if nested:
            # one block has one shape: a thread axis bound elsewhere in this kernel must have
            # the same extent here
            top = program.body[site.path[0]]
            other = {s.kind: s.extent for _, s in iter_stmts([top]) if isinstance(s, A.Loop)
                     and s.kind in _THREAD_AXES}
            for a, lp in zip(axes, loops):
                if a in other and other[a] != lp.extent:
                    return refuse(f"{a} already has extent {other[a]} in this kernel, not "
                                  f"{lp.extent} ({lp.var}): one block has one shape")
        path: Path = tuple(site.path)
        for a, lp in zip(axes, loops):
            if a.startswith("threadIdx") and lp.extent > MAX_THREADS:
                return refuse(f"cannot bind {lp.var} (extent {lp.extent}) to {a}: more than "
                              f"{MAX_THREADS} threads per block")
            target = _thread_reduction(program, path, lp) if a in _THREAD_AXES else None
            if isinstance(target, Verdict):
                return target
            v = _carried_reason(program, path, lp, f"bind to {a}",
                                frozenset({target}) if target else frozenset())
            if not v.ok:
                return v
            path = path + (0,)
        if nested:
            v = _across_threads(program, tuple(site.path), loops[:len(axes)])
            if not v.ok:
                return v
            # the rest of the block runs in every thread once it has threads
            races = thread_races(self.rewrite(program, site, params))
            if races:
                return refuse(races[0])
        return OK

    def rewrite(self, program, site, params):
        axes = list(params["axes"])
        loops = band(program, site.path)
        body = loops[len(axes) - 1].body
        for lp, a in reversed(list(zip(loops, axes))):
            body = (A.Loop(lp.var, lp.extent, a, body),)
        return replace_at(program, site.path, list(body))


@register
class ReductionFactorization(Strategy):
    name = "reduction_factorization"
    family = "loop"
    exactness = "reassociation"
    targets = frozenset({"cpu", "gpu"})
    description = ("rfactor: split the reduction loop k of `X[..] op= e` into k_o, k_i, "
                   "accumulate partial results into a new `T[.., k_i]` (reducing over k_o), then "
                   "reduce T over k_i into X.")

    def _stmt(self, program: A.Program, site: Site) -> tuple[A.Loop | None, A.Assign | None, Verdict]:
        loop, v = _loop_site(program, site)
        if loop is None:
            return None, None, v
        if len(loop.body) != 1 or not isinstance(loop.body[0], A.Assign) or not loop.body[0].is_reduction:
            return loop, None, refuse(f"the body of {loop.var} is not a single reduction statement")
        s = loop.body[0]
        loops = enclosing_loops(program, site.path) + [loop]
        axes = reduction_axes(s, loops)
        if loop.var not in axes:
            return loop, s, refuse(f"{loop.var} is not a reduction axis of `{format_stmt(s)}`")
        if axes != [loop.var]:
            return loop, s, refuse(f"`{format_stmt(s)}` also reduces over "
                                   f"{', '.join(a for a in axes if a != loop.var)}; rfactor needs "
                                   f"{loop.var} to be its only reduction axis")
        if s.tensor in tensors_read(s.value):
            return loop, s, refuse(f"`{format_stmt(s)}` reads the tensor it reduces into")
        return loop, s, OK

    def sites(self, program, analysis=None):
        out = []
        for p, s in iter_stmts(program.body):
            if isinstance(s, A.Loop) and s.extent >= 4 and _divisors(s.extent):
                _, _, v = self._stmt(program, Site.make(p, [s.var]))
                if v.ok:
                    out.append(Site.make(p, [s.var]))
        return out

    def params(self, program, site, rng=None):
        loop = node_at(program, site.path)
        return [{"factor": f} for f in _divisors(loop.extent)] if isinstance(loop, A.Loop) else []

    def check(self, program, site, params):
        loop, s, v = self._stmt(program, site)
        if not v.ok:
            return v
        f = params.get("factor")
        if not isinstance(f, int) or isinstance(f, bool) or not 2 <= f < loop.extent:
            return refuse(f"factor must be an integer in [2, {loop.extent - 1}]")
        if loop.extent % f:
            return refuse(f"factor {f} does not divide the extent {loop.extent} of {loop.var}")
        return OK

    def rewrite(self, program, site, params):
        loop = node_at(program, site.path)
        s = loop.body[0]
        f = int(params["factor"])
        used = all_names(program)
        ko = fresh_name(f"{loop.var}_o", used)
        ki = fresh_name(f"{loop.var}_i", used | {ko})
        t = fresh_tensor(program)
        x = program.tensor(s.tensor)
        tmp = A.Tensor(t, x.dtype, tuple(x.shape) + (f,))
        k_expr = affine_expr({ko: f, ki: 1}, 0)
        value = subst_stmt(s, {loop.var: k_expr}).value
        partial = A.Assign(t, tuple(s.index) + (A.Var(ki),), s.op, value)
        nest1 = A.Loop(ko, loop.extent // f, "serial", (A.Loop(ki, f, "serial", (partial,)),))
        final = A.Assign(s.tensor, s.index, s.op, A.Load(t, tuple(s.index) + (A.Var(ki),)))
        nest2 = A.Loop(ki, f, "serial", (final,))
        prog = replace(program, intermediates=program.intermediates + (tmp,))
        return replace_at(prog, site.path, [nest1, nest2])


@register
class ReverseComputeAt(Strategy):
    name = "reverse_compute_at"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Move an elementwise consumer nest `D[v] = f(T[v], ...)` that follows the "
                   "nest producing T into that nest, under a loop `at` that only spatial loops "
                   "enclose: each iteration then finishes its part of T and consumes it at once "
                   "(an epilogue such as a bias add runs on the tile while it is in cache). The "
                   "consumer runs over the producer's spatial loops below `at`, reading T where "
                   "the producer wrote it.")

    def sites(self, program, analysis=None):
        out = []

        def scan(body, base):
            for k in range(len(body) - 1):
                if isinstance(body[k], A.Loop) and isinstance(body[k + 1], A.Loop):
                    n = perfect_nest(body[k])
                    if n is not None and perfect_nest(body[k + 1]) is not None:
                        out.append(Site.make(base + (k,), [lp.var for lp in n[0]]))

        scan(program.body, ())
        for p, st in iter_stmts(program.body):
            if isinstance(st, (A.Loop, A.If)):
                scan(st.body, p)
        return out

    def params(self, program, site, rng=None):
        n = perfect_nest(node_at(program, site.path))
        if n is None:
            return []
        loops, st = n
        axes = set(reduction_axes(st, loops))
        out = []
        for lp in loops[:-1]:
            if lp.var in axes:
                break
            out.append({"at": lp.var})
        return out

    def _plan(self, program, site, params):
        prod = node_at(program, site.path)
        if not isinstance(prod, A.Loop):
            return refuse(f"no loop at path {list(site.path)}"), None
        n = perfect_nest(prod)
        if n is None:
            return refuse(f"the nest at path {list(site.path)} is not a perfect nest ending in "
                          f"one assignment"), None
        loops, sp = list(n[0]), n[1]
        if site.loops and [lp.var for lp in loops] != list(site.loops):
            return refuse(f"the nest at path {list(site.path)} has loops "
                          f"{[lp.var for lp in loops]}, not {list(site.loops)}"), None
        cpath = tuple(site.path[:-1]) + (site.path[-1] + 1,)
        cons = node_at(program, cpath)
        nq = perfect_nest(cons) if isinstance(cons, A.Loop) else None
        if nq is None:
            return refuse("the statement after the producer nest is not a perfect nest ending "
                          "in one assignment"), None
        qloops, sq = nq
        t = sp.tensor
        at = params.get("at")
        names = [lp.var for lp in loops]
        if at not in names[:-1]:
            return refuse(f"`at` must name a loop of the producer nest above its innermost "
                          f"({', '.join(names[:-1])}), not {at!r}"), None
        d = names.index(at)
        axes = set(reduction_axes(sp, enclosing_loops(program, site.path) + loops))
        red_above = [v for v in names[:d + 1] if v in axes]
        if red_above:
            return refuse(f"{red_above[0]} is a reduction axis of `{format_stmt(sp).strip()}` at "
                          f"or above {at}: {t} is not complete within one iteration"), None
        # the consumer: a plain store over its loops, each loop one subscript of its output,
        # reading T only at that same subscript
        qvars = [lp.var for lp in qloops]
        if sq.op != "=" or not all(isinstance(e, A.Var) for e in sq.index) \
                or sorted(e.name for e in sq.index) != sorted(qvars):
            return refuse(f"the consumer `{format_stmt(sq).strip()}` is not a plain store whose "
                          f"subscripts are its loop variables"), None
        reads_t = [ld for ld in A.loads(sq.value) if ld.tensor == t]
        if not reads_t or any(tuple(ld.index) != tuple(sq.index) for ld in reads_t):
            return refuse(f"the consumer does not read {t} exactly at the element it writes"), None
        if sq.tensor == t or sq.tensor in tensors_read(sp) or sq.tensor in tensors_written(sp):
            return refuse(f"the producer touches {sq.tensor}, the consumer's output"), None
        if any(ld.tensor != t and ld.tensor in tensors_written(sp) for ld in A.loads(sq.value)):
            return refuse("the consumer reads another tensor the producer writes"), None
        shape = program.tensors[t].shape
        ext = {lp.var: lp.extent for lp in qloops}
        if len(sp.index) != len(shape) or [ext[e.name] for e in sq.index] != list(shape):
            return refuse(f"the consumer does not run over all of {t}"), None
        spatial = [lp for lp in loops if lp.var not in axes]
        if math.prod(lp.extent for lp in spatial) != math.prod(shape):
            return refuse(f"the producer's spatial loops do not write each element of {t} once"), None
        # no two iterations of the spatial loops write one element (then each iteration of
        # `at` completes its elements, and the consumer computes each output once)
        accs = [a for a in D.collect_under(program, tuple(site.path)) if a.write and a.tensor == t]
        o = len(enclosing_loops(program, site.path))
        for a in accs:
            common = D.common_loops(a, a)
            fixed = {k: "=" if k < o else "*" for k, (v, _, _) in enumerate(common)
                     if k < o or v in axes}
            vecs = D.directions(a, a, common, fixed=fixed)
            for vec in vecs:
                if any(dd != "=" for dd, (v, _, _) in zip(vec, common) if v not in axes):
                    return refuse(f"two iterations of the spatial loops may write the same "
                                  f"{t} element (direction {D.fmt_vec(vec)})"), None
        return OK, (prod, loops, sp, cpath, d, spatial, sq)

    def check(self, program, site, params):
        return self._plan(program, site, params)[0]

    def rewrite(self, program, site, params):
        _, (prod, loops, sp, cpath, d, spatial, sq) = self._plan(program, site, params)
        sub = {e.name: sp.index[k] for k, e in enumerate(sq.index)}
        body: tuple = (replace(sq, index=tuple(sp.index),
                               value=subst_expr(sq.value, sub)),)
        for lp in reversed([lp for lp in spatial if loops.index(lp) > d]):
            body = (A.Loop(lp.var, lp.extent, "serial", body),)
        inner = loops[d]
        new_inner = replace(inner, body=tuple(inner.body) + body)
        ppath = tuple(site.path) + (0,) * d
        out = replace_at(program, cpath, [])
        return replace_at(out, ppath, [new_inner])


@register
class ComputeAt(Strategy):
    name = "compute_at"
    family = "loop"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Move an elementwise producer nest `T[..] = e` into the next nest, at a chosen "
                   "loop, computing there only the region of T that one iteration reads "
                   "(recomputing overlaps).")

    # -- structure
    def _producer(self, program: A.Program, path: Path) -> tuple[list[A.Loop], A.Assign | None, str]:
        loops = band(program, path)
        if not loops:
            return [], None, "the producer is not a serial loop nest"
        body = loops[-1].body
        if len(body) != 1 or not isinstance(body[0], A.Assign):
            return loops, None, "the producer nest does not end in a single assignment"
        s = body[0]
        if s.is_reduction:
            return loops, None, "the producer is a reduction"
        if s.tensor not in {t.name for t in program.intermediates}:
            return loops, None, f"{s.tensor} is not an intermediate"
        vars_ = [lp.var for lp in loops]
        seen = []
        for e in s.index:
            if isinstance(e, A.Var) and e.name in vars_:
                seen.append(e.name)
            elif not (isinstance(e, A.Const) and e.kind == "int"):
                return loops, None, f"the producer's subscript {format_stmt(s).split(' ')[0]} is " \
                                    f"not a plain loop variable or constant in every dimension"
        if sorted(seen) != sorted(vars_):
            return loops, None, "the producer's loops do not each index one dimension of its output"
        if s.tensor in tensors_read(s.value):
            return loops, None, "the producer reads its own output"
        return loops, s, ""

    def _levels(self, program: A.Program, cpath: Path, tensor: str) -> list[Path]:
        """Loops of the consumer nest, outermost first, that contain every read of ``tensor``."""
        out: list[Path] = []
        path = cpath
        node = node_at(program, path)
        while isinstance(node, A.Loop):
            out.append(path)
            holders = [k for k, b in enumerate(node.body) if tensor in tensors_read(b)]
            if len(holders) != 1 or not isinstance(node.body[holders[0]], A.Loop):
                break
            path = path + (holders[0],)
            node = node.body[holders[0]]
        return out

    def sites(self, program, analysis=None):
        out = []
        bodies = [((), program.body)] + [(p, s.body) for p, s in iter_stmts(program.body)
                                          if isinstance(s, (A.Loop, A.If))]
        for base, body in bodies:
            for k in range(len(body) - 1):
                p = base + (k,)
                loops, s, _ = self._producer(program, p)
                if s is None or not isinstance(body[k + 1], A.Loop):
                    continue
                if s.tensor in tensors_read(body[k + 1]):
                    out.append(Site.make(p, [lp.var for lp in loops], consumer=list(base + (k + 1,)),
                                         tensor=s.tensor))
        return out

    def params(self, program, site, rng=None):
        cpath = tuple(site.get("consumer") or ())
        tensor = site.get("tensor")
        return [{"at": node_at(program, p).var} for p in self._levels(program, cpath, tensor)]

    def _plan(self, program: A.Program, site: Site, params: Mapping[str, Any]):
        loops, s, why = self._producer(program, tuple(site.path))
        if s is None:
            return refuse(why), None
        if site.loops and [lp.var for lp in loops][:len(site.loops)] != list(site.loops):
            return refuse(f"no producer nest {list(site.loops)} at path {list(site.path)}"), None
        cpath = tuple(site.get("consumer") or ())
        if cpath != tuple(site.path[:-1]) + (site.path[-1] + 1,):
            return refuse("the consumer must be the statement right after the producer"), None
        tensor = s.tensor
        if site.get("tensor") not in (None, tensor):
            return refuse(f"the producer writes {tensor}, not {site.get('tensor')}"), None
        at = params.get("at")
        levels = self._levels(program, cpath, tensor)
        lpath = next((p for p in levels if node_at(program, p).var == at), None)
        if lpath is None:
            names = [node_at(program, p).var for p in levels]
            return refuse(f"{at!r} is not a loop of the consumer nest that contains every read "
                          f"of {tensor} (choices: {', '.join(names) or 'none'})"), None
        consumer = node_at(program, cpath)
        # every other use of the tensor must be inside the chosen loop
        lnode = node_at(program, lpath)
        for p, st in iter_stmts(program.body):
            if isinstance(st, A.Assign) and st.tensor == tensor and p != tuple(site.path) + (0,) * len(loops):
                return refuse(f"{tensor} is also written by `{format_stmt(st)}`"), None
        reads_total = sum(1 for b in program.body for n in A.walk(b)
                          if isinstance(n, A.Load) and n.tensor == tensor)
        reads_inside = sum(1 for b in lnode.body for n in A.walk(b)
                           if isinstance(n, A.Load) and n.tensor == tensor)
        if reads_total != reads_inside:
            return refuse(f"{tensor} is read outside loop {at}; computing it there would leave "
                          f"those reads without values"), None
        written_in_consumer = set(tensors_written(consumer))
        clash = [t for t in tensors_read(s.value) if t in written_in_consumer]
        if clash:
            return refuse(f"the consumer nest writes {clash[0]}, which the producer reads"), None
        ch = chain(program, lpath)
        for st in ch[len(cpath) - 1:]:
            if isinstance(st, A.Loop) and st.kind != "serial":
                return refuse(f"loop {st.var} is {st.kind}: recomputed writes of {tensor} from "
                              f"different iterations would race"), None
        # the region of the tensor one iteration of the chosen loop reads
        outer_ext = {lp.var: lp.extent for lp in enclosing_loops(program, lpath) + [lnode]}
        reads: list[tuple[A.Load, dict[str, int]]] = []

        def visit(body, inner: dict[str, int], guarded: bool):
            for st in body:
                if isinstance(st, A.Loop):
                    if not visit(st.body, {**inner, st.var: st.extent}, guarded):
                        return False
                elif isinstance(st, A.If):
                    if any(isinstance(n, A.Load) and n.tensor == tensor for n in A.walk(st)):
                        return False
                else:
                    for n in A.walk(st):
                        if isinstance(n, A.Load) and n.tensor == tensor:
                            reads.append((n, inner))
            return True

        if not visit(lnode.body, {}, False):
            return refuse(f"a read of {tensor} is under a guard; its region cannot be bounded "
                          f"exactly"), None
        prod_ext = {lp.var: lp.extent for lp in loops}
        dims = []
        for d, e in enumerate(s.index):
            bases, los, his = [], [], []
            for ld, inner in reads:
                a = affine(ld.index[d])
                if a is None or any(v not in inner and v not in outer_ext for v in a[0]):
                    return refuse(f"the subscript {d} of a read of {tensor} is not affine in the "
                                  f"loop variables"), None
                base = {v: c for v, c in a[0].items() if v not in inner}
                lo = hi = a[1]
                for v, c in a[0].items():
                    if v in inner:
                        lo += min(0, c * (inner[v] - 1))
                        hi += max(0, c * (inner[v] - 1))
                bases.append(base)
                los.append(lo)
                his.append(hi)
            if any(b != bases[0] for b in bases):
                return refuse(f"reads of {tensor} move differently with the outer loops in "
                              f"dimension {d}; no single region per iteration"), None
            base, lo, hi = bases[0], min(los), max(his)
            if isinstance(e, A.Const):
                if base or lo != e.value or hi != e.value:
                    return refuse(f"reads of {tensor} reach outside the written slice "
                                  f"{e.value} of dimension {d}"), None
                dims.append((None, base, lo, hi))
                continue
            n = prod_ext[e.name]
            bmin = lo + sum(min(0, c * (outer_ext[v] - 1)) for v, c in base.items())
            bmax = hi + sum(max(0, c * (outer_ext[v] - 1)) for v, c in base.items())
            if bmin < 0 or bmax > n - 1:
                return refuse(f"the region of {tensor} read per iteration leaves the producer's "
                              f"domain [0, {n - 1}] in dimension {d}"), None
            dims.append((e.name, base, lo, hi))
        return OK, (loops, s, lpath, dims)

    def check(self, program, site, params):
        return self._plan(program, site, params)[0]

    def rewrite(self, program, site, params):
        _, plan = self._plan(program, site, params)
        loops, s, lpath, dims = plan
        lnode = node_at(program, lpath)
        scope = {lp.var for lp in enclosing_loops(program, lpath)} | {lnode.var}
        scope |= {st.var for _, st in iter_stmts(lnode.body) if isinstance(st, A.Loop)}
        scope |= set(program.tensors)
        mapping: dict[str, A.Expr] = {}
        new_loops: list[tuple[str, int]] = []
        by_var = {v: (base, lo, hi) for v, base, lo, hi in dims if v is not None}
        for lp in loops:
            base, lo, hi = by_var[lp.var]
            if hi == lo:
                mapping[lp.var] = affine_expr(base, lo)
                continue
            name = fresh_name(lp.var, scope)
            scope.add(name)
            new_loops.append((name, hi - lo + 1))
            mapping[lp.var] = affine_expr({**base, name: 1}, lo)
        stmt: A.Stmt = subst_stmt(s, mapping)
        for name, ext in reversed(new_loops):
            stmt = A.Loop(name, ext, "serial", (stmt,))
        new_l = replace(lnode, body=(stmt,) + lnode.body)
        prog = replace_at(program, lpath, [new_l])
        return replace_at(prog, site.path, [])


__all__ = ["LoopSplit", "LoopReorder", "LoopTiling", "LoopFusion", "LoopUnrolling",
           "LoopParallelization", "LoopVectorization", "LoopBinding", "ReductionFactorization",
           "ComputeAt"]
