"""LEIR expressions <-> SymPy, equivalence proofs and the safety rules of the algebraic family.

Conversion (``Ctx.to_sympy``): one real SymPy symbol per distinct tensor access (``A[i,k]``),
numbered ``x0, x1, ...`` in first-appearance order, so the same expression always gives the same
SymPy expression (and SymPy's own canonical ordering is then deterministic). A symbol is declared
``positive`` only when the program guarantees it (:func:`positive_tensors`). Float literals become
exact rationals of their shortest round-trip decimal (``0.9`` -> ``9/10``, not the double's binary
fraction, which made ``together`` print 17-digit scale factors); the emitted literal rounds back
to the same double, and no rounding happens on the SymPy side.
``exp``, ``log``, ``sqrt``, ``rsqrt`` (``x**(-1/2)``), ``pow``/``**`` and ``abs`` map to SymPy's
own functions; the other intrinsics (``erf``, ``tanh``, ``max``...) become opaque undefined
functions whose arguments are still converted; casts, ``where``, comparisons, floor division and
the like become opaque atoms (one symbol per distinct subtree).

Back-conversion (``Ctx.from_sympy``) walks ``as_ordered_terms``/``as_ordered_factors``, so its
output is a pure function of the SymPy expression: stable across runs.

:func:`prove_equal` accepts a rewrite only when SymPy shows ``new - old == 0`` (expand, cancel,
then simplify); :func:`safety` refuses a result that divides by something not provably nonzero or
takes a log/sqrt of something not provably positive/nonnegative, unless the original already had
that denominator (factor) or that argument.
"""

from __future__ import annotations

import random
from typing import Iterable

import sympy as sp
from sympy.core.function import AppliedUndef

from ..leir import ast as A
from ..leir.printer import format_expr

# Intrinsics kept as opaque SymPy functions (their arguments are converted).
OPAQUE_FUNCS = ("erf", "tanh", "sigmoid", "sin", "cos", "max", "min", "log2", "exp2", "log1p",
                "floor", "ceil", "round")
MAX_NODES = 80  # larger expressions are not handed to SymPy


class Unsupported(ValueError):
    """The expression cannot be converted (either direction)."""


def count_nodes(e: A.Expr) -> int:
    return sum(1 for _ in A.walk(e))


def has_nonfinite(e: A.Expr) -> bool:
    return any(isinstance(n, A.Const) and n.kind == "float" and n.value != n.value or
               isinstance(n, A.Const) and n.kind == "float" and abs(n.value) == float("inf")
               for n in A.walk(e))


