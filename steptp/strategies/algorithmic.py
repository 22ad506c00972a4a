"""The algorithmic family: rewrites that change how a result is computed, not just where.

Each strategy matches one precise pattern and refuses anything else with a reason. Running
(loop-carried) values are written with plain stores inside a loop (``M[i] = max(M[i], x)``):
a plain ``=`` is not a reduction, so it keeps its loop-carried meaning. New per-row buffers are
fresh intermediates with the shape and dtype of the value they accompany.

* ``normal_loop_max_to_prefix_max`` (exact): ``for j in N: M[r] max= X(j)`` whose result a later
  statement reads becomes a prefix-max scan ``P[r,0] = X(0); for j in N-1: P[r,j+1] =
  max(P[r,j], X(j+1))`` followed by ``M[r] = P[r,N-1]``.
* ``normal_loop_summation_on_exp_to_prefix_summation_on_exp`` (algebraic): ``for j in N:
  S[r] += exp(X(j) - M[r])`` where ``M[r] = P[r,N-1]`` is the last element of a prefix scan
  becomes ``S[r] = exp(X(0) - P[r,0]); for j in N-1: S[r] = S[r]*exp(P[r,j] - P[r,j+1]) +
  exp(X(j+1) - P[r,j+1])``. By induction ``S_j = sum_{t<=j} exp(X(t) - P[r,j])`` for *any*
  finite sequence P, so the final S equals the original whenever ``P[r,N-1] == M[r]``.
  The sum may also read an intermediate the statement before it materialises,
  ``D[r,j] = exp(X(j) - M[r]); S[r] += D[r,j]`` (one operator per statement, as TVM emits
  softmax): the recurrence then computes ``exp(X - P)`` itself and D's definition stays for
  its other readers.
* ``online_softmax`` (algebraic): the 3-pass softmax (max, sum of exp(x - max), normalize) becomes
  2 passes: one online pass with a running max M and a rescaled running sum S
  (``Mn = max(M, x); S = S*exp(M - Mn) + exp(x - Mn); M = Mn``, from ``M = -inf, S = 0``),
  then the unchanged normalization pass (``exp(x - M) / S``, or log-softmax's
  ``x - M - log(S)``). In the materialised form ``M max= x; D = exp(x - M); S += D; Y = D / S``
  the online pass replaces the max and the sum, and D's definition moves after it (it is then
  computed from the final max, for the normalization and any later reader).
* The softmax passes may share their row loops (``for i: [for j: M[i] max= ..; for j: ..]``) or
  each have its own nest (``for i: for j: M[i] max= ..`` then ``for i: for j: ..``, as TVM
  emits them, over any number of row dimensions and with independently named or permuted loop
  variables): passes are matched by unification, binding the max pass's loop variables to the
  ones playing the same role in the other pass.
* ``flashattention_wo_tiling`` (algebraic): scores -> max pass -> sum pass -> ``O += exp(x - M) /
  S * V`` becomes one online pass over the keys with running max, running sum and an output
  accumulator rescaled by ``exp(M_old - M_new)``, then ``O = O / S``.
* ``exponential_split`` (algebraic): ``exp(a + b)`` -> ``exp(b) * exp(a)`` where the addends ``a``
  are invariant in the innermost enclosing loop and ``b`` vary with it (``exp(a)`` can then be
  hoisted). Refused where an exp subtracts a running maximum (``exp(x - M)``, M written by a
  ``max=`` reduction): the split form overflows where the stabilized one cannot.
* ``multiplicative_split`` (algebraic): ``S[r] += c * f(k)`` over reduction loops whose variables
  ``c`` does not use -> ``S[r] += f(k)`` then ``S[r] = S[r] * c`` (distributivity).
* ``additive_split`` (reassociation for float ``+= *=``, exact for ``max= min=``): a reduction
  over one loop ``for k in N`` is split into two halves: ``S op= f(k)`` for ``k < h``, a fresh
  ``U op= f(k + h)`` for the rest, then ``S = S (+) U``.
* ``partially_equivalent_then_correct`` (algebraic): ``S[r] += (E(j) - m) * (E(j) - m)`` with
  ``m`` invariant in ``j`` (a variance around a mean computed by an earlier pass) is computed
  around a stand-in ``c = E(0)`` instead -- partially equivalent: equal when ``m == c`` -- plus
  ``U[r] += E(j) - c``, and then corrected exactly: ``S[r] = S[r] + (c - m) * (U[r]*2 +
  (c - m)*N)``, since ``sum (E-m)^2 = sum (E-c)^2 + 2(c-m) sum(E-c) + N(c-m)^2``. The two
  reductions no longer read ``m``, so they can be fused with the pass computing it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..leir import ast as A
from ..leir.printer import format_expr
from ..leir.ast import iter_stmts, node_at
from ..leir.nav import (Path, enclosing_loops, perfect_nest, reduction_axes, replace_at, tensors_read,
                        tensors_written)
from ._ir import fresh_tensor, stabilized_exp, subst_expr
from .base import OK, Site, Strategy, refuse
from .registry import register

INF = A.Const(float("-inf"), "float")


# ============================================================================ helpers
def _body_of(program: A.Program, parent: Path) -> tuple[A.Stmt, ...]:
    if not parent:
        return program.body
    node = node_at(program, parent)
    return node.body if isinstance(node, (A.Loop, A.If)) else ()


def _replace_range(program: A.Program, parent: Path, start: int, stop: int,
                   new: Sequence[A.Stmt]) -> A.Program:
    """Replace siblings ``start..stop-1`` of the body at ``parent`` by ``new``."""
    body = _body_of(program, parent)
    nb = body[:start] + tuple(new) + body[stop:]
    if not parent:
        return replace(program, body=nb)
    node = node_at(program, parent)
    return replace_at(program, parent, [replace(node, body=nb)])


def _add_tensor(program: A.Program, like: A.Tensor, prefix: str = "T",
                shape: tuple[int, ...] | None = None) -> tuple[A.Program, str]:
    name = fresh_tensor(program, prefix)
    t = A.Tensor(name, like.dtype, like.shape if shape is None else shape, "global")
    return replace(program, intermediates=program.intermediates + (t,)), name


def _uses_var(e: object, var: str) -> bool:
    return any(isinstance(n, A.Var) and n.name == var for n in A.walk(e))


def _single_loop(s: A.Stmt) -> tuple[A.Loop, A.Assign] | None:
    """``for v in N: <one assignment>`` -> (loop, assignment)."""
    if isinstance(s, A.Loop) and s.kind == "serial" and len(s.body) == 1 \
            and isinstance(s.body[0], A.Assign):
        return s, s.body[0]
    return None


def _rename(e: A.Expr, old: str, new: str) -> A.Expr:
    return e if old == new else subst_expr(e, {old: A.Var(new)})


def _load(name: str, idx: tuple[A.Expr, ...]) -> A.Load:
    return A.Load(name, tuple(idx))


def _shift(e: A.Expr, var: str, k: int) -> A.Expr:
    """``e`` with ``var`` replaced by ``var + k`` (``k == 0``: unchanged)."""
    if k == 0:
        return e
    return subst_expr(e, {var: A.Binary("+", A.Var(var), A.const(k))})


def _at(e: A.Expr, var: str, value: int) -> A.Expr:
    return subst_expr(e, {var: A.const(value)})


def _exp_minus(e: A.Expr, m: A.Load) -> A.Expr | None:
    """``exp(X - m)`` -> X, else None."""
    if isinstance(e, A.Call) and e.func == "exp" and isinstance(e.args[0], A.Binary) \
            and e.args[0].op == "-" and A.strip_pos(e.args[0].rhs) == A.strip_pos(m):
        return e.args[0].lhs
    return None


def _is_float(program: A.Program, name: str) -> bool:
    return program.tensors[name].dtype in A.FLOAT_DTYPES


def _reads(e: object) -> set[str]:
    return {n.tensor for n in A.walk(e) if isinstance(n, A.Load)}


def _stmt_sites(program: A.Program, pred) -> list[Site]:
    out = []
    for p, s in iter_stmts(program.body):
        if pred(program, p, s):
            out.append(Site.make(p, [lp.var for lp in enclosing_loops(program, p)] +
                                 ([s.var] if isinstance(s, A.Loop) else [])))
    return out


# ----------------------------------------------------------------------------- softmax passes
# A *pass* is one sibling statement of a body: a perfect nest of loops around one assignment.
# Hand-written kernels share the row loops (``for i: [for j: max; for j: sum; for j: norm]``), so
# each pass is one loop. Kernels extracted through TVM give every operator its own nest, with
# its own (independently named) row loops, and materialise the exponentials:
# ``C[i] max= A[i,j]; D[i,j] = exp(A[i,j] - C[i]); E[i] += D[i,j]; B[i,j] = D[i,j] / E[i]``.
# Passes are compared by unification: a pattern written in the max pass's loop variables is
# matched against another pass's expression, binding each of those variables to the loop
# variable that plays its role there (``softmax(dim=1)`` on 4-D tensors permutes them).
def _nest_root(program: A.Program, path: Path) -> Path:
    """The outermost statement of the perfect nest around ``path``: climb through every
    enclosing loop whose body is that one statement."""
    p = tuple(path)
    while len(p) > 1:
        up = node_at(program, p[:-1])
        if not (isinstance(up, A.Loop) and len(up.body) == 1):
            break
        p = p[:-1]
    return p


def _wrap(rows: Sequence[A.Loop], stmts: Sequence[A.Stmt]) -> list[A.Stmt]:
    """``stmts`` inside copies of the loops ``rows`` (outermost first)."""
    out = tuple(stmts)
    for lp in reversed(rows):
        out = (replace(lp, body=out),)
    return list(out)


def _unify(pat: object, e: object, pvars: frozenset[str], b: dict[str, A.Expr]) -> bool:
    """Whether ``e`` matches ``pat``, whose variables ``pvars`` are placeholders bound (each to
    one expression, consistently) in ``b``; everything else must be equal."""
    if isinstance(pat, A.Var) and pat.name in pvars:
        e = A.strip_pos(e)
        if pat.name in b:
            return b[pat.name] == e
        b[pat.name] = e
        return True
    if type(pat) is not type(e):
        return False
    if isinstance(pat, A.Load):
        return pat.tensor == e.tensor and len(pat.index) == len(e.index) and all(
            _unify(p, x, pvars, b) for p, x in zip(pat.index, e.index))
    if isinstance(pat, A.Unary):
        return pat.op == e.op and _unify(pat.operand, e.operand, pvars, b)
    if isinstance(pat, A.Binary):
        return pat.op == e.op and _unify(pat.lhs, e.lhs, pvars, b) and \
            _unify(pat.rhs, e.rhs, pvars, b)
    if isinstance(pat, A.Call):
        return pat.func == e.func and len(pat.args) == len(e.args) and all(
            _unify(p, x, pvars, b) for p, x in zip(pat.args, e.args))
    return pat == e  # Const, Var (positions never compare)


def _loop_binding(b: dict[str, A.Expr], pvars: dict[str, int], loops: Sequence[A.Loop],
                  what: str) -> str | None:
    """Why the binding ``b`` is not a one-to-one map of the placeholders ``pvars`` (name ->
    extent) onto variables of ``loops`` with the same extents (None when it is)."""
    by = {lp.var: lp for lp in loops}
    used: set[str] = set()
    for v, ext in pvars.items():
        e = b.get(v)
        if e is None:
            return f"{what} does not vary with the max pass's {v}"
        if not isinstance(e, A.Var) or e.name not in by or e.name in used:
            return (f"{what} is not indexed by its own loops the way the max pass is "
                    f"({v} there is {format_expr(e)} here)")
        if by[e.name].extent != ext:
            return (f"the two passes have different extents ({ext}, {by[e.name].extent}) "
                    f"({v}, {e.name})")
        used.add(e.name)
    return None


def _materialised(program: A.Program, body: tuple[A.Stmt, ...], q: int, load: A.Load,
                  shared: set[str]) -> tuple[A.Expr | None, str]:
    """The value ``load`` (a read of D by the pass at sibling ``q``) holds, from D's definition
    by the elementwise nest at sibling ``q - 1``, in the reading pass's variables."""
    dname = load.tensor
    dn = perfect_nest(body[q - 1]) if q >= 1 else None
    if dn is None or dn[1].tensor != dname or dn[1].op != "=":
        return None, f"{dname} is not defined by an elementwise statement right before the sum"
    loops, st = dn
    own = {lp.var: lp.extent for lp in loops}
    shape = program.tensors[dname].shape
    idx = A.strip_pos(st.index)
    names = [i.name for i in idx if isinstance(i, A.Var)]
    if len(names) != len(idx) or len(set(names)) != len(names) or not set(own) <= set(names) \
            or len(idx) != len(load.index):
        return None, (f"{dname} is not written element by element by the loops around "
                      f"`{dname}[{', '.join(format_expr(i) for i in idx)}] = ...`")
    m: dict[str, A.Expr] = {}
    for t, v in enumerate(names):
        if v in own:
            if own[v] != shape[t]:
                return None, (f"{dname} is defined on {own[v]} of the {shape[t]} elements of "
                              f"its dimension {t}")
        elif v not in shared or A.strip_pos(load.index[t]) != A.Var(v):
            return None, f"the sum reads {dname} where its definition does not write it"
        m[v] = load.index[t]
    if dname in _reads(st.value):
        return None, f"the definition of {dname} reads {dname}"
    return subst_expr(st.value, m), ""


