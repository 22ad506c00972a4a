"""The graph / expression family: operator fusion and fission, compute_inline, expression
splitting, common-subexpression elimination, dead-code elimination, expression reordering, and
the concat/split pair that fuses two sibling operators over a concatenated tensor and decouples a
nest into halves.

These strategies work at the level of statements and expressions (an "operator" is a loop nest
and the statements it holds). Sites name a statement by path (``{"path": [1], "loops": ["i",
"j"]}``), with strategy-specific fields (``tensor``, ``expr``...); parameters are small JSON dicts.
Expressions are named by their canonical text (``{"expr": "T0[i,j] + C[j]"}``), so a language model
can name them back; the first occurrence in pre-order is meant.

Legality is sound: dependences come from the direction-vector tests of ``_deps`` (a dependence
that cannot be ruled out counts as present), and every refusal says why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

from ..leir import ast as A
from ..leir.private import private_to
from ..leir.printer import format_expr, format_stmt
from ..leir.types import LeirTypeError, expr_dtype
from . import _deps as D
from ..leir.ast import iter_stmts, node_at
from ..leir.nav import (Path, band, chain, enclosing_loops, reduction_axes, replace_at, tensors_read,
                        tensors_written)
from ._ir import all_names, fresh_name, fresh_tensor, rename_tensors, subst_expr, subst_stmt
from .base import OK, Site, Strategy, Verdict, refuse
from .registry import register

ALL_KINDS = A.LOOP_KINDS
PARALLEL_KINDS = ("parallel", "vectorized") + A.THREAD_KINDS


# ============================================================================ shared helpers
def map_expr(e: A.Expr, f: Callable[[A.Expr], A.Expr | None], subscripts: bool = True) -> A.Expr:
    """Top-down rewrite: ``f(node)`` returns a replacement (not revisited) or None to recurse.
    With ``subscripts=False`` the indices of loads are left alone."""
    r = f(e)
    if r is not None:
        return r
    if isinstance(e, (A.Const, A.Var)):
        return e
    if isinstance(e, A.Load):
        if not subscripts:
            return e
        return replace(e, index=tuple(map_expr(i, f, subscripts) for i in e.index))
    if isinstance(e, A.Unary):
        return replace(e, operand=map_expr(e.operand, f, subscripts))
    if isinstance(e, A.Binary):
        return replace(e, lhs=map_expr(e.lhs, f, subscripts), rhs=map_expr(e.rhs, f, subscripts))
    if isinstance(e, A.Call):
        return replace(e, args=tuple(map_expr(a, f, subscripts) for a in e.args))
    raise TypeError(e)


def map_stmt_exprs(s: A.Stmt, f: Callable[[A.Expr], A.Expr | None], targets: bool = True) -> A.Stmt:
    """Apply ``map_expr`` to every expression of a statement tree (assignment values, assignment
    subscripts unless ``targets`` is False, and if-conditions)."""
    if isinstance(s, A.Assign):
        idx = tuple(map_expr(i, f) for i in s.index) if targets else s.index
        return replace(s, index=idx, value=map_expr(s.value, f))
    if isinstance(s, A.If):
        return replace(s, cond=map_expr(s.cond, f), body=tuple(map_stmt_exprs(b, f, targets) for b in s.body))
    if isinstance(s, A.Loop):
        return replace(s, body=tuple(map_stmt_exprs(b, f, targets) for b in s.body))
    raise TypeError(s)


def value_nodes(e: A.Expr) -> Iterator[A.Expr]:
    """Pre-order nodes of a value expression, not descending into load subscripts."""
    yield e
    if isinstance(e, A.Unary):
        yield from value_nodes(e.operand)
    elif isinstance(e, A.Binary):
        yield from value_nodes(e.lhs)
        yield from value_nodes(e.rhs)
    elif isinstance(e, A.Call):
        for a in e.args:
            yield from value_nodes(a)


def prune_empty(program: A.Program) -> A.Program:
    """Remove loops and guards left with an empty body."""
    def go(body: tuple) -> tuple:
        out = []
        for s in body:
            if isinstance(s, (A.Loop, A.If)):
                b = go(s.body)
                if b:
                    out.append(replace(s, body=b) if b != s.body else s)
            else:
                out.append(s)
        return tuple(out)

    return replace(program, body=go(program.body))


def referenced(program: A.Program) -> set[str]:
    out: set[str] = set()
    for s in program.body:
        out.update(tensors_read(s))
        out.update(tensors_written(s))
    return out


def drop_unused(program: A.Program) -> A.Program:
    """Remove intermediates no statement mentions any more."""
    used = referenced(program)
    keep = tuple(t for t in program.intermediates if t.name in used)
    return replace(program, intermediates=keep) if keep != program.intermediates else program


def load_sites(program: A.Program, tensor: str) -> list[tuple[Path, A.Load]]:
    """Every load of ``tensor`` with the path of the statement (assignment or if) holding it."""
    out = []
    for p, s in iter_stmts(program.body):
        exprs: list[A.Expr] = []
        if isinstance(s, A.Assign):
            exprs = list(s.index) + [s.value]
        elif isinstance(s, A.If):
            exprs = [s.cond]
        for e in exprs:
            for ld in A.loads(e):
                if ld.tensor == tensor:
                    out.append((p, ld))
    return out


def writers(program: A.Program, tensor: str) -> list[tuple[Path, A.Assign]]:
    return [(p, s) for p, s in iter_stmts(program.body) if isinstance(s, A.Assign) and s.tensor == tensor]


def dtype_of(e: A.Expr, program: A.Program) -> str | None:
    try:
        return expr_dtype(e, program.tensors)
    except (LeirTypeError, KeyError):
        return None


def _stmt(s: A.Stmt) -> str:
    return "`" + format_stmt(s).strip().split("\n")[0] + "`"


def _guarded(program: A.Program, path: Path) -> bool:
    return any(isinstance(s, A.If) for s in (chain(program, path) or [])[:-1])


def _lex_negative_vectors(o: int, d: int) -> list[list[str]]:
    """Direction vectors over ``o`` equal outer loops and ``d`` loops that are lexicographically
    negative (the first instance runs later) on the ``d`` loops."""
    return [["="] * o + ["="] * l + [">"] + ["*"] * (d - l - 1) for l in range(d)]


def _dep_kind(a: D.Access, b: D.Access) -> str:
    if a.write and b.write:
        return "write-after-write"
    return "read-after-write" if a.write else "write-after-read"


def _reversed_dependence(program: A.Program, acc1: Sequence[D.Access], acc2: Sequence[D.Access],
                         o: int, d: int) -> tuple[D.Access, D.Access] | None:
    """A pair (a in acc1, b in acc2) conflicting with a's iteration of the ``d`` loops after b's
    (while the ``o`` outer loops are equal): running all of acc1 before acc2 (per outer
    iteration) or interleaving them per iteration would reverse it."""
    return _conflict(acc1, acc2, o, d, _lex_negative_vectors(o, d))


def _crossing_concurrent(acc1: Sequence[D.Access], acc2: Sequence[D.Access], o: int,
                         level: int, d: int) -> tuple[D.Access, D.Access] | None:
    """A pair (a in acc1, b in acc2) conflicting between different iterations of fused loop
    ``level`` (of the ``d`` fused loops; the loops above it equal), a's earlier: once fused
    under a parallel or GPU-bound loop, the two run in different threads with nothing ordering
    them (a's later iteration is ``_reversed_dependence``)."""
    vec = ["="] * o + ["="] * level + ["<"] + ["*"] * (d - level - 1)
    return _conflict(acc1, acc2, o, d, [vec])


def _conflict(acc1: Sequence[D.Access], acc2: Sequence[D.Access], o: int, d: int,
              vectors: Sequence[Sequence[str]]) -> tuple[D.Access, D.Access] | None:
    for a, b in D.conflicting_pairs(acc1, acc2):
        common = D.common_loops(a, b)
        if len(common) < o + d:
            # the d loops are different loop nodes for a and b (fusion): pair them by level
            common = common[:o] + [(a.loops[o + l].var, b.loops[o + l].var, a.loops[o + l].extent)
                                   for l in range(d)]
        else:
            common = common[:o + d]
        for vec in vectors:
            if D.feasible(a, b, common, vec):
                return a, b
    return None


def _reason_reversed(program: A.Program, a: D.Access, b: D.Access, verb: str) -> str:
    if a.write and a.reduction:
        stmt = node_at(program, a.stmt)
        if isinstance(stmt, A.Assign):
            axes = reduction_axes(stmt, enclosing_loops(program, a.stmt))
            if axes:
                return (f"{verb} would let `{b.text}` touch {a.tensor} before the reduction "
                        f"`{a.text}` over {', '.join(axes)} is complete")
    return (f"{verb} would reverse the {_dep_kind(a, b)} dependence on {a.tensor} from `{a.text}` "
            f"(a later iteration) to `{b.text}` (an earlier one)")


def band_any(program: A.Program, path: Path) -> list[A.Loop]:
    """The perfectly nested band at ``path``, loops of any kind."""
    node = node_at(program, path)
    out: list[A.Loop] = []
    while isinstance(node, A.Loop):
        out.append(node)
        node = node.body[0] if len(node.body) == 1 and isinstance(node.body[0], A.Loop) else None
    return out


def bound_vars(body: Sequence[A.Stmt]) -> set[str]:
    return {s.var for _, s in iter_stmts(tuple(body)) if isinstance(s, A.Loop)}


def _bodies(program: A.Program) -> list[tuple[Path, tuple]]:
    return [((), program.body)] + [(p, s.body) for p, s in iter_stmts(program.body)
                                   if isinstance(s, (A.Loop, A.If))]


def _expr_by_text(value: A.Expr, text: Any) -> A.Expr | None:
    if not isinstance(text, str):
        return None
    for n in value_nodes(value):
        if format_expr(n) == text:
            return n
    return None


def _replace_first(e: A.Expr, target: A.Expr, new: A.Expr) -> A.Expr:
    done = [False]

    def f(n):
        if not done[0] and n == target:
            done[0] = True
            return new
        return None

    return map_expr(e, f, subscripts=False)


def _replace_all(e: A.Expr, target: A.Expr, new: A.Expr) -> A.Expr:
    return map_expr(e, lambda n: new if n == target else None, subscripts=False)


# ============================================================================ operator fusion
def _fusion_plan(program: A.Program, p1: Path) -> tuple[Verdict, Any]:
    n1 = node_at(program, p1)
    if not isinstance(n1, A.Loop):
        return refuse(f"no loop nest at path {list(p1)}"), None
    p2 = tuple(p1[:-1]) + (p1[-1] + 1,)
    n2 = node_at(program, p2)
    if not isinstance(n2, A.Loop):
        return refuse(f"the statement after the nest at path {list(p1)} is not a loop nest"), None
    b1, b2 = band_any(program, p1), band_any(program, p2)
    d = 0
    while d < min(len(b1), len(b2)) and b1[d].extent == b2[d].extent and b1[d].kind == b2[d].kind:
        d += 1
    if d == 0:
        return refuse(f"the nests' outer loops differ ({b1[0].var} in {b1[0].extent} {b1[0].kind}, "
                      f"{b2[0].var} in {b2[0].extent} {b2[0].kind}): no common iteration domain"), None
    written1 = set(tensors_written(n1))
    shared = [t for t in tensors_read(n2) if t in written1]
    if not shared:
        return refuse(f"the second nest reads nothing the first writes: they are not a "
                      f"producer-consumer pair of operators"), None
    acc1 = D.collect_under(program, p1)
    acc2 = D.collect_under(program, p2)
    o = len(enclosing_loops(program, p1))
    w = _reversed_dependence(program, acc1, acc2, o, d)
    if w is not None:
        return refuse(_reason_reversed(program, w[0], w[1], "fusing the operators")), None
    for lvl in (l for l in range(d) if b1[l].kind in A.CONCURRENT_KINDS):
        w = _crossing_concurrent(acc1, acc2, o, lvl, d)
        if w is not None:
            a, b = w
            return refuse(f"fusing the operators under {b1[lvl].kind} loop {b1[lvl].var} would "
                          f"race: `{b.text}` in one iteration touches {a.tensor} that "
                          f"`{a.text}` writes in another, and {b1[lvl].kind} iterations are not "
                          f"ordered"), None
    return OK, (b1, b2, d, p2)


@register
class OperatorFusion(Strategy):
    name = "operator_fusion"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    inverse = "operator_fission"
    description = ("Merge a producer nest and the adjacent nest that consumes its output into one "
                   "nest over their common iteration domain (every matching loop level), the "
                   "consumer's statements after the producer's; legal iff no consumer instance "
                   "needs a producer instance of a later iteration.")

    def sites(self, program, analysis=None):
        out = []
        for base, body in _bodies(program):
            for k in range(len(body) - 1):
                if isinstance(body[k], A.Loop) and isinstance(body[k + 1], A.Loop):
                    p = base + (k,)
                    b1, b2 = band_any(program, p), band_any(program, base + (k + 1,))
                    out.append(Site.make(p, [lp.var for lp in b1][:1] + [lp.var for lp in b2][:1]))
        return out

    def check(self, program, site, params):
        v, plan = _fusion_plan(program, tuple(site.path))
        if not v.ok:
            return v
        b1, b2, _, _ = plan
        if len(site.loops) >= 2 and (site.loops[0] != b1[0].var or site.loops[1] != b2[0].var):
            return refuse(f"the nests at path {list(site.path)} start with {b1[0].var} and "
                          f"{b2[0].var}, not {site.loops[0]} and {site.loops[1]}")
        return OK

    def rewrite(self, program, site, params):
        p1 = tuple(site.path)
        _, (b1, b2, d, p2) = _fusion_plan(program, p1)
        rest1, rest2 = b1[d - 1].body, b2[d - 1].body
        inner2, inner1 = bound_vars(rest2), bound_vars(rest1)
        used = all_names(program)
        m1: dict[str, A.Expr] = {}
        m2: dict[str, A.Expr] = {}
        names = []
        for l in range(d):
            v1, v2 = b1[l].var, b2[l].var
            name = v1
            if name != v2 and name in inner2:
                name = fresh_name(v1, used)
                used.add(name)
            names.append(name)
            if name != v1:
                m1[v1] = A.Var(name)
            if name != v2:
                m2[v2] = A.Var(name)
        body = tuple(subst_stmt(s, m1) for s in rest1) + tuple(subst_stmt(s, m2) for s in rest2)
        for l in reversed(range(d)):
            body = (A.Loop(names[l], b1[l].extent, b1[l].kind, body),)
        prog = replace_at(program, p2, [])
        return replace_at(prog, p1, list(body))


@register
class OperatorFission(Strategy):
    name = "operator_fission"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    inverse = "operator_fusion"
    description = ("Split a loop nest holding several statements into two nests with the same "
                   "loops, the statements before a cut in the first, the rest in the second; legal "
                   "iff no statement after the cut feeds one before it in a later iteration.")

    def _chain(self, program: A.Program, path: Path) -> list[A.Loop]:
        """The loops from ``path`` down to the first one whose body is not a single loop."""
        return band_any(program, path)

    def sites(self, program, analysis=None):
        out = []
        for p, s in iter_stmts(program.body):
            if not isinstance(s, A.Loop):
                continue
            parent = node_at(program, p[:-1]) if len(p) > 1 else None
            if isinstance(parent, A.Loop) and len(parent.body) == 1:
                continue  # not the start of a band
            loops = self._chain(program, p)
            if len(loops[-1].body) >= 2:
                out.append(Site.make(p, [lp.var for lp in loops]))
        return out

    def params(self, program, site, rng=None):
        loops = self._chain(program, tuple(site.path))
        if not loops:
            return []
        return [{"at": k} for k in range(1, len(loops[-1].body))]

    def check(self, program, site, params):
        path = tuple(site.path)
        loops = self._chain(program, path)
        if not loops:
            return refuse(f"no loop nest at path {list(path)}")
        if site.loops and [lp.var for lp in loops] != list(site.loops):
            return refuse(f"the nest at path {list(path)} is ({', '.join(lp.var for lp in loops)}), "
                          f"not ({', '.join(site.loops)})")
        body = loops[-1].body
        at = params.get("at")
        if not isinstance(at, int) or isinstance(at, bool) or not 1 <= at < len(body):
            return refuse(f"at must be an integer in [1, {len(body) - 1}] (the innermost body of "
                          f"the nest holds {len(body)} statements)")
        inner = path + (0,) * (len(loops) - 1)
        acc1 = [a for k in range(at) for a in D.collect_under(program, inner + (k,))]
        acc2 = [a for k in range(at, len(body)) for a in D.collect_under(program, inner + (k,))]
        o = len(enclosing_loops(program, path))
        w = _reversed_dependence(program, acc1, acc2, o, len(loops))
        if w is not None:
            return refuse(_reason_reversed(program, w[0], w[1], "fission"))
        return OK

    def rewrite(self, program, site, params):
        path = tuple(site.path)
        loops = self._chain(program, path)
        at = int(params["at"])
        body = loops[-1].body
        parts = []
        for part in (body[:at], body[at:]):
            b = tuple(part)
            for lp in reversed(loops):
                b = (A.Loop(lp.var, lp.extent, lp.kind, b),)
            parts.append(b[0])
        return replace_at(program, path, parts)


# ============================================================================ compute_inline
def _later_writes(program: A.Program, reader: D.Access, tensor_writes: Sequence[D.Access]) -> D.Access | None:
    """A write that may run after an instance of ``reader`` and touch the element it read."""
    for w in tensor_writes:
        common = D.common_loops(reader, w)
        n = len(common)
        vecs = [["="] * l + ["<"] + ["*"] * (n - l - 1) for l in range(n)]
        if w.stmt > reader.stmt:
            vecs.append(["="] * n)
        for vec in vecs:
            if D.feasible(reader, w, common, vec):
                return w
    return None


@register
class ComputeInline(Strategy):
    name = "compute_inline"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Substitute an elementwise producer `T[i,j] = e` into every read of T and remove "
                   "the producer and T. The producer must be a plain store (not a reduction) that "
                   "writes each element of T once; its inputs must not change between the producer "
                   "and the consumers. Inlining recomputes e at every read.")

    def sites(self, program, analysis=None):
        inter = {t.name for t in program.intermediates}
        out = []
        for p, s in iter_stmts(program.body):
            if isinstance(s, A.Assign) and s.tensor in inter and load_sites(program, s.tensor):
                out.append(Site.make(p, [lp.var for lp in enclosing_loops(program, p)], tensor=s.tensor))
        return out

    def check(self, program, site, params):
        path = tuple(site.path)
        s = node_at(program, path)
        if not isinstance(s, A.Assign):
            return refuse(f"no assignment at path {list(path)}")
        if site.get("tensor") not in (None, s.tensor):
            return refuse(f"the statement at path {list(path)} writes {s.tensor}, not {site.get('tensor')}")
        t = program.tensors.get(s.tensor)
        if s.tensor not in {x.name for x in program.intermediates}:
            return refuse(f"{s.tensor} is a kernel {'output' if t in program.outputs else 'input'}, "
                          f"not an intermediate: it cannot be inlined away")
        if s.is_reduction:
            return refuse(f"{_stmt(s)} is a reduction ({s.op}): only a plain elementwise store "
                          f"can be inlined")
        if _guarded(program, path):
            return refuse(f"{_stmt(s)} is under an if guard: it does not write every element")
        loops = enclosing_loops(program, path)
        ext = {lp.var: lp.extent for lp in loops}
        seen = []
        for d, (e, n) in enumerate(zip(s.index, t.shape)):
            if isinstance(e, A.Var) and e.name in ext and ext[e.name] == n and e.name not in seen:
                seen.append(e.name)
            elif isinstance(e, A.Const) and e.kind == "int" and n == 1:
                pass
            else:
                return refuse(f"{_stmt(s)} is not elementwise: subscript {d} of {s.tensor} is not a "
                              f"distinct loop variable spanning the dimension")
        if set(seen) != set(ext):
            extra = [v for v in ext if v not in seen]
            return refuse(f"{_stmt(s)} writes the same {s.tensor} element in every iteration of "
                          f"{', '.join(extra)}")
        others = [q for q, _ in writers(program, s.tensor) if q != path]
        if others:
            return refuse(f"{s.tensor} is also written by {_stmt(node_at(program, others[0]))}")
        if s.tensor in tensors_read(s.value):
            return refuse(f"{_stmt(s)} reads its own output")
        reads = load_sites(program, s.tensor)
        if not reads:
            return refuse(f"nothing reads {s.tensor}")
        loop_prefix = len(path) - 1
        for q, ld in reads:
            shares_loop = any(isinstance(x, A.Loop) for x in
                              (chain(program, _common_prefix(q, path)) or []))
            if q <= path:
                return refuse(f"{_stmt(node_at(program, q))} reads {s.tensor} before {_stmt(s)} writes it")
            if not shares_loop:
                continue
            same_body = q[:loop_prefix] == path[:loop_prefix] and q[loop_prefix] > path[-1]
            if not (same_body and ld.index == s.index):
                return refuse(f"{_stmt(node_at(program, q))} reads {format_expr(ld)} inside the "
                              f"producer's loops but not the element the same iteration stores")
        # the producer's inputs must keep their values until the last consumer
        accs = D.collect(program.body)
        mine = [a for a in accs if a.stmt == path and not a.write]
        for x in tensors_read(s.value):
            ws = [a for a in accs if a.tensor == x and a.write]
            for r in (a for a in mine if a.tensor == x):
                w = _later_writes(program, r, ws)
                if w is not None:
                    return refuse(f"{x} is written by `{w.text}` after {_stmt(s)} reads it: the "
                                  f"consumers would see a different value")
        return OK

    def rewrite(self, program, site, params):
        path = tuple(site.path)
        s = node_at(program, path)
        t = program.tensor(s.tensor)
        value = s.value
        dt = dtype_of(value, program)
        if dt != t.dtype:
            value = A.Call(t.dtype, (value,))
        dims = [(d, e.name) for d, e in enumerate(s.index) if isinstance(e, A.Var)]

        def f(n):
            if isinstance(n, A.Load) and n.tensor == s.tensor:
                idx = tuple(map_expr(i, f) for i in n.index)
                return subst_expr(value, {v: idx[d] for d, v in dims})
            return None

        prog = replace_at(program, path, [])
        prog = replace(prog, body=tuple(map_stmt_exprs(b, f) for b in prog.body))
        return drop_unused(prune_empty(prog))