class Ctx:
    """One conversion context: the symbol table of one statement (or of one program)."""

    def __init__(self, positive: Iterable[str] = ()):
        self.positive = frozenset(positive)
        self.sym_of: dict[A.Expr, sp.Symbol] = {}
        self.expr_of: dict[sp.Symbol, A.Expr] = {}
        self.funcs: dict[str, sp.Function] = {}

    # ------------------------------------------------------------------ LEIR -> SymPy
    def atom(self, e: A.Expr, positive: bool = False) -> sp.Symbol:
        key = A.strip_pos(e)
        s = self.sym_of.get(key)
        if s is None:
            name = f"x{len(self.sym_of)}"
            s = sp.Symbol(name, positive=True) if positive else sp.Symbol(name, real=True)
            self.sym_of[key] = s
            self.expr_of[s] = key
        return s

    def func(self, name: str) -> sp.Function:
        f = self.funcs.get(name)
        if f is None:
            f = self.funcs[name] = sp.Function(f"leir_{name}", real=True)
        return f

    def to_sympy(self, e: A.Expr) -> sp.Expr:
        if isinstance(e, A.Const):
            if e.kind == "bool":
                raise Unsupported("boolean literal")
            v = e.value
            if isinstance(v, float) and (v != v or abs(v) == float("inf")):
                raise Unsupported("non-finite literal")
            return sp.Integer(int(v)) if e.kind == "int" else sp.Rational(repr(float(v)))
        if isinstance(e, A.Load):
            return self.atom(e, e.tensor in self.positive)
        if isinstance(e, A.Var):
            raise Unsupported("loop variable in a float expression")
        if isinstance(e, A.Unary):
            if e.op == "-":
                return -self.to_sympy(e.operand)
            raise Unsupported("boolean operator")
        if isinstance(e, A.Binary):
            if e.op in ("+", "-", "*", "/", "**"):
                a, b = self.to_sympy(e.lhs), self.to_sympy(e.rhs)
                if e.op == "+":
                    return a + b
                if e.op == "-":
                    return a - b
                if e.op == "*":
                    return a * b
                if e.op == "/":
                    return a / b
                return sp.Pow(a, b)
            return self.atom(e)  # //, %, comparisons: opaque
        if isinstance(e, A.Call):
            f = e.func
            if f == "exp":
                return sp.exp(self.to_sympy(e.args[0]))
            if f == "log":
                return sp.log(self.to_sympy(e.args[0]))
            if f == "sqrt":
                return sp.sqrt(self.to_sympy(e.args[0]))
            if f == "rsqrt":
                return sp.Pow(self.to_sympy(e.args[0]), sp.Rational(-1, 2))
            if f == "pow":
                return sp.Pow(self.to_sympy(e.args[0]), self.to_sympy(e.args[1]))
            if f == "abs":
                return sp.Abs(self.to_sympy(e.args[0]))
            if f in OPAQUE_FUNCS:
                return self.func(f)(*[self.to_sympy(a) for a in e.args])
            return self.atom(e)  # casts, where, isnan
        raise Unsupported(f"not an expression: {e!r}")

    # ------------------------------------------------------------------ SymPy -> LEIR
    def from_sympy(self, s: sp.Expr) -> A.Expr:
        if isinstance(s, sp.Symbol):
            if s not in self.expr_of:
                raise Unsupported(f"unknown symbol {s}")
            return self.expr_of[s]
        if s.is_Number or isinstance(s, sp.NumberSymbol):
            if not s.is_real or not s.is_finite:
                raise Unsupported(f"non-real or infinite number {s}")
            return A.const(float(s))
        if isinstance(s, sp.Add):
            terms = s.as_ordered_terms()
            first = next((t for t in terms if not t.could_extract_minus_sign()), terms[0])
            terms = [first] + [t for t in terms if t is not first]
            out = self.from_sympy(terms[0])
            for t in terms[1:]:
                if t.could_extract_minus_sign():
                    out = A.Binary("-", out, self.from_sympy(-t))
                else:
                    out = A.Binary("+", out, self.from_sympy(t))
            return out
        if isinstance(s, sp.Mul):
            c, rest = s.as_coeff_Mul()
            if c.is_negative:
                return A.Unary("-", self.from_sympy(-s))
            num: list[A.Expr] = []
            den: list[A.Expr] = []
            for f in rest.as_ordered_factors():
                if isinstance(f, sp.Pow) and f.exp.is_number and f.exp.is_negative:
                    den.append(self.from_sympy(sp.Pow(f.base, -f.exp)))
                else:
                    num.append(self.from_sympy(f))
            if c != 1:
                num.append(A.const(float(c)))  # the coefficient goes last: x * y * 0.5
            top = _product(num) if num else A.const(1.0)
            if den:
                return A.Binary("/", top, _product(den))
            return top
        if isinstance(s, sp.Pow):
            b, e = s.base, s.exp
            if e.is_Integer:
                n = int(e)
                if 1 <= n <= 4:
                    x = self.from_sympy(b)
                    return _product([x] * n)
                if -4 <= n <= -1:
                    return A.Binary("/", A.const(1.0), self.from_sympy(sp.Pow(b, -n)))
                return A.Call("pow", (self.from_sympy(b), A.const(float(n))))
            if e == sp.Rational(1, 2):
                return A.Call("sqrt", (self.from_sympy(b),))
            if e == sp.Rational(-1, 2):
                return A.Call("rsqrt", (self.from_sympy(b),))
            return A.Call("pow", (self.from_sympy(b), self.from_sympy(e)))
        if isinstance(s, sp.exp):
            return A.Call("exp", (self.from_sympy(s.args[0]),))
        if isinstance(s, sp.log):
            if len(s.args) != 1:
                raise Unsupported("log with a base")
            return A.Call("log", (self.from_sympy(s.args[0]),))
        if isinstance(s, sp.Abs):
            return A.Call("abs", (self.from_sympy(s.args[0]),))
        if isinstance(s, AppliedUndef):
            name = s.func.__name__
            if name.startswith("leir_") and name[5:] in OPAQUE_FUNCS:
                return A.Call(name[5:], tuple(self.from_sympy(a) for a in s.args))
        raise Unsupported(f"SymPy produced {type(s).__name__}, which has no LEIR spelling")

    def symbol_named(self, text: str) -> sp.Symbol | None:
        """The symbol of the access whose LEIR text is ``text`` (e.g. ``A[i]``)."""
        for e, s in self.sym_of.items():
            if format_expr(e, compact=True) == text.replace(" ", ""):
                return s
        return None

    def access_texts(self, s: sp.Expr) -> list[str]:
        """LEIR texts of the tensor-access symbols of ``s`` (symbol order: first appearance)."""
        out = []
        for sym, e in self.expr_of.items():
            if isinstance(e, A.Load) and sym in s.free_symbols:
                out.append(format_expr(e, compact=True))
        return out


