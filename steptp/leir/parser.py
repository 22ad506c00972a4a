"""Text -> AST. The grammar lives in ``leir.lark``; this module only builds nodes from the tree.

LEIR text may come from a language model, so it is only ever parsed, never evaluated, and every
failure is a ``LeirSyntaxError`` naming the line, the column and what was expected.

It is also bounded before anything walks it: at most ``MAX_BYTES`` of UTF-8 and ``MAX_DEPTH``
levels of nesting (``parse``'s ``max_bytes``/``max_depth``). Brackets and runs of unary
operators are counted by a scan of the text before the LALR parse (which takes about 10 us a
byte, and far longer and hundreds of MB on thousands of nested parentheses); the parse tree's
depth is measured without recursion after it, and the tree becomes the AST without recursion.
What walks the AST afterwards (the checker, printer, lowering, analyses) recurses a few frames
per level, so ``parse`` raises the process's recursion limit (never lowers it) to what a
program of ``max_depth`` levels needs: a 601-term sum is 601 levels deep and is accepted.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from importlib import resources

from lark import Lark, v_args
from lark.exceptions import (UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken,
                             VisitError)
from lark.indenter import DedentError, Indenter
from lark.visitors import Transformer_NonRecursive

from . import ast as A

#: The largest LEIR text ``parse`` reads, in bytes of UTF-8 (the largest bundled example is a
#: few KB; a model's reply is far below).
MAX_BYTES = 1 << 20
#: The deepest nesting ``parse`` accepts: loops and ifs in loops, expressions in expressions
#: (each bracket, unary operator and operand of a chain of binary operators is a level).
MAX_DEPTH = 1000
#: Python frames the AST's recursive walkers use per level of nesting, with a margin.
_FRAMES_PER_LEVEL = 8


class LeirSyntaxError(ValueError):
    """A LEIR text that does not parse. ``line``/``column`` are 1-based."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 source: str | None = None):
        self.line, self.column, self.detail = line, column, message
        where = f"line {line}, column {column}: " if line is not None else ""
        snippet = ""
        if source is not None and line is not None and column is not None:
            text = _source_line(source, line)
            if text is not None:
                # a line of a hostile text may be megabytes long: show a window of it
                start = max(0, column - 1 - 60)
                cut = text[start:start + 120]
                snippet = (f"\n    {'...' if start else ''}{cut}{'...' if start + 120 < len(text) else ''}"
                           f"\n    {' ' * (max(column - 1 - start, 0) + (3 if start else 0))}^")
        super().__init__(f"{where}{message}{snippet}")


def _source_line(source: str, line: int) -> str | None:
    """Line ``line`` (1-based) of ``source``, found without splitting the whole text."""
    pos = 0
    for _ in range(line - 1):
        pos = source.find("\n", pos) + 1
        if pos == 0:
            return None
    end = source.find("\n", pos)
    return source[pos:] if end < 0 else source[pos:end]


