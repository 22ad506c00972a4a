"""Static analyses of LEIR programs that scheduling strategies need.

Everything here is deterministic: results are lists and insertion-ordered dicts built in program
order (never from set iteration), so two runs on the same program give identical answers.

Vocabulary:

* a **path** is a tuple of body indices locating a statement: ``(0, 1)`` is
  ``program.body[0].body[1]``;
* a statement's **domain** is its enclosing loops (outermost first) and ``if`` guards;
* a **footprint** is, per tensor, the distinct index tuples a statement (or loop) uses and an
  inclusive bounding box of the elements it may touch, found by interval arithmetic over the loop
  extents (subscripts the arithmetic cannot bound cover the whole dimension).

Entry points: the :class:`Analysis` class (build once, everything cached) and module-level
functions taking a ``Program`` (they share one cached ``Analysis`` per program).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np

from . import ast as A
from .private import private_to

Path = tuple[int, ...]
Interval = tuple[int, int]

# Bytes per element of each LEIR dtype.
ITEMSIZE: dict[str, int] = {"bool": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "f16": 2, "bf16": 2,
                            "i32": 4, "u32": 4, "f32": 4, "i64": 8, "u64": 8, "f64": 8}


# ============================================================================ index arithmetic
def affine(e: A.Expr) -> tuple[dict[str, int], int] | None:
    """``e`` as ``sum(coef[v] * v) + const`` over loop variables, or None if it is not affine
    (loads, calls, division, products of variables...). Zero coefficients are dropped; the dict is
    in first-appearance order."""
    if isinstance(e, A.Const):
        if e.kind == "int":
            return {}, int(e.value)
        return None
    if isinstance(e, A.Var):
        return {e.name: 1}, 0
    if isinstance(e, A.Unary) and e.op == "-":
        a = affine(e.operand)
        return None if a is None else ({v: -c for v, c in a[0].items()}, -a[1])
    if isinstance(e, A.Binary) and e.op in ("+", "-", "*"):
        la, ra = affine(e.lhs), affine(e.rhs)
        if la is None or ra is None:
            return None
        if e.op == "*":
            if la[0] and ra[0]:
                return None
            (coef, k), s = (la, ra[1]) if not ra[0] else (ra, la[1])
            return {v: c * s for v, c in coef.items() if c * s}, k * s
        sign = 1 if e.op == "+" else -1
        coef = dict(la[0])
        for v, c in ra[0].items():
            coef[v] = coef.get(v, 0) + sign * c
        return {v: c for v, c in coef.items() if c}, la[1] + sign * ra[1]
    return None


def interval(e: A.Expr, ranges: Mapping[str, Interval], strict: bool = False) -> Interval | None:
    """Inclusive bounds of an integer expression when each loop variable ``v`` ranges over
    ``ranges[v]``, or None when they cannot be bounded.

    Affine expressions get exact bounds; ``//`` and ``%`` by constants, ``+ - *`` and unary minus
    combine bounds. Unless ``strict``, integer casts, ``min``/``max`` and ``where`` (the union of
    both branches) are also understood.
    """
    a = affine(e)
    if a is not None:
        lo = hi = a[1]
        for v, c in a[0].items():
            r = ranges.get(v)
            if r is None:
                return None
            lo += min(c * r[0], c * r[1])
            hi += max(c * r[0], c * r[1])
        return lo, hi
    if isinstance(e, A.Unary) and e.op == "-":
        r = interval(e.operand, ranges, strict)
        return None if r is None else (-r[1], -r[0])
    if isinstance(e, A.Binary):
        if e.op in ("+", "-", "*"):
            lr, rr = interval(e.lhs, ranges, strict), interval(e.rhs, ranges, strict)
            if lr is None or rr is None:
                return None
            if e.op == "+":
                return lr[0] + rr[0], lr[1] + rr[1]
            if e.op == "-":
                return lr[0] - rr[1], lr[1] - rr[0]
            corners = [x * y for x in lr for y in rr]
            return min(corners), max(corners)
        if e.op in ("//", "%"):
            c = affine(e.rhs)
            if c is None or c[0] or c[1] == 0:
                return None
            d = c[1]
            lr = interval(e.lhs, ranges, strict)
            if lr is None:
                return None
            if e.op == "//":
                q = (lr[0] // d, lr[1] // d)
                return min(q), max(q)
            if d < 0:
                return None
            if lr[0] // d == lr[1] // d:
                return lr[0] % d, lr[1] % d
            return 0, d - 1
        return None
    if strict:
        return None
    if isinstance(e, A.Call):
        if e.func in A.INT_DTYPES and len(e.args) == 1:
            return interval(e.args[0], ranges, strict)
        if e.func in ("max", "min") and len(e.args) == 2:
            lr, rr = interval(e.args[0], ranges, strict), interval(e.args[1], ranges, strict)
            if lr is None or rr is None:
                return None
            f = max if e.func == "max" else min
            return f(lr[0], rr[0]), f(lr[1], rr[1])
        if e.func == "where" and len(e.args) == 3:
            lr, rr = interval(e.args[1], ranges, strict), interval(e.args[2], ranges, strict)
            if lr is None or rr is None:
                return None
            return min(lr[0], rr[0]), max(lr[1], rr[1])
    return None


def _eval_np(e: A.Expr, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """Vectorised evaluation of a loop-variable-only expression (guards); raises on loads."""
    if isinstance(e, A.Const):
        return np.asarray(e.value)
    if isinstance(e, A.Var):
        return env[e.name]
    if isinstance(e, A.Unary):
        x = _eval_np(e.operand, env)
        return np.logical_not(x) if e.op == "not" else -x
    if isinstance(e, A.Binary):
        x, y = _eval_np(e.lhs, env), _eval_np(e.rhs, env)
        ops = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide,
               "//": np.floor_divide, "%": np.remainder, "**": np.power, "==": np.equal,
               "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
               ">=": np.greater_equal, "and": np.logical_and, "or": np.logical_or}
        return ops[e.op](x, y)
    if isinstance(e, A.Call):
        args = [_eval_np(a, env) for a in e.args]
        if e.func == "where":
            return np.where(*args)
        if e.func == "max":
            return np.maximum(*args)
        if e.func == "min":
            return np.minimum(*args)
        if e.func in A.INT_DTYPES or e.func == "bool":
            return args[0].astype(A.DTYPES[e.func])
    raise ValueError(f"cannot evaluate {type(e).__name__} statically")


# ============================================================================ statements
@dataclass(frozen=True)
class Domain:
    """The iteration domain of a statement: enclosing loops (outermost first) and guards."""

    loops: tuple[A.Loop, ...]
    guards: tuple[A.Expr, ...]

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(lp.var for lp in self.loops)

    @property
    def extents(self) -> dict[str, int]:
        return {lp.var: lp.extent for lp in self.loops}

    @property
    def ranges(self) -> dict[str, Interval]:
        """Inclusive range of each loop variable."""
        return {lp.var: (0, lp.extent - 1) for lp in self.loops}

    @property
    def size(self) -> int:
        """Number of loop iterations, ignoring guards."""
        return math.prod(lp.extent for lp in self.loops)

    @functools.cached_property
    def count(self) -> int:
        """Number of iterations whose guards all hold. Guards that read tensors, or domains over
        ten million points, are not evaluated: they count as always true (an upper bound)."""
        if not self.guards or self.size > 10_000_000:
            return self.size
        grids = np.meshgrid(*[np.arange(lp.extent, dtype=np.int64) for lp in self.loops],
                            indexing="ij") if self.loops else []
        env = {lp.var: g for lp, g in zip(self.loops, grids)}
        mask = np.ones([lp.extent for lp in self.loops], dtype=bool)
        try:
            with np.errstate(all="ignore"):
                for g in self.guards:
                    mask &= np.broadcast_to(np.asarray(_eval_np(g, env), dtype=bool), mask.shape)
        except (ValueError, KeyError, TypeError, ZeroDivisionError):
            return self.size
        return int(mask.sum())


@dataclass(frozen=True)
class StmtInfo:
    """One assignment with its location and context."""

    order: int                      # position in program order (0, 1, ...)
    path: Path                      # body indices from the program body down to the statement
    stmt: A.Assign
    loops: tuple[A.Loop, ...]       # enclosing loops, outermost first
    loop_paths: tuple[Path, ...]    # the path of each enclosing loop
    guards: tuple[A.Expr, ...]      # enclosing if-conditions, outermost first

    @property
    def domain(self) -> Domain:
        return Domain(self.loops, self.guards)

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(lp.var for lp in self.loops)

    @property
    def reduction_axes(self) -> tuple[str, ...]:
        """Enclosing loop variables absent from the left-hand subscripts (reductions only)."""
        if not self.stmt.is_reduction:
            return ()
        used = {v for sub in self.stmt.index for v in A.free_vars(sub)}
        return tuple(v for v in self.vars if v not in used)


@dataclass(frozen=True)
class LoopInfo:
    path: Path
    loop: A.Loop
    loops: tuple[A.Loop, ...]       # enclosing loops, outermost first (not including this one)
    guards: tuple[A.Expr, ...]

    @property
    def depth(self) -> int:
        return len(self.loops)


@dataclass(frozen=True)
class Access:
    """One tensor access of a statement. ``write`` accesses are the left-hand sides; a reduction
    also reads its left-hand side."""

    tensor: str
    index: tuple[A.Expr, ...]
    write: bool
    path: Path


@dataclass(frozen=True)
class Footprint:
    """What a statement or loop touches in one tensor."""

    tensor: str
    indices: tuple[tuple[A.Expr, ...], ...]   # distinct index tuples, first-appearance order
    box: tuple[Interval, ...]                 # inclusive per-dimension bounds, within the shape
    exact: bool                               # every subscript was bounded by interval arithmetic

    @property
    def volume(self) -> int:
        return math.prod(hi - lo + 1 for lo, hi in self.box)


@dataclass(frozen=True)
class Dependence:
    """``dst`` (later in program order) depends on ``src`` through ``tensor``.
    ``kind`` is RAW (src writes, dst reads), WAR (src reads, dst writes) or WAW."""

    src: Path
    dst: Path
    tensor: str
    kind: str


@dataclass(frozen=True)
class CarriedDependence:
    """Iterations of ``loop`` (variable ``var``) may touch the same element of ``tensor``: the
    write in statement ``src`` and the access in ``dst`` (a read for RAW, a write for WAW).
    ``reduction`` is set when this is a reduction's own accumulation over ``var``."""

    loop: Path
    var: str
    tensor: str
    src: Path
    dst: Path
    kind: str
    reduction: bool = False


