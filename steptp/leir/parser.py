"""Text -> AST. The grammar lives in ``leir.lark``; this module only builds nodes from the tree.

LEIR text may come from a language model, so it is only ever parsed, never evaluated, and every
failure is a ``LeirSyntaxError`` naming the line, the column and what was expected.
"""

from __future__ import annotations

import functools
from importlib import resources

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import Indenter

from . import ast as A


class LeirSyntaxError(ValueError):
    """A LEIR text that does not parse. ``line``/``column`` are 1-based."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 source: str | None = None):
        self.line, self.column, self.detail = line, column, message
        where = f"line {line}, column {column}: " if line is not None else ""
        snippet = ""
        if source is not None and line is not None:
            lines = source.splitlines()
            if 0 < line <= len(lines):
                snippet = f"\n    {lines[line - 1]}\n    {' ' * max(column - 1, 0)}^"
        super().__init__(f"{where}{message}{snippet}")


class _Indenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 4


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = resources.files(__package__).joinpath("leir.lark").read_text()
    return Lark(grammar, parser="lalr", postlex=_Indenter(), propagate_positions=True,
                maybe_placeholders=True)


def _p(meta_or_tok) -> A.Pos | None:
    line = getattr(meta_or_tok, "line", None)
    if line is None:
        return None
    return A.Pos(line, meta_or_tok.column)


_TOKEN_NAMES = {
    "_NL": "end of line", "_INDENT": "an indented block", "_DEDENT": "end of block",
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "DTYPE": "a dtype (f32, i64, ...)",
    "KIND": "a loop kind (parallel, vectorized, unrolled, blockIdx.x, threadIdx.x, ...)",
    "SCOPE": "a storage scope (global, shared, local)", "ASSIGN_OP": "=, +=, *=, max= or min=",
    "COMP_OP": "a comparison", "ADD_OP": "+ or -", "MUL_OP": "*, /, // or %",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "COMMA": "','", "COLON": "':'",
    "RARROW": "'->'", "MINUS": "'-'", "POW": "'**'", "$END": "end of input",
}


def _describe_expected(expected) -> str:
    names = sorted({_TOKEN_NAMES.get(e, repr(e.lower()) if e.isupper() else e) for e in expected})
    if len(names) > 6:
        names = names[:6] + ["..."]
    return ", ".join(names)


class _Build(Transformer):
    """Lark tree -> AST. Bare names are resolved against declared tensors after the fact."""

    def start(self, items):
        return items[-1]

    def kernel(self, items):
        name, inputs, outputs, *rest = items
        inter = tuple(x for x in rest if isinstance(x, A.Tensor))
        body = tuple(x for x in rest if not isinstance(x, A.Tensor))
        tensors = frozenset(t.name for t in inputs + outputs + inter)
        return A.Program(str(name), inputs, outputs, inter, _resolve_names(body, tensors))

    def inputs(self, items):
        return tuple(x for x in items if x is not None)

    def outputs(self, items):
        return tuple(items)

    def param(self, items):
        name, (dtype, shape) = items
        return A.Tensor(str(name), dtype, shape, "global", _p(name))

    def type(self, items):
        dtype = str(items[0])
        shape = items[1] if len(items) > 1 and items[1] is not None else ()
        return dtype, shape

    def shape(self, items):
        return tuple(int(t) for t in items if t is not None)

    def decl(self, items):
        name, (dtype, shape), scope = items
        return A.Tensor(str(name), dtype, shape, str(scope) if scope is not None else "global",
                        _p(name))

    @v_args(meta=True)
    def for_stmt(self, meta, items):
        heads = [x for x in items if isinstance(x, tuple) and len(x) == 4 and x[0] == "head"]
        body = tuple(x for x in items if not (isinstance(x, tuple) and x and x[0] == "head"))
        for _, var, extent, kind, pos in [(h[0], h[1], h[2], h[3][0], h[3][1]) for h in reversed(heads)]:
            body = (A.Loop(var, extent, kind, body, pos),)
        return body[0]

    def loop_head(self, items):
        name, extent, kind = items
        return ("head", str(name), int(extent), (str(kind) if kind is not None else "serial", _p(name)))

    @v_args(meta=True)
    def if_stmt(self, meta, items):
        return A.If(items[0], tuple(items[1:]), _p(meta))

    def assign(self, items):
        name, index, op, value = items
        return A.Assign(str(name), index if index is not None else (), str(op), value, _p(name))

    def index(self, items):
        return tuple(x for x in items if x is not None)

    # expressions
    @v_args(meta=True)
    def or_op(self, meta, items):
        return A.Binary("or", items[0], items[1], _p(meta))

    @v_args(meta=True)
    def and_op(self, meta, items):
        return A.Binary("and", items[0], items[1], _p(meta))

    @v_args(meta=True)
    def not_op(self, meta, items):
        return A.Unary("not", items[0], _p(meta))

    @v_args(meta=True)
    def compare(self, meta, items):
        return A.Binary(str(items[1]), items[0], items[2], _p(meta))

    @v_args(meta=True)
    def binop(self, meta, items):
        return A.Binary(str(items[1]), items[0], items[2], _p(meta))

    @v_args(meta=True)
    def pow_op(self, meta, items):
        return A.Binary("**", items[0], items[2], _p(meta))

    @v_args(meta=True)
    def neg(self, meta, items):
        x = items[0]
        # A negative literal is one constant, so that printing -1.0 and parsing it round-trips.
        if isinstance(x, A.Const) and x.kind in ("int", "float"):
            return A.Const(-x.value, x.kind, _p(meta))
        return A.Unary("-", x, _p(meta))

    def int_lit(self, items):
        return A.Const(int(items[0]), "int", _p(items[0]))

    def float_lit(self, items):
        return A.Const(float(items[0]), "float", _p(items[0]))

    @v_args(meta=True)
    def inf_lit(self, meta, items):
        return A.Const(float("inf"), "float", _p(meta))

    @v_args(meta=True)
    def true_lit(self, meta, items):
        return A.Const(True, "bool", _p(meta))

    @v_args(meta=True)
    def false_lit(self, meta, items):
        return A.Const(False, "bool", _p(meta))

    def call(self, items):
        name = items[0]
        return A.Call(str(name), tuple(x for x in items[1:] if x is not None), _p(name))

    def load(self, items):
        name = items[0]
        return A.Load(str(name), tuple(x for x in items[1:] if x is not None), _p(name))

    def name(self, items):
        return A.Var(str(items[0]), _p(items[0]))


def _resolve_names(node, tensors: frozenset[str]):
    """Bare names of declared tensors are scalar loads; every other bare name is a loop var."""
    if isinstance(node, tuple):
        return tuple(_resolve_names(x, tensors) for x in node)
    if isinstance(node, A.Var):
        return A.Load(node.name, (), node.pos) if node.name in tensors else node
    if isinstance(node, A.Const):
        return node
    if isinstance(node, A.Load):
        return A.Load(node.tensor, _resolve_names(node.index, tensors), node.pos)
    if isinstance(node, A.Unary):
        return A.Unary(node.op, _resolve_names(node.operand, tensors), node.pos)
    if isinstance(node, A.Binary):
        return A.Binary(node.op, _resolve_names(node.lhs, tensors), _resolve_names(node.rhs, tensors), node.pos)
    if isinstance(node, A.Call):
        return A.Call(node.func, _resolve_names(node.args, tensors), node.pos)
    if isinstance(node, A.Assign):
        return A.Assign(node.tensor, _resolve_names(node.index, tensors), node.op,
                        _resolve_names(node.value, tensors), node.pos)
    if isinstance(node, A.Loop):
        return A.Loop(node.var, node.extent, node.kind, _resolve_names(node.body, tensors), node.pos)
    if isinstance(node, A.If):
        return A.If(_resolve_names(node.cond, tensors), _resolve_names(node.body, tensors), node.pos)
    raise TypeError(node)  # pragma: no cover


def parse(text: str) -> A.Program:
    """Parse LEIR text into a ``Program``. Raises ``LeirSyntaxError`` on any syntax error.

    Parsing checks syntax only; run ``steptp.leir.check`` for names, shapes and dtypes.
    """
    if not isinstance(text, str):
        raise TypeError(f"LEIR text must be str, not {type(text).__name__}")
    src = text if text.endswith("\n") else text + "\n"
    try:
        tree = _lark().parse(src)
    except UnexpectedCharacters as e:
        raise LeirSyntaxError(f"unexpected character {src[e.pos_in_stream]!r}; expected "
                              f"{_describe_expected(e.allowed or [])}", e.line, e.column, src) from None
    except UnexpectedToken as e:
        tok = e.token
        what = "end of input" if tok.type == "$END" else (
            "end of line" if tok.type == "_NL" else
            "an indented block" if tok.type == "_INDENT" else
            "end of block" if tok.type == "_DEDENT" else repr(str(tok)))
        line = tok.line if tok.line is not None and tok.line > 0 else src.count("\n")
        column = tok.column if tok.column is not None and tok.column > 0 else 1
        raise LeirSyntaxError(f"unexpected {what}; expected {_describe_expected(e.expected)}",
                              line, column, src) from None
    except UnexpectedEOF as e:
        raise LeirSyntaxError(f"unexpected end of input; expected {_describe_expected(e.expected)}",
                              src.count("\n"), 1, src) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark errors
        raise LeirSyntaxError(str(e).splitlines()[0], getattr(e, "line", None),
                              getattr(e, "column", None), src) from None
    except Exception as e:  # the indenter raises plain errors on inconsistent dedent
        raise LeirSyntaxError(f"inconsistent indentation ({e})", None, None) from None
    return _Build().transform(tree)
