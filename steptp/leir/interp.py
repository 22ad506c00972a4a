"""A NumPy reference interpreter for LEIR, independent of TVM.

``run(program, inputs)`` executes the program element by element with the exact LEIR semantics
and returns its outputs. It is meant for small programs (tests, verification of rewrites): the
AST is compiled once into nested Python closures (no text is ever evaluated), then run.

Semantics:

* statements run in program order, loops from 0 to extent-1, ``if`` bodies when the guard holds;
* arithmetic is done on NumPy scalars of each expression's dtype (``np.float32`` for f32, ...);
  untyped literals take the dtype of the other operand or of the stored tensor, exactly as in
  ``types.py``; subscript arithmetic on loop variables uses Python integers;
* ``//`` and ``%`` are floor division and floor modulo; ``/`` is true division (floats only);
* a reduction sets its element to the identity (0, 1, -inf/+inf, or the integer dtype's min/max)
  when every reduction axis is 0, then updates it; ``max(a, b)`` is ``a if a > b else b`` and
  ``min(a, b)`` is ``a if a < b else b`` (TIR's select semantics, also for ``max=``/``min=``);
* ``where(c, a, b)`` evaluates only the chosen branch; casts truncate toward zero and wrap;
* intrinsics: NumPy ufuncs in the operand's dtype; ``erf`` via ``math.erf``; ``sigmoid(x) =
  1/(1+exp(-x))``; ``rsqrt(x) = 1/sqrt(x)``; ``round`` rounds half to even;
* outputs and intermediates start as NaN (floats), 0 (integers) or False, so elements that are
  never written show up; subscripts that ``check`` cannot prove in range are checked at run time.

bf16 is not supported (NumPy has no bfloat16): such programs raise NotImplementedError.
"""

from __future__ import annotations

import math
import operator
from typing import Callable, Mapping, Sequence

import numpy as np

from . import ast as A
from .analysis import interval
from .types import expr_dtype, unify

DEFAULT_LIMIT = 5_000_000

Env = list
Fn = Callable[[Env], object]


class InterpError(RuntimeError):
    """A program the interpreter cannot run (bad inputs, out-of-range access, too much work)."""


class WorkLimitExceeded(InterpError):
    pass


_NP: dict[str, type] = {k: np.dtype(v).type for k, v in A.DTYPES.items() if k != "bf16"}

_UFUNCS = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin,
           "cos": np.cos, "log2": np.log2, "exp2": np.exp2, "log1p": np.log1p}

_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
          "//": operator.floordiv, "%": operator.mod, "**": operator.pow}
_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


def _max(a, b):
    return a if a > b else b


def _min(a, b):
    return a if a < b else b


_COMBINE = {"+=": operator.add, "*=": operator.mul, "max=": _max, "min=": _min}


def identity(op: str, dtype: str):
    """The initial value of a reduction ``op`` on a tensor of ``dtype`` (a NumPy scalar)."""
    t = _NP[dtype]
    if op == "+=":
        return t(0)
    if op == "*=":
        return t(1)
    if dtype in A.FLOAT_DTYPES:
        return t(-np.inf if op == "max=" else np.inf)
    info = np.iinfo(np.dtype(A.DTYPES[dtype]))
    return t(info.min if op == "max=" else info.max)


def work(program: A.Program) -> int:
    """Number of statement executions, ignoring guards (the bound ``run``'s limit applies to)."""
    total = 0

    def visit(body, n):
        nonlocal total
        for s in body:
            if isinstance(s, A.Assign):
                total += n
            elif isinstance(s, A.Loop):
                visit(s.body, n * s.extent)
            elif isinstance(s, A.If):
                visit(s.body, n)

    visit(program.body, 1)
    return total


def _resolve(t: str, want: str | None) -> str:
    """The concrete type an expression of (possibly weak) type ``t`` is computed in when its
    value flows into ``want`` ("index" means a Python integer)."""
    if t in ("int", "index"):
        if want in A.INT_DTYPES or (t == "int" and want in A.FLOAT_DTYPES):
            return want  # type: ignore[return-value]
        return "index"
    if t == "float":
        return want if want in A.FLOAT_DTYPES else "f32"
    return t


