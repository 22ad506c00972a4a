"""Raising: an unscheduled TIR ``PrimFunc`` (what Relax LegalizeOps + FuseOps + FuseTIR produce)
→ a LEIR ``Program``.

The inverse of ``steptp.tir.lower``: ``lower(raise_primfunc(f))`` computes what ``f`` computes, and
``raise_primfunc(lower(p)) == p`` for a canonical ``p``.

What is understood
------------------
* Parameters are buffer variables with static shapes. The params written by some statement are
  the outputs and must come last (the kernel calling order is inputs, then outputs).
* Buffers allocated in the root block (``T.sblock_alloc_buffer``), in nested blocks or by
  ``AllocBuffer`` statements become intermediates with their storage scope.
* ``For`` loops (any start; serial, parallel, vectorized, unrolled, thread-bound) become LEIR
  loops named by depth (``i, j, k, ...``; sibling nests reuse names).
* A block's iteration variables are replaced by their bindings; a block predicate (``T.where``)
  becomes ``if``. A block with ``T.init`` is a reduction: each store of its body must have the
  form ``C = C + e`` (``+=``; also ``e + C`` and ``C - e`` as ``+= -e``), ``C * e`` (``*=``),
  ``max(C, e)`` (``max=``), ``min(C, e)`` (``min=``), its init must be the identity, and ``e``
  may read no accumulator of the block. Several independent accumulators in one block (tuple
  reductions) become several reductions in the same loop nest. Interdependent accumulators
  (argmax/argmin) are written out literally: ``if`` every reduction axis is at its first
  iteration, the init stores; then the updates as plain stores.
* ``Bind``/``LetStmt`` and ``Let`` are inlined (refused when a store in between overwrites a buffer
  the bound value reads).
* Expressions: loads, arithmetic, floor division/modulo, truncating division/modulo of provably
  non-negative integers, min/max, comparisons, logic, ``Select``/``if_then_else`` (→ ``where``),
  casts, literals (±inf), and the intrinsics LEIR has.

* Boolean ``&``/``|``/``^``/``~`` (``BitwiseAnd`` etc. on ``bool``, as torch masks legalize) become
  ``and``/``or``/``!=``/``not``; ``isinf``/``isfinite``/``trunc`` are rewritten exactly.
* The result passes LEIR's type rules and ``steptp.leir.check``.

Everything else raises ``RaiseError`` whose ``reason`` is a short code for reports:
``dynamic-shape``, ``scalar-param``, ``no-output``, ``interleaved-params``,
``unsupported-dtype:<d>``, ``unsupported-scope:<s>``, ``strided-buffer``, ``match-buffer``,
``opaque-block``, ``loop-step``, ``unsupported-thread:<tag>``, ``tuple-reduction`` (argmax/argmin),
``reduction-pattern``, ``reduction-init`` (init is not the identity), ``reduction-axes``,
``reduction-body``, ``let-stale``, ``truncdiv``/``truncmod`` (possibly negative operands),
``unsupported-op:<name>``, ``unsupported-expr:<Node>``, ``unsupported-stmt:<Node>``,
``vector-expr``, ``nan-literal``, ``if-else``, ``type-error``, ``check-failed``.
"""

from __future__ import annotations

import dataclasses

import math
import re
from dataclasses import dataclass, field
import tvm
from tvm import tirx
from tvm.s_tir import SBlock, SBlockRealize

from ..leir import ast as A
from ..leir import types as TY

# In TVM 0.27 ``tirx.BufferLoad`` is a constructor function returning ``tvm.ir.TensorLoad``.
_TensorLoad = tvm.ir.expr.TensorLoad

__all__ = ["RaiseError", "raise_primfunc", "loop_var_name", "sanitize_name"]


class RaiseError(ValueError):
    """A PrimFunc that LEIR cannot express (yet). ``reason`` is a short code for reports."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


# ----------------------------------------------------------------------------- names
_LOOP_LETTERS = "ijklmnopqrstuvwxyz"
_LOOP_VAR_RE = re.compile(r"^[i-z][0-9]*$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = frozenset({
    "kernel", "for", "in", "if", "inf", "true", "false", "and", "or", "not",
    "serial", "parallel", "vectorized", "unrolled", "global", "shared", "local",
}) | frozenset(A.DTYPES) | frozenset(A.INTRINSICS)


def loop_var_name(depth: int) -> str:
    """The name of the loop variable at nesting ``depth`` (0-based): i, j, ..., z, i1, j1, ..."""
    n = len(_LOOP_LETTERS)
    letter, rnd = _LOOP_LETTERS[depth % n], depth // n
    return letter if rnd == 0 else f"{letter}{rnd}"


def sanitize_name(name: str, kernel: bool = False) -> str:
    """A valid LEIR tensor name for ``name``: invalid characters become ``_``; names that are
    keywords, dtypes, intrinsics or could be loop variables (``i``, ``x``, ``k2``) get a trailing
    ``_``. With ``kernel=True`` (a kernel name, which never meets loop variables) only keywords
    and dtypes are avoided."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    if s[0].isdigit():
        s = "_" + s
    if s in _RESERVED or (not kernel and _LOOP_VAR_RE.match(s)):
        s = s + "_"
    return s


