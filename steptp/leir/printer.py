"""AST -> canonical LEIR text.

One printing per program: two-space indentation, perfectly nested loops merged into one header,
the fewest parentheses that keep the tree, subscripts without spaces. ``parse(print(p)) == p``
and ``print(parse(t))`` is a fixed point; the canonical hash is taken over this text.
"""

from __future__ import annotations

import math

from . import ast as A

INDENT = "  "

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


def format_type(t: A.Tensor) -> str:
    if not t.shape:
        return t.dtype
    return f"{t.dtype}[{','.join(str(d) for d in t.shape)}]"


def _stmt_lines(s: A.Stmt, depth: int, out: list[str]) -> None:
    pad = INDENT * depth
    if isinstance(s, A.Assign):
        lhs = s.tensor if not s.index else f"{s.tensor}[{','.join(_fmt(i, 0, True) for i in s.index)}]"
        out.append(f"{pad}{lhs} {s.op} {format_expr(s.value)}")
    elif isinstance(s, A.Loop):
        heads = []
        node: A.Stmt = s
        while True:
            kind = "" if node.kind == "serial" else f" {node.kind}"
            heads.append(f"{node.var} in {node.extent}{kind}")
            if len(node.body) == 1 and isinstance(node.body[0], A.Loop):
                node = node.body[0]
            else:
                break
        out.append(f"{pad}for {', '.join(heads)}:")
        for b in node.body:
            _stmt_lines(b, depth + 1, out)
    elif isinstance(s, A.If):
        out.append(f"{pad}if {format_expr(s.cond)}:")
        for b in s.body:
            _stmt_lines(b, depth + 1, out)
    else:
        raise TypeError(f"not a LEIR statement: {s!r}")


def format_stmt(s: A.Stmt, depth: int = 0) -> str:
    out: list[str] = []
    _stmt_lines(s, depth, out)
    return "\n".join(out)


def format_signature(p: A.Program) -> str:
    ins = ", ".join(f"{t.name}: {format_type(t)}" for t in p.inputs)
    outs = ", ".join(f"{t.name}: {format_type(t)}" for t in p.outputs)
    return f"kernel {p.name}({ins}) -> {outs}"


def format_program(p: A.Program) -> str:
    """The canonical text of a program (ends with a newline)."""
    out = [format_signature(p)]
    for t in p.intermediates:
        scope = "" if t.scope == "global" else f" {t.scope}"
        out.append(f"{INDENT}{t.name}: {format_type(t)}{scope}")
    for s in p.body:
        _stmt_lines(s, 1, out)
    return "\n".join(out) + "\n"
