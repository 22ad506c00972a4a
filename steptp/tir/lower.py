"""LEIR -> TVM TIR ``PrimFunc``, deterministically.

The PrimFunc is built with TVM's IRBuilder (the same builder the TVMScript parser drives), so it
has exactly the shape a parsed ``@T.prim_func(s_tir=True)`` would have: a root ``sblock`` holding
the intermediates, loops, and one leaf ``sblock`` per LEIR statement, with read/write regions
inferred by TVM. Building the same program twice gives ``tvm_ffi.structural_equal`` functions:
every name, counter and dtype below is a function of the LEIR text alone, and
``tvm.script.from_source(f.script())`` gives back a structurally equal function.

Lowering scheme
---------------
* **Function**: named ``main`` (``global_symbol = "main"``, so every build calls ``"main"``),
  attribute ``tirx.noalias``; parameters are the kernel's inputs then its outputs, each a
  ``T.Buffer`` named after the tensor (``layout=None``, as the s_tir parser makes them).
* **Intermediates** become ``T.sblock_alloc_buffer`` in the root block with their storage scope
  (``global``, ``shared``, ``local``); TVM later moves each allocation to the lowest common
  ancestor of its uses (so a ``local`` buffer ends up inside the thread loops on a GPU).
* **Index type**: every loop variable, block iterator and shape is ``int32``, unless some tensor
  has more than 2**31-1 elements or a loop extent exceeds that, then ``int64`` everywhere.
* **Loops**: ``serial/parallel/vectorized/unrolled`` map to the ``For`` kinds of the same name;
  ``blockIdx.*``/``threadIdx.*`` become ``thread_binding`` loops. A CPU (LLVM) target rejects a
  thread binding with a ``LowerError`` naming the loop, its line and its binding.
* **Statements**: each assignment is one leaf ``sblock`` named after the tensor it writes; the
  first block writing ``X`` is ``"X"``, later ones ``"X_1"``, ``"X_2"``... in program order. The
  block has one iterator per enclosing loop (outermost first), named ``v`` + the loop variable and
  bound to that loop variable with the loop's extent as its domain. For a plain store every
  iterator is spatial. For a reduction (``+= *= max= min=``) an iterator is spatial if its
  variable occurs in the left-hand subscript and a reduce axis otherwise -- exactly LEIR's rule,
  so TIR's ``T.init`` (run when every reduce iterator is at 0) is LEIR's init. The init stores
  the identity: ``0``, ``1``, ``-inf``/``inf`` for floats, the dtype's min/max for integers
  (``false``/``true`` for bool ``max=``/``min=``); the update is ``X = X op value``.
  This scheme accepts every form LEIR can write: split subscripts (``T0[io*4+ii, j]``), fused
  nests, compute-at style recomputation (a store inside a loop whose variable it does not use: a
  spatial iterator the block ignores), scalars (0-d buffers accessed as ``S[()]``), ``//``/``%``
  subscripts and gathers. TVM's block checks (affine bindings, compact data flow) only matter to
  ``tvm.s_tir.Schedule``; the build pipeline accepts all of these, which the tests check.
  A reduction axis that is ``vectorized`` or ``parallel`` is rejected (``LowerError``): TVM
  would run the updates of one element as independent lanes or threads and silently compute a
  wrong result (TVM's own schedule refuses it too); so is one bound to ``blockIdx``. One bound to
  ``threadIdx`` lowers to TVM's cross-thread reduction. Other loop-carried dependences under a
  ``vectorized``/``parallel`` loop (a scan) are not detected here; verification catches them.
* **Guards**: ``if c:`` becomes an ``IfThenElse`` at the same place among the loops, outside the
  blocks it guards (its condition uses loop variables, not block iterators); a reduction under a
  guard therefore has its init guarded too, as in LEIR.
* **Expressions**: weak types (untyped literals, loop variables) are resolved with
  ``steptp.leir.types.expr_dtype``/``concrete`` against the dtype they flow into (the stored
  tensor, the other operand, the index type in subscripts); a loop variable used as a value of
  another integer type is cast. ``//``/``%`` are ``floordiv``/``floormod`` (for floats
  ``floor(a/b)`` and ``a - floor(a/b)*b``); ``where`` is ``if_then_else`` (only the chosen branch
  is evaluated, so padded reads stay in bounds); ``round`` is ``nearbyint`` (half to even, as
  NumPy); a cast to ``bool`` is ``x != 0``; integer ``**`` needs a constant exponent >= 0 and
  becomes repeated multiplication. The few half-precision intrinsics TVM's LLVM backend cannot
  emit (``erf``/``log1p`` on f16; ``erf``/``isnan``/``pow`` on bf16) are computed in f32 and cast
  back.
"""

