"""Type rules of LEIR expressions — the one place that decides what dtype an expression has.

Concrete dtypes are the short names of ``ast.DTYPES`` (``f32``, ``i64``, ``bool``...). Three more
kinds exist only during inference:

* ``"int"`` / ``"float"`` — an untyped literal (``2``, ``0.5``); it takes the type of the other
  operand, or the type of the tensor it is stored into;
* ``"index"`` — a loop variable: an integer that adopts an integer tensor's type when mixed with
  one, and that must be cast (``f32(i)``) before it meets floating-point values.

Mixing two different concrete dtypes is an error: LEIR has no implicit promotion, exactly like
TIR, so every cast is visible in the text.
"""

from __future__ import annotations

from typing import Mapping

from . import ast as A

WEAK = ("int", "float")
INDEX = "index"
UNARY_FLOAT_FUNCS = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin",
                               "cos", "log2", "exp2", "log1p"})
SAME_TYPE_FUNCS = frozenset({"abs", "floor", "ceil", "round"})
COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})


class LeirTypeError(ValueError):
    def __init__(self, message: str, pos: A.Pos | None = None):
        self.pos, self.detail = pos, message
        super().__init__(f"{pos}: {message}" if pos else message)


def is_float(t: str) -> bool:
    return t == "float" or t in A.FLOAT_DTYPES


def is_int(t: str) -> bool:
    return t in ("int", INDEX) or t in A.INT_DTYPES


def unify(a: str, b: str, pos: A.Pos | None = None, what: str = "operands") -> str:
    """The common type of two operands, or a LeirTypeError saying which cast is missing."""
    if a == b:
        return a
    for x, y in ((a, b), (b, a)):
        if x == "int" and (y in ("float", INDEX) or y in A.INT_DTYPES or y in A.FLOAT_DTYPES):
            return y
        if x == "float" and y in A.FLOAT_DTYPES:
            return y
        if x == INDEX and y in A.INT_DTYPES:
            return y
    if INDEX in (a, b) and (is_float(a) or is_float(b)):
        other = b if a == INDEX else a
        cast = other if other in A.FLOAT_DTYPES else "f32"
        raise LeirTypeError(f"{what} mix a loop variable with {_name(other)}; "
                            f"cast the index, e.g. {cast}(i)", pos)
    raise LeirTypeError(f"{what} have different types {_name(a)} and {_name(b)}; "
                        f"LEIR has no implicit promotion, add a cast such as {_castee(a, b)}(...)", pos)


def _name(t: str) -> str:
    return {"int": "an integer literal", "float": "a float literal", INDEX: "a loop variable"}.get(t, t)


def _castee(a: str, b: str) -> str:
    for t in (a, b):
        if t in A.FLOAT_DTYPES:
            return t
    return a if a in A.DTYPES else b


def concrete(t: str, context: str) -> str:
    """Resolve a weak type against the dtype of the place it flows into."""
    if t == "float":
        return context if context in A.FLOAT_DTYPES else "f32"
    if t in ("int", INDEX):
        return context if context in A.DTYPES and context != "bool" else "i32"
    return t


def expr_dtype(e: A.Expr, tensors: Mapping[str, A.Tensor]) -> str:
    """The dtype of ``e`` (possibly weak). Raises LeirTypeError with the node's position."""
    if isinstance(e, A.Const):
        return "bool" if e.kind == "bool" else e.kind
    if isinstance(e, A.Var):
        return INDEX
    if isinstance(e, A.Load):
        t = tensors.get(e.tensor)
        if t is None:
            raise LeirTypeError(f"tensor {e.tensor!r} is not declared", e.pos)
        return t.dtype
    if isinstance(e, A.Unary):
        t = expr_dtype(e.operand, tensors)
        if e.op == "not":
            if t != "bool":
                raise LeirTypeError(f"'not' needs a boolean, got {_name(t)}", e.pos)
            return "bool"
        if t == "bool":
            raise LeirTypeError("unary '-' on a boolean", e.pos)
        return t
    if isinstance(e, A.Binary):
        lt, rt = expr_dtype(e.lhs, tensors), expr_dtype(e.rhs, tensors)
        if e.op in ("and", "or"):
            if lt != "bool" or rt != "bool":
                raise LeirTypeError(f"'{e.op}' needs booleans, got {_name(lt)} and {_name(rt)}", e.pos)
            return "bool"
        if e.op in COMPARISONS:
            unify(lt, rt, e.pos, f"operands of '{e.op}'")
            return "bool"
        if "bool" in (lt, rt):
            raise LeirTypeError(f"arithmetic '{e.op}' on a boolean; use where(c, a, b)", e.pos)
        t = unify(lt, rt, e.pos, f"operands of '{e.op}'")
        if e.op == "/" and is_int(t):
            raise LeirTypeError("'/' on integers; use '//' for floor division", e.pos)
        if e.op in ("//", "%") and is_float(t) and t != "float":
            return t  # floor division of floats is allowed (TIR floordiv on floats)
        return t
    if isinstance(e, A.Call):
        return _call_dtype(e, tensors)
    raise TypeError(f"not a LEIR expression: {e!r}")


def _call_dtype(e: A.Call, tensors: Mapping[str, A.Tensor]) -> str:
    f = e.func
    if f in A.DTYPES:
        if len(e.args) != 1:
            raise LeirTypeError(f"cast {f}(...) takes 1 argument, got {len(e.args)}", e.pos)
        expr_dtype(e.args[0], tensors)
        return f
    arity = A.INTRINSICS.get(f)
    if arity is None:
        known = ", ".join(sorted(A.INTRINSICS)) + ", and casts such as f32(x)"
        raise LeirTypeError(f"unknown function {f!r}; known: {known}", e.pos)
    if len(e.args) != arity:
        raise LeirTypeError(f"{f}() takes {arity} argument{'s' * (arity != 1)}, got {len(e.args)}",
                            e.pos)
    ts = [expr_dtype(a, tensors) for a in e.args]
    if f in UNARY_FLOAT_FUNCS:
        t = ts[0]
        if t == "int":
            return "float"
        if not is_float(t):
            raise LeirTypeError(f"{f}() needs a floating-point argument, got {_name(t)}", e.pos)
        return t
    if f == "isnan":
        if not is_float(ts[0]) and ts[0] != "int":
            raise LeirTypeError(f"isnan() needs a floating-point argument, got {_name(ts[0])}", e.pos)
        return "bool"
    if f in SAME_TYPE_FUNCS:
        if ts[0] == "bool":
            raise LeirTypeError(f"{f}() on a boolean", e.pos)
        return ts[0]
    if f in ("max", "min"):
        return unify(ts[0], ts[1], e.pos, f"arguments of {f}()")
    if f == "pow":
        t = unify(ts[0], ts[1], e.pos, "arguments of pow()")
        return "float" if t == "int" else t
    if f == "where":
        if ts[0] != "bool":
            raise LeirTypeError(f"where() needs a boolean condition, got {_name(ts[0])}", e.pos)
        return unify(ts[1], ts[2], e.pos, "branches of where()")
    raise AssertionError(f)  # pragma: no cover
