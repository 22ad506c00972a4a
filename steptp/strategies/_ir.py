"""AST plumbing shared by the rewrite strategies: paths, substitution, fresh names, affine forms.

A **path** is a tuple of body indices from the program root: ``(0,)`` is ``program.body[0]`` and
``(0, 1)`` is ``program.body[0].body[1]``. Nothing here mutates its input; every edit returns a
new tree (the AST is made of frozen dataclasses anyway).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Callable, Mapping, Sequence

from ..leir import ast as A
from ..leir.analysis import affine  # noqa: F401 - one home for affine forms; re-exported

Path = tuple[int, ...]


# ----------------------------------------------------------------------------- navigation
def chain(program: A.Program, path: Sequence[int]) -> list[A.Stmt] | None:
    """Every statement from the root down to ``path`` (inclusive), or None."""
    body: tuple = program.body
    out = []
    for k in path:
        if not isinstance(k, int) or k < 0 or k >= len(body):
            return None
        node = body[k]
        out.append(node)
        body = node.body if isinstance(node, (A.Loop, A.If)) else ()
    return out


def enclosing_loops(program: A.Program, path: Sequence[int]) -> list[A.Loop]:
    """Loops strictly enclosing the statement at ``path``, outermost first."""
    ch = chain(program, path) or []
    return [s for s in ch[:-1] if isinstance(s, A.Loop)]


def replace_at(program: A.Program, path: Sequence[int], new: Sequence[A.Stmt]) -> A.Program:
    """A copy of ``program`` where the statement at ``path`` is replaced by the statements
    ``new`` (zero, one or several)."""
    path = tuple(path)
    if not path:
        raise ValueError("empty path")

    def go(body: tuple, rest: tuple) -> tuple:
        k = rest[0]
        if len(rest) == 1:
            return body[:k] + tuple(new) + body[k + 1:]
        node = body[k]
        return body[:k] + (replace(node, body=go(node.body, rest[1:])),) + body[k + 1:]

    return replace(program, body=go(program.body, path))


iter_stmts = A.iter_stmts   # one home (leir.ast); re-exported for the strategies
node_at = A.node_at


def band(program: A.Program, path: Sequence[int], kinds: tuple[str, ...] = ("serial",)) -> list[A.Loop]:
    """The perfectly nested loop band starting at ``path``: the loop there, then its only child
    while that child is a loop, stopping at a loop whose kind is not in ``kinds``."""
    node = node_at(program, path)
    out: list[A.Loop] = []
    while isinstance(node, A.Loop) and node.kind in kinds:
        out.append(node)
        node = node.body[0] if len(node.body) == 1 else None
    return out


def perfect_nest(s: A.Stmt | None) -> tuple[tuple[A.Loop, ...], A.Assign] | None:
    """A perfect nest ``for a: for b: ... X[..] op e`` (loops of any kind) -> (its loops, the
    assignment); None when some loop holds more than one statement or it ends in no
    assignment."""
    loops = []
    while isinstance(s, A.Loop) and len(s.body) == 1:
        loops.append(s)
        s = s.body[0]
    return (tuple(loops), s) if isinstance(s, A.Assign) else None


# ----------------------------------------------------------------------------- names
def loop_vars(program: A.Program) -> list[str]:
    seen: dict[str, None] = {}
    for _, s in iter_stmts(program.body):
        if isinstance(s, A.Loop):
            seen.setdefault(s.var, None)
    return list(seen)


def fresh_name(base: str, used: set[str] | Sequence[str]) -> str:
    """``base`` if unused, else ``base_1``, ``base_2``, ... (deterministic)."""
    used = set(used)
    if base not in used:
        return base
    n = 1
    while f"{base}_{n}" in used:
        n += 1
    return f"{base}_{n}"


def all_names(program: A.Program) -> set[str]:
    """Every identifier a new name must avoid: tensors, loop variables, the kernel name."""
    names = set(program.tensors) | set(loop_vars(program)) | {program.name}
    return names


def fresh_tensor(program: A.Program, prefix: str = "T") -> str:
    used = all_names(program)
    n = 0
    while f"{prefix}{n}" in used:
        n += 1
    return f"{prefix}{n}"


# ----------------------------------------------------------------------------- affine forms
Affine = tuple[dict[str, int], int]


def linear(*terms: tuple[int, Affine]) -> Affine:
    """``sum(k * f)`` of affine forms ``f``, zero coefficients dropped (first-appearance order)."""
    coef: dict[str, int] = {}
    const = 0
    for k, (c, b) in terms:
        for v, x in c.items():
            coef[v] = coef.get(v, 0) + k * x
        const += k * b
    return {v: x for v, x in coef.items() if x}, const


def affine_expr(coef: Mapping[str, int], const: int) -> A.Expr:
    """Build ``sum(c*v) + const`` with the fewest nodes (``v``, ``v*c``, ``- v*c``, ``+ k``)."""
    out: A.Expr | None = None
    for v, c in coef.items():
        if c == 0:
            continue
        term: A.Expr = A.Var(v) if abs(c) == 1 else A.Binary("*", A.Var(v), A.const(abs(c)))
        if out is None:
            out = term if c > 0 else A.Unary("-", term)
        else:
            out = A.Binary("+" if c > 0 else "-", out, term)
    if out is None:
        return A.const(int(const))
    if const > 0:
        out = A.Binary("+", out, A.const(int(const)))
    elif const < 0:
        out = A.Binary("-", out, A.const(int(-const)))
    return out


# ----------------------------------------------------------------------------- substitution
def subst_expr(e: A.Expr, m: Mapping[str, A.Expr]) -> A.Expr:
    """Replace loop variables by expressions; subscripts that changed and are affine are
    re-simplified (``(io*4+ii)*16`` -> ``io*64+ii*16``)."""
    if not m:
        return e
    if isinstance(e, A.Var):
        return m.get(e.name, e)
    if isinstance(e, A.Const):
        return e
    if isinstance(e, A.Load):
        return replace(e, index=tuple(subst_index(i, m) for i in e.index))
    if isinstance(e, A.Unary):
        return replace(e, operand=subst_expr(e.operand, m))
    if isinstance(e, A.Binary):
        return replace(e, lhs=subst_expr(e.lhs, m), rhs=subst_expr(e.rhs, m))
    if isinstance(e, A.Call):
        return replace(e, args=tuple(subst_expr(a, m) for a in e.args))
    raise TypeError(e)


def subst_index(e: A.Expr, m: Mapping[str, A.Expr]) -> A.Expr:
    new = subst_expr(e, m)
    if new == e:
        return e
    a = affine(new)
    return affine_expr(*a) if a is not None else new


def subst_stmt(s: A.Stmt, m: Mapping[str, A.Expr]) -> A.Stmt:
    if not m:
        return s
    if isinstance(s, A.Assign):
        return replace(s, index=tuple(subst_index(i, m) for i in s.index), value=subst_expr(s.value, m))
    if isinstance(s, A.If):
        return replace(s, cond=subst_expr(s.cond, m), body=tuple(subst_stmt(b, m) for b in s.body))
    if isinstance(s, A.Loop):
        inner = {k: v for k, v in m.items() if k != s.var}  # the loop rebinds its own variable
        return replace(s, body=tuple(subst_stmt(b, inner) for b in s.body))
    raise TypeError(s)


def rename_tensors(node, m: Mapping[str, str]):
    """``node`` (a statement, an expression or a tuple of them) with the tensors of ``m``
    renamed, reads and writes alike."""
    if not m:
        return node
    if isinstance(node, tuple):
        return tuple(rename_tensors(x, m) for x in node)
    if not hasattr(node, "__dataclass_fields__"):
        return node
    changes = {}
    for f in fields(node):
        v = getattr(node, f.name)
        if f.name == "tensor" and v in m:   # a Load's or an Assign's
            changes["tensor"] = m[v]
        elif isinstance(v, tuple) or hasattr(v, "__dataclass_fields__"):
            changes[f.name] = rename_tensors(v, m)
    return replace(node, **changes)


def map_body(body: Sequence[A.Stmt], f: Callable[[A.Stmt], A.Stmt]) -> tuple[A.Stmt, ...]:
    return tuple(f(s) for s in body)


def tensors_read(node: object) -> list[str]:
    seen: dict[str, None] = {}
    for n in A.walk(node):
        if isinstance(n, A.Load):
            seen.setdefault(n.tensor, None)
        elif isinstance(n, A.Assign) and n.is_reduction:
            seen.setdefault(n.tensor, None)
    return list(seen)


def tensors_written(node: object) -> list[str]:
    seen: dict[str, None] = {}
    for n in A.walk(node):
        if isinstance(n, A.Assign):
            seen.setdefault(n.tensor, None)
    return list(seen)


def statement_instances(node: A.Stmt) -> int:
    """Statement instances ``node`` runs: the copies unrolling all of it writes out."""
    if isinstance(node, A.Loop):
        return node.extent * sum(statement_instances(b) for b in node.body)
    if isinstance(node, A.If):
        return sum(statement_instances(b) for b in node.body)
    return 1


def reduction_axes(stmt: A.Assign, loops: Sequence[A.Loop]) -> list[str]:
    """The enclosing loop variables a reduction statement reduces over (absent from its LHS)."""
    if not stmt.is_reduction:
        return []
    used = set()
    for i in stmt.index:
        used.update(A.free_vars(i))
    return [lp.var for lp in loops if lp.var not in used]


def stabilizers(program: A.Program) -> frozenset[str]:
    """Tensors holding a running maximum: written by a ``max=`` reduction or a ``max(...)`` scan,
    or copied from one (the maxima subtracted before an exp so that it cannot overflow: softmax,
    log-sum-exp, online attention)."""
    assigns = [s for _, s in iter_stmts(program.body) if isinstance(s, A.Assign)]
    out = {s.tensor for s in assigns if s.op == "max=" or s.op == "=" and isinstance(
        s.value, A.Call) and s.value.func == "max"}
    while True:
        more = {s.tensor for s in assigns if s.op == "=" and isinstance(s.value, A.Load)
                and s.value.tensor in out} - out
        if not more:
            return frozenset(out)
        out |= more


def stabilized_exp(program: A.Program, value: A.Expr) -> str | None:
    """Why splitting the exps of ``value`` is numerically unsafe: one of them subtracts a running
    maximum (``exp(x - M[i])``), so ``exp(x)`` alone overflows for x above 88 (f32) where the
    stabilized form never does. None when no exp of ``value`` does."""
    stab = stabilizers(program)
    if not stab:
        return None
    for n in A.walk(value):
        if isinstance(n, A.Call) and n.func == "exp":
            for m in A.walk(n.args[0]):
                if isinstance(m, A.Binary) and m.op == "-" and any(
                        isinstance(x, A.Load) and x.tensor in stab for x in A.walk(m.rhs)):
                    t = next(x.tensor for x in A.walk(m.rhs) if isinstance(x, A.Load)
                             and x.tensor in stab)
                    return (f"the exp subtracts the running maximum {t} for stability: split, "
                            f"exp of the unshifted value overflows (f32: above 88) where the "
                            f"shifted one cannot")
    return None


# ----------------------------------------------------------------------------- collapsed dims
def _sum_terms(e: A.Expr, sign: int = 1) -> list[tuple[int, A.Expr]]:
    """``e`` as signed terms of a sum (``a + b - c`` -> ``[(1, a), (1, b), (-1, c)]``)."""
    if isinstance(e, A.Binary) and e.op in ("+", "-"):
        return _sum_terms(e.lhs, sign) + _sum_terms(e.rhs, sign if e.op == "+" else -sign)
    return [(sign, e)]


def _divmod_part(e: A.Expr, op: str) -> tuple[Affine, int, Affine] | None:
    """``e`` written ``q op M + f`` (one ``op`` term with a positive constant ``M``, ``q`` and
    the rest ``f`` affine): ``(q, M, f)``; None otherwise."""
    hit, rest = None, []
    for sgn, t in _sum_terms(e):
        if isinstance(t, A.Binary) and t.op == op and isinstance(t.rhs, A.Const) \
                and t.rhs.kind == "int" and int(t.rhs.value) > 0 and sgn == 1 and hit is None:
            q = affine(t.lhs)
            if q is None:
                return None
            hit = (q, int(t.rhs.value))
        else:
            rest.append((sgn, t))
    if hit is None:
        return None
    forms = [(sgn, affine(t)) for sgn, t in rest]
    if any(a is None for _, a in forms):
        return None
    return hit[0], hit[1], linear(*forms)


def collapsed_dims(index: Sequence[A.Expr]) -> list[tuple[int, int, Affine]]:
    """Pairs of adjacent subscripts written ``q // M + f`` and ``q % M + g`` with the same
    affine ``q`` (what ``loop_collapse`` makes of ``A[i, j]`` with ``i, j`` fused into one loop):
    ``(d, M, q + M*f + g)`` for the pair at dimensions ``d, d+1``.

    ``q + M*f + g`` equals ``index[d] * M + index[d+1]`` identically (floor division), so two
    accesses that touch the same element have equal combined forms: a sound extra equation for
    the dependence tests. When the tensor's dimension ``d+1`` has extent ``M`` it is also the
    pair's offset in the row-major layout (for the cost model's strides)."""
    out = []
    for d in range(len(index) - 1):
        hi, lo = _divmod_part(index[d], "//"), _divmod_part(index[d + 1], "%")
        if hi is None or lo is None or hi[0] != lo[0] or hi[1] != lo[1]:
            continue
        (q, m, f), g = hi, lo[2]
        out.append((d, m, linear((1, q), (m, f), (1, g))))
    return out


def layout_forms(index: Sequence[A.Expr], shape: Sequence[int]
                 ) -> tuple[list[Affine | None], list[int], list[A.Expr]]:
    """Per-dimension affine forms of an access and the dimension extents they range over, with
    each collapsed pair (``collapsed_dims``) over a dimension of extent ``M`` read as ONE
    dimension of extent ``shape[d] * M`` indexed by its combined (affine) form: the row-major
    offset is the same, and the access's strides become visible. Third: the subscripts still
    not understood (neither affine nor such a pair)."""
    forms: list[Affine | None] = [affine(e) for e in index]
    dims = list(shape)
    exprs: list[A.Expr | None] = [None if f is not None else e for f, e in zip(forms, index)]
    if any(f is None for f in forms) and len(shape) == len(index):
        for d, m, comb in reversed(collapsed_dims(index)):
            if shape[d + 1] == m and forms[d] is None and forms[d + 1] is None:
                forms[d:d + 2] = [comb]
                dims[d:d + 2] = [shape[d] * m]
                exprs[d:d + 2] = [None]
    return forms, dims, [e for e in exprs if e is not None]