from __future__ import annotations

from typing import Iterable

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script import builder as T

from ..leir import ast as A
from ..leir.types import COMPARISONS, INDEX, WEAK, concrete, expr_dtype, unify
from .target import Target

INT32_MAX = 2**31 - 1


#: TVM's vector types count lanes in 16 bits: a vectorized loop of 65,536 iterations wraps to
#: zero lanes and the build dies with SIGFPE (a crashed measurement worker, not an error)
MAX_VECTOR_LANES = 65535


class LowerError(ValueError):
    """A LEIR program that cannot be lowered for the requested target."""

    def __init__(self, message: str, pos: A.Pos | None = None):
        self.pos, self.detail = pos, message
        super().__init__(f"{pos}: {message}" if pos else message)


def index_dtype(program: A.Program) -> str:
    """``int64`` if any tensor or loop needs it, else ``int32`` (deterministic)."""
    if any(t.size > INT32_MAX for t in program.tensors.values()):
        return "int64"
    if any(isinstance(n, A.Loop) and n.extent > INT32_MAX for s in program.body for n in A.walk(s)):
        return "int64"
    return "int32"


def lower(program: A.Program | str, target: Target | None = None) -> tirx.PrimFunc:
    """Lower a LEIR program (or its text) to a PrimFunc named ``main``.

    ``target`` only matters for legality: a CPU target rejects GPU thread bindings. Type errors
    in the program raise ``steptp.leir.types.LeirTypeError``; anything the lowering cannot express
    raises ``LowerError``.
    """
    if isinstance(program, str):
        from ..leir import parse

        program = parse(program)
    return _Lowerer(program, target).run()


_LOOP_FRAMES = {"serial": T.serial, "parallel": T.parallel, "vectorized": T.vectorized,
                "unrolled": T.unroll}

_UNARY_FLOAT = {"exp": tirx.exp, "log": tirx.log, "sqrt": tirx.sqrt, "rsqrt": tirx.rsqrt,
                "tanh": tirx.tanh, "sigmoid": tirx.sigmoid, "erf": tirx.erf, "sin": tirx.sin,
                "cos": tirx.cos, "log2": tirx.log2, "exp2": tirx.exp2, "log1p": tirx.log1p}

# (dtype, function) pairs TVM's LLVM backend cannot emit: computed in f32 and cast back (which
# is also how NumPy evaluates half-precision ufuncs).
_PROMOTE = frozenset({("f16", "erf"), ("f16", "log1p"), ("bf16", "erf"), ("bf16", "isnan"),
                      ("bf16", "pow")})

_COMPARE = {"==": tirx.EQ, "!=": tirx.NE, "<": tirx.LT, "<=": tirx.LE, ">": tirx.GT, ">=": tirx.GE}


def _tvm(dtype: str) -> str:
    return A.DTYPES[dtype]


def _dt(x: tirx.PrimExpr) -> str:
    """The dtype name of a TIR expression (``PrimExpr.dtype`` is gone in TVM 0.27)."""
    return str(x.ty.dtype)


def _short(tvm_dtype: str) -> str:
    return A.DTYPE_FROM_TVM[str(tvm_dtype)]


def identity(op: str, dtype: str) -> tirx.PrimExpr:
    """The identity of a reduction operator in a LEIR dtype, as a TIR constant."""
    d = _tvm(dtype)
    if op == "+=":
        return tirx.const(0, d) if dtype != "bool" else tirx.const(False, d)
    if op == "*=":
        return tirx.const(1, d) if dtype != "bool" else tirx.const(True, d)
    if dtype == "bool":
        return tirx.const(op == "min=", d)
    if dtype in A.FLOAT_DTYPES:
        return tirx.const(float("-inf") if op == "max=" else float("inf"), d)
    return tirx.min_value(d) if op == "max=" else tirx.max_value(d)


