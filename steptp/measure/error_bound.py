"""Per-element rounding-error bounds of a LEIR kernel: the slack the verifier allows beyond its
fixed tolerances.

A verifier that widens its tolerance with the output's *range* lets wrong small elements pass
(a softmax over 16,384 columns has values near 6e-5; "max |out| x rtol" is larger than that).
Rounding error does not scale with the range, it scales with the magnitudes *each element* was
computed from. So the slack is a running error bound (Higham, *Accuracy and Stability of
Numerical Algorithms*, ch. 3), computed element by element by a twin program:

``bound_program(p)`` is ``p`` in float64 plus, for every float tensor ``T``, a tensor ``T__err``
with a first-order bound of ``T``'s absolute rounding error when ``p`` is evaluated in its own
dtypes. The rules, with ``u`` the unit roundoff of the dtype an operation is done in (f32:
2^-24) and ``|r|`` the magnitude of its result:

=====================  ===============================================
``a + b``, ``a - b``   ``Ea + Eb + u|r|``
``a * b``              ``|a| Eb + |b| Ea + u|r|``
``a / b``              ``Ea / |b| + |a| Eb / b^2 + u|r|``
``f(x)`` (smooth)      ``|f'(x)| Ex + u|r|`` (exp, log, sqrt, tanh, erf, ...)
``max``, ``min``       the larger of the operands' bounds
``where(c, a, b)``     the chosen branch's bound
``T[..] += e``         ``E_T += Ee + R u |e|``, ``R`` = the reduction's slack factor
``T[..] max= e``       ``E_T = max(E_T, Ee)``
inputs, constants      0 (they are exact)
=====================  ===============================================

``R`` is where reassociation enters: a sum of ``n`` terms evaluated in any order is off by at
most ``(n-1) u sum|x_i|`` (the worst case, every rounding error in one direction) and, for
rounding errors that behave like independent random variables, by about ``lambda sqrt(n) u
sum|x_i|`` (Higham & Mary 2019). ``R = min(n - 1, 6 sqrt(n))`` for the classes that reorder
reductions (reassociation, algebraic) and ``R = 1`` for ``exact`` (the same order: only fused
multiply-adds differ). Floor, ceil, round, casts to integers and comparisons contribute no error
(a rounding of their argument moves them by a whole unit at a boundary, which no bound covers:
such outputs are compared with the fixed tolerances alone).

``error_bounds(program, inputs, ...)`` builds the twin once per (program, class) and returns
``[bound of each output]`` as float64 arrays; ``None`` when the program cannot be twinned (a
construct the rules above do not cover), in which case the verifier uses its fixed tolerances
alone (stricter, never looser).
"""

from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np

from ..leir import ast as A
from ..leir.types import expr_dtype, is_float
from ..lru import LRU

#: Unit roundoff (half a unit in the last place) of each float dtype.
UNIT_ROUNDOFF = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -24, "f64": 2.0 ** -53,
                 "float": 2.0 ** -24}
#: lambda of the probabilistic summation bound (a failure probability of about 2e-8 per element).
PROBABILISTIC_LAMBDA = 6.0
ERR_SUFFIX = "__err"
_BIG = 3.0e38  # a bound we cannot compute is "anything": comparisons then use the fixed tolerances


class NotTwinnable(ValueError):
    """The program holds a construct the error rules do not cover."""


def reduction_factor(n: int, reorders: bool) -> float:
    """The ``R`` of a reduction of ``n`` terms (see the module docstring)."""
    if not reorders or n <= 1:
        return 1.0
    return float(min(n - 1, PROBABILISTIC_LAMBDA * math.sqrt(n)))


def _c(x: float) -> A.Const:
    return A.Const(float(x), "float")


def _abs(e: A.Expr) -> A.Expr:
    return A.Call("abs", (e,))


def _add(*es: A.Expr) -> A.Expr:
    es = tuple(e for e in es if not (isinstance(e, A.Const) and e.value == 0))
    if not es:
        return _c(0.0)
    out = es[0]
    for e in es[1:]:
        out = A.Binary("+", out, e)
    return out