def _product(xs: list[A.Expr]) -> A.Expr:
    out = xs[0]
    for x in xs[1:]:
        out = A.Binary("*", out, x)
    return out


# ============================================================================ positivity
def positive_tensors(program: A.Program) -> frozenset[str]:
    """Intermediates and outputs the program guarantees positive: every write to them stores
    (or accumulates with ``+= *= max= min=``) a value SymPy proves positive, given the tensors
    already known positive (a least fixpoint, so self-referencing writes are never trusted).
    Inputs are never assumed positive."""
    writes: dict[str, list[A.Assign]] = {}
    for n in A.walk(program.body):
        if isinstance(n, A.Assign):
            writes.setdefault(n.tensor, []).append(n)
    known: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, stmts in writes.items():
            if name in known or program.tensors[name].dtype not in A.FLOAT_DTYPES:
                continue
            ok = True
            for st in stmts:
                if count_nodes(st.value) > MAX_NODES:
                    ok = False
                    break
                try:
                    v = Ctx(known).to_sympy(st.value)
                except Unsupported:
                    ok = False
                    break
                if v.is_positive is not True:
                    ok = False
                    break
            if ok:
                known.add(name)
                changed = True
    return frozenset(known)


# ============================================================================ proofs
def prove_equal(new: sp.Expr, old: sp.Expr) -> bool:
    """SymPy shows ``new - old == 0`` (expand, then cancel, then simplify)."""
    d = new - old
    if d == 0:
        return True
    steps = (lambda x: sp.expand(x),
             lambda x: sp.cancel(x),
             lambda x: sp.expand(sp.expand_log(sp.powsimp(x)), power_exp=True),
             lambda x: sp.simplify(x))
    for f in steps:
        try:
            if f(d) == 0:
                return True
        except Exception:  # pragma: no cover - SymPy failure counts as no proof
            continue
    return False


def numeric_agree(ctx: Ctx, new: sp.Expr, old: sp.Expr, trials: int = 6, seed: int = 0) -> bool:
    """Evaluate both at random points (positive symbols positive); points where the original
    is undefined are skipped. At least two points must be compared, and all must agree."""
    rng = random.Random(seed)
    new, old = _concrete(ctx, new), _concrete(ctx, old)
    syms = sorted(old.free_symbols | new.free_symbols, key=lambda s: s.name)
    compared = 0
    for _ in range(trials):
        subs = {s: sp.Float(rng.uniform(0.2, 2.0) if s.is_positive else rng.uniform(-2.0, 2.0), 30)
                for s in syms}
        try:
            a = complex(old.evalf(30, subs=subs))
            b = complex(new.evalf(30, subs=subs))
        except Exception:
            continue
        if a != a or abs(a) == float("inf") or abs(a.imag) > 1e-12:
            continue
        if b != b or abs(b - a) > 1e-9 * (1 + abs(a)):
            return False
        compared += 1
    return compared >= 2


_IMPLS = {
    "erf": sp.erf, "tanh": sp.tanh, "sigmoid": lambda x: 1 / (1 + sp.exp(-x)), "sin": sp.sin,
    "cos": sp.cos, "max": sp.Max, "min": sp.Min, "log2": lambda x: sp.log(x, 2),
    "exp2": lambda x: 2 ** x, "log1p": lambda x: sp.log(1 + x), "floor": sp.floor,
    "ceil": sp.ceiling, "round": lambda x: sp.floor(x + sp.Rational(1, 2)),
}


