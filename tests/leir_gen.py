"""Hypothesis strategies for small *valid* LEIR programs (they pass ``steptp.leir.check``).

``programs()`` draws kernels with 1-3 f32/f64 inputs (dims <= 8), 1-2 outputs, optional
intermediates, and up to three loop nests: stores and reductions (``+= *= max= min=``), loops in
any order, split loops with ``if`` tail guards, subscripts that are affine, shifted, reversed,
``%``/``//`` folded or constant, and numerically tame element-wise math (``exp`` only of bounded
values, ``sqrt`` of ``abs``, division by ``abs(x) + 1``, ``where`` on comparisons). Every output
and intermediate element is written, intermediates before they are read, so the NumPy
interpreter and a TVM build must agree on every output element.

Use: ``from leir_gen import programs`` (pytest puts tests/ on sys.path), then
``@given(programs())``. ``inputs_for(program, seed)`` makes matching random input arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from steptp.leir import ast as A

INPUT_NAMES = ["A", "B", "C", "X", "W", "Bias"]
OUTPUT_NAMES = ["D", "Y", "Out", "A1"]
INTERMEDIATE_NAMES = ["T1", "T0", "Tmp", "Acc"]
# loop variable names by depth (a nest has at most 3*2 spatial + 2*2 reduction loops)
LOOP_SCHEMES = [
    ["i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t"],
    ["k", "j", "i", "a", "b", "c", "d", "e", "f", "g", "h", "u"],
    [f"ax{n}" for n in range(12)],
    [f"i{n}" for n in range(12)],
]


def _c(v) -> A.Const:
    return A.const(v)


def _bin(op, a, b) -> A.Binary:
    return A.Binary(op, a, b)


def _call(f, *args) -> A.Call:
    return A.Call(f, tuple(args))


@dataclass
class _Axis:
    """A logical iteration axis: its extent and how its value is spelled in the program
    (a loop variable, or ``vo*f + vi`` after a split)."""

    extent: int
    expr: A.Expr = None  # type: ignore[assignment]
    guard: A.Expr | None = None
    loops: list = None  # type: ignore[assignment]  # [(name_slot, extent)] for this axis
    spatial: bool = True


def _shape(draw, max_rank=3, min_rank=0):
    rank = draw(st.integers(min_rank, max_rank))
    if rank == 0 and draw(st.integers(0, 3)) != 0:  # scalars are rarer
        rank = 1
    return tuple(draw(st.lists(st.integers(1, 8), min_size=rank, max_size=rank)))


def _subscript(draw, size: int, axes: list[_Axis]) -> A.Expr:
    """An in-range subscript for a dimension of ``size`` from the available axes."""
    if not axes or draw(st.integers(0, 9)) == 0:
        return _c(draw(st.integers(0, size - 1)))
    ax = draw(st.sampled_from(axes))
    e, n = ax.expr, ax.extent
    if n == size:
        kind = draw(st.sampled_from(["plain", "plain", "reverse", "mod"]))
    elif n < size:
        kind = draw(st.sampled_from(["plain", "shift", "reverse"]))
    else:
        kind = draw(st.sampled_from(["mod", "div"]))
    if kind == "plain":
        return e
    if kind == "shift":
        c = draw(st.integers(0, size - n))
        return _bin("+", e, _c(c)) if c else e
    if kind == "reverse":
        return _bin("-", _c(size - 1), e)
    if kind == "mod":
        return _bin("%", e, _c(size))
    q = -(-n // size)
    return _bin("//", e, _c(q))


class _Ctx:
    def __init__(self, dtype, readable: list[A.Tensor]):
        self.dtype = dtype
        self.readable = readable


def _leaf(draw, ctx: _Ctx, axes: list[_Axis]) -> A.Expr:
    choice = draw(st.integers(0, 9))
    if choice <= 6 and ctx.readable:
        t = draw(st.sampled_from(ctx.readable))
        return A.Load(t.name, tuple(_subscript(draw, d, axes) for d in t.shape))
    if choice == 7 and axes:
        ax = draw(st.sampled_from(axes))
        return _bin("*", _call(ctx.dtype, ax.expr), _c(0.25))
    return _c(draw(st.sampled_from([0.5, -1.5, 2.0, 0.25, 1.0, -0.75, 3.0])))


def _expr(draw, ctx: _Ctx, axes: list[_Axis], depth: int) -> A.Expr:
    if depth <= 0 or draw(st.integers(0, 2)) == 0:
        return _leaf(draw, ctx, axes)
    kind = draw(st.sampled_from(["+", "-", "*", "div", "max", "min", "where", "neg", "tanh",
                                 "sigmoid", "expt", "sqrtabs", "abs", "erf", "+", "*"]))
    a = _expr(draw, ctx, axes, depth - 1)
    if kind == "neg":
        return A.Unary("-", a) if not isinstance(a, A.Const) else _c(-a.value)
    if kind in ("tanh", "sigmoid", "abs", "erf"):
        return _call(kind, a)
    if kind == "expt":
        return _call("exp", _call("tanh", a))
    if kind == "sqrtabs":
        return _call("sqrt", _call("abs", a))
    b = _expr(draw, ctx, axes, depth - 1)
    if kind in ("+", "-", "*"):
        return _bin(kind, a, b)
    if kind == "div":
        return _bin("/", a, _bin("+", _call("abs", b), _c(1.0)))
    if kind in ("max", "min"):
        return _call(kind, a, b)
    c = _expr(draw, ctx, axes, depth - 1)
    return _call("where", _bin(draw(st.sampled_from(["<", ">=", "!="])), a, b), a, c)


def _split_axis(draw, ax: _Axis, names: list[str]) -> None:
    """Decide how the axis is spelled; ``names`` are not bound yet (filled by ``_nest``)."""
    ax.loops = []
    if ax.extent >= 3 and draw(st.integers(0, 3)) == 0:
        f = draw(st.integers(2, min(4, ax.extent - 1)))
        outer = -(-ax.extent // f)
        ax.loops = [outer, f]
        ax.split = f  # type: ignore[attr-defined]
    else:
        ax.loops = [ax.extent]
        ax.split = None  # type: ignore[attr-defined]


def _bind(axes_in_order: list[_Axis], names: list[str], depth0: int) -> list[tuple[str, int, _Axis]]:
    """Assign loop variable names by depth; set each axis's expression and guard."""
    loops = []
    d = depth0
    for ax in axes_in_order:
        vs = []
        for ext in ax.loops:
            vs.append(names[d])
            loops.append((names[d], ext, ax))
            d += 1
        if ax.split is None:  # type: ignore[attr-defined]
            ax.expr = A.Var(vs[0])
            ax.guard = None
        else:
            f = ax.split  # type: ignore[attr-defined]
            ax.expr = _bin("+", _bin("*", A.Var(vs[0]), _c(f)), A.Var(vs[1]))
            ax.guard = None if ax.extent % f == 0 else _bin("<", ax.expr, _c(ax.extent))
    return loops