@dataclass(frozen=True)
class _Passes:
    """The max pass (nest ``k``) and the sum-of-exp pass (nest ``end``) among the siblings of
    the body at ``parent``. ``rows`` are the max nest's own loops around the reduction loop
    (empty when the row loops are shared); ``x`` and ``s`` are in the max pass's variables.
    When the sum reads an intermediate D defined at ``end - 1`` as exp(x - max) (the form TVM
    emits), ``d`` is that definition and ``dload`` D as the sum reads it (max's variables)."""

    parent: Path
    k: int
    end: int
    rows: tuple[A.Loop, ...]
    loop1: A.Loop
    st1: A.Assign
    loop2: A.Loop
    st2: A.Assign
    x: A.Expr
    s: A.Load
    d: A.Stmt | None = None
    dload: A.Load | None = None

    @property
    def m(self) -> A.Load:
        return _load(self.st1.tensor, self.st1.index)

    @property
    def pvars(self) -> dict[str, int]:
        """The max pass's own loop variables (rows, then the reduced one) -> extents."""
        return {lp.var: lp.extent for lp in self.rows + (self.loop1,)}


def _exp_minus_of(e: A.Expr, tensor: str) -> bool:
    """Whether ``e`` is ``exp(x - tensor[..])``."""
    return isinstance(e, A.Call) and e.func == "exp" and len(e.args) == 1 and \
        isinstance(e.args[0], A.Binary) and e.args[0].op == "-" and \
        isinstance(e.args[0].rhs, A.Load) and e.args[0].rhs.tensor == tensor


