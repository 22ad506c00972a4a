"""The LEIR abstract syntax tree.

Every node is a frozen dataclass holding tuples, so programs are hashable, compare by value
(``parse(print(p)) == p``) and can never be mutated by a rewrite that forgot to copy.
Source positions are kept out of equality (``compare=False``) so that a reprinted program
equals its parse.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Iterator, Union

# LEIR dtype name -> TVM/NumPy dtype name. The short names are what the text uses.
DTYPES: dict[str, str] = {
    "bool": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
}
DTYPE_FROM_TVM: dict[str, str] = {v: k for k, v in DTYPES.items()}
FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})
INT_DTYPES = frozenset({"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"})

# Storage scopes an intermediate may live in. "global" is the default and is not printed.
SCOPES = ("global", "shared", "local")

# Loop kinds. Thread bindings are only legal for GPU targets.
THREAD_KINDS = (
    "blockIdx.x", "blockIdx.y", "blockIdx.z",
    "threadIdx.x", "threadIdx.y", "threadIdx.z",
)
#: the grid's axes, and a block's thread axes outermost first (x varies fastest)
BLOCK_KINDS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_AXES = ("threadIdx.z", "threadIdx.y", "threadIdx.x")
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled") + THREAD_KINDS
#: loop kinds whose iterations run at once, with nothing ordering one before another
CONCURRENT_KINDS = ("parallel",) + THREAD_KINDS

# Assignment operators: "=" is a store; the others are reductions over the enclosing loop
# variables absent from the left-hand side, initialised with the identity below.
ASSIGN_OPS = ("=", "+=", "*=", "max=", "min=")
REDUCE_OPS = ("+=", "*=", "max=", "min=")

BINARY_OPS = ("+", "-", "*", "/", "//", "%", "**",
              "==", "!=", "<", "<=", ">", ">=", "and", "or")
UNARY_OPS = ("-", "not")

# Intrinsic functions and their arity. Casts are spelled as calls to a dtype name, e.g. f32(x).
INTRINSICS: dict[str, int] = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "sigmoid": 1, "erf": 1,
    "abs": 1, "floor": 1, "ceil": 1, "round": 1, "sin": 1, "cos": 1, "log2": 1, "exp2": 1,
    "log1p": 1, "isnan": 1,
    "pow": 2, "max": 2, "min": 2,
    "where": 3,
}


@dataclass(frozen=True)
class Pos:
    line: int
    column: int

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}"


def _pos() -> Pos | None:
    return field(default=None, compare=False, repr=False, hash=False)  # type: ignore[return-value]


# ----------------------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Const:
    """A literal. ``kind`` is "int", "float" or "bool"; floats may be inf/-inf."""

    value: int | float | bool
    kind: str
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Var:
    """A loop variable."""

    name: str
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Load:
    """A tensor read ``X[i, j]``; a scalar tensor has an empty index."""

    tensor: str
    index: tuple["Expr", ...]
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Unary:
    op: str
    operand: "Expr"
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: "Expr"
    rhs: "Expr"
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Call:
    """An intrinsic (``exp``, ``where``, ...) or a cast (``f32(x)``)."""

    func: str
    args: tuple["Expr", ...]
    pos: Pos | None = _pos()


Expr = Union[Const, Var, Load, Unary, Binary, Call]


# ----------------------------------------------------------------------------- statements
@dataclass(frozen=True)
class Assign:
    """``X[idx] op value`` with op one of ASSIGN_OPS."""

    tensor: str
    index: tuple[Expr, ...]
    op: str
    value: Expr
    pos: Pos | None = _pos()

    @property
    def is_reduction(self) -> bool:
        return self.op in REDUCE_OPS


@dataclass(frozen=True)
class Loop:
    """``for var in extent [kind]:`` — the variable runs over 0..extent-1."""

    var: str
    extent: int
    kind: str
    body: tuple["Stmt", ...]
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class If:
    """``if cond:`` guard, e.g. the tail of a split whose factor does not divide the extent."""

    cond: Expr
    body: tuple["Stmt", ...]
    pos: Pos | None = _pos()


Stmt = Union[Assign, Loop, If]


# ----------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class Tensor:
    """A declared tensor: a kernel argument or an intermediate buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: str = "global"
    pos: Pos | None = _pos()

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def tvm_dtype(self) -> str:
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class Program:
    """A LEIR kernel: signature (inputs, outputs), intermediates, and a statement list."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    intermediates: tuple[Tensor, ...]
    body: tuple[Stmt, ...]

    @property
    def params(self) -> tuple[Tensor, ...]:
        """Kernel arguments in calling order: inputs then outputs."""
        return self.inputs + self.outputs

    @property
    def tensors(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.inputs + self.outputs + self.intermediates}

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]


Node = Union[Expr, Stmt, Tensor, Program]


# ----------------------------------------------------------------------------- helpers
#: Field names per node class (``dataclasses.fields`` on every visit dominated tree walks).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


_IN_TUPLE = (Const, Var, Load, Unary, Binary, Call, Assign, Loop, If, Tensor)
_ALONE = (Const, Var, Load, Unary, Binary, Call, Assign, Loop, If)


def _kids(node: object) -> list[object]:
    if isinstance(node, tuple):
        return list(node)
    names = _FIELD_NAMES.get(type(node))
    if names is None:
        names = tuple(f.name for f in fields(node) if f.name != "pos")  # type: ignore[arg-type]
        _FIELD_NAMES[type(node)] = names
    out: list[object] = []
    for name in names:
        v = getattr(node, name)
        if isinstance(v, tuple):
            out.extend(x for x in v if isinstance(x, _IN_TUPLE))
        elif isinstance(v, _ALONE):
            out.append(v)
    return out


def children(node: object) -> Iterator[object]:
    """Direct AST children of a node (expressions and statements), in field order. A tuple of
    nodes (a body, an index) yields its elements."""
    yield from _kids(node)


def iter_stmts(body: tuple["Stmt", ...] | list, path: tuple[int, ...] = ()
               ) -> Iterator[tuple[tuple[int, ...], "Stmt"]]:
    """Pre-order (path, statement) pairs of a statement list; a path indexes the bodies from
    the program's down (``(1, 0)``: the first statement inside the second top-level one)."""
    for k, s in enumerate(body):
        p = path + (k,)
        yield p, s
        if isinstance(s, (Loop, If)):
            yield from iter_stmts(s.body, p)