def _walk_stmts(body, path, loops, loop_paths, guards) -> Iterator[tuple]:
    for n, s in enumerate(body):
        p = path + (n,)
        if isinstance(s, A.Assign):
            yield ("assign", p, s, loops, loop_paths, guards)
        elif isinstance(s, A.Loop):
            yield ("loop", p, s, loops, loop_paths, guards)
            yield from _walk_stmts(s.body, p, loops + (s,), loop_paths + (p,), guards)
        elif isinstance(s, A.If):
            yield ("if", p, s, loops, loop_paths, guards)
            yield from _walk_stmts(s.body, p, loops, loop_paths, guards + (s.cond,))
        else:
            raise TypeError(f"not a LEIR statement: {s!r}")


def _count_ops(e: A.Expr) -> int:
    """Arithmetic operations in a value expression (subscripts excluded; casts are free)."""
    if isinstance(e, (A.Const, A.Var, A.Load)):
        return 0
    if isinstance(e, A.Unary):
        return 1 + _count_ops(e.operand)
    if isinstance(e, A.Binary):
        return 1 + _count_ops(e.lhs) + _count_ops(e.rhs)
    if isinstance(e, A.Call):
        return (0 if e.func in A.DTYPES else 1) + sum(_count_ops(a) for a in e.args)
    raise TypeError(f"not a LEIR expression: {e!r}")