def _max_sum_passes(program: A.Program, path: Path) -> tuple[_Passes | None, str]:
    """The max pass whose reduction loop is at ``path`` and the sum of exp(x - max) after it,
    inline (``S += exp(x - M)``) or materialised (``D = exp(x - M); S += D``)."""
    node = node_at(program, path)
    a = _single_loop(node) if node is not None else None
    if a is None:
        return None, "the statement is not a serial loop holding one max= reduction"
    loop1, st1 = a
    if st1.op != "max=" or any(_uses_var(i, loop1.var) for i in st1.index):
        return None, f"the loop over {loop1.var} does not hold a max= reduction over {loop1.var}"
    if not _is_float(program, st1.tensor):
        return None, f"{st1.tensor} is not floating-point"
    root = _nest_root(program, path)
    parent, k = root[:-1], root[-1]
    body = _body_of(program, parent)
    rows = perfect_nest(body[k])[0][:-1]
    outer = enclosing_loops(program, root)
    pvars = {lp.var: lp.extent for lp in rows + (loop1,)}
    pv = frozenset(pvars)
    m = _load(st1.tensor, st1.index)
    x = st1.value
    if k + 1 >= len(body):
        return None, "no pass follows the max pass"
    nxt = perfect_nest(body[k + 1])
    if nxt is None or not nxt[0]:
        return None, "the max pass is not followed by a loop holding one sum of exp"
    end, d, dname = k + 1, None, None
    if nxt[1].op == "=" and _exp_minus_of(nxt[1].value, st1.tensor):
        # materialised: D = exp(x - M) then S += D
        d, dname, end = body[k + 1], nxt[1].tensor, k + 2
        if dname == st1.tensor:
            return None, f"exp(x - max) is stored into the max {dname} itself"
        sn = perfect_nest(body[end]) if end < len(body) else None
        if sn is None or sn[1].op != "+=" or not isinstance(sn[1].value, A.Load) or \
                sn[1].value.tensor != dname:
            if sn is not None and sn[1].op == "+=" and dname in _reads(sn[1].value):
                return None, (f"the sum after {dname} = exp(x - max) adds "
                              f"{format_expr(sn[1].value)}, not {dname}[...] itself")
            if end < len(body) and dname in tensors_read(body[end]):
                return None, (f"{dname} (= exp(x - max)) is also read by `{_text(body[end])}` "
                              f"between its definition and the sum: only the sum may read it "
                              f"there")
            return None, f"{dname} = exp(x - max) is not followed by a sum `S += {dname}[...]`"
    loops2, st2 = perfect_nest(body[end])
    v = st2.value
    if st2.op == "+=" and d is not None:
        v, why = _materialised(program, body, end, st2.value, {lp.var for lp in outer})
        if v is None:
            return None, why
    b: dict[str, A.Expr] = {}
    if st2.op != "+=" or not loops2 or not _exp_minus_of(v, st1.tensor) or \
            not _unify(m, v.args[0].rhs, pv, b):
        return None, (f"the pass after the max is not a sum `S += exp(x - {format_expr(m)})` over "
                      f"{loop1.var}")
    x2 = v.args[0].lhs
    if not _unify(x, x2, pv, b):
        return None, (f"the sum exponentiates {format_expr(x2)}, not the maximized value "
                      f"{format_expr(x)} minus the max")
    why = _loop_binding(b, pvars, loops2, "the sum")
    if why:
        return None, why
    loop2 = next(lp for lp in loops2 if lp.var == b[loop1.var].name)
    inv = {b[p].name: A.Var(p) for p in pvars}
    s = _load(st2.tensor, tuple(subst_expr(i, inv) for i in st2.index))
    dload = _load(dname, tuple(subst_expr(i, inv) for i in st2.value.index)) if d else None
    if st2.tensor == st1.tensor or _uses_var(s.index, loop1.var):
        return None, "the sum and the max share a buffer"
    if {st1.tensor, st2.tensor, dname} & _reads(x):
        return None, "the maximized value reads the running max, the sum or the exponentials"
    if not _is_float(program, st2.tensor):
        return None, f"{st2.tensor} is not floating-point"
    if reduction_axes(st1, enclosing_loops(program, path) + [loop1]) != [loop1.var]:
        return None, f"{st1.tensor} is reduced over more than {loop1.var}"
    if reduction_axes(st2, outer + list(loops2)) != [loop2.var]:
        return None, f"{st2.tensor} is reduced over more than {loop2.var}"
    return _Passes(parent, k, end, rows, loop1, st1, loop2, st2, x, s, d, dload), ""


def _text(s: A.Stmt) -> str:
    """The assignment of a nest, as one line."""
    n = perfect_nest(s)
    if n is None:
        return "a loop nest"
    st = n[1]
    return (f"{st.tensor}[{','.join(format_expr(i) for i in st.index)}] {st.op} "
            f"{format_expr(st.value)}")


