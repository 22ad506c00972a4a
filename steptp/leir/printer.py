"""AST -> canonical LEIR text.

One printing per program: one-space indentation, perfectly nested loops merged into one header,
the fewest parentheses that keep the tree, subscripts without spaces. ``parse(print(p)) == p``
and ``print(parse(t))`` is a fixed point; the canonical hash is taken over this text.
"""

from __future__ import annotations

import functools
import math

from . import ast as A

# One space per level: every line starts with its indentation, and a single space merges
# with the next token where two spaces cost one more token per line.
INDENT = " "

# Binding strength of each operator (higher binds tighter), as in Python.
_PREC = {"or": 1, "and": 2, "not": 3,
         "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "neg": 7, "**": 8}
_ATOM = 9


def format_const(c: A.Const) -> str:
    if c.kind == "bool":
        return "true" if c.value else "false"
    if c.kind == "int":
        return str(int(c.value))
    v = float(c.value)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        raise ValueError("NaN literals have no LEIR spelling")
    return repr(v)


def _level(e: A.Expr) -> int:
    if isinstance(e, A.Binary):
        return _PREC[e.op]
    if isinstance(e, A.Unary):
        return _PREC["neg"] if e.op == "-" else _PREC["not"]
    if isinstance(e, A.Const) and e.kind in ("int", "float") and (
            e.value < 0 or (isinstance(e.value, float) and math.copysign(1.0, e.value) < 0)):
        return _PREC["neg"]
    return _ATOM


def format_expr(e: A.Expr, compact: bool = False) -> str:
    """Print an expression. ``compact`` drops the spaces around operators (used in subscripts)."""
    return _fmt(e, 0, compact)


def _wrap(s: str, level: int, need: int) -> str:
    return f"({s})" if level < need else s


def _fmt(e: A.Expr, need: int, compact: bool) -> str:
    if isinstance(e, A.Const):
        return _wrap(format_const(e), _level(e), need)
    if isinstance(e, A.Var):
        return e.name
    if isinstance(e, A.Load):
        if not e.index:
            return e.tensor
        return f"{e.tensor}[{','.join(_fmt(i, 0, True) for i in e.index)}]"
    if isinstance(e, A.Call):
        sep = "," if compact else ", "
        return f"{e.func}({sep.join(_fmt(a, 0, compact) for a in e.args)})"
    if isinstance(e, A.Unary):
        if e.op == "-":
            inner = _fmt(e.operand, _PREC["neg"], compact)
            # "--x" would lex as two minus signs anyway, but "-(-1)" must keep its parentheses
            # so that it is not read back as the literal 1.
            if inner.startswith("-"):
                inner = f"({inner})"
            return _wrap("-" + inner, _PREC["neg"], need)
        return _wrap("not " + _fmt(e.operand, _PREC["not"], compact), _PREC["not"], need)
    if isinstance(e, A.Binary):
        p = _PREC[e.op]
        if e.op == "**":
            left = _fmt(e.lhs, _ATOM, compact)
            right = _fmt(e.rhs, _PREC["neg"], compact)
        elif p == 4:
            left = _fmt(e.lhs, p + 1, compact)
            right = _fmt(e.rhs, p + 1, compact)
        else:
            left = _fmt(e.lhs, p, compact)
            right = _fmt(e.rhs, p + 1, compact)
        sep = "" if compact and e.op not in ("and", "or") else " "
        return _wrap(f"{left}{sep}{e.op}{sep}{right}", p, need)
    raise TypeError(f"not a LEIR expression: {e!r}")


def default_dtype(p: A.Program) -> str:
    """The kernel's default dtype: the most common one among its tensors (first seen wins a
    tie), so that the fewest declarations spell theirs out."""
    counts: dict[str, int] = {}
    for t in p.inputs + p.outputs + p.intermediates:
        counts[t.dtype] = counts.get(t.dtype, 0) + 1
    return max(counts, key=lambda d: counts[d]) if counts else "f32"


def format_type(t: A.Tensor) -> str:
    """The long form ``f32[8,64]`` (error messages and the v1 signature use it)."""
    if not t.shape:
        return t.dtype
    return f"{t.dtype}[{','.join(str(d) for d in t.shape)}]"


def format_decl(t: A.Tensor, default: str, intermediate: bool = False) -> str:
    shape = f"[{','.join(str(d) for d in t.shape)}]" if (t.shape or intermediate) else ""
    dtype = "" if t.dtype == default else f" {t.dtype}"
    scope = "" if t.scope == "global" else f" {t.scope}"
    return f"{t.name}{shape}{dtype}{scope}"


@functools.lru_cache(maxsize=4096)
def _vars_and_accesses(stmt: A.Assign) -> tuple[tuple[str, ...], tuple[tuple[str, tuple], ...]]:
    """An assignment's loop variables in first-appearance order (left-hand side first) and its
    accesses (tensor, index), the left-hand side first. Keyed on the statement's value: every
    print of a search's candidates meets the same statements again (bounded)."""
    order = tuple(dict.fromkeys(
        [v for e in stmt.index for v in A.free_vars(e)] + A.free_vars(stmt.value)))
    return order, ((stmt.tensor, stmt.index),) + tuple((ld.tensor, ld.index)
                                                       for ld in A.loads(stmt.value))


def _implicit_from(chain: list[A.Loop], stmt: A.Assign, bound: tuple[str, ...],
                   tensors: dict[str, A.Tensor]) -> int:
    """How many loops of a perfect serial chain ending in ``stmt`` must be written out; the
    rest are exactly the loops the parser infers for a bare assignment (see
    ``parser.implicit_loops``). Returns len(chain) when none can be left implicit."""
    # ``parser.implicit_loops`` for each k, its stmt analysis done once: the variables in
    # first-appearance order, each one's plain-dimension extent, and which of them index
    # dimensions of different sizes (an inference that fails, as a message there).
    order, accesses = _vars_and_accesses(stmt)
    extents: dict[str, int] = {}
    clash: set[str] = set()
    for name, index in accesses:
        t = tensors.get(name)
        if t is None or len(index) != len(t.shape):
            continue
        for dim, e in zip(t.shape, index):
            if isinstance(e, A.Var) and extents.setdefault(e.name, dim) != dim:
                clash.add(e.name)
    for k in range(len(chain) + 1):
        rest = chain[k:]
        if any(lp.kind != "serial" for lp in rest):
            continue
        bound_k = frozenset(bound + tuple(lp.var for lp in chain[:k]))
        free = [v for v in order if v not in bound_k]
        if any(v in clash or v not in extents for v in free):
            continue
        if [(v, extents[v]) for v in free] == [(lp.var, lp.extent) for lp in rest]:
            return k
    return len(chain)


def _stmt_lines(s: A.Stmt, depth: int, out: list[str], bound: tuple[str, ...] = (),
                tensors: dict[str, A.Tensor] | None = None) -> None:
    pad = INDENT * depth
    tensors = tensors or {}
    if isinstance(s, A.Assign):
        lhs = s.tensor if not s.index else f"{s.tensor}[{','.join(_fmt(i, 0, True) for i in s.index)}]"
        out.append(f"{pad}{lhs} {s.op} {format_expr(s.value)}")
    elif isinstance(s, A.Loop):
        chain = [s]
        while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], A.Loop):
            chain.append(chain[-1].body[0])
        inner = chain[-1].body
        if tensors and len(inner) == 1 and isinstance(inner[0], A.Assign):
            k = _implicit_from(chain, inner[0], bound, tensors)
            if k == 0:
                _stmt_lines(inner[0], depth, out, bound, tensors)
                return
            chain, inner = chain[:k], (inner[0],)
        heads = [f"{lp.var} in {lp.extent}{'' if lp.kind == 'serial' else ' ' + lp.kind}"
                 for lp in chain]
        out.append(f"{pad}for {', '.join(heads)}:")
        inner_bound = bound + tuple(lp.var for lp in chain)
        for b in inner:
            _stmt_lines(b, depth + 1, out, inner_bound, tensors)
    elif isinstance(s, A.If):
        out.append(f"{pad}if {format_expr(s.cond)}:")
        for b in s.body:
            _stmt_lines(b, depth + 1, out, bound, tensors)
    else:
        raise TypeError(f"not a LEIR statement: {s!r}")


def format_stmt(s: A.Stmt, depth: int = 0, program: A.Program | None = None,
                bound: tuple[str, ...] = ()) -> str:
    """Print one statement. Given its program (and the loop variables bound around it), loops
    the parser can infer are left implicit, as in ``format_program``; without, all are written."""
    out: list[str] = []
    _stmt_lines(s, depth, out, bound, program.tensors if program is not None else None)
    return "\n".join(out)


def format_signature(p: A.Program) -> str:
    d = default_dtype(p)
    ins = ", ".join(format_decl(t, d) for t in p.inputs)
    outs = ", ".join(format_decl(t, d) for t in p.outputs)
    return f"kernel {d} {p.name}({ins}) -> {outs}"


def format_program(p: A.Program) -> str:
    """The canonical text of a program (ends with a newline)."""
    d = default_dtype(p)
    out = [format_signature(p)]
    for t in p.intermediates:
        out.append(f"{INDENT}{format_decl(t, d, intermediate=True)}")
    tensors = p.tensors
    for s in p.body:
        _stmt_lines(s, 1, out, (), tensors)
    return "\n".join(out) + "\n"