def _common_prefix(a: Path, b: Path) -> Path:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


# ============================================================================ expression splitting / CSE
def _subexpr_candidates(program: A.Program, s: A.Assign, min_count: int) -> list[A.Expr]:
    """Proper subexpressions of a statement's value worth naming: an operation (not a bare load,
    variable, literal or cast) that reads a tensor and has a concrete non-boolean dtype; with
    ``min_count`` = 2, only those occurring at least twice."""
    counts: dict[A.Expr, int] = {}
    order: list[A.Expr] = []
    for n in value_nodes(s.value):
        if n is s.value and min_count < 2:
            continue
        if not isinstance(n, (A.Binary, A.Unary, A.Call)):
            continue
        if isinstance(n, A.Call) and n.func in A.DTYPES:
            continue
        if not any(True for _ in A.loads(n)):
            continue
        dt = dtype_of(n, program)
        if dt not in A.DTYPES or dt == "bool":
            continue
        if n not in counts:
            order.append(n)
        counts[n] = counts.get(n, 0) + 1
    return [n for n in order if counts[n] >= min_count and not (min_count < 2 and n == s.value)]


def _assign_site(program: A.Program, site: Site) -> tuple[A.Assign | None, Verdict]:
    s = node_at(program, site.path)
    if not isinstance(s, A.Assign):
        return None, refuse(f"no assignment at path {list(site.path)}")
    return s, OK