class Analysis:
    """All analyses of one program, computed lazily and cached. Build with ``Analysis(program)``."""

    def __init__(self, program: A.Program):
        self.program = program
        self.tensors = program.tensors
        self._statements: list[StmtInfo] = []
        self._loops: list[LoopInfo] = []
        self._nodes: dict[Path, A.Stmt] = {}
        for kind, p, s, loops, loop_paths, guards in _walk_stmts(program.body, (), (), (), ()):
            self._nodes[p] = s
            if kind == "assign":
                self._statements.append(StmtInfo(len(self._statements), p, s, loops, loop_paths,
                                                 guards))
            elif kind == "loop":
                self._loops.append(LoopInfo(p, s, loops, guards))
        self._by_path = {si.path: si for si in self._statements}
        self._loop_by_path = {li.path: li for li in self._loops}

    # ------------------------------------------------------------------ enumeration
    @property
    def statements(self) -> list[StmtInfo]:
        """Every assignment in program order, with path, enclosing loops and guards."""
        return list(self._statements)

    @property
    def loops(self) -> list[LoopInfo]:
        """Every loop in program (pre-)order."""
        return list(self._loops)

    def node(self, path: Path) -> A.Stmt:
        """The statement (Assign, Loop or If) at ``path``."""
        return self._nodes[tuple(path)]

    def statement(self, path: Path) -> StmtInfo:
        """The StmtInfo of the assignment at ``path``."""
        try:
            return self._by_path[tuple(path)]
        except KeyError:
            raise KeyError(f"no assignment at path {tuple(path)}") from None

    def loop(self, path: Path) -> LoopInfo:
        try:
            return self._loop_by_path[tuple(path)]
        except KeyError:
            raise KeyError(f"no loop at path {tuple(path)}") from None

    def statements_under(self, path: Path) -> list[StmtInfo]:
        """The assignments at or below ``path`` (``()`` is the whole program), in order."""
        path = tuple(path)
        return [si for si in self._statements if si.path[:len(path)] == path]

    def reduction_axes(self, path: Path) -> tuple[str, ...]:
        """Reduction axes of the assignment at ``path``: its enclosing loop variables absent from
        the left-hand subscripts (empty for stores)."""
        return self.statement(path).reduction_axes

    def domain(self, path: Path) -> Domain:
        """Iteration domain (loops, guards) of the assignment at ``path``."""
        return self.statement(path).domain

    # ------------------------------------------------------------------ accesses & footprints
    @functools.cached_property
    def _accesses(self) -> dict[Path, tuple[Access, ...]]:
        out: dict[Path, tuple[Access, ...]] = {}
        for si in self._statements:
            s = si.stmt
            acc: list[Access] = []
            for g in si.guards:
                acc.extend(Access(ld.tensor, ld.index, False, si.path) for ld in A.loads(g))
            for i in s.index:
                acc.extend(Access(ld.tensor, ld.index, False, si.path) for ld in A.loads(i))
            acc.extend(Access(ld.tensor, ld.index, False, si.path) for ld in A.loads(s.value))
            if s.is_reduction:
                acc.append(Access(s.tensor, s.index, False, si.path))
            acc.append(Access(s.tensor, s.index, True, si.path))
            out[si.path] = tuple(acc)
        return out

    def accesses(self, path: Path = ()) -> list[Access]:
        """Every access of the assignments at or below ``path``, in program order."""
        return [a for si in self.statements_under(path) for a in self._accesses[si.path]]

    def _footprints(self, path: Path, write: bool, pinned: tuple[str, ...] = ()) -> dict[str, Footprint]:
        groups: dict[str, list[tuple[tuple[A.Expr, ...], dict[str, Interval]]]] = {}
        for si in self.statements_under(path):
            ranges = si.domain.ranges
            for v in pinned:
                if v in ranges:
                    ranges[v] = (0, 0)
            for a in self._accesses[si.path]:
                if a.write == write:
                    groups.setdefault(a.tensor, []).append((a.index, ranges))
        out: dict[str, Footprint] = {}
        for t, items in groups.items():
            tensor = self.tensors.get(t)
            shape = tensor.shape if tensor is not None else ()
            indices: dict[tuple, None] = {}
            exact = True
            box: list[Interval] | None = None
            for index, ranges in items:
                indices.setdefault(index, None)
                dims = []
                for d, sub in enumerate(index):
                    size = shape[d] if d < len(shape) else 1
                    r = interval(sub, ranges)
                    if r is None:
                        exact = False
                        r = (0, size - 1)
                    dims.append((max(r[0], 0), min(r[1], size - 1)))
                box = dims if box is None else [(min(a[0], b[0]), max(a[1], b[1]))
                                                for a, b in zip(box, dims)]
            out[t] = Footprint(t, tuple(indices), tuple(box or ()), exact)
        return out

    def reads(self, path: Path = (), per_iteration: bool = False) -> dict[str, Footprint]:
        """Read footprints (tensor -> Footprint) of the assignment or loop at ``path``.

        By default the box covers every iteration of every enclosing loop. With ``per_iteration``
        the variables of loops *enclosing* ``path`` are held at 0, so the box is what one
        execution of the loop touches (for affine subscripts its size is the same at every outer
        iteration): the tile a compute-at or cache-read would need.
        """
        return self._footprints(tuple(path), False, self._outer_vars(path) if per_iteration else ())

    def writes(self, path: Path = (), per_iteration: bool = False) -> dict[str, Footprint]:
        """Write footprints of the assignment or loop at ``path`` (see :meth:`reads`)."""
        return self._footprints(tuple(path), True, self._outer_vars(path) if per_iteration else ())

    def _outer_vars(self, path: Path) -> tuple[str, ...]:
        path = tuple(path)
        if path in self._loop_by_path:
            return tuple(lp.var for lp in self._loop_by_path[path].loops)
        if path in self._by_path:
            return self._by_path[path].vars
        return ()

    # ------------------------------------------------------------------ dependences
    @functools.cached_property
    def dependences(self) -> list[Dependence]:
        """Dependences between distinct assignments, earlier -> later in program order, per
        tensor: RAW, WAR, WAW. Pairs whose exact bounding boxes are disjoint are left out."""
        deps: list[Dependence] = []
        foot = {si.path: (self._footprints(si.path, False), self._footprints(si.path, True))
                for si in self._statements}
        for s1, s2 in itertools.combinations(self._statements, 2):
            r1, w1 = foot[s1.path]
            r2, w2 = foot[s2.path]
            for kind, a, b in (("RAW", w1, r2), ("WAR", r1, w2), ("WAW", w1, w2)):
                for t, fa in a.items():
                    fb = b.get(t)
                    if fb is not None and _may_overlap(fa, fb):
                        deps.append(Dependence(s1.path, s2.path, t, kind))
        return deps

    @functools.cached_property
    def def_use(self) -> dict[Path, list[tuple[Path, str]]]:
        """Writer path -> [(reader path, tensor), ...]: the RAW edges, in program order."""
        out: dict[Path, list[tuple[Path, str]]] = {si.path: [] for si in self._statements}
        for d in self.dependences:
            if d.kind == "RAW":
                out[d.src].append((d.dst, d.tensor))
        return out

    def producers(self, path: Path) -> list[tuple[Path, str]]:
        """Earlier assignments whose writes the assignment at ``path`` reads."""
        path = tuple(path)
        return [(d.src, d.tensor) for d in self.dependences if d.kind == "RAW" and d.dst == path]

    def consumers(self, path: Path) -> list[tuple[Path, str]]:
        """Later assignments that read what the assignment at ``path`` writes."""
        return list(self.def_use[tuple(path)])

    def loop_carried(self, path: Path) -> list[CarriedDependence]:
        """Dependences carried by the loop at ``path`` (a conservative, sound test).

        For every write W and every access R (read or write, W itself included) of the same
        tensor in the loop body, the pair is *not* carried by the loop variable ``v`` only if some
        dimension has the same subscript in W and R, affine ``a*v + rest`` with ``|a|`` larger
        than the spread of ``rest`` over the loops nested inside (variables of enclosing loops
        are fixed across the loop's iterations). Then distinct iterations touch distinct
        elements. Everything else (gathers, scalars, shifted accesses such as a scan's
        ``C[i,j-1]``, a reduction's accumulator over its reduction axis) is carried, except
        through a ``local`` buffer private to each iteration (``leir.private``).
        """
        li = self.loop(path)
        v = li.loop.var
        depth = li.depth
        stmts = self.statements_under(li.path)
        private = private_to(self.program, tuple(li.path))
        acc = [(si, a) for si in stmts for a in self._accesses[si.path] if a.tensor not in private]
        out: list[CarriedDependence] = []
        seen: set[tuple] = set()
        for si_w, w in acc:
            if not w.write:
                continue
            for si_r, r in acc:
                if r.tensor != w.tensor:
                    continue
                if _independent(w.index, r.index, v, si_w.loops[depth + 1:], si_r.loops[depth + 1:]):
                    continue
                kind = "WAW" if r.write else "RAW"
                key = (w.tensor, si_w.path, si_r.path, kind)
                if key in seen:
                    continue
                seen.add(key)
                red = (si_w.path == si_r.path and si_w.stmt.is_reduction
                       and v in si_w.reduction_axes)
                out.append(CarriedDependence(li.path, v, w.tensor, si_w.path, si_r.path, kind, red))
        return out

    def carries_dependence(self, path: Path) -> bool:
        """Whether the loop at ``path`` carries any dependence."""
        return bool(self.loop_carried(path))

    def is_parallelizable(self, path: Path) -> bool:
        """Whether iterations of the loop at ``path`` are independent (no carried dependence)."""
        return not self.loop_carried(path)

    # ------------------------------------------------------------------ cost
    def statement_flops(self, path: Path) -> int:
        """Operations of one assignment over its domain: every operator, unary minus and
        intrinsic call in the value counts 1 (casts and subscript arithmetic are free), a
        reduction adds 1 for the update; times the number of iterations whose guards hold."""
        si = self.statement(path)
        ops = _count_ops(si.stmt.value) + (1 if si.stmt.is_reduction else 0)
        return ops * si.domain.count

    @functools.cached_property
    def flops(self) -> int:
        """Total operations (see :meth:`statement_flops`); a matmul counts 2*M*N*K."""
        return sum(self.statement_flops(si.path) for si in self._statements)

    @functools.cached_property
    def bytes_moved(self) -> int:
        """Compulsory traffic: size * itemsize of every input that is read plus every output
        that is written (intermediates are assumed to stay on chip)."""
        read: dict[str, None] = {}
        written: dict[str, None] = {}
        for si in self._statements:
            for a in self._accesses[si.path]:
                (written if a.write else read).setdefault(a.tensor, None)
        total = 0
        for t in self.program.inputs:
            if t.name in read:
                total += t.size * ITEMSIZE[t.dtype]
        for t in self.program.outputs:
            if t.name in written:
                total += t.size * ITEMSIZE[t.dtype]
        return total

    @property
    def arithmetic_intensity(self) -> float:
        """flops / bytes_moved (0.0 when nothing is moved)."""
        b = self.bytes_moved
        return self.flops / b if b else 0.0