# ----------------------------------------------------------------------------- helpers
def _dtype(e) -> str:
    """TVM dtype string of a PrimExpr or scalar Var."""
    return str(e.ty.dtype)


def _leir_dtype(tvm_dtype: str, what: str) -> str:
    d = A.DTYPE_FROM_TVM.get(tvm_dtype)
    if d is None:
        raise RaiseError(f"unsupported-dtype:{tvm_dtype}", what)
    return d


def _int_const(e, what: str) -> int:
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    raise RaiseError("dynamic-shape", f"{what} is {e}")


def _op_name(call) -> str:
    name = str(call.op.name) if hasattr(call.op, "name") else str(call.op)
    return name.split(".", 1)[1] if "." in name else name


# finite extremes that TIR uses as identities of max/min (T.min_value/T.max_value)
_FLOAT_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38,
              "f64": 1.7976931348623157e308}


def _int_min(d: str) -> int:
    bits = int(d[1:])
    return 0 if d.startswith("u") else -(1 << (bits - 1))


def _int_max(d: str) -> int:
    bits = int(d[1:])
    return (1 << bits) - 1 if d.startswith("u") else (1 << (bits - 1)) - 1


def _is_identity(op: str, init: A.Expr, dtype: str) -> bool:
    if not isinstance(init, A.Const) or init.kind == "bool":
        return False
    v = init.value
    if op == "+=":
        return v == 0
    if op == "*=":
        return v == 1
    if dtype in A.FLOAT_DTYPES:
        big = _FLOAT_MAX[dtype]
        if op == "max=":
            return v == -math.inf or v == -big
        return v == math.inf or v == big
    if dtype in A.INT_DTYPES:
        return v == (_int_min(dtype) if op == "max=" else _int_max(dtype))
    return False


def _tensors_read(e: A.Expr) -> set[str]:
    return {ld.tensor for ld in A.loads(e)}


def _nonneg(e) -> bool:
    """Conservative: ``e`` (TIR, integer) is provably >= 0 given 0-based loop variables."""
    if isinstance(e, tirx.IntImm):
        return e.value >= 0
    if isinstance(e, tirx.Var):
        return True  # only loop/block variables reach here (checked by the caller's env)
    if isinstance(e, (tirx.Add, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod,
                      tirx.Min, tirx.Max)):
        return _nonneg(e.a) and _nonneg(e.b)
    if isinstance(e, tirx.Cast):
        return _dtype(e.value).startswith(("int", "uint")) and _nonneg(e.value)
    return False


# ----------------------------------------------------------------------------- raiser
@dataclass
class _Bound:
    """A ``Bind``/``Let`` value, already raised, and whether a later store made it stale."""

    expr: A.Expr
    reads: set[str]
    stale: bool = False
    uses: int = 0


@dataclass
class _Env:
    vars: dict = field(default_factory=dict)        # tirx.Var -> A.Expr (loop vars, block vars)
    lets: dict = field(default_factory=dict)        # tirx.Var -> _Bound
    loop_vars: set = field(default_factory=set)     # tirx.Vars that are (or bind to) loop vars

    def child(self) -> "_Env":
        return _Env(dict(self.vars), dict(self.lets), set(self.loop_vars))


_UNARY_CALLS = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
    "sigmoid": "sigmoid", "erf": "erf", "fabs": "abs", "abs": "abs", "floor": "floor",
    "ceil": "ceil", "round": "round", "sin": "sin", "cos": "cos", "log2": "log2",
    "exp2": "exp2", "log1p": "log1p", "isnan": "isnan",
    # LEIR's round lowers to nearbyint (half to even); LLVM's round on CPU is half to even too
    "nearbyint": "round",
}
_CMP = {tirx.EQ: "==", tirx.NE: "!=", tirx.LT: "<", tirx.LE: "<=", tirx.GT: ">", tirx.GE: ">="}