class _HoistSubexpression(Strategy):
    """A subexpression of one statement stored first into a new intermediate, read back at every
    occurrence. Subclasses choose how often it must occur (``min_count``), extra legality
    (``check_more``) and the intermediate's indexing and scope (``temporary``)."""

    min_count: int = 1

    def sites(self, program, analysis=None):
        out = []
        for p, s in iter_stmts(program.body):
            if isinstance(s, A.Assign) and _subexpr_candidates(program, s, self.min_count):
                out.append(Site.make(p, [lp.var for lp in enclosing_loops(program, p)]))
        return out

    def params(self, program, site, rng=None):
        s = node_at(program, site.path)
        if not isinstance(s, A.Assign):
            return []
        return [{"expr": format_expr(n)} for n in _subexpr_candidates(program, s, self.min_count)]

    def check(self, program, site, params):
        s, v = _assign_site(program, site)
        if s is None:
            return v
        sub = _expr_by_text(s.value, params.get("expr"))
        if sub is None:
            return refuse(f"{params.get('expr')!r} is not a subexpression of {_stmt(s)}")
        why = self.check_more(program, site, s, sub)
        if why is not None:
            return refuse(why)
        if sub not in _subexpr_candidates(program, s, self.min_count):
            return refuse(f"{format_expr(sub)} is not an operation on tensor values with a "
                          f"concrete numeric dtype")
        return OK

    def check_more(self, program, site, stmt, sub) -> str | None:
        return None

    def temporary(self, program, path, sub) -> tuple[A.Tensor, A.Load]:
        raise NotImplementedError

    def rewrite(self, program, site, params):
        path = tuple(site.path)
        s = node_at(program, path)
        sub = _expr_by_text(s.value, params["expr"])
        t, load = self.temporary(program, path, sub)
        pre = A.Assign(t.name, load.index, "=", sub)
        new = replace(s, value=_replace_all(s.value, sub, load))
        prog = replace(program, intermediates=program.intermediates + (t,))
        return replace_at(prog, path, [pre, new])