def _mul(a: A.Expr, b: A.Expr) -> A.Expr:
    if isinstance(a, A.Const) and a.value == 0 or isinstance(b, A.Const) and b.value == 0:
        return _c(0.0)
    if isinstance(a, A.Const) and a.value == 1:
        return b
    return A.Binary("*", a, b)


def _safe_div(a: A.Expr, b: A.Expr) -> A.Expr:
    # a / |b| where b may be 0: the bound is then "anything", which the comparison reads as
    # "use the fixed tolerance" (never a division by zero in the twin)
    return A.Call("where", (A.Binary("==", b, _c(0.0)), _c(_BIG), A.Binary("/", a, b)))


class _Twin:
    def __init__(self, program: A.Program, reorders: bool):
        self.p = program
        self.tensors = program.tensors
        self.reorders = reorders
        self.float_names = {t.name for t in program.params + program.intermediates
                            if is_float(t.dtype)}

    # ---------------------------------------------------------------- values in f64
    def val(self, e: A.Expr) -> A.Expr:
        """``e`` with every float cast made f64 (the twin computes values in f64)."""
        if isinstance(e, A.Call):
            func = "f64" if e.func in A.FLOAT_DTYPES else e.func
            return A.Call(func, tuple(self.val(a) for a in e.args))
        if isinstance(e, A.Binary):
            return A.Binary(e.op, self.val(e.lhs), self.val(e.rhs))
        if isinstance(e, A.Unary):
            return A.Unary(e.op, self.val(e.operand))
        if isinstance(e, A.Load):
            return A.Load(e.tensor, tuple(self.val(i) for i in e.index))
        return e

    def _u(self, e: A.Expr) -> float:
        t = expr_dtype(e, self.tensors)
        return UNIT_ROUNDOFF.get(t, 0.0)

    def _is_float(self, e: A.Expr) -> bool:
        t = expr_dtype(e, self.tensors)
        return t in UNIT_ROUNDOFF

    # ---------------------------------------------------------------- error expressions
    def err(self, e: A.Expr) -> A.Expr:
        """An f64 expression bounding the absolute rounding error of float expression ``e``."""
        if not self._is_float(e):
            return _c(0.0)
        if isinstance(e, A.Const):
            return _c(0.0)
        if isinstance(e, A.Load):
            if e.tensor in {t.name for t in self.p.inputs}:
                return _c(0.0)
            return A.Load(e.tensor + ERR_SUFFIX, tuple(self.val(i) for i in e.index))
        if isinstance(e, A.Unary):
            return self.err(e.operand)
        u = self._u(e)
        r = _abs(self.val(e))
        if isinstance(e, A.Binary):
            a, b = e.lhs, e.rhs
            ea, eb = self.err(a), self.err(b)
            va, vb = self.val(a), self.val(b)
            if e.op in ("+", "-"):
                return _add(ea, eb, _mul(_c(u), r))
            if e.op == "*":
                return _add(_mul(_abs(va), eb), _mul(_abs(vb), ea), _mul(_c(u), r))
            if e.op == "/":
                return _add(_safe_div(ea, _abs(vb)),
                            _safe_div(_mul(_abs(va), eb), A.Binary("*", vb, vb)), _mul(_c(u), r))
            if e.op == "**":
                return self._pow(va, vb, ea, eb, u, r)
            if e.op in ("//", "%"):
                return _add(ea, eb, _mul(_c(u), r))
            raise NotTwinnable(f"operator {e.op!r}")
        if isinstance(e, A.Call):
            return self._call(e, u, r)
        raise NotTwinnable(type(e).__name__)

    def _pow(self, va, vb, ea, eb, u, r):
        # d(a^b) = b a^(b-1) da + a^b ln|a| db
        da = _safe_div(_mul(_mul(_abs(vb), r), ea), _abs(va))
        db = _mul(_mul(r, _abs(A.Call("log", (A.Call("max", (_abs(va), _c(1e-300))),)))), eb)
        return _add(da, db, _mul(_c(u), r))

    def _call(self, e: A.Call, u: float, r: A.Expr) -> A.Expr:
        f, args = e.func, e.args
        if f in A.FLOAT_DTYPES:
            inner = self.err(args[0]) if self._is_float(args[0]) else _c(0.0)
            return _add(inner, _mul(_c(u), r))
        if f in A.DTYPES:
            return _c(0.0)
        if f in ("floor", "ceil", "round"):
            return _c(0.0)
        if f == "abs":
            return self.err(args[0])
        if f in ("max", "min"):
            return A.Call("max", (self.err(args[0]), self.err(args[1])))
        if f == "where":
            return A.Call("where", (self.val(args[0]), self.err(args[1]), self.err(args[2])))
        if f == "pow":
            return self._pow(self.val(args[0]), self.val(args[1]), self.err(args[0]),
                             self.err(args[1]), u, r)
        x = self.val(args[0])
        ex = self.err(args[0])
        deriv = {
            "exp": lambda: A.Call("exp", (x,)),
            "exp2": lambda: _mul(_c(math.log(2.0)), A.Call("exp2", (x,))),
            "log": lambda: _safe_div(_c(1.0), _abs(x)),
            "log2": lambda: _safe_div(_c(1.0 / math.log(2.0)), _abs(x)),
            "log1p": lambda: _safe_div(_c(1.0), _abs(A.Binary("+", _c(1.0), x))),
            "sqrt": lambda: _safe_div(_c(0.5), A.Call("sqrt", (_abs(x),))),
            "rsqrt": lambda: _safe_div(_c(0.5), _mul(_abs(x), A.Call("sqrt", (_abs(x),)))),
            "tanh": lambda: A.Binary("-", _c(1.0), A.Binary("*", A.Call("tanh", (x,)),
                                                            A.Call("tanh", (x,)))),
            "sigmoid": lambda: A.Binary("*", A.Call("sigmoid", (x,)),
                                        A.Binary("-", _c(1.0), A.Call("sigmoid", (x,)))),
            "erf": lambda: _mul(_c(2.0 / math.sqrt(math.pi)),
                                A.Call("exp", (A.Unary("-", A.Binary("*", x, x)),))),
            "sin": lambda: _c(1.0),
            "cos": lambda: _c(1.0),
        }.get(f)
        if deriv is None:
            raise NotTwinnable(f"function {f}()")
        return _add(_mul(_abs(deriv()), ex), _mul(_c(u), r))

    # ---------------------------------------------------------------- statements
    def body(self, stmts, extents: dict[str, int]) -> tuple[A.Stmt, ...]:
        out: list[A.Stmt] = []
        for s in stmts:
            if isinstance(s, A.Loop):
                out.append(A.Loop(s.var, s.extent, "serial",
                                  self.body(s.body, {**extents, s.var: s.extent})))
            elif isinstance(s, A.If):
                out.append(A.If(self.val(s.cond), self.body(s.body, extents)))
            else:
                out.extend(self.assign(s, extents))
        return tuple(out)

    def assign(self, s: A.Assign, extents: dict[str, int]) -> list[A.Stmt]:
        idx = tuple(self.val(i) for i in s.index)
        value = A.Assign(s.tensor, idx, s.op, self.val(s.value))
        if s.tensor not in self.float_names:
            return [value]
        e = s.value
        u = UNIT_ROUNDOFF[self.tensors[s.tensor].dtype]
        ee = self.err(e) if self._is_float(e) else _c(0.0)
        name = s.tensor + ERR_SUFFIX
        if s.op == "=":
            err = A.Assign(name, idx, "=", ee)
        elif s.op == "+=":
            lhs_vars = {v for i in s.index for v in A.free_vars(i)}
            n = 1
            for v, ext in extents.items():
                if v not in lhs_vars:
                    n *= ext
            R = reduction_factor(n, self.reorders)
            err = A.Assign(name, idx, "+=", _add(ee, _mul(_c(R * u), _abs(self.val(e)))))
        elif s.op in ("max=", "min="):
            err = A.Assign(name, idx, "max=", ee)
        else:  # "*=": a relative bound would be needed; no rule here
            raise NotTwinnable(f"reduction {s.op!r}")
        # the error bound is written first: it reads the value operands before the update
        return [err, value]