class _Raiser:
    def __init__(self, f: tirx.PrimFunc, name: str):
        self.f = f
        self.name = name
        self.buffers: dict = {}           # buffer Var -> LEIR name
        self.decls: dict[str, A.Tensor] = {}
        self.inputs: list[A.Tensor] = []
        self.outputs: list[A.Tensor] = []
        self.intermediates: list[A.Tensor] = []
        self._used_names: set[str] = set()
        # id(reduction Assign) -> (the Assign, LEIR loop vars that TIR reduces over)
        self._pending_axes_check: dict = {}

    # -- declarations
    def _declare(self, buf, role: str) -> A.Tensor:
        if buf in self.buffers:
            return self.decls[self.buffers[buf]]
        base = sanitize_name(str(buf.name))
        nm, n = base, 1
        while nm in self._used_names:
            nm, n = f"{base}_{n}", n + 1
        self._used_names.add(nm)
        shape = tuple(_int_const(d, f"dimension {k} of {buf.name}") for k, d in enumerate(buf.shape))
        if any(d <= 0 for d in shape):
            raise RaiseError("empty-shape", f"{buf.name} has shape {shape}")
        if buf.strides and len(buf.strides) > 0:
            raise RaiseError("strided-buffer", str(buf.name))
        scope = buf.scope() or "global"
        if scope not in A.SCOPES:
            raise RaiseError(f"unsupported-scope:{scope}", str(buf.name))
        t = A.Tensor(nm, _leir_dtype(str(buf.dtype), str(buf.name)), shape,
                     scope if role == "intermediate" else "global")
        self.buffers[buf] = nm
        self.decls[nm] = t
        return t

    def _buf(self, buf) -> str:
        nm = self.buffers.get(buf)
        if nm is None:
            raise RaiseError("undeclared-buffer", str(buf.name))
        return nm

    # -- entry
    def run(self) -> A.Program:
        f = self.f
        params = list(f.params)
        for p in params:
            if not tirx.is_buffer_var(p):
                raise RaiseError("scalar-param", f"parameter {p} is not a buffer")
        written = _written_buffers(f.body)
        flags = [p in written for p in params]
        if not any(flags):
            raise RaiseError("no-output", "no parameter is written")
        first_out = flags.index(True)
        if not all(flags[first_out:]):
            bad = [str(p.name) for p, w in zip(params, flags) if not w][-1]
            raise RaiseError("interleaved-params",
                             f"input {bad} follows an output; LEIR kernels take inputs then outputs")
        for p, w in zip(params, flags):
            (self.outputs if w else self.inputs).append(self._declare(p, "param"))
        body = f.body
        stmts = self._stmt(body, _Env(), 0)
        if not stmts:
            raise RaiseError("empty-body")
        prog = A.Program(sanitize_name(self.name, kernel=True), tuple(self.inputs), tuple(self.outputs),
                         tuple(self.intermediates), tuple(stmts))
        _typecheck(prog)
        return prog

    # -- statements
    def _alloc(self, buf):
        t = self._declare(buf, "intermediate")
        self.intermediates.append(t)

    def _stmt(self, s, env: _Env, depth: int) -> list[A.Stmt]:
        if isinstance(s, tirx.SeqStmt):
            out: list[A.Stmt] = []
            env = env.child()  # Binds in a sequence scope over the following statements
            for x in s:
                out.extend(self._stmt(x, env, depth))
            return out
        if isinstance(s, SBlockRealize):
            return self._block(s, env, depth)
        if isinstance(s, tirx.For):
            return self._for(s, env, depth)
        if isinstance(s, tirx.BufferStore):
            return [self._store(s, env)]
        if isinstance(s, tirx.Bind):
            bound = _Bound(self._expr(s.value, env), set())
            bound.reads = _tensors_read(bound.expr)
            env.lets[s.var] = bound
            body = getattr(s, "body", None)
            return self._stmt(body, env, depth) if body is not None else []
        if isinstance(s, tirx.AllocBuffer):
            self._alloc(s.buffer)
            body = getattr(s, "body", None)
            return self._stmt(body, env, depth) if body is not None else []
        if isinstance(s, tirx.DeclBuffer):
            if s.buffer not in self.buffers:
                raise RaiseError("decl-buffer", str(s.buffer.name))
            body = getattr(s, "body", None)
            return self._stmt(body, env, depth) if body is not None else []
        if isinstance(s, tirx.IfThenElse):
            cond = self._expr(s.condition, env)
            then = tuple(self._stmt(s.then_case, env.child(), depth))
            out = [A.If(cond, then)] if then else []
            if s.else_case is not None:
                written = {a.tensor for st in then for a in A.walk(st) if isinstance(a, A.Assign)}
                if _tensors_read(cond) & written:
                    raise RaiseError("if-else", "else branch whose condition reads a tensor the "
                                     "then branch writes")
                other = tuple(self._stmt(s.else_case, env.child(), depth))
                if other:
                    out.append(A.If(A.Unary("not", cond), other))
            return out
        if isinstance(s, tirx.Evaluate):
            if isinstance(s.value, (tirx.IntImm, tirx.FloatImm)):
                return []
            raise RaiseError("evaluate", str(s.value))
        if isinstance(s, tirx.AttrStmt):
            if s.attr_key == "pragma_scope":
                # a scheduling hint around a sequential body (TOPI's scatter / index_put
                # kernels say "seq"): the loops inside carry the meaning
                return self._stmt(s.body, env, depth)
            raise RaiseError(f"attr-stmt:{s.attr_key}")
        raise RaiseError(f"unsupported-stmt:{type(s).__name__}")

    def _for(self, s, env: _Env, depth: int) -> list[A.Stmt]:
        step = getattr(s, "step", None)
        if step is not None and not (isinstance(step, tirx.IntImm) and int(step.value) == 1):
            raise RaiseError("loop-step", f"loop step {step}")
        extent = _int_const(s.extent, "loop extent")
        start = _int_const(s.min, "loop start")
        if extent <= 0:
            return []
        kind = _loop_kind(s)
        name = loop_var_name(depth)
        env = env.child()
        var: A.Expr = A.Var(name)
        if start != 0:
            var = A.Binary("+", var, A.Const(start, "int"))
        env.vars[s.loop_var] = var
        if start >= 0:
            env.loop_vars.add(s.loop_var)
        before = {id(b): (b.uses, b.stale) for b in env.lets.values()}
        body = self._stmt(s.body, env, depth + 1)
        for b in env.lets.values():
            uses, stale = before.get(id(b), (b.uses, b.stale))
            if b.stale and not stale and b.uses > uses:
                # used in the loop, then its buffer overwritten: later iterations would differ
                raise RaiseError("let-stale", "a bound value is used in a loop that overwrites "
                                 "a buffer it reads")
        if not body:
            return []
        return [A.Loop(name, extent, kind, tuple(body))]

    def _block(self, br, env: _Env, depth: int) -> list[A.Stmt]:
        b: SBlock = br.block
        if len(b.match_buffers) > 0:
            raise RaiseError("match-buffer", str(b.name_hint))
        for buf in b.alloc_buffers:
            self._alloc(buf)
        env = env.child()
        reduce_loops: set[str] = set()
        first: list[A.Expr] = []  # "every reduction axis at its first iteration"
        for iv, val in zip(b.iter_vars, br.iter_values):
            if int(iv.iter_type) not in (0, 2):  # 0 data-parallel, 2 comm-reduce
                raise RaiseError("opaque-block", f"block {b.name_hint} has iter type {iv.iter_type}")
            lv = self._expr(val, env)
            env.vars[iv.var] = lv
            if _is_loop_expr(val, env.loop_vars):
                env.loop_vars.add(iv.var)
            if int(iv.iter_type) == 2:
                reduce_loops.update(A.free_vars(lv))
                first.append(A.Binary("==", lv, A.Const(_int_const(iv.dom.min, "reduce min"), "int")))
        if b.init is not None:
            stmts = self._reduction(b, env, reduce_loops, first)
        else:
            stmts = self._stmt(b.body, env, depth)
        pred = br.predicate
        if not (isinstance(pred, tirx.IntImm) and int(pred.value) == 1):
            cond = self._expr(pred, env)
            stmts = [A.If(cond, tuple(stmts))] if stmts else []
        return stmts

    def _store(self, s, env: _Env) -> A.Assign:
        nm = self._buf(s.buffer)
        idx = tuple(self._index(i, env) for i in s.indices)
        val = self._expr(s.value, env)
        # Binds whose value read this tensor are stale from now on
        for b in env.lets.values():
            if nm in b.reads:
                b.stale = True
        return A.Assign(nm, idx, "=", val)

    def _flat_stores(self, s, env: _Env, what: str) -> list:
        """The BufferStores of an init/body made only of stores and binds, in order."""
        out = []
        if isinstance(s, tirx.SeqStmt):
            for x in s:
                out.extend(self._flat_stores(x, env, what))
        elif isinstance(s, tirx.BufferStore):
            out.append(s)
        elif isinstance(s, tirx.Bind):
            out.append(s)
            if getattr(s, "body", None) is not None:
                out.extend(self._flat_stores(s.body, env, what))
        else:
            raise RaiseError("reduction-body", f"{what} holds {type(s).__name__}")
        return out

    def _reduction(self, b, env: _Env, reduce_loops: set[str],
                   first: list[A.Expr] | None = None) -> list[A.Stmt]:
        # init: stores (binds allowed) evaluated in the block's environment
        init_env = env.child()
        inits: dict[str, tuple[tuple, A.Expr]] = {}
        for s in self._flat_stores(b.init, init_env, "init"):
            if isinstance(s, tirx.Bind):
                self._stmt(s, init_env, 0)
                continue
            a = self._store(s, init_env)
            if a.tensor in inits:
                raise RaiseError("reduction-init", f"{a.tensor} initialised twice")
            inits[a.tensor] = (a.index, a.value)
        body_env = env.child()
        updates: list[A.Assign] = []
        for s in self._flat_stores(b.body, body_env, "body"):
            if isinstance(s, tirx.Bind):
                self._stmt(s, body_env, 0)
                continue
            updates.append(self._store(s, body_env))
        accs = {u.tensor for u in updates}
        if set(inits) != accs:
            raise RaiseError("reduction-init", f"init writes {sorted(inits)}, body writes {sorted(accs)}")
        if len(updates) != len(accs):
            raise RaiseError("reduction-body", "an accumulator is updated twice")
        if first and any(_tensors_read(u.value) & (accs - {u.tensor}) for u in updates):
            # Interdependent accumulators (argmax/argmin): no LEIR reduction op expresses them,
            # so write T.init's meaning out: the init stores guarded by "every reduction axis at
            # its first iteration", then the updates as plain stores, in the block's order.
            cond = first[0]
            for c in first[1:]:
                cond = A.Binary("and", cond, c)
            init_stmts = tuple(A.Assign(t, idx, "=", v) for t, (idx, v) in inits.items())
            return [A.If(cond, init_stmts), *updates]
        out = []
        for u in updates:
            idx, init = inits[u.tensor]
            if idx != u.index:
                raise RaiseError("reduction-init", f"init and update of {u.tensor} index differently")
            acc = A.Load(u.tensor, u.index)
            others = accs - {u.tensor}
            if _tensors_read(u.value) & others:
                raise RaiseError("tuple-reduction",
                                 "tuple reduction with interdependent accumulators (argmax/argmin)")
            op, e = _match_update(acc, u.value)
            if op is None:
                raise RaiseError("reduction-pattern",
                                 f"update of {u.tensor} is not C+e, C*e, max(C,e) or min(C,e)")
            if u.tensor in _tensors_read(e):
                raise RaiseError("reduction-pattern", f"update of {u.tensor} reads it twice")
            dtype = self.decls[u.tensor].dtype
            if not _is_identity(op, init, dtype):
                raise RaiseError("reduction-init",
                                 f"init of {u.tensor} ({_fmt(init)}) is not the identity of {op}")
            lhs_vars = set()
            for i in u.index:
                lhs_vars.update(A.free_vars(i))
            out.append(A.Assign(u.tensor, u.index, op, e))
            if reduce_loops & lhs_vars:
                raise RaiseError("reduction-axes", f"reduction variable in the subscript of {u.tensor}")
            self._pending_axes_check[id(out[-1])] = (out[-1], set(reduce_loops))
        return out

    # -- expressions
    def _index(self, e, env: _Env) -> A.Expr:
        x = self._expr(e, env)
        y = _drop_int_casts(x)
        if y is not x:
            try:
                if TY.is_int(TY.expr_dtype(y, self.decls)):
                    return y
            except TY.LeirTypeError:
                pass
        return x

    def _expr(self, e, env: _Env) -> A.Expr:  # noqa: C901 - one dispatch
        if isinstance(e, tirx.Var) and not tirx.is_buffer_var(e):
            if e in env.vars:
                return env.vars[e]
            if e in env.lets:
                b = env.lets[e]
                if b.stale:
                    raise RaiseError("let-stale", f"{e} reads a buffer overwritten before its use")
                b.uses += 1
                return b.expr
            raise RaiseError("free-var", str(e))
        if isinstance(e, tirx.IntImm):
            d = _dtype(e)
            if d == "bool":
                return A.Const(bool(e.value), "bool")
            return A.Const(int(e.value), "int")
        if isinstance(e, tirx.FloatImm):
            v = float(e.value)
            if math.isnan(v):
                raise RaiseError("nan-literal")
            return A.Const(v, "float")
        if isinstance(e, _TensorLoad):
            nm = self._buf(e.source)
            return A.Load(nm, tuple(self._index(i, env) for i in e.indices))
        if isinstance(e, tirx.Let):
            inner = env.child()
            v = self._expr(e.value, env)
            inner.lets[e.var] = _Bound(v, _tensors_read(v))
            return self._expr(e.body, inner)
        if isinstance(e, tirx.Cast):
            return self._cast(e, env)
        if isinstance(e, tirx.Mul) and isinstance(e.b, (tirx.IntImm, tirx.FloatImm)) \
                and e.b.value == -1:
            return A.Unary("-", self._expr(e.a, env))  # TIR spells -x as x * -1
        for cls, op in ((tirx.Add, "+"), (tirx.Sub, "-"), (tirx.Mul, "*")):
            if isinstance(e, cls):
                return A.Binary(op, self._expr(e.a, env), self._expr(e.b, env))
        if isinstance(e, tirx.Div):
            d = _dtype(e)
            if d.startswith("float") or d.startswith("bfloat"):
                return A.Binary("/", self._expr(e.a, env), self._expr(e.b, env))
            if _nonneg(e.a) and _nonneg(e.b) and self._only_loop_vars(e, env):
                return A.Binary("//", self._expr(e.a, env), self._expr(e.b, env))
            raise RaiseError("truncdiv", f"integer division of possibly negative values: {e}")
        if isinstance(e, tirx.Mod):
            d = _dtype(e)
            if d.startswith(("int", "uint")) and _nonneg(e.a) and _nonneg(e.b) \
                    and self._only_loop_vars(e, env):
                return A.Binary("%", self._expr(e.a, env), self._expr(e.b, env))
            raise RaiseError("truncmod", f"truncating modulo: {e}")
        if isinstance(e, tirx.FloorDiv):
            return A.Binary("//", self._expr(e.a, env), self._expr(e.b, env))
        if isinstance(e, tirx.FloorMod):
            return A.Binary("%", self._expr(e.a, env), self._expr(e.b, env))
        if isinstance(e, tirx.Min):
            return A.Call("min", (self._expr(e.a, env), self._expr(e.b, env)))
        if isinstance(e, tirx.Max):
            return A.Call("max", (self._expr(e.a, env), self._expr(e.b, env)))
        for cls, op in _CMP.items():
            if isinstance(e, cls):
                return A.Binary(op, self._expr(e.a, env), self._expr(e.b, env))
        if isinstance(e, tirx.And):
            return A.Binary("and", self._expr(e.a, env), self._expr(e.b, env))
        if isinstance(e, tirx.Or):
            return A.Binary("or", self._expr(e.a, env), self._expr(e.b, env))
        if isinstance(e, tirx.Not):
            return A.Unary("not", self._expr(e.a, env))
        if isinstance(e, (tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor, tirx.BitwiseNot)):
            if _dtype(e) != "bool":
                raise RaiseError(f"unsupported-expr:{type(e).__name__}", str(e))
            # on booleans (masks: torch's `&`, `|`, `^`, `~`) they are logic
            if isinstance(e, tirx.BitwiseNot):
                return A.Unary("not", self._expr(e.a, env))
            op = {tirx.BitwiseAnd: "and", tirx.BitwiseOr: "or", tirx.BitwiseXor: "!="}[type(e)]
            return A.Binary(op, self._expr(e.a, env), self._expr(e.b, env))
        if isinstance(e, tirx.Select):
            return A.Call("where", (self._expr(e.condition, env), self._expr(e.true_value, env),
                                    self._expr(e.false_value, env)))
        if isinstance(e, tvm.ir.Call):
            return self._call(e, env)
        if isinstance(e, (tirx.Ramp, tirx.Broadcast, tirx.Shuffle)):
            raise RaiseError("vector-expr", type(e).__name__)
        raise RaiseError(f"unsupported-expr:{type(e).__name__}", str(e))

    def _only_loop_vars(self, e, env: _Env) -> bool:
        ok = True

        def visit(x):
            nonlocal ok
            if isinstance(x, tirx.Var) and not tirx.is_buffer_var(x) and x not in env.loop_vars:
                ok = False

        _visit_vars(e, visit)
        return ok

    def _cast(self, e, env: _Env) -> A.Expr:
        to = _leir_dtype(_dtype(e), str(e))
        src = _dtype(e.value)
        x = self._expr(e.value, env)
        t = TY.expr_dtype(x, self.decls)
        if to in A.INT_DTYPES and t in ("index", "int"):
            return x  # index arithmetic: LEIR integers adopt the width they meet
        if t == "float":
            # an all-literal float expression: pin its TIR dtype before converting
            x = A.Call(_leir_dtype(src, str(e.value)), (x,))
        elif t == "int" and src.startswith(("int", "uint")) and to in A.FLOAT_DTYPES:
            pass  # f32(3): exact
        return A.Call(to, (x,))

    def _call(self, e, env: _Env) -> A.Expr:
        op = _op_name(e)
        args = list(e.args)
        if op in _UNARY_CALLS:
            return A.Call(_UNARY_CALLS[op], (self._expr(args[0], env),))
        if op in ("pow", "power"):
            return A.Call("pow", (self._expr(args[0], env), self._expr(args[1], env)))
        if op == "if_then_else":
            return A.Call("where", tuple(self._expr(a, env) for a in args))
        if op == "likely":
            return self._expr(args[0], env)
        if op == "isinf":
            return A.Binary("==", A.Call("abs", (self._expr(args[0], env),)), A.Const(math.inf, "float"))
        if op == "isfinite":
            return A.Binary("<", A.Call("abs", (self._expr(args[0], env),)), A.Const(math.inf, "float"))
        if op == "trunc":
            x = self._expr(args[0], env)
            return A.Call("where", (A.Binary("<", x, A.Const(0.0, "float")),
                                    A.Call("ceil", (x,)), A.Call("floor", (x,))))
        raise RaiseError(f"unsupported-op:{op}", str(e))