@register
class ExpressionSplitting(_HoistSubexpression):
    name = "expression_splitting"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Hoist a subexpression of a statement into a new intermediate `T[..] = sub` "
                   "stored right before the statement (same loops, same iteration), indexed by the "
                   "loop variables it uses (and any parallel/vector/thread loop around it), and "
                   "read it back at every occurrence.")
    min_count = 1

    def check_more(self, program, site, stmt, sub):
        if sub == stmt.value:
            return "the whole right-hand side is not a proper subexpression"
        return None

    def temporary(self, program, path, sub):
        used = set(A.free_vars(sub))
        dims = [lp for lp in enclosing_loops(program, path) if lp.var in used or lp.kind in PARALLEL_KINDS]
        name = fresh_tensor(program)
        return (A.Tensor(name, dtype_of(sub, program), tuple(lp.extent for lp in dims)),
                A.Load(name, tuple(A.Var(lp.var) for lp in dims)))


@register
class CommonSubexpressionElimination(_HoistSubexpression):
    name = "common_subexpression_elimination"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("A subexpression that occurs several times in one statement is computed once per "
                   "iteration into a `local` scalar stored right before the statement, and every "
                   "occurrence reads the scalar. Refused inside parallel, vectorized or thread-bound "
                   "loops, where one scalar would be shared by concurrent iterations.")
    min_count = 2

    def check_more(self, program, site, stmt, sub):
        if sum(1 for n in value_nodes(stmt.value) if n == sub) < 2:
            return (f"{format_expr(sub)} occurs only once in {_stmt(stmt)}: nothing to share "
                    f"(use expression_splitting)")
        for lp in enclosing_loops(program, tuple(site.path)):
            if lp.kind in PARALLEL_KINDS:
                return (f"loop {lp.var} is {lp.kind}: a scalar temporary would be shared by "
                        f"its concurrent iterations")
        return None

    def temporary(self, program, path, sub):
        name = fresh_tensor(program)
        return A.Tensor(name, dtype_of(sub, program), (), "local"), A.Load(name, ())