def _online_pass(program: A.Program, ps: _Passes) -> tuple[A.Program, list[A.Stmt], str]:
    """Init + fused online loop computing M (max) and S (sum of exp(x - M)) in one pass, in
    the max pass's variables (inside its row loops when it has its own).
    Returns the new program (with the fresh running-max buffer), the statements, and its name."""
    program, mn = _add_tensor(program, program.tensors[ps.st1.tensor])
    j = ps.loop1.var
    m, s, x = ps.m, ps.s, ps.x
    mnl = _load(mn, ps.st1.index)
    loop = A.Loop(j, ps.loop1.extent, "serial", (
        A.Assign(mn, ps.st1.index, "=", A.Call("max", (m, x))),
        A.Assign(s.tensor, s.index, "=",
                 A.Binary("+", A.Binary("*", s, A.Call("exp", (A.Binary("-", m, mnl),))),
                          A.Call("exp", (A.Binary("-", x, mnl),)))),
        A.Assign(ps.st1.tensor, ps.st1.index, "=", mnl),
    ))
    init = [A.Assign(ps.st1.tensor, ps.st1.index, "=", INF),
            A.Assign(s.tensor, s.index, "=", A.const(0.0))]
    return program, _wrap(ps.rows, init + [loop]), mn


def _loop_sites(program: A.Program) -> list[Site]:
    return [Site.make(p, [lp.var for lp in enclosing_loops(program, p)] + [s.var])
            for p, s in iter_stmts(program.body) if isinstance(s, A.Loop)]


def _read_after(program: A.Program, parent: Path, k: int, name: str) -> bool:
    """Whether a statement after sibling ``k`` (at ``parent`` or further out) reads ``name``."""
    path = tuple(parent) + (k,)
    while path:
        body = _body_of(program, path[:-1])
        for s in body[path[-1] + 1:]:
            if name in tensors_read(s):
                return True
        path = path[:-1]
    return any(t.name == name for t in program.outputs)


# ============================================================================ strategies
class _Algo(Strategy):
    family = "algorithmic"
    exactness = "algebraic"
    targets = frozenset({"cpu", "gpu"})


class _SingleLoopAlgo(_Algo):
    """A rewrite of one serial loop holding one assignment: its sites are the loops whose
    assignment ``accepts``, and ``_single`` finds that (loop, assignment) pair or says why not."""

    def accepts(self, loop: A.Loop, stmt: A.Assign) -> bool:
        raise NotImplementedError

    def sites(self, program, analysis=None):
        out = []
        for s in _loop_sites(program):
            m = _single_loop(node_at(program, s.path))
            if m and self.accepts(*m):
                out.append(s)
        return out

    @staticmethod
    def _single(program, site):
        node = node_at(program, site.path)
        m = _single_loop(node) if node is not None else None
        if m is None:
            return None, refuse(f"no serial loop holding one assignment at {list(site.path)}")
        return m, None


@register
class NormalLoopMaxToPrefixMax(_SingleLoopAlgo):
    name = "normal_loop_max_to_prefix_max"
    exactness = "exact"
    description = ("A max-reduction pass `for j in N: M[r] max= X(j)` feeding a later pass becomes "
                   "a prefix-max scan P[r,j] = max(X(0..j)) (P[r,0] = X(0); P[r,j+1] = "
                   "max(P[r,j], X(j+1))) and M[r] = P[r,N-1]: the running max the online "
                   "softmax derivation starts from. Exact.")

    def accepts(self, loop, stmt):
        return stmt.op == "max="

    def _match(self, program, site):
        m, why = self._single(program, site)
        if m is None:
            return None, why
        loop, st = m
        if st.op != "max=":
            return None, refuse(f"the loop holds `{st.op}`, not a max= reduction")
        if any(_uses_var(i, loop.var) for i in st.index):
            return None, refuse(f"{loop.var} indexes {st.tensor}: not a reduction over it")
        if loop.extent < 2:
            return None, refuse("a prefix max needs at least two iterations")
        if st.tensor in _reads(st.value):
            return None, refuse("the maximized value reads the max itself")
        if not _read_after(program, site.path[:-1], site.path[-1], st.tensor):
            return None, refuse(f"{st.tensor} feeds no later pass")
        # every other reduction axis would re-run the scan: only the loop's own variable may be one
        outer = enclosing_loops(program, site.path)
        axes = reduction_axes(st, outer + [loop])
        if axes != [loop.var]:
            return None, refuse(f"{st.tensor} is also reduced over {[a for a in axes if a != loop.var]}")
        return (loop, st), OK

    def check(self, program, site, params):
        return self._match(program, site)[1]

    def rewrite(self, program, site, params):
        (loop, st), _ = self._match(program, site)
        t = program.tensors[st.tensor]
        program2, p = _add_tensor(program, t, shape=t.shape + (loop.extent,))
        j, n = loop.var, loop.extent
        pi = lambda e: tuple(st.index) + (e,)  # noqa: E731
        new = [A.Assign(p, pi(A.const(0)), "=", _at(st.value, j, 0)),
               A.Loop(j, n - 1, "serial", (
                   A.Assign(p, pi(A.Binary("+", A.Var(j), A.const(1))), "=",
                            A.Call("max", (_load(p, pi(A.Var(j))), _shift(st.value, j, 1)))),)),
               A.Assign(st.tensor, st.index, "=", _load(p, pi(A.const(n - 1))))]
        return _replace_range(program2, site.path[:-1], site.path[-1], site.path[-1] + 1, new)