def _position(src: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of character ``offset`` of ``src``."""
    line = src.count("\n", 0, offset) + 1
    return line, offset - (src.rfind("\n", 0, offset) + 1) + 1


def decode(data: bytes) -> str:
    """LEIR text from bytes (UTF-8, a byte-order mark allowed); bytes that are not UTF-8 are a
    ``LeirSyntaxError`` naming the first bad byte's line and column (in bytes)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        k = e.start
        line = data.count(b"\n", 0, k) + 1
        column = k - (data.rfind(b"\n", 0, k) + 1) + 1
        raise LeirSyntaxError(f"the text is not UTF-8: byte 0x{data[k]:02x} at offset {k} "
                              f"({e.reason})", line, column) from None


_BRACKETS = re.compile(r"[()\[\]#]")


@functools.lru_cache(maxsize=4)
def _unary_run(n: int) -> re.Pattern:
    """``n`` unary operators in a row (``- - -x``, ``not not``; a binary minus before a run
    counts one too many, which is on the safe side)."""
    return re.compile(r"(?:(?:-|\bnot\b)[ \t]*){%d}" % n)


def _bound(src: str, max_bytes: int, max_depth: int) -> None:
    """Raise ``LeirSyntaxError`` when ``src`` is over ``max_bytes`` or nests brackets or unary
    operators more than ``max_depth`` deep; a linear scan, before the parser sees it."""
    if len(src) > max_bytes or len(src.encode("utf-8", "surrogatepass")) > max_bytes:
        # the character where the limit is crossed
        k = len(src.encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore"))
        line, column = _position(src, k)
        raise LeirSyntaxError(f"the text is longer than the limit of {max_bytes:,} bytes of "
                              f"UTF-8 (max_bytes); this is where it passes it", line, column, src)
    depth, pos = 0, 0
    while True:
        m = _BRACKETS.search(src, pos)
        if m is None:
            break
        c = m.group()
        pos = m.end()
        if c == "#":
            nl = src.find("\n", pos)
            pos = len(src) if nl < 0 else nl
        elif c in "([":
            depth += 1
            if depth > max_depth:
                line, column = _position(src, m.start())
                raise LeirSyntaxError(f"brackets nest more than {max_depth} deep (max_depth)",
                                      line, column, src)
        else:
            depth -= 1
    m = _unary_run(max_depth + 1).search(src)
    if m is not None:
        line, column = _position(src, len(src[:m.end()].rstrip()) - 1)
        raise LeirSyntaxError(f"more than {max_depth} unary operators in a row (max_depth)",
                              line, column, src)


def _tree_depth(tree, max_depth: int):
    """The first subtree of the parse tree deeper than ``max_depth``, or None (no recursion)."""
    from lark import Tree

    stack = [(tree, 1)]
    while stack:
        t, d = stack.pop()
        if d > max_depth:
            return t
        stack.extend((c, d + 1) for c in t.children if isinstance(c, Tree))
    return None


class _Indenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 4

    def handle_NL(self, token):
        levels = list(self.indent_level)
        try:
            yield from super().handle_NL(token)
        except DedentError:
            indent_str = token.rsplit("\n", 1)[1]
            indent = indent_str.count(" ") + indent_str.count("\t") * self.tab_len
            cols = " or ".join(str(n + 1) for n in levels if 0 < n < indent) or "1"
            raise LeirSyntaxError(f"inconsistent indentation: this line starts at column {indent + 1}, "
                                  f"which matches no enclosing block (expected column {cols})",
                                  token.end_line, indent + 1) from None


@functools.lru_cache(maxsize=1)
def _grammar() -> str:
    return resources.files(__package__).joinpath("leir.lark").read_text()


_PER_THREAD = threading.local()


def _lark() -> Lark:
    """This thread's parser: the indenter keeps its indentation stack on the instance, so two
    threads parsing with one parser corrupt each other's (bogus "unexpected end of input")."""
    p = getattr(_PER_THREAD, "lark", None)
    if p is None:
        p = _PER_THREAD.lark = Lark(_grammar(), parser="lalr", postlex=_Indenter(),
                                    propagate_positions=True, maybe_placeholders=True)
    return p


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


class _Build(Transformer_NonRecursive):
    """Lark tree -> AST. Bare names are resolved against declared tensors after the fact."""

    def start(self, items):
        return items[-1]

    def kernel(self, items):
        default, name, inputs, outputs, *rest = items
        default = str(default) if default is not None else None
        decls = [x for x in rest if isinstance(x, _Decl)]
        body = tuple(x for x in rest if not isinstance(x, _Decl))
        ins = tuple(d.tensor(default) for d in inputs)
        outs = tuple(d.tensor(default) for d in outputs)
        inter = tuple(d.tensor(default) for d in decls)
        tensors = {t.name: t for t in ins + outs + inter}
        return A.Program(str(name), ins, outs, inter, _resolve(body, tensors, ()))

    def inputs(self, items):
        return tuple(x for x in items if x is not None)

    def outputs(self, items):
        return tuple(items)

    def param_long(self, items):
        name, (dtype, shape) = items
        return _Decl(str(name), dtype, shape, "global", _p(name))

    def param(self, items):
        name, shape, dtype = items
        return _Decl(str(name), str(dtype) if dtype is not None else None,
                     shape if shape is not None else (), "global", _p(name))

    def type(self, items):
        dtype = str(items[0])
        shape = items[1] if len(items) > 1 and items[1] is not None else ()
        return dtype, shape

    def shape(self, items):
        return tuple(int(t) for t in items if t is not None)

    def decl_long(self, items):
        name, (dtype, shape), scope = items
        return _Decl(str(name), dtype, shape, str(scope) if scope is not None else "global",
                     _p(name))

    def decl(self, items):
        name, index, dtype, scope = items
        shape = []
        for e in index or ():
            if not (isinstance(e, A.Const) and e.kind == "int" and e.value > 0):
                pos = e.pos or _p(name)
                raise _Positioned(f"declaration of {name}: a shape holds positive integers; "
                                  f"a statement needs =, +=, *=, max= or min=", pos)
            shape.append(int(e.value))
        return _Decl(str(name), str(dtype) if dtype is not None else None, tuple(shape),
                     str(scope) if scope is not None else "global", _p(name))

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


class _Positioned(Exception):
    """An error found while building the AST, with the position it refers to."""

    def __init__(self, message: str, pos: A.Pos | None):
        super().__init__(message)
        self.message, self.pos = message, pos


class _Decl:
    """A declared tensor whose dtype may still come from the kernel's default."""

    def __init__(self, name, dtype, shape, scope, pos):
        self.name, self.dtype, self.shape, self.scope, self.pos = name, dtype, shape, scope, pos

    def tensor(self, default: str | None) -> A.Tensor:
        dtype = self.dtype or default
        if dtype is None:
            raise _Positioned(f"{self.name} has no dtype: write it ({self.name}[...] f32) or give "
                              f"the kernel a default (kernel f32 NAME(...))", self.pos)
        return A.Tensor(self.name, dtype, self.shape, self.scope, self.pos)


def implicit_loops(stmt: A.Assign, bound, tensors) -> list[tuple[str, int]] | str:
    """The loops an assignment written without its ``for`` lines stands for, outermost first.

    A variable that no enclosing loop binds is looped over implicitly: the left-hand side's
    variables in order of first appearance, then the right-hand side's. Each extent is the size
    of a dimension the variable indexes plainly (``A[i,k]``); all such dimensions must agree.
    Returns the loops, or a message saying why they cannot be inferred.
    """
    order: dict[str, None] = {}
    for e in stmt.index:
        for v in A.free_vars(e):
            if v not in bound:
                order.setdefault(v, None)
    for v in A.free_vars(stmt.value):
        if v not in bound:
            order.setdefault(v, None)
    if not order:
        return []
    extents: dict[str, int] = {}
    accesses = [(stmt.tensor, stmt.index)] + [(ld.tensor, ld.index) for ld in A.loads(stmt.value)]
    for name, index in accesses:
        t = tensors.get(name)
        if t is None or len(index) != len(t.shape):
            continue
        for dim, e in zip(t.shape, index):
            if isinstance(e, A.Var) and e.name in order:
                if extents.setdefault(e.name, dim) != dim:
                    return (f"loop variable {e.name} indexes dimensions of sizes "
                            f"{extents[e.name]} and {dim}; write its for loop")
    for v in order:
        if v not in extents:
            return (f"loop variable {v} is bound by no for loop and indexes no dimension "
                    f"plainly, so its extent is unknown; write its for loop")
    return [(v, extents[v]) for v in order]


def _resolve(node, tensors: dict[str, A.Tensor], bound: tuple[str, ...]):
    """Resolve bare names (declared tensors are scalar loads, the rest loop variables) and
    expand assignments written without their loops."""
    if isinstance(node, tuple):
        return tuple(_resolve(x, tensors, bound) for x in node)
    if isinstance(node, A.Var):
        return A.Load(node.name, (), node.pos) if node.name in tensors else node
    if isinstance(node, A.Const):
        return node
    if isinstance(node, A.Load):
        return A.Load(node.tensor, _resolve(node.index, tensors, bound), node.pos)
    if isinstance(node, A.Unary):
        return A.Unary(node.op, _resolve(node.operand, tensors, bound), node.pos)
    if isinstance(node, A.Binary):
        return A.Binary(node.op, _resolve(node.lhs, tensors, bound),
                        _resolve(node.rhs, tensors, bound), node.pos)
    if isinstance(node, A.Call):
        return A.Call(node.func, _resolve(node.args, tensors, bound), node.pos)
    if isinstance(node, A.Assign):
        stmt = A.Assign(node.tensor, _resolve(node.index, tensors, bound), node.op,
                        _resolve(node.value, tensors, bound), node.pos)
        loops = implicit_loops(stmt, frozenset(bound), tensors)
        if isinstance(loops, str):
            raise _Positioned(loops, node.pos)
        out: A.Stmt = stmt
        for var, extent in reversed(loops):
            out = A.Loop(var, extent, "serial", (out,), node.pos)
        return out
    if isinstance(node, A.Loop):
        return A.Loop(node.var, node.extent, node.kind,
                      _resolve(node.body, tensors, bound + (node.var,)), node.pos)
    if isinstance(node, A.If):
        return A.If(_resolve(node.cond, tensors, bound), _resolve(node.body, tensors, bound),
                    node.pos)
    raise TypeError(node)  # pragma: no cover


def _after_colon(src: str, line: int) -> bool:
    """Whether the last non-blank line before ``line`` opens a block (ends with ':')."""
    for prev in reversed(src.splitlines()[:line - 1]):
        code = prev.split("#", 1)[0].rstrip()
        if code:
            return code.endswith(":")
    return False


def parse(text: str, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> A.Program:
    """Parse LEIR text into a ``Program``. Raises ``LeirSyntaxError`` on any syntax error and
    on a text over ``max_bytes`` or nested deeper than ``max_depth`` (see the module
    docstring). Bytes are for ``decode`` first.

    Parsing checks syntax only; run ``steptp.leir.check`` for names, shapes and dtypes.
    """
    if not isinstance(text, str):
        raise TypeError(f"LEIR text must be str, not {type(text).__name__}")
    _bound(text, max_bytes, max_depth)
    need = _FRAMES_PER_LEVEL * max_depth + 2000
    if sys.getrecursionlimit() < need:
        sys.setrecursionlimit(need)
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
        expected = _describe_expected(e.expected)
        if set(e.expected) == {"_NL"} and _after_colon(src, line):
            expected = "an indented block"
        raise LeirSyntaxError(f"unexpected {what}; expected {expected}",
                              line, column, src) from None
    except UnexpectedEOF as e:
        raise LeirSyntaxError(f"unexpected end of input; expected {_describe_expected(e.expected)}",
                              src.count("\n"), 1, src) from None
    except LeirSyntaxError as e:  # raised by the indenter
        raise LeirSyntaxError(e.detail, e.line, e.column, src) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark errors
        raise LeirSyntaxError(str(e).splitlines()[0], getattr(e, "line", None),
                              getattr(e, "column", None), src) from None
    except MemoryError:
        raise       # not a syntax error: the caller's limit (``parse_in_worker``) says so
    except Exception as e:  # the indenter raises plain errors on inconsistent dedent
        raise LeirSyntaxError(f"inconsistent indentation ({e})", None, None) from None
    deep = _tree_depth(tree, max_depth)
    if deep is not None:
        pos = _p(deep.meta) if not deep.meta.empty else None
        raise LeirSyntaxError(f"the program nests more than {max_depth} levels deep (max_depth; "
                              f"loops and ifs, bracketed and unary expressions, and each "
                              f"operand of a chain like a + b + c count one level)",
                              pos.line if pos else None, pos.column if pos else None, src)
    try:
        return _Build().transform(tree)
    except VisitError as e:
        orig = e.orig_exc
        if isinstance(orig, _Positioned):
            pos = orig.pos
            raise LeirSyntaxError(orig.message, pos.line if pos else None,
                                  pos.column if pos else None, src) from None
        raise