def _may_overlap(a: Footprint, b: Footprint) -> bool:
    if not (a.exact and b.exact) or len(a.box) != len(b.box):
        return True
    return all(x[0] <= y[1] and y[0] <= x[1] for x, y in zip(a.box, b.box))


def _independent(wi: tuple[A.Expr, ...], ri: tuple[A.Expr, ...], v: str,
                 w_inner: tuple[A.Loop, ...], r_inner: tuple[A.Loop, ...]) -> bool:
    if len(wi) != len(ri):
        return False
    for ew, er in zip(wi, ri):
        if ew != er:
            continue
        aff = affine(ew)
        if aff is None:
            continue
        coef, _ = aff
        a = coef.get(v, 0)
        if not a:
            continue
        lo = hi = None
        for inner in (w_inner, r_inner):
            ext = {lp.var: lp.extent for lp in inner}
            slo = shi = 0
            for u, c in coef.items():
                if u == v:
                    continue
                if u in ext:
                    slo += min(0, c * (ext[u] - 1))
                    shi += max(0, c * (ext[u] - 1))
                # variables of enclosing loops are the same in both iterations: no spread
            lo = slo if lo is None else min(lo, slo)
            hi = shi if hi is None else max(hi, shi)
        if abs(a) > hi - lo:
            return True
    return False