@register
class SummationOnExpToPrefix(_SingleLoopAlgo):
    name = "normal_loop_summation_on_exp_to_prefix_summation_on_exp"
    description = ("`for j in N: S[r] += exp(X(j) - M[r])` where M[r] = P[r,N-1] is the last "
                   "element of a prefix scan P becomes the recurrence S = exp(X(0) - P[r,0]); "
                   "S = S*exp(P[r,j] - P[r,j+1]) + exp(X(j+1) - P[r,j+1]): the online-softmax "
                   "denominator over the prefix max. Also `S[r] += D[r,j]` where the statement "
                   "before defines D = exp(X - M) (D is kept for its other readers).")

    def accepts(self, loop, stmt):
        return stmt.op == "+=" and (isinstance(stmt.value, A.Load) or (
            isinstance(stmt.value, A.Call) and stmt.value.func == "exp"))

    @staticmethod
    def _scan_nest(s: A.Stmt) -> tuple[list[A.Loop], A.Stmt, A.Stmt, A.Assign] | None:
        """``for rows: [..., P[r,0] = e0; for v: P[r,v+1] = max(P[r,v], e); M[r] = P[r,N-1]]``
        (what normal_loop_max_to_prefix_max makes of a max pass with its own row loops) ->
        (rows, the first element, the scan loop, the last-element store)."""
        rows: list[A.Loop] = []
        while isinstance(s, A.Loop):
            rows.append(s)
            if len(s.body) == 1 and isinstance(s.body[0], A.Loop):
                s = s.body[0]
                continue
            break
        if not rows or len(rows[-1].body) < 3 or not isinstance(rows[-1].body[-1], A.Assign):
            return None
        s0, s1, dm = rows[-1].body[-3:]
        return rows, s0, s1, dm

    def _match(self, program, site):
        m, why = self._single(program, site)
        if m is None:
            return None, why
        loop, st = m
        j, n = loop.var, loop.extent
        if st.op != "+=":
            return None, refuse("the loop does not hold a sum `S += exp(x - M)`")
        root = _nest_root(program, site.path)
        parent, q = root[:-1], root[-1]
        body = _body_of(program, parent)
        v = st.value
        if isinstance(v, A.Load):
            # materialised: D[..] = exp(X - M) right before, S += D[r,j]
            v, why = _materialised(program, body, q, v,
                                   {lp.var for lp in enclosing_loops(program, root)})
            if v is None:
                return None, refuse(f"the loop does not hold a sum `S += exp(x - M)`: {why}")
        if not (isinstance(v, A.Call) and v.func == "exp"
                and isinstance(v.args[0], A.Binary) and v.args[0].op == "-"
                and isinstance(v.args[0].rhs, A.Load)):
            return None, refuse("the loop does not hold a sum `S += exp(x - M)`")
        mload = v.args[0].rhs
        x = v.args[0].lhs
        if _uses_var(mload, j) or not _uses_var(x, j) or any(_uses_var(i, j) for i in st.index):
            return None, refuse(f"not a sum over {j} of exp(x - M) with M invariant in {j}")
        if not _is_float(program, st.tensor) or st.tensor in _reads(x) | {mload.tensor}:
            return None, refuse("the sum reads its own accumulator or is not floating-point")
        outer = enclosing_loops(program, site.path)
        if reduction_axes(st, outer + [loop]) != [j]:
            return None, refuse(f"{st.tensor} is reduced over more than {j}")
        # the last write of M before the sum's nest: M[r] = P[r, N-1]
        d = None
        for q2 in range(q - 1, -1, -1):
            if mload.tensor in tensors_written(body[q2]):
                d = q2
                break
        first = (f"{format_expr(mload)} is not defined by a prefix scan in this pass "
                 f"(apply normal_loop_max_to_prefix_max first)")
        r = tuple(A.strip_pos(mload.index))
        if d is not None and isinstance(body[d], A.Assign):
            # shared row loops: the scan's statements are siblings of the sum
            if d < 2:
                return None, refuse(first)
            s0, s1, dm = body[d - 2], body[d - 1], body[d]
            if not (dm.op == "=" and A.strip_pos(dm.index) == r and isinstance(dm.value, A.Load)):
                return None, refuse(f"{format_expr(mload)} is not the last element of a prefix "
                                    f"scan")
            rp = r
        else:
            # the scan has its own row loops: for rows: [P[r,0] = ..; for ..; M[r] = P[r,N-1]]
            sn = self._scan_nest(body[d]) if d is not None else None
            if sn is None or sn[3].tensor != mload.tensor:
                return None, refuse(first)
            prows, s0, s1, dm = sn
            pvars = {lp.var: lp.extent for lp in prows}
            b: dict[str, A.Expr] = {}
            if not (dm.op == "=" and isinstance(dm.value, A.Load) and
                    _unify(_load(dm.tensor, dm.index), mload, frozenset(pvars), b)) or \
                    _loop_binding(b, pvars, outer, "the sum"):
                return None, refuse(f"{format_expr(mload)} is not the last element of a prefix "
                                    f"scan over the rows the sum reads")
            rp = tuple(A.strip_pos(dm.index))
        pl = dm.value
        pt = program.tensors[pl.tensor]
        if not pt.shape or pt.shape[-1] != n or tuple(A.strip_pos(pl.index[:-1])) != rp or \
                A.strip_pos(pl.index[-1]) != A.const(n - 1):
            return None, refuse(f"{format_expr(dm.value)} is not element {n - 1} of a prefix "
                                f"sequence over {j}")
        # the scan: P[r,0] = e0 ; for v in N-1: P[r,v+1] = max(P[r,v], e)
        sl = _single_loop(s1)
        ok = isinstance(s0, A.Assign) and s0.tensor == pl.tensor and s0.op == "=" and \
            tuple(A.strip_pos(s0.index)) == rp + (A.const(0),) and sl is not None
        if ok:
            vl, vs = sl
            vv = A.Var(vl.var)
            ok = vl.extent == n - 1 and vs.tensor == pl.tensor and vs.op == "=" and \
                tuple(A.strip_pos(vs.index)) == rp + (A.Binary("+", vv, A.const(1)),) and \
                isinstance(vs.value, A.Call) and vs.value.func == "max" and \
                A.strip_pos(vs.value.args[0]) == _load(pl.tensor, rp + (vv,))
        if not ok:
            return None, refuse(f"{pl.tensor} is not written by a prefix-max scan right before "
                                f"{format_expr(mload)} is defined")
        for q2 in range(d + 1, q):
            if {pl.tensor, mload.tensor} & set(tensors_written(body[q2])):
                return None, refuse(f"{pl.tensor} or {mload.tensor} is rewritten before the sum")
        if pl.tensor in _reads(x):
            return None, refuse("the summed value reads the prefix sequence")
        return (loop, st, x, pl.tensor, r), OK

    def check(self, program, site, params):
        return self._match(program, site)[1]

    def rewrite(self, program, site, params):
        (loop, st, x, p, r), _ = self._match(program, site)
        j, n = loop.var, loop.extent
        vj = A.Var(j)
        j1 = A.Binary("+", vj, A.const(1))
        s = _load(st.tensor, st.index)
        pj, pj1 = _load(p, r + (vj,)), _load(p, r + (j1,))
        new = [A.Assign(st.tensor, st.index, "=",
                        A.Call("exp", (A.Binary("-", _at(x, j, 0), _load(p, r + (A.const(0),))),))),
               A.Loop(j, n - 1, "serial", (A.Assign(st.tensor, st.index, "=", A.Binary(
                   "+", A.Binary("*", s, A.Call("exp", (A.Binary("-", pj, pj1),))),
                   A.Call("exp", (A.Binary("-", _shift(x, j, 1), pj1),)))),))]
        return _replace_range(program, site.path[:-1], site.path[-1], site.path[-1] + 1, new)


def _is_softmax_norm(program: A.Program, ps: _Passes, s: A.Stmt) -> str | None:
    """Why ``s`` is not the normalization pass ``Y[.., j] = exp(x - M) / S`` (or ``D / S`` with
    D = exp(x - M) materialised, or log-softmax's ``x - M - log(S)``)."""
    n = perfect_nest(s)
    if n is None or not n[0]:
        return "not a softmax: the sum is not followed by a normalization loop"
    loops, st = n
    x, m, sl = ps.x, ps.m, ps.s
    wants = [A.Binary("/", A.Call("exp", (A.Binary("-", x, m),)), sl)]
    if ps.dload is not None:
        wants.append(A.Binary("/", ps.dload, sl))
    wants.append(A.Binary("-", A.Binary("-", x, m), A.Call("log", (sl,))))
    v = st.value
    for want in wants:
        b: dict[str, A.Expr] = {}
        if st.op == "=" and _unify(want, v, frozenset(ps.pvars), b):
            why = _loop_binding(b, ps.pvars, loops, "the normalization")
            if why:
                return f"not a softmax: {why}"
            break
    else:
        d = f", {ps.dload.tensor} / sum" if ps.dload is not None else ""
        return (f"not a softmax: the pass after the sum is not a normalization storing "
                f"exp(x - max) / sum{d} or x - max - log(sum) "
                f"(found `{st.tensor}[...] {st.op} {format_expr(v)}`)")
    if st.tensor in (ps.st1.tensor, ps.st2.tensor) or (ps.d is not None and
                                                      st.tensor == ps.dload.tensor):
        return "the normalization overwrites the max, the sum or the exponentials"
    return None