def _to_type(src: str, dst: str) -> Callable[[object], object]:
    """A converter from values of type ``src`` to NumPy scalars of ``dst`` (TIR cast rules)."""
    t = _NP[dst]
    if src == dst:
        return lambda x: x
    if src == "index" or src == "bool":
        if dst in A.INT_DTYPES:
            return lambda x: np.int64(x).astype(t)
        return lambda x: t(x)
    if dst == "bool":
        return lambda x: np.bool_(x != 0)
    return lambda x: x.astype(t)  # type: ignore[attr-defined]


class _Compiler:
    def __init__(self, program: A.Program, bufs: dict[str, np.ndarray]):
        self.p = program
        self.tensors = program.tensors
        self.bufs = bufs

    def ty(self, e: A.Expr) -> str:
        return expr_dtype(e, self.tensors)

    # ------------------------------------------------------------------ statements
    def body(self, stmts, scope: dict[str, int], ranges: dict, guarded: bool) -> Fn:
        fs = [self.stmt(s, scope, ranges, guarded) for s in stmts]
        if len(fs) == 1:
            return fs[0]
        if len(fs) == 2:
            f0, f1 = fs

            def seq2(env):
                f0(env)
                f1(env)
            return seq2
        fs_t = tuple(fs)

        def seq(env):
            for f in fs_t:
                f(env)
        return seq

    def stmt(self, s: A.Stmt, scope, ranges, guarded) -> Fn:
        if isinstance(s, A.Loop):
            slot = len(scope)
            inner = dict(scope)
            inner[s.var] = slot
            r = dict(ranges)
            r[s.var] = (0, s.extent - 1)
            body = self.body(s.body, inner, r, guarded)
            n = s.extent

            def loop(env):
                for x in range(n):
                    env[slot] = x
                    body(env)
            return loop
        if isinstance(s, A.If):
            cond = self.expr(s.cond, "bool", scope, ranges)
            body = self.body(s.body, scope, ranges, True)

            def guard(env):
                if cond(env):
                    body(env)
            return guard
        if isinstance(s, A.Assign):
            return self.assign(s, scope, ranges)
        raise TypeError(f"not a LEIR statement: {s!r}")

    def assign(self, s: A.Assign, scope, ranges) -> Fn:
        t = self.tensors[s.tensor]
        arr = self.bufs[s.tensor]
        index = self.index(s.tensor, s.index, scope, ranges)
        vt = _resolve(self.ty(s.value), t.dtype)
        value = self.expr(s.value, t.dtype, scope, ranges)
        if vt != t.dtype:
            conv = _to_type(vt, t.dtype)
            inner_value = value
            value = lambda env: conv(inner_value(env))  # noqa: E731
        if not s.is_reduction:
            if index is None:
                def store0(env):
                    arr[()] = value(env)
                return store0

            def store(env):
                arr[index(env)] = value(env)
            return store
        combine = _COMBINE[s.op]
        init = identity(s.op, t.dtype)
        used = {v for sub in s.index for v in A.free_vars(sub)}
        axes = [scope[v] for v in scope if v not in used]
        idx = index if index is not None else (lambda env: ())
        if not axes:
            def reduce_always(env):
                arr[idx(env)] = combine(init, value(env))
            return reduce_always
        if len(axes) == 1:
            (a0,) = axes

            def reduce1(env):
                i = idx(env)
                if env[a0] == 0:
                    arr[i] = init
                arr[i] = combine(arr[i], value(env))
            return reduce1
        axes_t = tuple(axes)

        def reduce_n(env):
            i = idx(env)
            for a in axes_t:
                if env[a]:
                    break
            else:
                arr[i] = init
            arr[i] = combine(arr[i], value(env))
        return reduce_n

    def index(self, name: str, subs: tuple[A.Expr, ...], scope, ranges) -> Fn | None:
        """A closure computing the index tuple (or the single int) of an access; None for
        scalars."""
        shape = self.tensors[name].shape
        if not subs:
            return None
        fs: list[Fn] = []
        simple: list[int | None] = []
        for d, sub in enumerate(subs):
            size = shape[d]
            r = interval(sub, ranges)
            safe = r is not None and 0 <= r[0] and r[1] < size
            if safe and isinstance(sub, A.Var):
                simple.append(scope[sub.name])
                fs.append(None)  # type: ignore[arg-type]
                continue
            simple.append(None)
            f = self.expr(sub, "index", scope, ranges)
            if not safe:
                f = _checked(f, name, d, size, sub)
            fs.append(f)
        if all(s is not None for s in simple):
            slots = simple
            if len(slots) == 1:
                s0 = slots[0]
                return lambda env: env[s0]
            if len(slots) == 2:
                s0, s1 = slots
                return lambda env: (env[s0], env[s1])
            if len(slots) == 3:
                s0, s1, s2 = slots
                return lambda env: (env[s0], env[s1], env[s2])
            st = tuple(slots)
            return lambda env: tuple([env[s] for s in st])
        getters: list[Fn] = []
        for s, f in zip(simple, fs):
            if s is not None:
                getters.append((lambda k: (lambda env: env[k]))(s))
            else:
                getters.append(f)
        if len(getters) == 1:
            return getters[0]
        if len(getters) == 2:
            g0, g1 = getters
            return lambda env: (g0(env), g1(env))
        gt = tuple(getters)
        return lambda env: tuple([g(env) for g in gt])

    # ------------------------------------------------------------------ expressions
    def expr(self, e: A.Expr, want: str | None, scope, ranges) -> Fn:
        """Compile ``e``; its value is computed in ``_resolve(type(e), want)``."""
        t = _resolve(self.ty(e), want)
        if isinstance(e, A.Const):
            if t == "index":
                c = int(e.value)
            elif e.kind == "bool":
                c = bool(e.value)
            else:
                c = _NP[t](e.value)
            return lambda env: c
        if isinstance(e, A.Var):
            slot = scope[e.name]
            if t == "index":
                return lambda env: env[slot]
            conv = _to_type("index", t)
            return lambda env: conv(env[slot])
        if isinstance(e, A.Load):
            arr = self.bufs[e.tensor]
            index = self.index(e.tensor, e.index, scope, ranges)
            if index is None:
                return lambda env: arr[()]
            return lambda env: arr[index(env)]
        if isinstance(e, A.Unary):
            if e.op == "not":
                f = self.expr(e.operand, "bool", scope, ranges)
                return lambda env: not f(env)
            f = self.expr(e.operand, t, scope, ranges)
            return lambda env: -f(env)
        if isinstance(e, A.Binary):
            return self.binary(e, t, scope, ranges)
        if isinstance(e, A.Call):
            return self.call(e, t, scope, ranges)
        raise TypeError(f"not a LEIR expression: {e!r}")

    def binary(self, e: A.Binary, t: str, scope, ranges) -> Fn:
        if e.op in ("and", "or"):
            a = self.expr(e.lhs, "bool", scope, ranges)
            b = self.expr(e.rhs, "bool", scope, ranges)
            if e.op == "and":
                return lambda env: bool(a(env)) and bool(b(env))
            return lambda env: bool(a(env)) or bool(b(env))
        if e.op in _CMP:
            ot = _resolve(unify(self.ty(e.lhs), self.ty(e.rhs)), None)
            op = _CMP[e.op]
        else:
            ot = t
            op = _ARITH[e.op]
        a = self.expr(e.lhs, ot, scope, ranges)
        b = self.expr(e.rhs, ot, scope, ranges)
        # constants folded into the closure save one call per evaluation
        if isinstance(e.rhs, A.Const):
            cb = b(None)
            return lambda env: op(a(env), cb)
        if isinstance(e.lhs, A.Const):
            ca = a(None)
            return lambda env: op(ca, b(env))
        return lambda env: op(a(env), b(env))

    def call(self, e: A.Call, t: str, scope, ranges) -> Fn:
        f = e.func
        if f in A.DTYPES:
            at = self.ty(e.args[0])
            src = _resolve(at, f if at == "float" else None)
            a = self.expr(e.args[0], src, scope, ranges)
            conv = _to_type(src, f)
            return lambda env: conv(a(env))
        if f == "where":
            c = self.expr(e.args[0], "bool", scope, ranges)
            a = self.expr(e.args[1], t, scope, ranges)
            b = self.expr(e.args[2], t, scope, ranges)
            return lambda env: a(env) if c(env) else b(env)
        if f in ("max", "min", "pow"):
            a = self.expr(e.args[0], t, scope, ranges)
            b = self.expr(e.args[1], t, scope, ranges)
            op = {"max": _max, "min": _min, "pow": operator.pow}[f]
            return lambda env: op(a(env), b(env))
        if f == "isnan":
            at = _resolve(self.ty(e.args[0]), None)
            at = "f32" if at == "index" else at
            a = self.expr(e.args[0], at, scope, ranges)
            return lambda env: bool(np.isnan(a(env)))
        a = self.expr(e.args[0], t, scope, ranges)
        if f == "abs":
            return lambda env: abs(a(env))
        if f in ("floor", "ceil", "round"):
            if t not in A.FLOAT_DTYPES:
                return a
            uf = {"floor": np.floor, "ceil": np.ceil, "round": np.rint}[f]
            return lambda env: uf(a(env))
        if t not in A.FLOAT_DTYPES:
            raise TypeError(f"{f}() of {t}")  # ruled out by the type rules
        T = _NP[t]
        one = T(1)
        if f in _UFUNCS:
            uf = _UFUNCS[f]
            return lambda env: uf(a(env))
        if f == "erf":
            return lambda env: T(math.erf(a(env)))
        if f == "sigmoid":
            return lambda env: one / (one + np.exp(-a(env)))
        if f == "rsqrt":
            return lambda env: one / np.sqrt(a(env))
        raise TypeError(f"unknown intrinsic {f!r}")