# ============================================================================ dead code
@register
class DeadCodeElimination(Strategy):
    name = "dead_code_elimination"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    description = ("Remove every statement writing an intermediate that nothing else reads (and "
                   "the intermediate itself, and loops left empty); also drop intermediates that "
                   "are declared but never used.")

    def sites(self, program, analysis=None):
        out = []
        for t in program.intermediates:
            ws = writers(program, t.name)
            path = ws[0][0] if ws else ()
            out.append(Site.make(path, [lp.var for lp in enclosing_loops(program, path)] if ws else [],
                                 tensor=t.name))
        return out

    def check(self, program, site, params):
        name = site.get("tensor")
        if not isinstance(name, str) or name not in program.tensors:
            return refuse(f"no tensor {name!r}")
        if name in {t.name for t in program.outputs}:
            return refuse(f"{name} is a kernel output: its value is the result")
        if name in {t.name for t in program.inputs}:
            return refuse(f"{name} is a kernel input")
        for q, ld in load_sites(program, name):
            s = node_at(program, q)
            if isinstance(s, A.Assign) and s.tensor == name:
                continue
            return refuse(f"{name} is read by {_stmt(s)}: its statements are not dead")
        return OK

    def rewrite(self, program, site, params):
        name = site.get("tensor")

        def go(body):
            out = []
            for s in body:
                if isinstance(s, A.Assign):
                    if s.tensor != name:
                        out.append(s)
                else:
                    out.append(replace(s, body=go(s.body)))
            return tuple(out)

        prog = replace(program, body=go(program.body),
                       intermediates=tuple(t for t in program.intermediates if t.name != name))
        return prune_empty(prog)


