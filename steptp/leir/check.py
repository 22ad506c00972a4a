"""Static checks of a parsed LEIR program: names, shapes, ranks, index ranges, write permissions,
types and initialisation order. ``check`` reports every problem it finds, each with its line and
column, in one ``LeirCheckError``. The type rules themselves live in ``types.py``.

What is checked:

* declarations: no duplicate tensor names, known dtypes and scopes, positive dimensions;
* loops: extent >= 1, a known kind, a variable that neither shadows an enclosing loop variable nor
  has the name of a tensor, a non-empty body;
* names: every tensor is declared, every bare name is a tensor or an enclosing loop variable;
* accesses: the number of subscripts equals the tensor's rank; subscripts are integers; constant
  subscripts are in range, and so are subscripts whose range interval arithmetic over the loop
  extents can bound (affine, ``//``, ``%``) unless they sit under an ``if`` guard or in a branch
  of ``where`` (both evaluated only when their condition holds);
* writes go to outputs and intermediates, never inputs; a reduction's target subscripts read no
  tensor, and its target is not boolean;
* types (``types.expr_dtype``): every value, and its agreement with the stored tensor's dtype;
  ``if`` conditions are boolean;
* order: an intermediate is not read before the first statement (in program order) that writes it,
  and every output is written somewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from . import ast as A
from ..lru import LRU
from .analysis import affine, interval
from .printer import format_expr
from .types import LeirTypeError, _name, expr_dtype, is_int, unify


@dataclass(frozen=True)
class Problem:
    """One problem found by ``check``; ``pos`` may be None for hand-built ASTs."""

    pos: A.Pos | None
    message: str

    @property
    def line(self) -> int | None:
        return self.pos.line if self.pos else None

    @property
    def column(self) -> int | None:
        return self.pos.column if self.pos else None

    def __str__(self) -> str:
        return f"{self.pos}: {self.message}" if self.pos else self.message


class LeirCheckError(ValueError):
    """A program that fails ``check``; ``problems`` lists every problem found, in text order."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def problems(program: A.Program) -> list[Problem]:
    """Every problem of ``program`` (empty when it is valid), sorted by position."""
    c = _Checker(program)
    c.run()
    seen: dict[tuple, Problem] = {}
    for p in c.problems:
        seen.setdefault((p.pos.line if p.pos else None, p.pos.column if p.pos else None,
                         p.message), p)
    return sorted(seen.values(), key=lambda p: (p.pos is None, p.line or 0, p.column or 0))


def check(program: A.Program) -> None:
    """Raise ``LeirCheckError`` listing every problem of ``program``; return None if it is valid."""
    found = problems(program)
    if found:
        raise LeirCheckError(found)


#: The problems of a top-level statement and what it leaves written, keyed on the statement
#: object (held, so its ``id`` cannot be reused while the entry lives), the declarations and
#: what the statements before it wrote (and reported unwritten): everything its checks read.
#: The search checks hundreds of candidates of one state, each rewriting one nest and sharing
#: every other top-level statement object with the state. Bounded; the answer never depends
#: on it.
_STMTS: "LRU[tuple]" = LRU(4096)