def _checked(f: Fn, name: str, d: int, size: int, sub: A.Expr) -> Fn:
    from .printer import format_expr

    text = format_expr(sub, compact=True)

    def g(env):
        v = int(f(env))
        if 0 <= v < size:
            return v
        raise InterpError(f"subscript {text} = {v} out of range for dimension {d} of {name} "
                          f"(size {size})")
    return g


def _fill(t: A.Tensor) -> np.ndarray:
    dt = np.dtype(t.tvm_dtype)
    if t.dtype in A.FLOAT_DTYPES:
        return np.full(t.shape, np.nan, dtype=dt)
    return np.zeros(t.shape, dtype=dt)


def run(program: A.Program, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], *,
        limit: int = DEFAULT_LIMIT, check_program: bool = True,
        intermediates: bool = False) -> dict[str, np.ndarray]:
    """Run ``program`` on ``inputs`` (a dict by name, or a list in argument order) and return
    ``{output name: array}`` (plus the intermediates with ``intermediates=True``).

    Inputs are converted to their declared dtype and must have the declared shape. Raises
    ``LeirCheckError`` for invalid programs (unless ``check_program=False``), ``InterpError`` for
    bad inputs or out-of-range accesses, ``WorkLimitExceeded`` when the program would execute more
    than ``limit`` statements, and NotImplementedError for bf16.
    """
    if check_program:
        from .check import check

        check(program)
    for t in program.params + program.intermediates:
        if t.dtype == "bf16":
            raise NotImplementedError(f"the NumPy interpreter does not support bf16 ({t.name})")
    n = work(program)
    if n > limit:
        raise WorkLimitExceeded(f"{program.name} needs {n} statement executions, more than the "
                                f"limit of {limit}; the interpreter is meant for small programs "
                                f"(pass limit= to raise it)")
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - {t.name for t in program.inputs})
        if unknown:
            raise InterpError(f"unknown inputs {unknown}; {program.name} takes "
                              f"{[t.name for t in program.inputs]}")
        missing = [t.name for t in program.inputs if t.name not in inputs]
        if missing:
            raise InterpError(f"missing inputs {missing}")
        given = [inputs[t.name] for t in program.inputs]
    else:
        given = list(inputs)
        if len(given) != len(program.inputs):
            raise InterpError(f"{program.name} takes {len(program.inputs)} inputs, "
                              f"got {len(given)}")
    bufs: dict[str, np.ndarray] = {}
    for t, x in zip(program.inputs, given):
        arr = np.array(x, dtype=np.dtype(t.tvm_dtype))
        if arr.shape != t.shape:
            raise InterpError(f"input {t.name} must have shape {list(t.shape)}, "
                              f"got {list(arr.shape)}")
        bufs[t.name] = arr
    for t in program.outputs + program.intermediates:
        bufs[t.name] = _fill(t)
    comp = _Compiler(program, bufs)
    main = comp.body(program.body, {}, {}, False)
    depth = _max_depth(program.body)
    env: Env = [0] * max(depth, 1)
    with np.errstate(all="ignore"):
        main(env)
    names = [t.name for t in program.outputs]
    if intermediates:
        names += [t.name for t in program.intermediates]
    return {name: bufs[name] for name in names}


def _max_depth(body) -> int:
    best = 0
    for s in body:
        if isinstance(s, A.Loop):
            best = max(best, 1 + _max_depth(s.body))
        elif isinstance(s, A.If):
            best = max(best, _max_depth(s.body))
    return best