def _visit_vars(e, fn) -> None:
    """Call ``fn`` on every node of a TIR expression (pre-order)."""
    fn(e)
    if isinstance(e, tirx.Var):
        return
    for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
        if hasattr(e, attr):
            try:
                child = getattr(e, attr)
            except Exception:  # noqa: BLE001 - property that does not apply
                continue
            if isinstance(child, tvm.ir.Expr) and not isinstance(child, (int, float)):
                _visit_vars(child, fn)
    for attr in ("args", "indices") if not isinstance(e, tirx.Var) else ():
        if hasattr(e, attr):
            for child in getattr(e, attr):
                _visit_vars(child, fn)


# ----------------------------------------------------------------------------- analysis helpers
def _written_buffers(body) -> set:
    out: set = set()

    def visit(s):
        if isinstance(s, tirx.BufferStore):
            out.add(s.buffer)

    _walk_stmt(body, visit)
    return out


def _walk_stmt(s, fn) -> None:
    if s is None:
        return
    fn(s)
    if isinstance(s, tirx.SeqStmt):
        for x in s:
            _walk_stmt(x, fn)
    elif isinstance(s, SBlockRealize):
        _walk_stmt(s.block, fn)
    elif isinstance(s, SBlock):
        _walk_stmt(s.init, fn)
        _walk_stmt(s.body, fn)
    elif isinstance(s, tirx.IfThenElse):
        _walk_stmt(s.then_case, fn)
        _walk_stmt(s.else_case, fn)
    else:
        body = getattr(s, "body", None) if not isinstance(s, tirx.BufferStore) else None
        if isinstance(body, tirx.Stmt):
            _walk_stmt(body, fn)