def node_at(program: "Program", path) -> "Stmt | None":
    """The statement at ``path`` (as ``iter_stmts`` numbers them), or None when the path does
    not resolve."""
    body: tuple = program.body
    node = None
    for k in path:
        if not isinstance(k, int) or k < 0 or k >= len(body):
            return None
        node = body[k]
        body = node.body if isinstance(node, (Loop, If)) else ()
    return node


def walk(node: object) -> Iterator[object]:
    """Pre-order traversal of a node and everything under it."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        kids = _kids(n)
        kids.reverse()
        stack.extend(kids)


def strip_pos(node):
    """A copy of the tree with every source position removed (positions never affect equality,
    but stripped trees print smaller reprs and pickle smaller)."""
    if isinstance(node, tuple):
        return tuple(strip_pos(x) for x in node)
    if not hasattr(node, "__dataclass_fields__"):
        return node
    changes = {}
    for f in fields(node):
        v = getattr(node, f.name)
        if f.name == "pos":
            if v is not None:
                changes["pos"] = None
        elif isinstance(v, tuple) or hasattr(v, "__dataclass_fields__"):
            nv = strip_pos(v)
            if nv is not v:
                changes[f.name] = nv
    return replace(node, **changes) if changes else node


def loads(node: object) -> Iterator[Load]:
    for n in walk(node):
        if isinstance(n, Load):
            yield n


def free_vars(expr: object) -> list[str]:
    """Loop variables an expression mentions, in first-appearance order (deterministic)."""
    seen: dict[str, None] = {}
    for n in walk(expr):
        if isinstance(n, Var):
            seen.setdefault(n.name, None)
    return list(seen)


def const(value: int | float | bool) -> Const:
    if isinstance(value, bool):
        return Const(value, "bool")
    if isinstance(value, int):
        return Const(value, "int")
    return Const(float(value), "float")