def _concrete(ctx: Ctx, e: sp.Expr) -> sp.Expr:
    """``e`` with the opaque functions replaced by their SymPy meaning (for evaluation only)."""
    for name, f in ctx.funcs.items():
        e = e.replace(f, _IMPLS[name])
    return e


# ============================================================================ safety
def _denominators(e: A.Expr) -> list[A.Expr]:
    out = []
    for n in A.walk(e):
        if isinstance(n, A.Binary) and n.op == "/":
            out.append(n.rhs)
        elif isinstance(n, A.Call) and n.func == "rsqrt":
            out.append(n.args[0])
        elif isinstance(n, A.Binary) and n.op == "**" or isinstance(n, A.Call) and n.func == "pow":
            base, ex = (n.lhs, n.rhs) if isinstance(n, A.Binary) else n.args
            if not (isinstance(ex, A.Const) and ex.value >= 0):
                out.append(base)
    return out


def _roots(e: A.Expr) -> list[tuple[str, A.Expr]]:
    """(kind, argument) of every log / sqrt-like call: "log" needs a positive argument,
    "sqrt" a nonnegative one, "rsqrt"/"pow" a positive one."""
    out = []
    for n in A.walk(e):
        if isinstance(n, A.Call) and n.func in ("log", "log2"):
            out.append(("log", n.args[0]))
        elif isinstance(n, A.Call) and n.func == "log1p":
            out.append(("log1p", n.args[0]))
        elif isinstance(n, A.Call) and n.func == "sqrt":
            out.append(("sqrt", n.args[0]))
        elif isinstance(n, A.Call) and n.func == "rsqrt":
            out.append(("rsqrt", n.args[0]))
        elif isinstance(n, A.Call) and n.func == "pow" or isinstance(n, A.Binary) and n.op == "**":
            base, ex = (n.lhs, n.rhs) if isinstance(n, A.Binary) else n.args
            if not (isinstance(ex, A.Const) and float(ex.value).is_integer()):
                out.append(("pow", base))
    return out


def _factors(ctx: Ctx, e: A.Expr) -> list[sp.Expr]:
    s = ctx.to_sympy(e)
    try:
        _, fs = sp.factor_list(s)
        return [f for f, _ in fs]
    except Exception:
        return [s]


def _same(a: sp.Expr, b: sp.Expr) -> bool:
    if a == b or a == -b:
        return True
    try:
        return sp.expand(a - b) == 0 or sp.expand(a + b) == 0
    except Exception:  # pragma: no cover
        return False


def safety(ctx: Ctx, old: A.Expr, new: A.Expr) -> str | None:
    """Why ``new`` may not replace ``old`` (None: safe). Both are LEIR expressions; ``ctx`` is
    the statement's conversion context (it knows which symbols are positive)."""
    old_facs: list[sp.Expr] = []
    for d in _denominators(old):
        old_facs.extend(_factors(ctx, d))
    for d in _denominators(new):
        for f in _factors(ctx, d):
            if f.is_zero is False or f.is_number and f != 0:
                continue
            if any(_same(f, g) for g in old_facs):
                continue
            return (f"the result divides by {format_expr(ctx.from_sympy(f))}, which may be zero "
                    f"(it is not a denominator of the original and nothing proves it nonzero)")
    old_args = [(k, ctx.to_sympy(a)) for k, a in _roots(old)]
    for kind, arg in _roots(new):
        s = ctx.to_sympy(arg)
        if kind in ("log", "rsqrt", "pow"):
            proven = s.is_positive is True
        elif kind == "log1p":
            proven = (s + 1).is_positive is True
        else:
            proven = s.is_nonnegative is True
        if proven or any(_same(s, t) for _, t in old_args):
            continue
        what = {"log": "a log of", "log1p": "log1p of", "sqrt": "a square root of",
                "rsqrt": "an inverse square root of", "pow": "a fractional power of"}[kind]
        return (f"the result takes {what} {format_expr(arg)}, which may be "
                f"{'negative' if kind == 'sqrt' else 'negative or zero'} (not proven, and not an "
                f"argument the original already took)")
    return None


__all__ = ["Ctx", "Unsupported", "positive_tensors", "prove_equal", "numeric_agree", "safety",
           "count_nodes", "has_nonfinite", "MAX_NODES"]