@register
class OnlineSoftmax(_SingleLoopAlgo):
    name = "online_softmax"
    description = ("The 3-pass softmax (max; sum of exp(x - max); exp(x - max)/sum) becomes 2 "
                   "passes: an online pass with running max M and rescaled sum S (M = -inf, "
                   "S = 0; Mn = max(M, x); S = S*exp(M - Mn) + exp(x - Mn); M = Mn), then the "
                   "unchanged normalization. Also log-softmax, and the form with the "
                   "exponentials materialised (D = exp(x - M); S += D), whose D is then "
                   "computed after the online pass, once the max is final.")

    def accepts(self, loop, stmt):
        return stmt.op == "max="

    def _match(self, program, site):
        if not site.path:
            return None, refuse("empty path")
        ps, why = _max_sum_passes(program, site.path)
        if ps is None:
            return None, refuse(f"not a softmax: {why}")
        body = _body_of(program, ps.parent)
        if ps.end + 1 >= len(body):
            return None, refuse("not a softmax: no normalization pass after the sum")
        why = _is_softmax_norm(program, ps, body[ps.end + 1])
        if why:
            return None, refuse(why)
        return ps, OK

    def check(self, program, site, params):
        return self._match(program, site)[1]

    def rewrite(self, program, site, params):
        ps, _ = self._match(program, site)
        program2, stmts, _ = _online_pass(program, ps)
        new = stmts + ([ps.d] if ps.d is not None else [])
        return _replace_range(program2, ps.parent, ps.k, ps.end + 1, new)


@register
class FlashAttentionWoTiling(_SingleLoopAlgo):
    name = "flashattention_wo_tiling"
    description = ("Attention's max pass, sum-of-exp pass and `O[r,l] += exp(x - M)/S * V[j,l]` "
                   "pass become one online pass over the keys: running max, running sum, and an "
                   "output accumulator rescaled by exp(M_old - M_new) each step, then O = O / S.")

    def accepts(self, loop, stmt):
        return stmt.op == "max="   # the max pass that starts the attention softmax

    def _match(self, program, site):
        if not site.path:
            return None, refuse("empty path")
        ps, why = _max_sum_passes(program, site.path)
        if ps is None:
            return None, refuse(f"not attention: {why}")
        if ps.rows or ps.d is not None:
            return None, refuse("not attention: only the form whose passes share their row "
                                "loops, with exp inline in the sum, is supported")
        parent, k = ps.parent, ps.k
        body = _body_of(program, parent)
        if k + 2 >= len(body):
            return None, refuse("not attention: nothing consumes the softmax")
        third = body[k + 2]
        # for l in L: for j in N: O[.., l ..] += P * V
        if not (isinstance(third, A.Loop) and third.kind == "serial" and len(third.body) == 1):
            return None, refuse("not attention: the pass after the sum is not `for l: for j: O += P*V`")
        inner = _single_loop(third.body[0])
        if inner is None:
            return None, refuse("not attention: the pass after the sum is not `for l: for j: O += P*V`")
        lloop, (jloop, st) = third, inner
        if jloop.extent != ps.loop1.extent or st.op != "+=":
            return None, refuse("not attention: the third pass is not a sum over the keys")
        j, l = jloop.var, lloop.var
        if any(_uses_var(i, j) for i in st.index) or not any(_uses_var(i, l) for i in st.index):
            return None, refuse(f"not attention: the output must be indexed by {l}, not by {j}")
        x = _rename(ps.x, ps.loop1.var, j)
        p = A.Call("exp", (A.Binary("-", x, ps.m),))
        v = st.value
        vv = None
        if isinstance(v, A.Binary) and v.op == "*" and A.strip_pos(v.lhs) == A.strip_pos(
                A.Binary("/", p, ps.s)):
            vv = v.rhs
        elif isinstance(v, A.Binary) and v.op == "/" and A.strip_pos(v.rhs) == A.strip_pos(ps.s) \
                and isinstance(v.lhs, A.Binary) and v.lhs.op == "*" and \
                A.strip_pos(v.lhs.lhs) == A.strip_pos(p):
            vv = v.lhs.rhs
        if vv is None:
            return None, refuse(f"not attention: the third pass accumulates {format_expr(v)}, not "
                                f"exp(x - max) / sum * V")
        o = st.tensor
        if {o, ps.st1.tensor, ps.st2.tensor} & (_reads(vv) | _reads(x)):
            return None, refuse("not attention: V or the scores read the max, sum or output")
        if o in (ps.st1.tensor, ps.st2.tensor) or not _is_float(program, o):
            return None, refuse("not attention: the output shares a buffer with the max or sum")
        if _uses_var(ps.st1.index, l) or _uses_var(ps.s.index, l):
            return None, refuse(f"not attention: the max or sum is indexed by {l}")
        outer = enclosing_loops(program, site.path)
        for s_, lp in ((ps.st1, ps.loop1), (ps.st2, ps.loop2)):
            if reduction_axes(s_, outer + [lp]) != [lp.var]:
                return None, refuse(f"{s_.tensor} is reduced over more than {lp.var}")
        if reduction_axes(st, outer + [lloop, jloop]) != [j]:
            return None, refuse(f"{o} is reduced over more than {j}")
        return (ps, lloop, jloop, st, vv), OK

    def check(self, program, site, params):
        return self._match(program, site)[1]

    def rewrite(self, program, site, params):
        (ps, lloop, jloop, st, vv), _ = self._match(program, site)
        j, l = ps.loop1.var, lloop.var
        program2, mn = _add_tensor(program, program.tensors[ps.st1.tensor])
        program2, rs = _add_tensor(program2, program.tensors[ps.st1.tensor])
        m, s, x, r = ps.m, ps.s, ps.x, ps.st1.index
        mnl, rsl = _load(mn, r), _load(rs, r)
        lv = l if l != j else j + "_l"
        # one simultaneous substitution: renaming the key loop first would capture V's output
        # index when it already carries the new key name (canonical programs reuse names)
        vv = subst_expr(vv, {v: A.Var(n) for v, n in ((jloop.var, j), (l, lv)) if v != n})
        oidx = tuple(_rename(i, l, lv) for i in st.index)
        ol = _load(st.tensor, oidx)
        e = A.Call("exp", (A.Binary("-", x, mnl),))
        loop = A.Loop(j, ps.loop1.extent, "serial", (
            A.Assign(mn, r, "=", A.Call("max", (m, x))),
            A.Assign(rs, r, "=", A.Call("exp", (A.Binary("-", m, mnl),))),
            A.Assign(ps.st2.tensor, ps.st2.index, "=", A.Binary("+", A.Binary("*", s, rsl), e)),
            A.Loop(lv, lloop.extent, "serial", (A.Assign(st.tensor, oidx, "=", A.Binary(
                "+", A.Binary("*", ol, rsl), A.Binary("*", e, vv))),)),
            A.Assign(ps.st1.tensor, r, "=", mnl),
        ))
        new = [A.Assign(ps.st1.tensor, r, "=", INF),
               A.Assign(ps.st2.tensor, ps.st2.index, "=", A.const(0.0)),
               A.Loop(lv, lloop.extent, "serial", (A.Assign(st.tensor, oidx, "=", A.const(0.0)),)),
               loop,
               A.Loop(lv, lloop.extent, "serial", (A.Assign(st.tensor, oidx, "=",
                                                            A.Binary("/", ol, s)),))]
        return _replace_range(program2, site.path[:-1], site.path[-1], site.path[-1] + 3, new)


