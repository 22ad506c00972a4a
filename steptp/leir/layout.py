"""Affine forms of subscripts, and the row-major layout an access walks.

An affine form is ``(coefficients by loop variable, constant)`` (``leir.analysis.affine`` reads
one off an expression). ``collapsed_dims`` recognises the ``q // M, q % M`` subscript pairs a
loop collapse writes, so that the dependence tests and the cost model's strides still see an
affine access.
"""

from __future__ import annotations

from typing import Sequence

from . import ast as A
from .analysis import affine

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