def _is_loop_expr(val, loop_vars: set) -> bool:
    return isinstance(val, tirx.Var) and val in loop_vars


def _loop_kind(s) -> str:
    k = int(s.kind)
    if k == 0:
        return "serial"
    if k == 1:
        return "parallel"
    if k == 2:
        return "vectorized"
    if k == 3:
        return "unrolled"
    if k == 4:
        tag = str(s.thread_binding.thread_tag) if s.thread_binding is not None else ""
        if tag in A.THREAD_KINDS:
            return tag
        raise RaiseError(f"unsupported-thread:{tag or '?'}")
    raise RaiseError(f"unsupported-loop-kind:{k}")


def _drop_int_casts(x: A.Expr) -> A.Expr:
    """A subscript without its integer casts (``i32(B[i])*4 + j`` → ``B[i]*4 + j``): any integer
    type indexes, so the casts TIR adds to reach its index type carry no information. The caller
    keeps the original when the stripped form no longer types."""
    if isinstance(x, A.Call) and x.func in A.INT_DTYPES and len(x.args) == 1:
        return _drop_int_casts(x.args[0])
    if isinstance(x, A.Binary) and x.op in ("+", "-", "*", "//", "%"):
        lhs, rhs = _drop_int_casts(x.lhs), _drop_int_casts(x.rhs)
        if lhs is x.lhs and rhs is x.rhs:
            return x
        return A.Binary(x.op, lhs, rhs)
    return x