def bound_program(program: A.Program, reorders: bool) -> A.Program:
    """The twin of ``program`` (see the module docstring): outputs are the original outputs in
    f64 followed by ``<output>__err`` for each float output. Raises ``NotTwinnable``."""
    tw = _Twin(program, reorders)

    def f64(t: A.Tensor) -> A.Tensor:
        return A.Tensor(t.name, "f64" if is_float(t.dtype) else t.dtype, t.shape)

    def err(t: A.Tensor) -> A.Tensor:
        return A.Tensor(t.name + ERR_SUFFIX, "f64", t.shape)

    float_outs = [t for t in program.outputs if is_float(t.dtype)]
    inter = tuple(f64(t) for t in program.intermediates) + tuple(
        err(t) for t in program.intermediates if is_float(t.dtype))
    return A.Program(program.name + "_error_bound", tuple(f64(t) for t in program.inputs),
                     tuple(f64(t) for t in program.outputs) + tuple(err(t) for t in float_outs),
                     inter, tw.body(program.body, {}))


_MISSING = object()   # a miss in the twin cache, told from a cached None (no twin)


class ErrorBounds:
    """Builds and caches twins (a few per process: the verifier asks for the same reference
    once per seed), and keeps the bounds they computed: every candidate of a kernel is judged
    against the reference's bound on the same seeded inputs, which is one run of the float64
    twin (about as slow as the unscheduled kernel) per seed, not one per candidate. Results
    are keyed by the program and the inputs' bytes, so equal inputs get the bound they would
    get computed again."""

    def __init__(self, size: int = 8, results: int = 16):
        self._cache: LRU[object] = LRU(size)   # None: the program cannot be twinned
        self._results: LRU[list] = LRU(results)
        self._lock = threading.Lock()
        self.runs = 0   # twin runs (a result not computed before)

    def _built(self, program: A.Program, reorders: bool, target):
        from ..tir import build as B

        key = (program, reorders, target.key)
        hit = self._cache.get(key, _MISSING)
        if hit is not _MISSING:
            return hit
        try:
            built = B.build(bound_program(program, reorders), target)
        except NotTwinnable:
            built = None
        except Exception:  # noqa: BLE001 - a twin TVM cannot build: fall back to fixed tolerances
            built = None
        return self._cache.put(key, built)

    def __call__(self, program: A.Program, inputs: Sequence[np.ndarray], reorders: bool,
                 target=None, keep: bool = True) -> list[np.ndarray | None] | None:
        """The error bound of each output of ``program`` on ``inputs`` (``None`` for a
        non-float output); ``None`` when the program cannot be twinned. ``keep=False``: not
        kept for later callers (a candidate's own bound is asked for once)."""
        from ..tir import build as B

        target = target or B.default_target()
        built = self._built(program, reorders, target)
        if built is None:
            return None
        key = (program, reorders, target.key, _digest(inputs)) if keep else None
        hit = self._results.get(key) if keep else None
        if hit is not None:
            return list(hit)
        ins = [np.asarray(x, dtype=np.float64) if B.is_float_dtype(str(np.asarray(x).dtype))
               or str(np.asarray(x).dtype) == "bfloat16" else x for x in inputs]
        outs = B.run(built, ins)
        n = len(program.outputs)
        errs = iter(outs[n:])
        result: list[np.ndarray | None] = []
        for t in program.outputs:
            b = np.nan_to_num(next(errs), nan=_BIG, posinf=_BIG) if is_float(t.dtype) else None
            if b is not None:
                b.setflags(write=False)   # shared by every later caller: read-only
            result.append(b)
        with self._lock:
            self.runs += 1
        if keep:
            self._results.put(key, result)
        return list(result)


def _digest(inputs: Sequence[np.ndarray]) -> str:
    """The inputs' identity for the bound cache: dtype, shape and bytes of each."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for x in inputs:
        a = np.ascontiguousarray(np.asarray(x))
        h.update(f"{a.dtype.str}{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


#: The process-wide instance the verifier uses.
error_bounds = ErrorBounds()