# ============================================================================ expression reorder
def _float_like(dt: str | None) -> bool:
    return dt is None or dt in A.FLOAT_DTYPES or dt == "float"


@register
class ExpressionReorder(Strategy):
    name = "expression_reorder"
    family = "graph"
    exactness = "reassociation"
    targets = frozenset({"cpu", "gpu"})
    inverse = "expression_reorder"
    description = ("Reorder the operands of + or *: `swap` (a+b -> b+a, bit-exact), or reassociate "
                   "`(a+b)+c -> a+(b+c)` (`rotate_right`) / `a+(b+c) -> (a+b)+c` (`rotate_left`), "
                   "exact on integers and a reassociation on floats.")

    OPS = ("+", "*")

    def _choices(self, program: A.Program, s: A.Assign) -> list[dict[str, Any]]:
        out, seen = [], set()
        for n in value_nodes(s.value):
            if not isinstance(n, A.Binary) or n.op not in self.OPS:
                continue
            text = format_expr(n)
            if text in seen:
                continue
            seen.add(text)
            if n.lhs != n.rhs:
                out.append({"expr": text, "rewrite": "swap"})
            if isinstance(n.lhs, A.Binary) and n.lhs.op == n.op:
                out.append({"expr": text, "rewrite": "rotate_right"})
            if isinstance(n.rhs, A.Binary) and n.rhs.op == n.op:
                out.append({"expr": text, "rewrite": "rotate_left"})
        return out

    def sites(self, program, analysis=None):
        return [Site.make(p, [lp.var for lp in enclosing_loops(program, p)])
                for p, s in iter_stmts(program.body)
                if isinstance(s, A.Assign) and self._choices(program, s)]

    def params(self, program, site, rng=None):
        s = node_at(program, site.path)
        return self._choices(program, s) if isinstance(s, A.Assign) else []

    def check(self, program, site, params):
        s, v = _assign_site(program, site)
        if s is None:
            return v
        n = _expr_by_text(s.value, params.get("expr"))
        if not isinstance(n, A.Binary) or n.op not in self.OPS:
            return refuse(f"{params.get('expr')!r} is not a + or * of {_stmt(s)}")
        r = params.get("rewrite")
        if r == "swap":
            if n.lhs == n.rhs:
                return refuse("both operands are the same: swapping changes nothing")
        elif r == "rotate_right":
            if not (isinstance(n.lhs, A.Binary) and n.lhs.op == n.op):
                return refuse(f"the left operand of {format_expr(n)} is not another {n.op}")
        elif r == "rotate_left":
            if not (isinstance(n.rhs, A.Binary) and n.rhs.op == n.op):
                return refuse(f"the right operand of {format_expr(n)} is not another {n.op}")
        else:
            return refuse("rewrite must be swap, rotate_left or rotate_right")
        return OK

    def exactness_for(self, program, site, params):
        if params.get("rewrite") == "swap":
            return "exact"
        s = node_at(program, site.path)
        n = _expr_by_text(s.value, params.get("expr")) if isinstance(s, A.Assign) else None
        if n is not None and not _float_like(dtype_of(n, program)):
            return "exact"
        return "reassociation"

    def rewrite(self, program, site, params):
        path = tuple(site.path)
        s = node_at(program, path)
        n = _expr_by_text(s.value, params["expr"])
        r = params["rewrite"]
        if r == "swap":
            new = replace(n, lhs=n.rhs, rhs=n.lhs)
        elif r == "rotate_right":
            a, b, c = n.lhs.lhs, n.lhs.rhs, n.rhs
            new = A.Binary(n.op, a, A.Binary(n.op, b, c))
        else:
            a, b, c = n.lhs, n.rhs.lhs, n.rhs.rhs
            new = A.Binary(n.op, A.Binary(n.op, a, b), c)
        return replace_at(program, path, [replace(s, value=_replace_first(s.value, n, new))])


# ============================================================================ concat / split
def _match(e1: Any, e2: Any, m: dict[str, str]) -> bool:
    """Structural equality up to a consistent renaming of tensors (recorded in ``m``)."""
    if type(e1) is not type(e2):
        return False
    if isinstance(e1, (A.Load, A.Assign)):
        if m.get(e1.tensor, e2.tensor) != e2.tensor:
            return False
        m[e1.tensor] = e2.tensor
        if len(e1.index) != len(e2.index) or not all(_match(a, b, m) for a, b in zip(e1.index, e2.index)):
            return False
        if isinstance(e1, A.Assign):
            return e1.op == e2.op and _match(e1.value, e2.value, m)
        return True
    if isinstance(e1, A.Unary):
        return e1.op == e2.op and _match(e1.operand, e2.operand, m)
    if isinstance(e1, A.Binary):
        return e1.op == e2.op and _match(e1.lhs, e2.lhs, m) and _match(e1.rhs, e2.rhs, m)
    if isinstance(e1, A.Call):
        return e1.func == e2.func and len(e1.args) == len(e2.args) and all(
            _match(a, b, m) for a, b in zip(e1.args, e2.args))
    return e1 == e2


def _single_assign_nest(program: A.Program, path: Path) -> tuple[list[A.Loop], A.Assign | None]:
    loops = band_any(program, path)
    if not loops or len(loops[-1].body) != 1 or not isinstance(loops[-1].body[0], A.Assign):
        return loops, None
    return loops, loops[-1].body[0]