def _match_update(acc: A.Load, v: A.Expr) -> tuple[str | None, A.Expr | None]:
    """Match ``v`` against the update forms of a reduction of accumulator ``acc``."""
    if isinstance(v, A.Binary):
        if v.op in ("+", "*"):
            op = v.op + "="
            if v.lhs == acc:
                return op, v.rhs
            if v.rhs == acc:
                return op, v.lhs
        if v.op == "-" and v.lhs == acc:
            rhs = v.rhs
            if isinstance(rhs, A.Const) and rhs.kind in ("int", "float"):
                return "+=", A.Const(-rhs.value, rhs.kind)
            return "+=", A.Unary("-", rhs)
    if isinstance(v, A.Call) and v.func in ("max", "min"):
        op = v.func + "="
        if v.args[0] == acc:
            return op, v.args[1]
        if v.args[1] == acc:
            return op, v.args[0]
    return None, None


def _fmt(e: A.Expr) -> str:
    from ..leir.printer import format_expr
    return format_expr(e)


def _typecheck(p: A.Program) -> None:
    """Every stored value and subscript must type under LEIR's rules (no implicit promotion)."""
    tensors = p.tensors
    for n in A.walk(p):
        try:
            if isinstance(n, A.Assign):
                t = tensors[n.tensor].dtype
                TY.unify(TY.expr_dtype(n.value, tensors), t, None, f"value stored into {n.tensor}")
            if isinstance(n, (A.Assign, A.Load)):
                for i in n.index:
                    it = TY.expr_dtype(i, tensors)
                    if not TY.is_int(it):
                        raise TY.LeirTypeError(f"subscript of {n.tensor} has type {it}")
            if isinstance(n, A.If):
                if TY.expr_dtype(n.cond, tensors) != "bool":
                    raise TY.LeirTypeError("if condition is not boolean")
        except TY.LeirTypeError as err:
            raise RaiseError("type-error", str(err)) from None