def _wrap(loops: list[tuple[str, int, _Axis]], body: tuple, kinds: dict[int, str]) -> tuple:
    for pos in range(len(loops) - 1, -1, -1):
        name, ext, _ = loops[pos]
        body = (A.Loop(name, ext, kinds.get(pos, "serial"), body),)
    return body


def _guarded(guards: list[A.Expr], body: tuple) -> tuple:
    if not guards:
        return body
    cond = guards[0]
    for g in guards[1:]:
        cond = _bin("and", cond, g)
    return (A.If(cond, body),)


def _kinds(draw, loops, n_spatial_outer: int, vectorize: bool = True) -> dict[int, str]:
    """Non-serial kinds only on the leading run of spatial loops (no races, no reductions);
    ``vectorized`` only on an innermost loop."""
    kinds = {}
    if n_spatial_outer and draw(st.integers(0, 2)) == 0:
        kinds[0] = draw(st.sampled_from(["parallel", "unrolled"]))
    if (vectorize and n_spatial_outer >= 2 and n_spatial_outer == len(loops)
            and draw(st.integers(0, 3)) == 0):
        kinds[len(loops) - 1] = draw(st.sampled_from(["vectorized", "unrolled"]))
    return kinds


def _leading_spatial(loops) -> int:
    n = 0
    for _, _, ax in loops:
        if not ax.spatial:
            break
        n += 1
    return n


def _reduction_value(draw, op: str, ctx: _Ctx, axes, depth) -> A.Expr:
    e = _expr(draw, ctx, axes, depth)
    if op == "*=":  # keep products of many factors finite: each factor in [0.5, 1.5]
        return _bin("+", _call("sigmoid", e), _c(0.5))
    return e