def _concat_plan(program: A.Program, p1: Path, var: Any = None) -> tuple[Verdict, Any]:
    l1, s1 = _single_assign_nest(program, p1)
    if s1 is None:
        return refuse(f"the statement at path {list(p1)} is not a loop nest around one assignment"), None
    p2 = tuple(p1[:-1]) + (p1[-1] + 1,)
    l2, s2 = _single_assign_nest(program, p2)
    if s2 is None:
        return refuse("the next statement is not a loop nest around one assignment"), None
    if [(lp.extent, lp.kind) for lp in l1] != [(lp.extent, lp.kind) for lp in l2]:
        return refuse("the two nests do not have the same loop structure"), None
    if any(lp.kind != "serial" for lp in l1):
        return refuse("the nests must be serial loop nests"), None
    s2r = subst_stmt(s2, {b.var: A.Var(a.var) for a, b in zip(l1, l2) if a.var != b.var})
    m: dict[str, str] = {}
    if not _match(s1, s2r, m):
        return refuse(f"{_stmt(s1)} and {_stmt(s2)} are not the same operation on different tensors"), None
    if s1.tensor == s2.tensor:
        return refuse("both nests write the same tensor"), None
    pairs = [(a, b) for a, b in m.items() if a != b]
    if len(set(b for _, b in pairs)) != len(pairs):
        return refuse("the tensors of the two nests do not correspond one to one"), None
    written = {s1.tensor, s2.tensor}
    for a, b in pairs:
        ta, tb = program.tensor(a), program.tensor(b)
        if ta.shape != tb.shape or ta.dtype != tb.dtype:
            return refuse(f"{a} and {b} differ in shape or dtype"), None
    for t in written:
        if t in tensors_read(s1.value) or t in tensors_read(s2.value):
            return refuse(f"{t} is read by the nests themselves: they are not independent"), None
    ext = {lp.var: lp.extent for lp in l1}
    for d, e in enumerate(s1.index):
        if not (isinstance(e, A.Var) and e.name in ext and ext[e.name] == program.tensor(s1.tensor).shape[d]):
            return refuse(f"{_stmt(s1)} does not write every element of {s1.tensor} once"), None
    if len({e.name for e in s1.index}) != len(s1.index):
        return refuse(f"{_stmt(s1)} repeats a loop variable in its subscripts"), None
    differing = {a for a, _ in pairs}
    accesses = [s1] + [ld for ld in A.loads(s1.value)]
    choices = []
    for lp in l1:
        v = lp.var
        ok = True
        for acc in accesses:
            uses = [d for d, e in enumerate(acc.index) if v in A.free_vars(e)]
            if acc.tensor in differing:
                if len(uses) != 1 or acc.index[uses[0]] != A.Var(v) \
                        or program.tensor(acc.tensor).shape[uses[0]] != lp.extent:
                    ok = False
            elif uses:
                ok = False
        if ok:
            choices.append(lp.var)
    if var is None:
        return (OK if choices else refuse("no loop indexes exactly the differing tensors")), (l1, s1, l2, s2, pairs, choices)
    if var not in choices:
        return refuse(f"{var!r} is not a loop that indexes only the differing tensors, each plainly "
                      f"along one full dimension (choices: {', '.join(choices) or 'none'})"), None
    return OK, (l1, s1, l2, s2, pairs, choices)


def _copy_nest(program_names: set[str], shape: Sequence[int], dst: str, dst_off: tuple[int, int] | None,
               src: str, src_off: tuple[int, int] | None) -> A.Stmt:
    """``dst[..] = src[..]`` over ``shape``; an offset (dim, n) shifts that dim of one side."""
    vars_ = []
    for k in range(len(shape)):
        vars_.append(fresh_name(f"c{k}", program_names | set(vars_)))

    def idx(off):
        out = []
        for k, v in enumerate(vars_):
            e: A.Expr = A.Var(v)
            if off is not None and off[0] == k and off[1]:
                e = A.Binary("+", e, A.const(off[1]))
            out.append(e)
        return tuple(out)

    s: A.Stmt = A.Assign(dst, idx(dst_off), "=", A.Load(src, idx(src_off)))
    for v, n in reversed(list(zip(vars_, shape))):
        s = A.Loop(v, n, "serial", (s,))
    return s


@register
class TensorConcatToFuseOperators(Strategy):
    name = "tensor_concat_to_fuse_operators"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    inverse = "tensor_split_to_decouple_operators"
    description = ("Two adjacent independent nests computing the same operation on different "
                   "tensors (A@B1 and A@B2) become one nest over a loop of twice the extent: the "
                   "differing inputs are copied into a concatenated intermediate, the fused nest "
                   "writes a concatenated output, which is copied back into the two outputs.")

    def sites(self, program, analysis=None):
        out = []
        for base, body in _bodies(program):
            for k in range(len(body) - 1):
                p = base + (k,)
                if isinstance(body[k], A.Loop) and isinstance(body[k + 1], A.Loop):
                    v, plan = _concat_plan(program, p)
                    if v.ok:
                        out.append(Site.make(p, [lp.var for lp in plan[0]]))
        return out

    def params(self, program, site, rng=None):
        v, plan = _concat_plan(program, tuple(site.path))
        return [{"loop": c} for c in plan[5]] if v.ok else []

    def check(self, program, site, params):
        return _concat_plan(program, tuple(site.path), params.get("loop", ""))[0]

    def rewrite(self, program, site, params):
        p1 = tuple(site.path)
        var = params["loop"]
        _, (l1, s1, l2, s2, pairs, _) = _concat_plan(program, p1, var)
        lv = next(lp for lp in l1 if lp.var == var)
        n = lv.extent
        names = all_names(program)
        prog = program
        rename: dict[str, str] = {}
        pre, post, new_t = [], [], []
        taken = set(names)
        for a, b in pairs:
            ta = program.tensor(a)
            dim = next(d for d, e in enumerate(_first_access(s1, a).index) if e == A.Var(var))
            cname = "T0"
            k = 0
            while cname in taken:
                k += 1
                cname = f"T{k}"
            taken.add(cname)
            shape = list(ta.shape)
            shape[dim] *= 2
            new_t.append(A.Tensor(cname, ta.dtype, tuple(shape)))
            rename[a] = cname
            if a == s1.tensor:
                post.append(_copy_nest(taken, ta.shape, a, None, cname, None))
                post.append(_copy_nest(taken, ta.shape, b, None, cname, (dim, n)))
            else:
                pre.append(_copy_nest(taken, ta.shape, cname, None, a, None))
                pre.append(_copy_nest(taken, ta.shape, cname, (dim, n), b, None))

        def f(e):
            if isinstance(e, A.Load) and e.tensor in rename:
                return replace(e, tensor=rename[e.tensor])
            return None

        body = map_stmt_exprs(s1, f)
        body = replace(body, tensor=rename.get(body.tensor, body.tensor))
        stmt: A.Stmt = body
        for lp in reversed(l1):
            stmt = A.Loop(lp.var, lp.extent * 2 if lp.var == var else lp.extent, lp.kind, (stmt,))
        p2 = tuple(p1[:-1]) + (p1[-1] + 1,)
        prog = replace(prog, intermediates=prog.intermediates + tuple(new_t))
        prog = replace_at(prog, p2, [])
        return replace_at(prog, p1, pre + [stmt] + post)


