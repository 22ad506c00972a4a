"""The rewriting plumbing the strategies share: fresh names, substitution of loop variables,
tensor renaming, building affine subscripts, and the numerical-safety test of exp splits.

Paths and structural queries (``chain``, ``band``, ``tensors_read``, ...) live in
:mod:`steptp.leir.nav`, affine layouts in :mod:`steptp.leir.layout`. Nothing here mutates its
input; every edit returns a new tree.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Callable, Mapping, Sequence

from ..leir import ast as A
from ..leir.analysis import affine


# ----------------------------------------------------------------------------- names
def loop_vars(program: A.Program) -> list[str]:
    seen: dict[str, None] = {}
    for _, s in A.iter_stmts(program.body):
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


# ----------------------------------------------------------------------------- numerical safety
def stabilizers(program: A.Program) -> frozenset[str]:
    """Tensors holding a running maximum: written by a ``max=`` reduction or a ``max(...)`` scan,
    or copied from one (the maxima subtracted before an exp so that it cannot overflow: softmax,
    log-sum-exp, online attention)."""
    assigns = [s for _, s in A.iter_stmts(program.body) if isinstance(s, A.Assign)]
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