class _Checker:
    def __init__(self, program: A.Program):
        self.p = program
        self.problems: list[Problem] = []
        self.tensors: dict[str, A.Tensor] = {}
        self.inputs = {t.name for t in program.inputs}
        self.intermediates = {t.name for t in program.intermediates}
        self.written: dict[str, None] = {}
        self.reported_uninit: dict[str, None] = {}

    def add(self, pos: A.Pos | None, message: str) -> None:
        self.problems.append(Problem(pos, message))

    # ------------------------------------------------------------------ declarations
    def run(self) -> None:
        p = self.p
        if not p.outputs:
            self.add(None, f"kernel {p.name!r} has no outputs")
        for role, group in (("input", p.inputs), ("output", p.outputs),
                            ("intermediate", p.intermediates)):
            for t in group:
                self.declaration(t, role)
        if not p.body:
            self.add(None, f"kernel {p.name!r} has no statements")
        decls = (p.inputs, p.outputs, p.intermediates)
        for s in p.body:
            key = (id(s), decls, tuple(self.written), tuple(self.reported_uninit))
            hit = _STMTS.get(key)
            if hit is None or hit[0] is not s:
                n0 = len(self.problems)
                self.stmt(s, {}, False)
                hit = _STMTS.put(key, (s, tuple(self.problems[n0:]), tuple(self.written),
                                       tuple(self.reported_uninit)))
            else:
                self.problems.extend(hit[1])
                self.written = dict.fromkeys(hit[2])
                self.reported_uninit = dict.fromkeys(hit[3])
        for t in p.outputs:
            if t.name not in self.written:
                self.add(t.pos, f"output {t.name!r} is never written")

    def declaration(self, t: A.Tensor, role: str) -> None:
        first = self.tensors.get(t.name)
        if first is not None:
            where = f" (first declared at {first.pos})" if first.pos else ""
            self.add(t.pos, f"tensor {t.name!r} is declared twice{where}")
        else:
            self.tensors[t.name] = t
        if t.dtype not in A.DTYPES:
            self.add(t.pos, f"tensor {t.name!r} has unknown dtype {t.dtype!r}; "
                            f"known: {', '.join(A.DTYPES)}")
        for d, n in enumerate(t.shape):
            if not isinstance(n, int) or n < 1:
                self.add(t.pos, f"dimension {d} of {t.name} must be a positive integer, got {n}")
        if role == "intermediate":
            if t.scope not in A.SCOPES:
                self.add(t.pos, f"intermediate {t.name!r} has unknown scope {t.scope!r}; "
                                f"known: {', '.join(A.SCOPES)}")
        elif t.scope != "global":
            self.add(t.pos, f"{role} {t.name!r} must be in global scope, not {t.scope!r}")

    # ------------------------------------------------------------------ statements
    def body(self, stmts, scope: dict[str, A.Loop], guarded: bool) -> None:
        for s in stmts:
            self.stmt(s, scope, guarded)

    def stmt(self, s: A.Stmt, scope: dict[str, A.Loop], guarded: bool) -> None:
        if isinstance(s, A.Loop):
            self.loop(s, scope, guarded)
        elif isinstance(s, A.If):
            self.expr(s.cond, scope, guarded)
            t = self.dtype(s.cond)
            if t is not None and t != "bool":
                self.add(s.pos, f"if condition must be boolean, got {_name(t)}")
            if not s.body:
                self.add(s.pos, "if statement has an empty body")
            self.body(s.body, scope, True)
        elif isinstance(s, A.Assign):
            self.assign(s, scope, guarded)
        else:
            self.add(None, f"not a LEIR statement: {type(s).__name__}")

    def loop(self, s: A.Loop, scope: dict[str, A.Loop], guarded: bool) -> None:
        if s.var in self.tensors:
            self.add(s.pos, f"loop variable {s.var!r} has the name of a tensor")
        outer = scope.get(s.var)
        if outer is not None:
            where = f" (at {outer.pos})" if outer.pos else ""
            self.add(s.pos, f"loop variable {s.var!r} shadows the enclosing loop variable "
                            f"{s.var!r}{where}")
        if not isinstance(s.extent, int) or s.extent < 1:
            self.add(s.pos, f"loop {s.var!r} has extent {s.extent}; extents must be >= 1")
        if s.kind not in A.LOOP_KINDS:
            self.add(s.pos, f"loop {s.var!r} has unknown kind {s.kind!r}; "
                            f"known: {', '.join(A.LOOP_KINDS)}")
        if not s.body:
            self.add(s.pos, f"loop {s.var!r} has an empty body")
        inner = dict(scope)
        if outer is None:
            inner[s.var] = s
        self.body(s.body, inner, guarded)

    def assign(self, s: A.Assign, scope: dict[str, A.Loop], guarded: bool) -> None:
        t = self.tensors.get(s.tensor)
        if s.op not in A.ASSIGN_OPS:
            self.add(s.pos, f"unknown assignment operator {s.op!r}; known: {', '.join(A.ASSIGN_OPS)}")
        if t is None:
            self.add(s.pos, f"tensor {s.tensor!r} is not declared")
        else:
            if s.tensor in self.inputs:
                self.add(s.pos, f"write to input tensor {s.tensor!r}; inputs are read-only")
            self.subscripts(s.tensor, s.index, s.pos, scope, guarded)
        if s.is_reduction:
            for sub in s.index:
                ld = next(A.loads(sub), None)
                if ld is not None:
                    self.add(ld.pos or s.pos,
                             f"the subscripts of reduction target {s.tensor!r} must not read "
                             f"tensors (found a read of {ld.tensor!r})")
            if t is not None and t.dtype == "bool":
                self.add(s.pos, f"reduction '{s.op}' on boolean tensor {s.tensor!r}")
            # the reduction initialises its target before the update reads it
            self.written.setdefault(s.tensor, None)
        self.expr(s.value, scope, guarded)
        vt = self.dtype(s.value)
        if t is not None and vt is not None and t.dtype in A.DTYPES:
            try:
                unify(vt, t.dtype)
            except LeirTypeError:
                self.add(s.value.pos or s.pos,
                         f"{s.tensor} has dtype {t.dtype} but the value has type {_name(vt)}; "
                         f"LEIR has no implicit conversion, add a cast {t.dtype}(...)")
        self.written.setdefault(s.tensor, None)

    # ------------------------------------------------------------------ expressions
    def dtype(self, e: A.Expr) -> str | None:
        try:
            return expr_dtype(e, self.tensors)
        except LeirTypeError as err:
            self.add(err.pos, err.detail)
            return None

    def expr(self, e: A.Expr, scope: dict[str, A.Loop], guarded: bool) -> None:
        """Name, rank, range and initialisation checks of every node of ``e``."""
        if isinstance(e, A.Var):
            if e.name not in scope:
                self.add(e.pos, f"name {e.name!r} is not defined: it is neither a tensor nor an "
                                f"enclosing loop variable")
        elif isinstance(e, A.Load):
            if e.tensor not in self.tensors:
                self.add(e.pos, f"tensor {e.tensor!r} is not declared")
                for sub in e.index:
                    self.expr(sub, scope, guarded)
                return
            if e.tensor in self.intermediates and e.tensor not in self.written \
                    and e.tensor not in self.reported_uninit:
                self.reported_uninit[e.tensor] = None
                self.add(e.pos, f"intermediate {e.tensor!r} is read before it is written")
            self.subscripts(e.tensor, e.index, e.pos, scope, guarded)
        elif isinstance(e, A.Unary):
            if e.op not in A.UNARY_OPS:
                self.add(e.pos, f"unknown unary operator {e.op!r}")
            self.expr(e.operand, scope, guarded)
        elif isinstance(e, A.Binary):
            if e.op not in A.BINARY_OPS:
                self.add(e.pos, f"unknown operator {e.op!r}")
            self.expr(e.lhs, scope, guarded)
            self.expr(e.rhs, scope, guarded)
        elif isinstance(e, A.Call):
            for n, a in enumerate(e.args):
                # where() evaluates only the chosen branch (it lowers to if_then_else), so its
                # branches are guarded like the body of an ``if``: e.g. padding's
                # where(k >= 1, X[k-1], 0.0)
                self.expr(a, scope, guarded or (e.func == "where" and n > 0))
        elif not isinstance(e, A.Const):
            self.add(None, f"not a LEIR expression: {type(e).__name__}")

    def subscripts(self, name: str, index: tuple[A.Expr, ...], pos: A.Pos | None,
                   scope: dict[str, A.Loop], guarded: bool) -> None:
        t = self.tensors[name]
        if len(index) != len(t.shape):
            self.add(pos, f"{name} has rank {len(t.shape)} but is indexed with {len(index)} "
                          f"subscript{'s' * (len(index) != 1)}")
        ranges = {v: (0, lp.extent - 1) for v, lp in scope.items()
                  if isinstance(lp.extent, int) and lp.extent >= 1}
        for d, sub in enumerate(index):
            self.expr(sub, scope, guarded)
            st = self.dtype(sub)
            if st is not None and not is_int(st):
                self.add(sub.pos or pos, f"subscript {d} of {name} must be an integer, "
                                         f"got {_name(st)}")
                continue
            if d >= len(t.shape) or not isinstance(t.shape[d], int) or t.shape[d] < 1:
                continue
            size = t.shape[d]
            aff = affine(sub)
            if aff is not None and not aff[0]:
                c = aff[1]
                if c < 0 or c >= size:
                    self.add(sub.pos or pos, f"subscript {c} out of range for dimension {d} of "
                                             f"{name} (size {size})")
                continue
            if guarded:
                continue
            r = interval(sub, ranges, strict=True)
            if r is not None and (r[0] < 0 or r[1] >= size):
                self.add(sub.pos or pos,
                         f"subscript {format_expr(sub, compact=True)} ranges over [{r[0]}, {r[1]}], "
                         f"out of range for dimension {d} of {name} (size {size})")