# ----------------------------------------------------------------------------- expression splits
def _addends(e: A.Expr, sign: int = 1) -> list[tuple[int, A.Expr]]:
    if isinstance(e, A.Binary) and e.op in ("+", "-"):
        return _addends(e.lhs, sign) + _addends(e.rhs, sign if e.op == "+" else -sign)
    if isinstance(e, A.Unary) and e.op == "-":
        return _addends(e.operand, -sign)
    return [(sign, e)]


def _sum(terms: list[tuple[int, A.Expr]]) -> A.Expr:
    sign, out = terms[0]
    if sign < 0:
        out = A.Const(-out.value, out.kind) if isinstance(out, A.Const) else A.Unary("-", out)
    for sg, t in terms[1:]:
        out = A.Binary("+" if sg > 0 else "-", out, t)
    return out


def _invariant(e: A.Expr, var: str, written: set[str]) -> bool:
    return not _uses_var(e, var) and not (_reads(e) & written)


def _split_exps(e: A.Expr, var: str, written: set[str]) -> A.Expr:
    """Every ``exp(a + b)`` with invariant addends a and variant addends b -> exp(b) * exp(a)."""
    if isinstance(e, A.Call):
        args = tuple(_split_exps(a, var, written) for a in e.args)
        if e.func == "exp":
            terms = _addends(args[0])
            inv = [t for t in terms if _invariant(t[1], var, written)]
            var_ = [t for t in terms if not _invariant(t[1], var, written)]
            if inv and var_:
                return A.Binary("*", A.Call("exp", (_sum(var_),)), A.Call("exp", (_sum(inv),)))
        return replace(e, args=args)
    if isinstance(e, A.Binary):
        return replace(e, lhs=_split_exps(e.lhs, var, written), rhs=_split_exps(e.rhs, var, written))
    if isinstance(e, A.Unary):
        return replace(e, operand=_split_exps(e.operand, var, written))
    return e


@register
class ExponentialSplit(_Algo):
    name = "exponential_split"
    description = ("exp(a + b) -> exp(b) * exp(a) where the addends a are invariant in the "
                   "innermost enclosing loop and b vary with it, so exp(a) can be hoisted out of "
                   "that loop. Every such exp of the statement is split.")

    def sites(self, program, analysis=None):
        return _stmt_sites(program, lambda p_, path, s: isinstance(s, A.Assign) and any(
            isinstance(n, A.Call) and n.func == "exp" for n in A.walk(s.value)))

    def _new(self, program, site):
        node = node_at(program, site.path)
        if not isinstance(node, A.Assign):
            return None, refuse(f"no assignment at {list(site.path)}")
        loops = enclosing_loops(program, site.path)
        if not loops:
            return None, refuse("the statement is in no loop: nothing to hoist out of")
        if not _is_float(program, node.tensor):
            return None, refuse(f"{node.tensor} is not floating-point")
        unsafe = stabilized_exp(program, node.value)
        if unsafe:
            return None, refuse(f"exponential_split does not apply: {unsafe}")
        inner = loops[-1]
        written = set(tensors_written(inner))
        new = _split_exps(node.value, inner.var, written)
        if new == node.value:
            return None, refuse(f"no exp(...) of the statement has both an addend invariant in "
                                f"{inner.var} and one that varies with it")
        return replace(node, value=new), OK

    def check(self, program, site, params):
        return self._new(program, site)[1]

    def rewrite(self, program, site, params):
        return replace_at(program, site.path, [self._new(program, site)[0]])


def _reduction_band(program: A.Program, path: Path) -> tuple[Path, list[str]] | None:
    """(path of the outermost loop, reduction vars) of the perfect band of reduction-axis loops
    directly around the reduction at ``path``, when it covers all its reduction axes."""
    st = node_at(program, path)
    loops = enclosing_loops(program, path)
    axes = reduction_axes(st, loops)
    if not axes:
        return None
    p = tuple(path)
    covered = []
    while len(p) > 1:
        parent = node_at(program, p[:-1])
        if isinstance(parent, A.Loop) and parent.var in axes and len(parent.body) == 1:
            covered.append(parent.var)
            p = p[:-1]
        else:
            break
    if sorted(covered) != sorted(axes):
        return None
    return p, axes


def _factors(e: A.Expr) -> list[A.Expr]:
    if isinstance(e, A.Binary) and e.op == "*":
        return _factors(e.lhs) + _factors(e.rhs)
    return [e]


def _prod(xs: list[A.Expr]) -> A.Expr:
    out = xs[0]
    for x in xs[1:]:
        out = A.Binary("*", out, x)
    return out


@register
class MultiplicativeSplit(_Algo):
    name = "multiplicative_split"
    description = ("S[r] += c * f over reduction loops whose variables c does not use -> "
                   "S[r] += f, then S[r] = S[r] * c after the reduction (distributivity): the "
                   "invariant factor is applied once per element instead of once per term.")

    def sites(self, program, analysis=None):
        return _stmt_sites(program, lambda p_, path, s: isinstance(s, A.Assign) and s.op == "+="
                           and isinstance(s.value, A.Binary) and s.value.op == "*")

    def _match(self, program, site):
        st = node_at(program, site.path)
        if not (isinstance(st, A.Assign) and st.op == "+="):
            return None, refuse("not a += reduction")
        band = _reduction_band(program, site.path)
        if band is None:
            return None, refuse("the reduction axes are not a perfect band of loops around it")
        bpath, axes = band
        written = set(tensors_written(node_at(program, bpath)))
        fs = _factors(st.value)
        inv = [f for f in fs if not any(_uses_var(f, a) for a in axes) and not (_reads(f) & written)]
        var = [f for f in fs if f not in inv]
        if not inv or not var:
            return None, refuse(f"no factor of {format_expr(st.value)} is invariant in the "
                                f"reduction axes {axes} (or every factor is)")
        if st.tensor in _reads(st.value):
            return None, refuse("the summand reads the accumulator")
        return (st, bpath, inv, var), OK

    def check(self, program, site, params):
        return self._match(program, site)[1]

    def rewrite(self, program, site, params):
        (st, bpath, inv, var), _ = self._match(program, site)
        program = replace_at(program, site.path, [replace(st, value=_prod(var))])
        band = node_at(program, bpath)
        scale = A.Assign(st.tensor, st.index, "=",
                         A.Binary("*", _load(st.tensor, st.index), _prod(inv)))
        return _replace_range(program, bpath[:-1], bpath[-1], bpath[-1] + 1, [band, scale])