def _nest(draw, target: A.Tensor, ctx: _Ctx, names: list[str], extra: A.Tensor | None = None):
    """Statements that write every element of ``target`` (and first, of ``extra``, an
    intermediate of the same shape computed in the same nest)."""
    spatial = [_Axis(d) for d in target.shape]
    reduce_ = draw(st.integers(0, 4)) < 2 or extra is not None
    op = draw(st.sampled_from(["+=", "+=", "max=", "min=", "*="])) if reduce_ else "="
    red = [_Axis(draw(st.integers(1, 8)), spatial=False)
           for _ in range(draw(st.integers(1, 2)) if reduce_ else 0)]
    for ax in spatial + red:
        _split_axis(draw, ax, names)
    lhs_of = lambda axes: tuple(ax.expr for ax in axes)  # noqa: E731
    if extra is None:
        order = draw(st.permutations(spatial + red))
        loops = _bind(list(order), names, 0)
        guards = [ax.guard for ax in order if ax.guard is not None]
        value = (_reduction_value(draw, op, ctx, spatial + red, 3) if reduce_
                 else _expr(draw, ctx, spatial, 3))
        stmt = A.Assign(target.name, lhs_of(spatial), op, value)
        return _wrap(loops, _guarded(guards, (stmt,)), _kinds(draw, loops, _leading_spatial(loops)))
    # fused: for spatial: (for red: extra[s] op= ...); target[s] = f(extra[s], ...)
    sp_order = list(draw(st.permutations(spatial)))
    sp_loops = _bind(sp_order, names, 0)
    red_loops = _bind(list(draw(st.permutations(red))), names, len(sp_loops))
    sp_guards = [ax.guard for ax in sp_order if ax.guard is not None]
    red_guards = [ax.guard for ax in red if ax.guard is not None]
    rval = _reduction_value(draw, op, ctx, spatial + red, 2)
    rstmt = A.Assign(extra.name, lhs_of(spatial), op, rval)
    inner = _wrap(red_loops, _guarded(sp_guards + red_guards, (rstmt,)), {})
    # the intermediate is complete only at the current spatial point: read it only there
    own = A.Load(extra.name, lhs_of(spatial))
    value = _bin(draw(st.sampled_from(["+", "*", "-"])), own, _expr(draw, ctx, spatial, 2))
    sstmt = A.Assign(target.name, lhs_of(spatial), "=", value)
    body = inner + _guarded(sp_guards, (sstmt,))
    return _wrap(sp_loops, body, _kinds(draw, sp_loops, len(sp_loops), vectorize=False))


@st.composite
def programs(draw, dtypes=("f32", "f64"), max_inputs: int = 3, max_outputs: int = 2,
             intermediates: bool = True) -> A.Program:
    """A small valid LEIR program (see the module docstring)."""
    dtype = draw(st.sampled_from(list(dtypes)))
    names = draw(st.sampled_from(LOOP_SCHEMES))
    n_in = draw(st.integers(1, max_inputs))
    in_names = draw(st.permutations(INPUT_NAMES))[:n_in]
    inputs = tuple(A.Tensor(n, dtype, _shape(draw)) for n in in_names)
    n_out = draw(st.integers(1, max_outputs))
    out_names = draw(st.permutations(OUTPUT_NAMES))[:n_out]
    outputs = tuple(A.Tensor(n, dtype, _shape(draw)) for n in out_names)
    mids: list[A.Tensor] = []
    body: tuple = ()
    readable = list(inputs)
    n_nests = 0
    inter_pool = list(draw(st.permutations(INTERMEDIATE_NAMES)))
    if intermediates and n_out == 1 and draw(st.booleans()):
        t = A.Tensor(inter_pool.pop(), dtype, _shape(draw, min_rank=1),
                     draw(st.sampled_from(["global", "global", "local", "shared"])))
        mids.append(t)
        body += _nest(draw, t, _Ctx(dtype, readable), names)
        readable = readable + [t]
        n_nests += 1
    for o in outputs:
        extra = None
        if intermediates and n_nests < 2 and o.shape and draw(st.integers(0, 3)) == 0:
            extra = A.Tensor(inter_pool.pop(), dtype, o.shape)
            mids.append(extra)
        body += _nest(draw, o, _Ctx(dtype, readable), names, extra)
        n_nests += 1
    return A.Program(draw(st.sampled_from(["k", "fused_op", "gen"])), inputs, outputs,
                     tuple(mids), body)


def inputs_for(program: A.Program, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs of the declared shapes and dtypes."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(t.tvm_dtype) for t in program.inputs}