def _first_access(s: A.Assign, tensor: str):
    if s.tensor == tensor:
        return s
    return next(ld for ld in A.loads(s.value) if ld.tensor == tensor)


@register
class TensorSplitToDecoupleOperators(Strategy):
    name = "tensor_split_to_decouple_operators"
    family = "graph"
    exactness = "exact"
    targets = frozenset({"cpu", "gpu"})
    inverse = "tensor_concat_to_fuse_operators"
    description = ("Split a nest over one of its loops (even extent) into two nests, each over one "
                   "half of that dimension of every tensor it indexes. The half-split must be "
                   "legal to hoist outside the loops enclosing it in the nest, and the loop must not "
                   "be a reduction axis (the second half would re-initialise the accumulator). A "
                   "local buffer each iteration overwrites before reading gets its own copy in the "
                   "second half, so the halves stay independent.")

    def sites(self, program, analysis=None):
        out = []
        for p, s in iter_stmts(program.body):
            if not isinstance(s, A.Loop) or s.kind != "serial":
                continue
            parent = node_at(program, p[:-1]) if len(p) > 1 else None
            if isinstance(parent, A.Loop) and len(parent.body) == 1:
                continue
            loops = band(program, p)
            if any(lp.extent >= 4 and lp.extent % 2 == 0 for lp in loops):
                out.append(Site.make(p, [lp.var for lp in loops]))
        return out

    def params(self, program, site, rng=None):
        return [{"loop": lp.var} for lp in band(program, tuple(site.path))
                if lp.extent >= 4 and lp.extent % 2 == 0]

    def _plan(self, program, site, params):
        from .loops import _reorder_analysis, _split
        path = tuple(site.path)
        loops = band(program, path)
        if not loops:
            return refuse(f"no serial loop nest at path {list(path)}"), None
        var = params.get("loop")
        vars_ = [lp.var for lp in loops]
        if var not in vars_:
            return refuse(f"{var!r} is not a loop of the serial band ({', '.join(vars_)})"), None
        l = vars_.index(var)
        lp = loops[l]
        if lp.extent < 4 or lp.extent % 2:
            return refuse(f"loop {var} has extent {lp.extent}: it needs an even extent of at least 4"), None
        vpath = path + (0,) * l
        for q, s in iter_stmts(lp.body, vpath):
            if isinstance(s, A.Assign) and s.is_reduction:
                axes = reduction_axes(s, enclosing_loops(program, q))
                if var in axes:
                    return refuse(f"{var} is a reduction axis of {_stmt(s)}: the second half would "
                                  f"start again from the identity"), None
        p_split, vo, vi = _split(program, vpath, lp.extent // 2)
        if l:
            names = vars_[:l] + [vo]
            v, reassoc = _reorder_analysis(p_split, path, names, [vo] + vars_[:l])
            if not v.ok:
                return refuse(f"splitting {var} into halves outside "
                              f"{', '.join(vars_[:l])} is illegal: {v.reason}"), None
            if reassoc:
                return refuse(f"splitting {var} into halves would regroup a reduction"), None
        return OK, (p_split, vars_[:l], vo, vi)

    def check(self, program, site, params):
        return self._plan(program, site, params)[0]

    def rewrite(self, program, site, params):
        from .loops import _reorder
        path = tuple(site.path)
        _, (prog, outer, vo, vi) = self._plan(program, site, params)
        var = params["loop"]
        # a local buffer each iteration of the split loop overwrites before reading (a register
        # tile's accumulators) gets a copy of its own in the second half: shared, it would tie
        # the halves together and neither could be parallelized (``private_to``)
        own = {}
        for name in sorted(private_to(program, path + (0,) * len(outer))):
            t = prog.tensor(name)
            own[name] = fresh_tensor(prog)
            prog = replace(prog, intermediates=prog.intermediates + (replace(t, name=own[name]),))
        if outer:
            prog = _reorder(prog, path, outer + [vo], [vo] + outer)
        lo = node_at(prog, path)
        halves = []
        for h in range(2):
            b = tuple(subst_stmt(s, {vo: A.const(h)}) for s in lo.body)
            # give the half loop back its original name
            b = tuple(_rename_loop(s, vi, var) for s in b)
            halves.extend(rename_tensors(b, own) if h else b)
        return replace_at(prog, path, halves)


def _rename_loop(s: A.Stmt, old: str, new: str) -> A.Stmt:
    if isinstance(s, A.Loop):
        if s.var == old:
            return replace(s, var=new, body=tuple(subst_stmt(b, {old: A.Var(new)}) for b in s.body))
        return replace(s, body=tuple(_rename_loop(b, old, new) for b in s.body))
    if isinstance(s, A.If):
        return replace(s, body=tuple(_rename_loop(b, old, new) for b in s.body))
    return s


__all__ = ["OperatorFusion", "OperatorFission", "ComputeInline", "ExpressionSplitting",
           "CommonSubexpressionElimination", "DeadCodeElimination", "ExpressionReorder",
           "TensorConcatToFuseOperators", "TensorSplitToDecoupleOperators", "map_expr",
           "map_stmt_exprs", "value_nodes", "prune_empty", "drop_unused", "load_sites", "writers"]