class _Lowerer:
    def __init__(self, program: A.Program, target: Target | None):
        self.p = program
        self.target = target
        self.tensors = program.tensors
        self.idx = index_dtype(program)
        self.idx_short = _short(self.idx)
        self.buffers: dict[str, tirx.Buffer] = {}
        self.block_counts: dict[str, int] = {}
        # Enclosing loops, outermost first: (LEIR name, extent, loop var).
        self.loops: list[tuple[str, int, tirx.Var, A.Loop]] = []
        # LEIR variable name -> TIR expression (loop var outside blocks, iterator inside).
        self.env: dict[str, tirx.PrimExpr] = {}

    # ------------------------------------------------------------------ structure
    def run(self) -> tirx.PrimFunc:
        p = self.p
        with IRBuilder() as ib:
            with T.prim_func(s_tir=True):
                T.func_name("main")
                T.func_attr({"global_symbol": "main", "tirx.noalias": True})
                for t in p.params:
                    buf = T.arg(t.name, T.buffer(self._shape(t), _tvm(t.dtype), layout=None))
                    self.buffers[t.name] = buf
                with T.sblock("root"):
                    for t in p.intermediates:
                        buf = T.sblock_alloc_buffer(self._shape(t), _tvm(t.dtype), scope=t.scope,
                                                    layout=None)
                        IRBuilder.name(t.name, buf)
                        self.buffers[t.name] = buf
                    if not p.body:
                        T.evaluate(0)
                    self._stmts(p.body)
        return ib.get()

    def _shape(self, t: A.Tensor) -> list[tirx.PrimExpr]:
        return [tirx.IntImm(self.idx, d) for d in t.shape]

    def _stmts(self, stmts: Iterable[A.Stmt]) -> None:
        for s in stmts:
            if isinstance(s, A.Loop):
                self._loop(s)
            elif isinstance(s, A.If):
                self._if(s)
            elif isinstance(s, A.Assign):
                self._assign(s)
            else:  # pragma: no cover
                raise LowerError(f"unknown statement {s!r}")

    def _loop(self, s: A.Loop) -> None:
        lo, hi = tirx.IntImm(self.idx, 0), tirx.IntImm(self.idx, s.extent)
        if s.kind in A.THREAD_KINDS:
            if self.target is not None and not self.target.is_gpu:
                raise LowerError(
                    f"loop '{s.var}' is bound to {s.kind}, but the target {self.target.key} is a "
                    f"CPU (LLVM) target without GPU threads; use serial, parallel, vectorized or "
                    f"unrolled", s.pos)
            frame = T.thread_binding(lo, hi, thread=s.kind)
        elif s.kind in _LOOP_FRAMES:
            if s.kind == "vectorized" and s.extent > MAX_VECTOR_LANES:
                raise LowerError(
                    f"loop '{s.var}' is vectorized over {s.extent} iterations, but a TVM vector "
                    f"holds at most {MAX_VECTOR_LANES} lanes; split it and vectorize the inner "
                    f"loop (e.g. 16 lanes)", s.pos)
            frame = _LOOP_FRAMES[s.kind](lo, hi)
        else:
            raise LowerError(f"loop '{s.var}' has unknown kind {s.kind!r}", s.pos)
        with frame as v:
            IRBuilder.name(s.var, v)
            saved = self.env.get(s.var)
            self.env[s.var] = v
            self.loops.append((s.var, s.extent, v, s))
            try:
                self._stmts(s.body)
            finally:
                self.loops.pop()
                if saved is None:
                    self.env.pop(s.var, None)
                else:
                    self.env[s.var] = saved

    def _if(self, s: A.If) -> None:
        cond = self._expr(s.cond, "bool")
        if _dt(cond) != "bool":
            raise LowerError(f"an if condition must be boolean, got {_short(_dt(cond))}", s.pos)
        with T.If(cond):
            with T.Then():
                self._stmts(s.body)

    def _block_name(self, tensor: str) -> str:
        n = self.block_counts.get(tensor, 0)
        self.block_counts[tensor] = n + 1
        return tensor if n == 0 else f"{tensor}_{n}"

    def _assign(self, s: A.Assign) -> None:
        t = self.tensors.get(s.tensor)
        if t is None:
            raise LowerError(f"tensor {s.tensor!r} is not declared", s.pos)
        if len(s.index) != len(t.shape):
            raise LowerError(f"{s.tensor} has rank {len(t.shape)} but is written with "
                             f"{len(s.index)} subscripts", s.pos)
        vt = expr_dtype(s.value, self.tensors)
        unify(vt, t.dtype, s.pos, f"the value stored into {s.tensor} ({t.dtype}) and it")
        lhs_vars = {v for i in s.index for v in A.free_vars(i)}
        buf = self.buffers[s.tensor]
        outer_env = dict(self.env)
        with T.sblock(self._block_name(s.tensor)):
            for name, extent, var, loop in self.loops:
                dom = tirx.IntImm(self.idx, extent)
                if s.is_reduction and name not in lhs_vars:
                    if loop.kind in ("vectorized", "parallel"):
                        raise LowerError(
                            f"{s.tensor} {s.op} reduces over loop '{name}', which is {loop.kind}: "
                            f"its iterations all update the same element, so they cannot run as "
                            f"vector lanes or in parallel; make '{name}' serial or unrolled (or "
                            f"vectorize/parallelize a loop that occurs in the left-hand side)",
                            s.pos)
                    if loop.kind.startswith("blockIdx"):
                        raise LowerError(
                            f"{s.tensor} {s.op} reduces over loop '{name}', which is bound to "
                            f"{loop.kind}; thread blocks cannot combine partial results (only "
                            f"threadIdx-bound reduction axes lower to a cross-thread reduction)",
                            s.pos)
                    iv = T.axis.reduce(dom, var, dtype=self.idx)
                else:
                    iv = T.axis.spatial(dom, var, dtype=self.idx)
                IRBuilder.name("v" + name, iv)
                self.env[name] = iv
            try:
                index = [self._index(e) for e in s.index]
                value = self._expr(s.value, t.dtype)
                if s.is_reduction:
                    with T.init():
                        T.buffer_store(buf, identity(s.op, t.dtype), index)
                    cur = tirx.BufferLoad(buf, index)
                    if s.op == "+=":
                        value = cur + value
                    elif s.op == "*=":
                        value = cur * value
                    elif s.op == "max=":
                        value = T.max(cur, value)
                    else:
                        value = T.min(cur, value)
                T.buffer_store(buf, value, index)
            finally:
                self.env = outer_env

    # ------------------------------------------------------------------ expressions
    def _index(self, e: A.Expr) -> tirx.PrimExpr:
        x = self._expr(e, self.idx_short)
        if _dt(x) != self.idx:
            if not _short(_dt(x)) in A.INT_DTYPES:
                raise LowerError(f"a subscript must be an integer, got {_short(_dt(x))}", e.pos)
            x = tirx.Cast(self.idx, x)
        return x

    def _resolve(self, t: str, want: str | None) -> str:
        """A concrete dtype for a (possibly weak) type, given the dtype the context expects."""
        if t == INDEX and (want is None or want not in A.INT_DTYPES):
            return self.idx_short
        if t == "int" and want is None:
            return self.idx_short
        return concrete(t, want or "")

    def _expr(self, e: A.Expr, want: str | None) -> tirx.PrimExpr:
        """Lower ``e``; ``want`` is the dtype weak parts resolve to (None: no context)."""
        ct = self._resolve(expr_dtype(e, self.tensors), want)
        if isinstance(e, A.Const):
            return self._const(e, ct)
        if isinstance(e, A.Var):
            v = self.env.get(e.name)
            if v is None:
                raise LowerError(f"loop variable {e.name!r} is not bound here", e.pos)
            return v if _dt(v) == _tvm(ct) else tirx.Cast(_tvm(ct), v)
        if isinstance(e, A.Load):
            t = self.tensors[e.tensor]
            if len(e.index) != len(t.shape):
                raise LowerError(f"{e.tensor} has rank {len(t.shape)} but is read with "
                                 f"{len(e.index)} subscripts", e.pos)
            return tirx.BufferLoad(self.buffers[e.tensor], [self._index(i) for i in e.index])
        if isinstance(e, A.Unary):
            x = self._expr(e.operand, ct)
            if e.op == "not":
                return tirx.Not(x)
            return -x
        if isinstance(e, A.Binary):
            return self._binary(e, ct)
        if isinstance(e, A.Call):
            return self._call(e, ct)
        raise LowerError(f"not a LEIR expression: {e!r}")  # pragma: no cover

    def _const(self, e: A.Const, ct: str) -> tirx.PrimExpr:
        d = _tvm(ct)
        if e.kind == "bool" or ct == "bool":
            return tirx.const(bool(e.value), "bool")
        if ct in A.FLOAT_DTYPES:
            return tirx.const(float(e.value), d)
        if e.kind == "float":
            raise LowerError(f"float literal {e.value} used as {ct}", e.pos)
        return tirx.const(int(e.value), d)

    def _binary(self, e: A.Binary, ct: str) -> tirx.PrimExpr:
        op = e.op
        if op in ("and", "or"):
            a, b = self._expr(e.lhs, "bool"), self._expr(e.rhs, "bool")
            return tirx.And(a, b) if op == "and" else tirx.Or(a, b)
        if op in COMPARISONS:
            u = unify(expr_dtype(e.lhs, self.tensors), expr_dtype(e.rhs, self.tensors), e.pos)
            ut = self._resolve(u, None)
            return _COMPARE[op](self._expr(e.lhs, ut), self._expr(e.rhs, ut))
        a, b = self._expr(e.lhs, ct), self._expr(e.rhs, ct)
        is_float = ct in A.FLOAT_DTYPES
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            if not is_float:
                raise LowerError("'/' on integers; use '//' for floor division", e.pos)
            return tirx.Div(a, b)
        if op == "//":
            return tirx.floor(tirx.Div(a, b)) if is_float else tirx.floordiv(a, b)
        if op == "%":
            return a - tirx.floor(tirx.Div(a, b)) * b if is_float else tirx.floormod(a, b)
        if op == "**":
            return self._pow(e, a, b, ct)
        raise LowerError(f"unknown operator {op!r}", e.pos)  # pragma: no cover

    def _pow(self, e: A.Expr, a, b, ct: str) -> tirx.PrimExpr:
        if (ct, "pow") in _PROMOTE:
            return tirx.Cast(_tvm(ct), tirx.pow(tirx.Cast("float32", a), tirx.Cast("float32", b)))
        if ct in A.FLOAT_DTYPES:
            return tirx.pow(a, b)
        exp = e.args[1] if isinstance(e, A.Call) else e.rhs  # type: ignore[union-attr]
        if not (isinstance(exp, A.Const) and exp.kind == "int" and int(exp.value) >= 0):
            raise LowerError("integer power needs a constant exponent >= 0; cast to a float "
                             "type for other exponents", e.pos)
        n = int(exp.value)
        if n == 0:
            return tirx.const(1, _tvm(ct))
        result = a
        for _ in range(n - 1):
            result = result * a
        return result

    def _call(self, e: A.Call, ct: str) -> tirx.PrimExpr:
        f = e.func
        if f in A.DTYPES:
            arg_t = expr_dtype(e.args[0], self.tensors)
            x = self._expr(e.args[0], f if arg_t in WEAK or arg_t == INDEX else None)
            if _dt(x) == _tvm(f):
                return x
            if f == "bool":
                return tirx.NE(x, tirx.const(0, _dt(x)))
            return tirx.Cast(_tvm(f), x)
        if f in _UNARY_FLOAT:
            x = self._expr(e.args[0], ct)
            if (ct, f) in _PROMOTE:
                return tirx.Cast(_tvm(ct), _UNARY_FLOAT[f](tirx.Cast("float32", x)))
            return _UNARY_FLOAT[f](x)
        if f == "isnan":
            arg_t = expr_dtype(e.args[0], self.tensors)
            x = self._expr(e.args[0], self._resolve(arg_t, "f32"))
            if (_short(_dt(x)), f) in _PROMOTE:
                x = tirx.Cast("float32", x)
            return tirx.isnan(x)
        if f in ("abs", "floor", "ceil", "round"):
            x = self._expr(e.args[0], ct)
            if f == "abs":
                return tirx.abs(x)
            if ct not in A.FLOAT_DTYPES:
                return x  # rounding an integer is the identity
            return {"floor": tirx.floor, "ceil": tirx.ceil, "round": tirx.nearbyint}[f](x)
        if f in ("max", "min"):
            a, b = self._expr(e.args[0], ct), self._expr(e.args[1], ct)
            return T.max(a, b) if f == "max" else T.min(a, b)
        if f == "pow":
            return self._pow(e, self._expr(e.args[0], ct), self._expr(e.args[1], ct), ct)
        if f == "where":
            c = self._expr(e.args[0], "bool")
            return tirx.if_then_else(c, self._expr(e.args[1], ct), self._expr(e.args[2], ct))
        raise LowerError(f"unknown function {f!r}", e.pos)