def _check_reduction_axes(p: A.Program, pending: dict) -> None:
    """LEIR's reduction axes are the enclosing loop variables absent from the left-hand side;
    they must be exactly the loops TIR's reduction iteration variables are bound to."""
    def visit(stmts, enclosing: list[str]):
        for s in stmts:
            if isinstance(s, A.Loop):
                visit(s.body, enclosing + [s.var])
            elif isinstance(s, A.If):
                visit(s.body, enclosing)
            elif isinstance(s, A.Assign) and s.is_reduction:
                entry = pending.get(id(s))
                if entry is None or entry[0] is not s:  # pragma: no cover - internal invariant
                    raise RaiseError("internal", f"reduction into {s.tensor} was not recorded")
                lhs = {v for i in s.index for v in A.free_vars(i)}
                axes = {v for v in enclosing if v not in lhs}
                if axes != entry[1]:
                    raise RaiseError("reduction-axes",
                                     f"{s.tensor}: LEIR would reduce over {sorted(axes)}, TIR "
                                     f"reduces over {sorted(entry[1])}")

    visit(p.body, [])


# ----------------------------------------------------------------------------- entry point
def raise_primfunc(f: tirx.PrimFunc, name: str | None = None) -> A.Program:
    """Raise an unscheduled PrimFunc to a LEIR program. Raises ``RaiseError`` (with a short
    ``reason`` code) for anything LEIR cannot express."""
    if not isinstance(f, tirx.PrimFunc):
        raise TypeError(f"expected a tvm.tirx.PrimFunc, got {type(f).__name__}")
    if name is None:
        gs = f.attrs.get("global_symbol") if f.attrs is not None else None
        name = str(gs) if gs is not None else "main"
    r = _Raiser(f, name)
    prog = _serial_where_racy(r.run())
    _check_reduction_axes(prog, r._pending_axes_check)
    _check(prog)
    return prog


def _serial_where_racy(prog: A.Program) -> A.Program:
    """TVM schedules some operators' loops parallel although iterations may write one element
    (scatter and index_put write through an index tensor: duplicate indices race). The raised
    kernel is the reference every candidate is verified against, so such a loop is raised
    serial: a result that does not depend on the thread schedule, and a kernel the race check
    accepts. Loops that provably do not race stay parallel."""
    from ..leir.nav import replace_at
    from ..leir.races import racing_loops

    for path, _ in racing_loops(prog):
        loop = A.node_at(prog, path)
        prog = replace_at(prog, path, [dataclasses.replace(loop, kind="serial")])
    return prog


def _check(prog: A.Program) -> None:
    """Run ``steptp.leir.check`` on the raised program (it treats ``where`` branches as guarded,
    so padded reads such as ``where(1 <= k and k < 9, X[k-1], 0.0)`` pass)."""
    try:
        from ..leir.check import problems
    except ImportError:  # pragma: no cover - the checker is optional at import time
        return
    found = problems(prog)
    if found:
        raise RaiseError("check-failed", "; ".join(str(q) for q in found))