# ============================================================================ module functions
@functools.lru_cache(maxsize=64)
def analyze(program: A.Program) -> Analysis:
    """A cached Analysis of ``program`` (programs are hashable values)."""
    return Analysis(program)


def statements(program: A.Program) -> list[StmtInfo]:
    """Every assignment in program order with path, enclosing loops and guards."""
    return analyze(program).statements


def reduction_axes(program: A.Program, path: Path) -> tuple[str, ...]:
    """Reduction axes of the assignment at ``path``."""
    return analyze(program).reduction_axes(path)


def domain(program: A.Program, path: Path) -> Domain:
    """Iteration domain of the assignment at ``path``."""
    return analyze(program).domain(path)


def reads(program: A.Program, path: Path = (), per_iteration: bool = False) -> dict[str, Footprint]:
    """Read footprints of the statement or loop at ``path`` (``()``: the whole program)."""
    return analyze(program).reads(path, per_iteration)


def writes(program: A.Program, path: Path = (), per_iteration: bool = False) -> dict[str, Footprint]:
    """Write footprints of the statement or loop at ``path`` (``()``: the whole program)."""
    return analyze(program).writes(path, per_iteration)


def dependences(program: A.Program) -> list[Dependence]:
    """RAW/WAR/WAW dependences between assignments, in program order."""
    return analyze(program).dependences


def def_use(program: A.Program) -> dict[Path, list[tuple[Path, str]]]:
    """Writer path -> [(reader path, tensor)]."""
    return analyze(program).def_use


def loop_carried(program: A.Program, path: Path) -> list[CarriedDependence]:
    """Dependences carried by the loop at ``path``."""
    return analyze(program).loop_carried(path)


def flops(program: A.Program) -> int:
    """Arithmetic operations of the whole program (matmul: 2*M*N*K)."""
    return analyze(program).flops


def bytes_moved(program: A.Program) -> int:
    """Compulsory bytes: inputs read plus outputs written."""
    return analyze(program).bytes_moved


def arithmetic_intensity(program: A.Program) -> float:
    """flops / bytes_moved."""
    return analyze(program).arithmetic_intensity