_COMBINE = {"+=": lambda a, b: A.Binary("+", a, b), "*=": lambda a, b: A.Binary("*", a, b),
            "max=": lambda a, b: A.Call("max", (a, b)), "min=": lambda a, b: A.Call("min", (a, b))}


@register
class AdditiveSplit(_SingleLoopAlgo):
    name = "additive_split"
    exactness = "reassociation"
    description = ("A reduction over one loop `for k in N: S op= f(k)` is split into two parts: "
                   "S op= f(k) for k < h, a fresh U op= f(k + h) for the rest, then S = S (+) U. "
                   "Params: {\"at\": h}. Reassociation for float += and *=, exact for max=/min=.")

    def accepts(self, loop, stmt):
        return stmt.is_reduction and loop.extent >= 2

    def params(self, program, site, rng=None):
        node = node_at(program, site.path)
        if not isinstance(node, A.Loop):
            return []
        return [{"at": node.extent // 2}]

    def _match(self, program, site, params):
        m, why = self._single(program, site)
        if m is None:
            return None, why
        loop, st = m
        if not st.is_reduction:
            return None, refuse("the loop does not hold a reduction")
        axes = reduction_axes(st, enclosing_loops(program, site.path) + [loop])
        if axes != [loop.var]:
            return None, refuse(f"{st.tensor} is reduced over {axes}, not only over {loop.var}: "
                                f"splitting one axis would re-add partial sums")
        h = params.get("at")
        if not isinstance(h, int) or isinstance(h, bool) or not 1 <= h < loop.extent:
            return None, refuse(f"split point must be an integer in [1, {loop.extent - 1}]")
        if st.tensor in _reads(st.value) or any(_uses_var(i, loop.var) for i in st.index):
            return None, refuse("the summand reads the accumulator")
        return (loop, st, h), OK

    def check(self, program, site, params):
        return self._match(program, site, params)[1]

    def exactness_for(self, program, site, params):
        node = node_at(program, site.path)
        m = _single_loop(node) if node is not None else None
        if m and m[1].op in ("+=", "*=") and _is_float(program, m[1].tensor):
            return "reassociation"
        return "exact"

    def rewrite(self, program, site, params):
        (loop, st, h), _ = self._match(program, site, params)
        program2, u = _add_tensor(program, program.tensors[st.tensor])
        k = loop.var
        new = [A.Loop(k, h, "serial", (st,)),
               A.Loop(k, loop.extent - h, "serial",
                      (A.Assign(u, st.index, st.op, _shift(st.value, k, h)),)),
               A.Assign(st.tensor, st.index, "=",
                        _COMBINE[st.op](_load(st.tensor, st.index), _load(u, st.index)))]
        return _replace_range(program2, site.path[:-1], site.path[-1], site.path[-1] + 1, new)


@register
class PartiallyEquivalentThenCorrect(_SingleLoopAlgo):
    name = "partially_equivalent_then_correct"
    description = ("S[r] += (E(j) - m) * (E(j) - m) with m invariant in j is computed around the "
                   "stand-in c = E(0) (partially equivalent: equal when m == c) with U[r] += "
                   "E(j) - c, then corrected exactly: S[r] = S[r] + (c - m) * (U[r] * 2 + "
                   "(c - m) * N). The reductions no longer read m.")

    def accepts(self, loop, stmt):
        return stmt.op == "+=" and isinstance(stmt.value, A.Binary) and stmt.value.op == "*"

    def _match(self, program, site):
        m, why = self._single(program, site)
        if m is None:
            return None, why
        loop, st = m
        j = loop.var
        v = st.value
        if st.op != "+=" or not (isinstance(v, A.Binary) and v.op == "*" and
                                 A.strip_pos(v.lhs) == A.strip_pos(v.rhs) and
                                 isinstance(v.lhs, A.Binary) and v.lhs.op == "-"):
            return None, refuse("the loop does not sum a square (E - m) * (E - m)")
        if not _is_float(program, st.tensor):
            return None, refuse(f"{st.tensor} is not floating-point")
        axes = reduction_axes(st, enclosing_loops(program, site.path) + [loop])
        if axes != [j]:
            return None, refuse(f"{st.tensor} is reduced over {axes}, not only over {j}")
        e, mm = v.lhs.lhs, v.lhs.rhs
        written = {st.tensor}
        if not _uses_var(e, j):
            return None, refuse(f"E = {format_expr(e)} does not vary with {j}")
        if not _invariant(mm, j, written) or st.tensor in _reads(e):
            return None, refuse(f"m = {format_expr(mm)} is not invariant in {j}")
        c = _at(e, j, 0)
        if A.strip_pos(c) == A.strip_pos(mm):
            return None, refuse("m already is the stand-in E(0)")
        return (loop, st, e, mm, c), OK

    def check(self, program, site, params):
        return self._match(program, site)[1]

    def rewrite(self, program, site, params):
        (loop, st, e, mm, c), _ = self._match(program, site)
        program2, u = _add_tensor(program, program.tensors[st.tensor])
        d = A.Binary("-", e, c)
        cm = A.Binary("-", c, mm)
        s, ul = _load(st.tensor, st.index), _load(u, st.index)
        new = [A.Loop(loop.var, loop.extent, "serial",
                      (replace(st, value=A.Binary("*", d, d)),)),
               A.Loop(loop.var, loop.extent, "serial", (A.Assign(u, st.index, "+=", d),)),
               A.Assign(st.tensor, st.index, "=", A.Binary("+", s, A.Binary("*", cm, A.Binary(
                   "+", A.Binary("*", ul, A.const(2.0)),
                   A.Binary("*", cm, A.const(float(loop.extent))))))),
               ]
        return _replace_range(program2, site.path[:-1], site.path[-1], site.path[-1] + 1, new)


__all__ = ["NormalLoopMaxToPrefixMax", "SummationOnExpToPrefix", "OnlineSoftmax",
           "FlashAttentionWoTiling", "ExponentialSplit", "MultiplicativeSplit", "AdditiveSplit",
           "PartiallyEquivalentThenCorrect"]
