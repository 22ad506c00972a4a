"""Step-TP v1 text <-> LEIR AST.

The published Step-TP dataset writes every program as one line of LaTeX-like text ("v1")::

    B^{16}_{tx=0}L^{16384}_{a=0}[D^{f64,g}_{tx}=max(D^{f64,g}_{tx},A^{f64,g}_{tx,a});];...

plus a side signature ``{"inputs": {name: shape}, "constants": {...}, "params": {...},
"outputs": {...}}``. :func:`read_v1` turns the two into a LEIR :class:`~steptp.leir.ast.Program`
and :func:`write_v1` goes back. The reader is a hand-written tokenizer and recursive-descent
parser: v1 text is data, it is never evaluated. docs/v1.md describes the format and every
decision below in prose.

Grammar (``;`` terminates every statement and every loop nest)::

    program  := item*
    item     := (nest | stmt) ";"
    nest     := head+ "[" item* "]"
    head     := KIND "^{" INT "}_{" var "=" INT "}"        KIND in L P V U B
    stmt     := access "=" expr
    access   := NAME ["^{" dtype "," scope "}"] ["_{" expr ("," expr)* "}"]
    expr     := or;  or := and ("|" and)*;  and := not ("&" not)*;  not := "!" not | cmp
    cmp      := arith (CMP arith)*        a<b<c is a chained comparison, a<b & b<c
    arith    := term (("+"|"-") term)*;   term := unary (("*"|"/"|"//"|"%") unary)*
    unary    := "-" unary | power;        power := atom ["**" unary]
    atom     := NUMBER | "inf" | "true" | "false" | NAME "(" args ")" | access | var
              | "(" expr ")"

Semantic decisions (see docs/v1.md):

* Loops: ``L`` serial, ``P`` parallel, ``V`` vectorized, ``U`` unrolled, ``B`` bound; a bound
  variable named ``tx``/``ty``/``tz`` (or starting with them) is ``threadIdx.x|y|z``, ``bx…``,
  ``by…``, ``bz…`` is ``blockIdx``. ``bind_as="serial"`` (or ``"parallel"``) maps every bound
  loop to that kind instead, for CPU lowering. A start other than ``0`` is an error.
* Reductions: ``X=X+e``, ``X=e+X``, ``X=X*e``, ``X=max(X,e)``, ``X=min(X,e)`` (also longer
  ``+``/``*`` chains with exactly one ``X`` term, and ``X`` absent from ``e``) whose enclosing
  loops include a variable absent from ``X``'s subscript become LEIR ``+=``/``*=``/``max=``/
  ``min=``: an accumulation initialised to the identity (TIR ``T.init``), exactly as TE
  reductions are. With no such variable the statement is not a reduction: if ``X`` was written
  by an earlier statement it is the in-place store ``X = X + e``; otherwise (the first write of
  ``X``) it is an accumulation over zero axes started from the identity, i.e. the store
  ``X = e``.
* Intermediates: a name not in the signature is an intermediate, declared in order of first
  appearance, with the dtype and scope of its ``^{dtype,scope}`` annotation and a shape inferred
  from the accesses that write it (per subscript position, the largest value the index can take
  over its loops, plus one); reads are used only for a tensor that is never written.
* Types: v1 promotes implicitly, LEIR never does; the reader inserts the casts v1 leaves
  implicit (a loop variable, integer or boolean meeting a float becomes ``f64(...)``; an integer
  or boolean meeting a wider type is cast to it; a stored value of another concrete dtype is
  cast to the stored tensor's dtype). Untyped literals stay untyped.
* Extensions the writer may need and the reader accepts, none of which occurs in the corpus:
  casts written as calls to a dtype name (``f32(a)``), ``//`` and ``%``, ``|`` and ``!``, all
  LEIR intrinsics by their LEIR names, a top-level statement outside any loop, nests inside
  nests, and signature keys ``"dtypes"`` (name -> dtype, for tensors never accessed) and
  ``"intermediates"`` (name -> shape, declaration order and shapes that inference would not
  reproduce).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from . import ast as A
from . import types as T

__all__ = ["V1SyntaxError", "V1WriteError", "read_v1", "write_v1", "signature_of"]


class V1SyntaxError(ValueError):
    """A v1 text that cannot be read. ``offset`` is the 0-based character offset."""

    def __init__(self, message: str, offset: int, source: str | None = None,
                 expected: str | None = None):
        self.offset, self.detail, self.expected = offset, message, expected
        snippet = ""
        if source is not None:
            lo = max(0, offset - 30)
            hi = min(len(source), offset + 30)
            snippet = f"\n    {source[lo:hi]}\n    {' ' * (offset - lo)}^"
        super().__init__(f"v1 offset {offset}: {message}{snippet}")


class V1WriteError(ValueError):
    """A LEIR program that v1 cannot express (guards, loop-carried stores v1 would read as
    reductions, ...)."""


# ----------------------------------------------------------------------------- tokens
_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|[0-9]+)
  | (?P<name>[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*)
  | (?P<op>\*\*|//|==|!=|<=|>=|&&|\|\||[-+*/%<>=!&|^_{}\[\](),;])
""", re.VERBOSE)

_KIND_LETTERS = {"L": "serial", "P": "parallel", "V": "vectorized", "U": "unrolled", "B": None}
_LETTER_OF_KIND = {"serial": "L", "parallel": "P", "vectorized": "V", "unrolled": "U"}
_SCOPES = {"g": "global", "s": "shared", "l": "local"}
_SCOPE_LETTER = {v: k for k, v in _SCOPES.items()}
_BOUND_RE = re.compile(r"^(t|b)([xyz])[a-z0-9]*$")
_FUNC_ALIASES = {"if_then_else": "where", "select": "where", "fabs": "abs", "power": "pow"}
_COMPARE = ("==", "!=", "<", "<=", ">", ">=")
# LEIR words a loop variable may not be called (the reader renames such a variable).
_LEIR_RESERVED = frozenset({"kernel", "for", "in", "if", "and", "or", "not", "inf", "true",
                            "false"}) | frozenset(A.DTYPES) | frozenset(A.INTRINSICS) \
    | frozenset(A.LOOP_KINDS) | frozenset(A.SCOPES)


@dataclass(frozen=True)
class _Tok:
    kind: str   # "num", "name", "op", "end"
    text: str
    pos: int


def _tokenize(src: str) -> list[_Tok]:
    out: list[_Tok] = []
    i, n = 0, len(src)
    while i < n:
        m = _TOKEN_RE.match(src, i)
        if m is None:
            raise V1SyntaxError(f"unexpected character {src[i]!r}", i, src,
                                "a name, a number or an operator")
        kind = m.lastgroup
        if kind != "ws":
            out.append(_Tok(kind, m.group(), i))
        i = m.end()
    out.append(_Tok("end", "", n))
    return out


def _describe(tok: _Tok) -> str:
    return "end of input" if tok.kind == "end" else repr(tok.text)


# ----------------------------------------------------------------------------- raw tree
# The parser first builds a raw tree (loops with their v1 letter and variable, statements with
# raw expressions) and only then resolves names, reductions, shapes and types.
@dataclass
class _Access:
    name: str
    dtype: str | None
    scope: str | None
    index: tuple | None      # None: no subscript (a scalar)
    pos: int


@dataclass
class _Stmt:
    lhs: _Access
    rhs: object
    pos: int


@dataclass
class _Nest:
    letter: str
    extent: int
    var: str
    body: list
    pos: int


class _Parser:
    def __init__(self, src: str):
        self.src = src
        self.toks = _tokenize(src)
        self.i = 0
        self.scope: list[str] = []   # loop variables in scope, innermost last

    # -- helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, expected: str, tok: _Tok | None = None) -> V1SyntaxError:
        tok = tok or self.tok
        return V1SyntaxError(f"unexpected {_describe(tok)}; expected {expected}", tok.pos,
                             self.src, expected)

    def accept(self, text: str) -> _Tok | None:
        if self.tok.kind == "op" and self.tok.text == text:
            t = self.tok
            self.i += 1
            return t
        return None

    def expect(self, text: str, expected: str | None = None) -> _Tok:
        t = self.accept(text)
        if t is None:
            raise self.error(expected or repr(text))
        return t

    def expect_int(self, what: str) -> tuple[int, int]:
        t = self.tok
        if t.kind != "num" or not t.text.isdigit():
            raise self.error(what)
        self.i += 1
        return int(t.text), t.pos

    def expect_name(self, what: str) -> _Tok:
        t = self.tok
        if t.kind != "name":
            raise self.error(what)
        self.i += 1
        return t

    # -- structure
    def is_head(self) -> bool:
        t = self.tok
        return (t.kind == "name" and t.text in _KIND_LETTERS and self.peek(1).text == "^"
                and self.peek(2).text == "{" and self.peek(3).kind == "num")

    def program(self) -> list:
        items = self.items(top=True)
        if self.tok.kind != "end":
            raise self.error("a loop nest, a statement or end of input")
        if not items:
            raise self.error("a loop nest or a statement (a program writes its outputs)")
        return items

    def items(self, top: bool) -> list:
        out = []
        while True:
            t = self.tok
            if t.kind == "end" or (t.kind == "op" and t.text == "]"):
                return out
            if self.is_head():
                out.append(self.nest())
            elif t.kind == "name":
                out.append(self.stmt())
            else:
                what = "a loop nest, a statement or end of input" if top else \
                    "a loop nest, a statement or ']'"
                raise self.error(what)
            self.expect(";", "';' after " + ("a loop nest" if isinstance(out[-1], _Nest)
                                             else "a statement"))

    def nest(self) -> _Nest:
        heads = []
        while self.is_head():
            letter_tok = self.tok
            self.i += 2  # letter, ^
            self.expect("{")
            extent, epos = self.expect_int("a loop extent")
            if extent < 1:
                raise V1SyntaxError("loop extent must be positive", epos, self.src,
                                    "a positive integer")
            self.expect("}", "'}' after the loop extent")
            self.expect("_", "'_{var=0}' after the loop extent")
            self.expect("{", "'{' of the loop variable")
            var = self.expect_name("a loop variable")
            if not var.text[0].islower():
                raise V1SyntaxError(f"loop variable {var.text!r} must start with a lowercase "
                                    "letter", var.pos, self.src, "a lowercase loop variable")
            if var.text in self.scope or var.text in [h[2] for h in heads]:
                raise V1SyntaxError(f"loop variable {var.text!r} is already bound by an "
                                    "enclosing loop", var.pos, self.src, "a fresh loop variable")
            self.expect("=", "'=' and the loop start")
            neg = self.accept("-")
            start, spos = self.expect_int("the loop start 0")
            if neg or start != 0:
                raise V1SyntaxError(
                    f"loop {var.text!r} starts at {'-' if neg else ''}{start}; only loops "
                    "starting at 0 are supported (LEIR loops run over 0..N-1)",
                    neg.pos if neg else spos, self.src, "0")
            self.expect("}", "'}' after the loop start")
            if letter_tok.text == "B" and not _BOUND_RE.match(var.text):
                raise V1SyntaxError(
                    f"bound loop variable {var.text!r} names no hardware axis; expected "
                    "tx/ty/tz (threadIdx) or bx/by/bz (blockIdx)", var.pos, self.src,
                    "tx, ty, tz, bx, by or bz")
            heads.append((letter_tok.text, extent, var.text, letter_tok.pos))
        self.expect("[", "another loop head or '['")
        self.scope.extend(h[2] for h in heads)
        body = self.items(top=False)
        self.expect("]")
        del self.scope[len(self.scope) - len(heads):]
        node: list = body
        for letter, extent, var, pos in reversed(heads):
            node = [_Nest(letter, extent, var, node, pos)]
        return node[0]

    def stmt(self) -> _Stmt:
        t = self.tok
        if t.text in self.scope or not t.text[0].isupper():
            raise self.error("a tensor (a capitalized name) to assign to")
        lhs = self.access()
        self.expect("=", "'=' after the assigned tensor")
        rhs = self.expr()
        return _Stmt(lhs, rhs, t.pos)

    def access(self) -> _Access:
        name = self.expect_name("a tensor name")
        dtype = scope = None
        if self.accept("^"):
            self.expect("{", "'{' of the '^{dtype,scope}' annotation")
            d = self.expect_name("a dtype (f64, f32, i64, bool, ...)")
            if d.text not in A.DTYPES:
                raise V1SyntaxError(f"unknown dtype {d.text!r}", d.pos, self.src,
                                    "a dtype (" + ", ".join(A.DTYPES) + ")")
            self.expect(",", "',' and a scope (g, s or l)")
            s = self.expect_name("a scope (g, s or l)")
            if s.text not in _SCOPES:
                raise V1SyntaxError(f"unknown scope {s.text!r}", s.pos, self.src,
                                    "a scope (g, s or l)")
            self.expect("}", "'}' closing the annotation")
            dtype, scope = d.text, _SCOPES[s.text]
        index = None
        if self.accept("_"):
            self.expect("{", "'{' of the subscript")
            idx = [self.expr()]
            while self.accept(","):
                idx.append(self.expr())
            self.expect("}", "',' or '}' in the subscript")
            index = tuple(idx)
        return _Access(name.text, dtype, scope, index, name.pos)

    # -- expressions: raw nodes are A.* nodes except tensor accesses (_Access)
    def _pos(self, p: int) -> A.Pos:
        return A.Pos(1, p + 1)

    def expr(self):
        return self.or_expr()

    def or_expr(self):
        e = self.and_expr()
        while True:
            t = self.accept("|") or self.accept("||")
            if t is None:
                return e
            e = A.Binary("or", e, self.and_expr(), self._pos(t.pos))

    def and_expr(self):
        e = self.not_expr()
        while True:
            t = self.accept("&") or self.accept("&&")
            if t is None:
                return e
            e = A.Binary("and", e, self.not_expr(), self._pos(t.pos))

    def not_expr(self):
        t = self.accept("!")
        if t is not None:
            return A.Unary("not", self.not_expr(), self._pos(t.pos))
        return self.comparison()

    def comparison(self):
        first = self.arith()
        terms, ops = [first], []
        while self.tok.kind == "op" and self.tok.text in _COMPARE:
            ops.append(self.tok)
            self.i += 1
            terms.append(self.arith())
        if not ops:
            return first
        out = None
        for k, op in enumerate(ops):   # a<b<c is a<b & b<c, as in the corpus' bound guards
            c = A.Binary(op.text, terms[k], terms[k + 1], self._pos(op.pos))
            out = c if out is None else A.Binary("and", out, c, self._pos(op.pos))
        return out

    def arith(self):
        e = self.term()
        while self.tok.kind == "op" and self.tok.text in ("+", "-"):
            t = self.tok
            self.i += 1
            e = A.Binary(t.text, e, self.term(), self._pos(t.pos))
        return e

    def term(self):
        e = self.unary()
        while self.tok.kind == "op" and self.tok.text in ("*", "/", "//", "%"):
            t = self.tok
            self.i += 1
            e = A.Binary(t.text, e, self.unary(), self._pos(t.pos))
        return e

    def unary(self):
        t = self.accept("-")
        if t is not None:
            x = self.unary()
            if isinstance(x, A.Const) and x.kind in ("int", "float"):
                return A.Const(-x.value, x.kind, self._pos(t.pos))
            return A.Unary("-", x, self._pos(t.pos))
        return self.power()

    def power(self):
        e = self.atom()
        t = self.accept("**")
        if t is not None:
            return A.Binary("**", e, self.unary(), self._pos(t.pos))
        return e

    def atom(self):
        t = self.tok
        if t.kind == "num":
            self.i += 1
            if re.fullmatch(r"[0-9]+", t.text):
                return A.Const(int(t.text), "int", self._pos(t.pos))
            return A.Const(float(t.text), "float", self._pos(t.pos))
        if t.kind == "op" and t.text == "(":
            self.i += 1
            e = self.expr()
            self.expect(")", "')'")
            return e
        if t.kind != "name":
            raise self.error("an expression (a number, a name, a call or '(')")
        nxt = self.peek(1)
        if nxt.kind == "op" and nxt.text == "(":
            return self.call()
        if t.text in self.scope and not (nxt.kind == "op" and nxt.text in ("^", "_")):
            self.i += 1
            return A.Var(t.text, self._pos(t.pos))
        if t.text == "inf":
            self.i += 1
            return A.Const(math.inf, "float", self._pos(t.pos))
        if t.text in ("true", "false"):
            self.i += 1
            return A.Const(t.text == "true", "bool", self._pos(t.pos))
        if t.text[0].isupper() or (nxt.kind == "op" and nxt.text in ("^", "_")):
            return self.access()
        raise V1SyntaxError(f"{t.text!r} is neither a loop variable in scope nor a tensor "
                            "(tensor names are capitalized)", t.pos, self.src,
                            "a loop variable in scope, a tensor or a function call")

    def call(self):
        name = self.tok
        self.i += 2  # name, (
        func = _FUNC_ALIASES.get(name.text, name.text)
        if func not in A.INTRINSICS and func not in A.DTYPES:
            known = ", ".join(sorted(set(A.INTRINSICS) | {"if_then_else"}))
            raise V1SyntaxError(f"unknown function {name.text!r}", name.pos, self.src,
                                f"one of {known} or a cast such as f64(x)")
        args = []
        if not self.accept(")"):
            args.append(self.expr())
            while self.accept(","):
                args.append(self.expr())
            self.expect(")", "',' or ')' in the argument list")
        want = 1 if func in A.DTYPES else A.INTRINSICS[func]
        if len(args) != want:
            raise V1SyntaxError(f"{name.text}() takes {want} argument{'s' * (want != 1)}, got "
                                f"{len(args)}", name.pos, self.src,
                                f"{want} argument{'s' * (want != 1)}")
        return A.Call(func, tuple(args), self._pos(name.pos))


# ----------------------------------------------------------------------------- reading
def _signature_tensors(signature: Mapping) -> tuple[list[tuple[str, tuple[int, ...]]],
                                                     list[tuple[str, tuple[int, ...]]]]:
    if not isinstance(signature, Mapping):
        raise TypeError(f"signature must be a mapping, not {type(signature).__name__}")
    ins: list[tuple[str, tuple[int, ...]]] = []
    outs: list[tuple[str, tuple[int, ...]]] = []
    seen: set[str] = set()
    for key, dest in (("inputs", ins), ("constants", ins), ("params", ins), ("outputs", outs)):
        for name, shape in (signature.get(key) or {}).items():
            if name in seen:
                raise ValueError(f"signature declares {name!r} twice")
            seen.add(name)
            shp = tuple(int(d) for d in shape)
            if any(d < 1 for d in shp):
                raise ValueError(f"signature shape of {name!r} has a non-positive extent: {shp}")
            dest.append((name, shp))
    if not outs:
        raise ValueError("signature has no outputs")
    return ins, outs


def _subst_loads(e, fn):
    """Rebuild a raw expression bottom-up, mapping each _Access through ``fn``."""
    if isinstance(e, _Access):
        return fn(e)
    if isinstance(e, (A.Const, A.Var)):
        return e
    if isinstance(e, A.Unary):
        return A.Unary(e.op, _subst_loads(e.operand, fn), e.pos)
    if isinstance(e, A.Binary):
        return A.Binary(e.op, _subst_loads(e.lhs, fn), _subst_loads(e.rhs, fn), e.pos)
    if isinstance(e, A.Call):
        return A.Call(e.func, tuple(_subst_loads(a, fn) for a in e.args), e.pos)
    raise TypeError(e)  # pragma: no cover


def _raw_accesses(e) -> Iterable[_Access]:
    if isinstance(e, _Access):
        yield e
        for i in e.index or ():
            yield from _raw_accesses(i)
    elif isinstance(e, A.Unary):
        yield from _raw_accesses(e.operand)
    elif isinstance(e, A.Binary):
        yield from _raw_accesses(e.lhs)
        yield from _raw_accesses(e.rhs)
    elif isinstance(e, A.Call):
        for a in e.args:
            yield from _raw_accesses(a)


def _upper_bound(e: A.Expr, extents: Mapping[str, int]) -> tuple[int, int] | None:
    """Interval [lo, hi] an integer index expression takes, or None if unknown."""
    if isinstance(e, A.Const):
        return (int(e.value), int(e.value)) if e.kind == "int" else None
    if isinstance(e, A.Var):
        n = extents.get(e.name)
        return (0, n - 1) if n is not None else None
    if isinstance(e, A.Unary) and e.op == "-":
        r = _upper_bound(e.operand, extents)
        return (-r[1], -r[0]) if r else None
    if isinstance(e, A.Binary) and e.op in ("+", "-", "*", "//", "%"):
        a, b = _upper_bound(e.lhs, extents), _upper_bound(e.rhs, extents)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a[0] + b[0], a[1] + b[1]
        if e.op == "-":
            return a[0] - b[1], a[1] - b[0]
        if e.op == "*":
            c = [x * y for x in a for y in b]
            return min(c), max(c)
        if b[0] <= 0 <= b[1]:
            return None
        if e.op == "//":
            c = [x // y for x in a for y in b]
            return min(c), max(c)
        if b[0] > 0:
            return 0, b[1] - 1
        return None
    if isinstance(e, A.Call) and e.func in ("max", "min") or (
            isinstance(e, A.Call) and e.func == "where"):
        rs = [_upper_bound(x, extents) for x in (e.args[1:] if e.func == "where" else e.args)]
        if any(r is None for r in rs):
            return None
        if e.func == "max":
            return max(r[0] for r in rs), max(r[1] for r in rs)
        if e.func == "min":
            return min(r[0] for r in rs), min(r[1] for r in rs)
        return min(r[0] for r in rs), max(r[1] for r in rs)
    return None


def _same(a, b) -> bool:
    return A.strip_pos(a) == A.strip_pos(b)


def _mentions(e: A.Expr, tensor: str) -> bool:
    return any(isinstance(n, A.Load) and n.tensor == tensor for n in A.walk(e))


def _match_reduction(lhs: A.Load, value: A.Expr) -> tuple[str, A.Expr] | None:
    """If ``value`` is ``lhs op e`` (op + * max min) with lhs absent from e: (op, e)."""
    if isinstance(value, A.Call) and value.func in ("max", "min"):
        a, b = value.args
        for x, e in ((a, b), (b, a)):
            if _same(x, lhs) and not _mentions(e, lhs.tensor):
                return value.func, e
        return None
    if isinstance(value, A.Binary) and value.op in ("+", "*"):
        if _same(value.lhs, lhs) and not _mentions(value.rhs, lhs.tensor):
            return value.op, value.rhs
        if _same(value.rhs, lhs) and not _mentions(value.lhs, lhs.tensor):
            return value.op, value.lhs
        # a left-leaning chain with X leftmost: ((X + a) + b) + c  ->  X += (a + b) + c
        spine: list[A.Binary] = []
        node: A.Expr = value
        while isinstance(node, A.Binary) and node.op == value.op:
            spine.append(node)
            node = node.lhs
        if not _same(node, lhs) or any(_mentions(b.rhs, lhs.tensor) for b in spine):
            return None
        e = spine[-1].rhs
        for b in reversed(spine[:-1]):
            e = A.Binary(value.op, e, b.rhs, b.pos)
        return value.op, e
    return None


def read_v1(text: str, signature: Mapping, name: str = "kernel", dtype: str = "f64",
            bind_as: str = "thread") -> A.Program:
    """Read a v1 program and its signature into a LEIR ``Program``.

    ``signature`` holds ``inputs``, ``constants``, ``params`` and ``outputs`` (name -> shape);
    the kernel's inputs are inputs, constants and params in that order. ``dtype`` is the dtype of
    a signature tensor that no access annotates. ``bind_as`` is ``"thread"`` (bound loops become
    ``threadIdx``/``blockIdx`` loops) or a LEIR loop kind (``"serial"``, ``"parallel"``) that
    every bound loop becomes instead. Raises ``V1SyntaxError`` with the character offset.
    """
    if not isinstance(text, str):
        raise TypeError(f"v1 text must be str, not {type(text).__name__}")
    if dtype not in A.DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    if bind_as not in ("thread", "serial", "parallel", "unrolled", "vectorized"):
        raise ValueError(f"bind_as must be 'thread' or a CPU loop kind, not {bind_as!r}")
    ins, outs = _signature_tensors(signature)
    sig_shape = dict(ins + outs)
    items = _Parser(text).program()
    return _Reader(text, ins, outs, sig_shape, signature, name, dtype, bind_as).build(items)


class _Reader:
    def __init__(self, src, ins, outs, sig_shape, signature, name, dtype, bind_as):
        self.src, self.ins, self.outs, self.sig_shape = src, ins, outs, sig_shape
        self.name, self.default_dtype, self.bind_as = name, dtype, bind_as
        self.sig_dtypes = dict(signature.get("dtypes") or {})
        self.sig_inter = {k: tuple(int(d) for d in v)
                          for k, v in (signature.get("intermediates") or {}).items()}
        self.dtypes: dict[str, tuple[str, int]] = {}   # name -> (dtype, offset of first annot.)
        self.scopes: dict[str, str] = {}
        self.ranks: dict[str, tuple[int, int]] = {}
        self.order: list[str] = []                      # first appearance
        self.written: set[str] = set()
        self.write_bounds: dict[str, list[int]] = {}
        self.read_bounds: dict[str, list[int | None]] = {}
        self.renames: dict[str, str] = {}

    def err(self, msg: str, pos: int, expected: str | None = None) -> V1SyntaxError:
        return V1SyntaxError(msg, pos, self.src, expected)

    # -- pass 1: collect tensor facts
    def note(self, acc: _Access, extents: Mapping[str, int], write: bool) -> None:
        if acc.name not in self.order:
            self.order.append(acc.name)
        if acc.dtype is not None:
            if acc.name in self.dtypes and self.dtypes[acc.name][0] != acc.dtype:
                d, p = self.dtypes[acc.name]
                raise self.err(f"{acc.name} is annotated {acc.dtype} here but {d} at offset {p}",
                               acc.pos, d)
            self.dtypes.setdefault(acc.name, (acc.dtype, acc.pos))
            if acc.name in self.scopes and self.scopes[acc.name] != acc.scope:
                raise self.err(f"{acc.name} is annotated with scope {acc.scope} here but "
                               f"{self.scopes[acc.name]} before", acc.pos)
            self.scopes.setdefault(acc.name, acc.scope)
        rank = len(acc.index) if acc.index is not None else 0
        if acc.name in self.ranks and self.ranks[acc.name][0] != rank:
            r, p = self.ranks[acc.name]
            raise self.err(f"{acc.name} is accessed with {rank} subscript(s) here but {r} at "
                           f"offset {p}", acc.pos, f"{r} subscript(s)")
        self.ranks.setdefault(acc.name, (rank, acc.pos))
        if acc.name in self.sig_shape and len(self.sig_shape[acc.name]) != rank:
            raise self.err(f"{acc.name} has rank {len(self.sig_shape[acc.name])} in the "
                           f"signature but is accessed with {rank} subscript(s)", acc.pos,
                           f"{len(self.sig_shape[acc.name])} subscript(s)")
        for k, ix in enumerate(acc.index or ()):
            r = _upper_bound(self._plain(ix), extents)
            table = self.write_bounds if write else self.read_bounds
            cur = table.setdefault(acc.name, [0] * rank)
            if r is None:
                if write and acc.name not in self.sig_shape and acc.name not in self.sig_inter:
                    raise self.err(f"cannot infer the shape of intermediate {acc.name}: "
                                   f"subscript {k} is not an affine function of loop "
                                   "variables", acc.pos)
                if not write:
                    cur[k] = None  # type: ignore[call-overload]
                continue
            if write and r[0] < 0 and acc.name not in self.sig_shape:
                raise self.err(f"subscript {k} of {acc.name} can be negative ({r[0]})", acc.pos)
            if cur[k] is not None:
                cur[k] = max(cur[k], r[1] + 1)

    def _plain(self, e):
        """A raw index expression with accesses turned into loads (for interval analysis)."""
        return _subst_loads(e, lambda a: A.Load(a.name, tuple(self._plain(i) for i in a.index
                                                                 or ()), None))

    def collect(self, items, extents: dict[str, int]) -> None:
        for it in items:
            if isinstance(it, _Nest):
                extents[it.var] = it.extent
                self.collect(it.body, extents)
                del extents[it.var]
            else:
                for acc in _raw_accesses(it.rhs):
                    self.note(acc, extents, write=False)
                for ix in it.lhs.index or ():
                    for acc in _raw_accesses(ix):
                        self.note(acc, extents, write=False)
                self.note(it.lhs, extents, write=True)

    # -- pass 2: declarations
    def declare(self) -> tuple[dict[str, A.Tensor], list[A.Tensor], list[A.Tensor],
                               list[A.Tensor]]:
        tensors: dict[str, A.Tensor] = {}

        def sig_tensor(name, shape):
            dt = self.dtypes.get(name, (self.sig_dtypes.get(name, self.default_dtype), 0))[0]
            scope = self.scopes.get(name, "global")
            if scope != "global":
                raise self.err(f"kernel argument {name} is annotated with scope {scope}; "
                               "arguments live in global memory", self.dtypes[name][1], "g")
            return A.Tensor(name, dt, shape, "global")

        inputs = [sig_tensor(n, s) for n, s in self.ins]
        outputs = [sig_tensor(n, s) for n, s in self.outs]
        inter_names = [n for n in self.sig_inter] + \
            [n for n in self.order if n not in self.sig_shape and n not in self.sig_inter]
        inter = []
        for n in inter_names:
            if n not in self.dtypes and n not in self.order:
                continue
            if n in self.sig_inter:
                shape = self.sig_inter[n]
            elif n in self.write_bounds or self.ranks.get(n, (0,))[0] == 0:
                shape = tuple(self.write_bounds.get(n, ()))
            else:
                rb = self.read_bounds.get(n, [])
                if any(b is None for b in rb):
                    raise self.err(f"cannot infer the shape of intermediate {n}, which is "
                                   "never written", self.ranks[n][1])
                shape = tuple(rb)  # type: ignore[arg-type]
            if n not in self.dtypes:
                raise self.err(f"intermediate {n} has no ^{{dtype,scope}} annotation",
                               self.ranks[n][1], "^{dtype,scope}")
            inter.append(A.Tensor(n, self.dtypes[n][0], shape, self.scopes.get(n, "global")))
        for t in inputs + outputs + inter:
            tensors[t.name] = t
        return tensors, inputs, outputs, inter

    # -- pass 3: statements
    def var_name(self, v: str) -> str:
        return self.renames.get(v, v)

    def kind(self, nest: _Nest) -> str:
        k = _KIND_LETTERS[nest.letter]
        if k is not None:
            return k
        if self.bind_as != "thread":
            return self.bind_as
        m = _BOUND_RE.match(nest.var)
        assert m is not None
        return ("threadIdx." if m.group(1) == "t" else "blockIdx.") + m.group(2)

    def lower_expr(self, e) -> A.Expr:
        if isinstance(e, _Access):
            return A.Load(e.name, tuple(self.lower_expr(i) for i in e.index or ()),
                          A.Pos(1, e.pos + 1))
        if isinstance(e, A.Var):
            return A.Var(self.var_name(e.name), e.pos)
        return _subst_loads(e, lambda a: self.lower_expr(a)) if not isinstance(e, A.Const) \
            else e

    def build_items(self, items, loops: list[str], tensors) -> tuple[A.Stmt, ...]:
        out: list[A.Stmt] = []
        for it in items:
            if isinstance(it, _Nest):
                var = it.var
                if var in _LEIR_RESERVED:
                    self.renames[var] = var + "_"
                body = self.build_items(it.body, loops + [var], tensors)
                out.append(A.Loop(self.var_name(var), it.extent, self.kind(it), body,
                                  A.Pos(1, it.pos + 1)))
                self.renames.pop(var, None)
            else:
                out.append(self.build_stmt(it, loops, tensors))
        return tuple(out)

    def build_stmt(self, st: _Stmt, loops: list[str], tensors) -> A.Assign:
        lhs = self.lower_expr(st.lhs)
        assert isinstance(lhs, A.Load)
        value = self.lower_expr(st.rhs)
        op = "="
        red = _match_reduction(lhs, value)
        if red is not None:
            rop, e = red
            used = set(A.free_vars(lhs))
            axes = [v for v in loops if self.var_name(v) not in used]
            if axes:
                op, value = f"{rop}=", e
            elif lhs.tensor not in self.written:
                value = e     # accumulation over zero axes from the identity: identity op e
        target = tensors[lhs.tensor]
        try:
            index = tuple(_coerce_index(i, tensors) for i in lhs.index)
            value = _coerce_value(value, target.dtype, tensors, self.default_float())
        except T.LeirTypeError as exc:
            off = exc.pos.column - 1 if exc.pos is not None else st.pos
            raise self.err(f"type error: {exc.detail}", off) from None
        self.written.add(lhs.tensor)
        return A.Assign(lhs.tensor, index, op, value, A.Pos(1, st.pos + 1))

    def default_float(self) -> str:
        return self.default_dtype if self.default_dtype in A.FLOAT_DTYPES else "f64"

    def build(self, items) -> A.Program:
        self.collect(items, {})
        tensors, inputs, outputs, inter = self.declare()
        body = self.build_items(items, [], tensors)
        return A.Program(self.name, tuple(inputs), tuple(outputs), tuple(inter), body)


# ----------------------------------------------------------------------------- casts
def _rank(t: str) -> int:
    order = ["bool", "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64",
             "f16", "bf16", "f32", "f64"]
    return order.index(t) if t in order else -1


def _cast(e: A.Expr, to: str) -> A.Expr:
    return A.Call(to, (e,), getattr(e, "pos", None))


def _join(a: str, b: str, default_float: str) -> str | None:
    """The type two operands meet at, or None when they already unify."""
    try:
        T.unify(a, b)
        return None
    except T.LeirTypeError:
        pass
    concrete = [t for t in (a, b) if t in A.DTYPES]
    floats = [t for t in concrete if t in A.FLOAT_DTYPES]
    if floats:
        return max(floats, key=_rank)
    if T.is_float(a) or T.is_float(b):          # a weak float meets index/int/bool
        return default_float
    ints = [t for t in concrete if t in A.INT_DTYPES]
    if ints:
        return max(ints, key=_rank)
    return "i64"                                 # bool meets a weak int or a loop variable


def _coerce(e: A.Expr, tensors, default_float: str) -> tuple[A.Expr, str]:
    """Insert the casts v1 leaves implicit; returns the new expression and its (maybe weak)
    type."""
    if isinstance(e, A.Const):
        return e, ("bool" if e.kind == "bool" else e.kind)
    if isinstance(e, A.Var):
        return e, T.INDEX
    if isinstance(e, A.Load):
        idx = tuple(_coerce_index(i, tensors) for i in e.index)
        t = tensors.get(e.tensor)
        return A.Load(e.tensor, idx, e.pos), (t.dtype if t else default_float)
    if isinstance(e, A.Unary):
        x, t = _coerce(e.operand, tensors, default_float)
        if e.op == "not" and t != "bool":
            return A.Unary("not", A.Binary("!=", x, A.Const(0, "int"), e.pos), e.pos), "bool"
        if e.op == "-" and t == "bool":
            x, t = _cast(x, "i64"), "i64"
        return A.Unary(e.op, x, e.pos), ("bool" if e.op == "not" else t)
    if isinstance(e, A.Binary):
        l, lt = _coerce(e.lhs, tensors, default_float)
        r, rt = _coerce(e.rhs, tensors, default_float)
        if e.op in ("and", "or"):
            if lt != "bool":
                l = A.Binary("!=", l, A.Const(0, "int"), e.pos)
            if rt != "bool":
                r = A.Binary("!=", r, A.Const(0, "int"), e.pos)
            return A.Binary(e.op, l, r, e.pos), "bool"
        if e.op not in T.COMPARISONS and "bool" in (lt, rt):
            # arithmetic on a boolean: cast it to the other side's type
            other = rt if lt == "bool" else lt
            to = other if other in A.DTYPES and other != "bool" else (
                default_float if T.is_float(other) else "i64")
            if lt == "bool":
                l, lt = _cast(l, to), to
            if rt == "bool":
                r, rt = _cast(r, to), to
        to = _join(lt, rt, default_float)
        if to is not None:
            if lt != to and lt not in T.WEAK:
                l, lt = _cast(l, to), to
            if rt != to and rt not in T.WEAK:
                r, rt = _cast(r, to), to
        if e.op == "/" and T.is_int(lt) and T.is_int(rt):
            # v1 '/' on integers: true division in the float type, as v1's arithmetic is
            to = default_float
            if lt not in T.WEAK:
                l = _cast(l, to)
            if rt not in T.WEAK:
                r = _cast(r, to)
            if lt in T.WEAK and rt in T.WEAK:
                l = _cast(l, to)
        out = A.Binary(e.op, l, r, e.pos)
        return out, T.expr_dtype(out, tensors)
    if isinstance(e, A.Call):
        args = [_coerce(a, tensors, default_float) for a in e.args]
        if e.func in A.DTYPES:
            return A.Call(e.func, (args[0][0],), e.pos), e.func
        xs = [a for a, _ in args]
        ts = [t for _, t in args]
        if e.func in T.UNARY_FLOAT_FUNCS or e.func == "isnan":
            if ts[0] not in ("float", "int") and not T.is_float(ts[0]):
                xs[0] = _cast(xs[0], default_float)
        elif e.func in ("max", "min", "pow"):
            to = _join(ts[0], ts[1], default_float)
            if to is not None:
                xs = [x if t == to or t in T.WEAK else _cast(x, to) for x, t in zip(xs, ts)]
        elif e.func == "where":
            if ts[0] != "bool":
                xs[0] = A.Binary("!=", xs[0], A.Const(0, "int"), e.pos)
            to = _join(ts[1], ts[2], default_float)
            if to is not None:
                xs[1:] = [x if t == to or t in T.WEAK else _cast(x, to)
                          for x, t in zip(xs[1:], ts[1:])]
        elif e.func in T.SAME_TYPE_FUNCS and ts[0] == "bool":
            xs[0] = _cast(xs[0], "i64")
        out = A.Call(e.func, tuple(xs), e.pos)
        return out, T.expr_dtype(out, tensors)
    raise TypeError(f"not a LEIR expression: {e!r}")  # pragma: no cover


def _coerce_index(e: A.Expr, tensors) -> A.Expr:
    x, t = _coerce(e, tensors, "f64")
    return x


def _coerce_value(e: A.Expr, dtype: str, tensors, default_float: str) -> A.Expr:
    x, t = _coerce(e, tensors, default_float)
    try:
        T.unify(t, dtype)
        return x
    except T.LeirTypeError:
        return _cast(x, dtype)


# ----------------------------------------------------------------------------- writing
_PREC = {"or": 1, "and": 2, "not": 3, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "neg": 7, "**": 8}
_ATOM = 9
_V1_OP = {"and": "&", "or": "|"}
_V1_FUNC = {"where": "if_then_else"}
_TENSOR_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_VAR_NAME_RE = re.compile(r"^[a-z][a-z0-9]*$")


def _fmt_const(c: A.Const) -> str:
    if c.kind == "bool":
        return "true" if c.value else "false"
    if c.kind == "int":
        return str(int(c.value))
    v = float(c.value)
    if math.isnan(v):
        raise V1WriteError("NaN literals have no v1 spelling")
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


class _Writer:
    def __init__(self, p: A.Program):
        self.p = p
        self.tensors = p.tensors
        self.tnames: dict[str, str] = {}
        used = set()
        for t in p.inputs + p.outputs + p.intermediates:
            n = t.name
            if not _TENSOR_NAME_RE.match(n) or n in used:
                k = 0
                while f"X{k}" in used or any(x.name == f"X{k}" for x in self.tensors.values()):
                    k += 1
                n = f"X{k}"
            used.add(n)
            self.tnames[t.name] = n
        self.vnames: dict[str, str] = {}

    # -- expressions
    def expr(self, e: A.Expr, need: int = 0) -> str:
        if isinstance(e, A.Const):
            s = _fmt_const(e)
            lvl = _PREC["neg"] if s.startswith("-") else _ATOM
            return f"({s})" if lvl < need else s
        if isinstance(e, A.Var):
            return self.vnames[e.name]
        if isinstance(e, A.Load):
            return self.access(e.tensor, e.index)
        if isinstance(e, A.Call):
            f = _V1_FUNC.get(e.func, e.func)
            return f"{f}({','.join(self.expr(a) for a in e.args)})"
        if isinstance(e, A.Unary):
            if e.op == "-":
                inner = self.expr(e.operand, _PREC["neg"])
                if inner.startswith("-"):
                    inner = f"({inner})"
                s, p = "-" + inner, _PREC["neg"]
            else:
                # always parenthesized, so that no reader can take !a==b for (!a)==b
                s, p = "!(" + self.expr(e.operand) + ")", _PREC["not"]
            return f"({s})" if p < need else s
        if isinstance(e, A.Binary):
            chain = _as_chain(e)
            if chain is not None:
                # (a<b)&(b<c) is printed as v1's chained comparison a<b<c, read back the same
                terms, ops = chain
                s = self.expr(terms[0], 5) + "".join(
                    op + self.expr(t, 5) for op, t in zip(ops, terms[1:]))
                return f"({s})" if 4 < need else s
            p = _PREC[e.op]
            if e.op == "**":
                left, right = self.expr(e.lhs, _ATOM), self.expr(e.rhs, _PREC["neg"])
            elif p == 4:
                left, right = self.expr(e.lhs, p + 1), self.expr(e.rhs, p + 1)
            else:
                left, right = self.expr(e.lhs, p), self.expr(e.rhs, p + 1)
            s = f"{left}{_V1_OP.get(e.op, e.op)}{right}"
            return f"({s})" if p < need else s
        raise TypeError(f"not a LEIR expression: {e!r}")

    def access(self, name: str, index) -> str:
        t = self.tensors[name]
        s = f"{self.tnames[name]}^{{{t.dtype},{_SCOPE_LETTER[t.scope]}}}"
        if index:
            s += "_{" + ",".join(self.expr(i) for i in index) + "}"
        return s

    # -- statements
    def loop_name(self, loop: A.Loop, taken: set[str]) -> str:
        if loop.kind in A.THREAD_KINDS:
            base = ("t" if loop.kind.startswith("thread") else "b") + loop.kind[-1]
            if loop.var == base or (_BOUND_RE.match(loop.var) and loop.var.startswith(base)):
                cand = loop.var
            else:
                cand = base
            k = 0
            while cand in taken:
                k += 1
                cand = f"{base}{k}"
            return cand
        cand = loop.var
        if not _VAR_NAME_RE.match(cand) or cand in taken:
            base = re.sub(r"[^a-z0-9]", "", cand.lower()) or "v"
            if not base[0].isalpha():
                base = "v" + base
            cand, k = base, 0
            while cand in taken:
                k += 1
                cand = f"{base}{k}"
        return cand

    def stmts(self, body, loops: list[A.Loop], taken: set[str], written: set[str]) -> str:
        out = []
        for s in body:
            if isinstance(s, A.Loop):
                heads = []
                node = s
                mine = []
                while True:
                    v = self.loop_name(node, taken)
                    taken.add(v)
                    mine.append((node.var, self.vnames.get(node.var)))
                    self.vnames[node.var] = v
                    letter = "B" if node.kind in A.THREAD_KINDS else _LETTER_OF_KIND[node.kind]
                    heads.append(f"{letter}^{{{node.extent}}}_{{{v}=0}}")
                    loops = loops + [node]
                    if len(node.body) == 1 and isinstance(node.body[0], A.Loop):
                        node = node.body[0]
                    else:
                        break
                inner = self.stmts(node.body, loops, taken, written)
                loops = loops[:len(loops) - len(heads)]
                for var, old in reversed(mine):
                    taken.discard(self.vnames[var])
                    if old is None:
                        del self.vnames[var]
                    else:
                        self.vnames[var] = old
                out.append("".join(heads) + "[" + inner + "];")
            elif isinstance(s, A.Assign):
                out.append(self.assign(s, loops, written) + ";")
            elif isinstance(s, A.If):
                raise V1WriteError("v1 has no guards; cannot write an 'if' statement "
                                   f"({s.pos or 'no position'})")
            else:
                raise TypeError(s)
        return "".join(out)

    def assign(self, s: A.Assign, loops: list[A.Loop], written: set[str]) -> str:
        lhs_load = A.Load(s.tensor, s.index)
        lhs = self.access(s.tensor, s.index)
        used = set()
        for i in s.index:
            used.update(A.free_vars(i))
        axes = [lp.var for lp in loops if lp.var not in used]
        value = self._implicit(s)
        if s.op == "=":
            red = _match_reduction(lhs_load, value)
            if red is not None:
                if axes:
                    raise V1WriteError(
                        f"the store to {s.tensor} reads {s.tensor} at the same element inside "
                        f"loop(s) {', '.join(axes)}: v1 would read it as a reduction")
                if s.tensor not in written:
                    raise V1WriteError(f"the store to {s.tensor} reads it before any write")
            written.add(s.tensor)
            return f"{lhs}={self.expr(value)}"
        written.add(s.tensor)
        if _mentions(value, s.tensor):
            raise V1WriteError(f"the reduction into {s.tensor} reads {s.tensor}; v1 cannot "
                               "express it")
        if not axes:
            # a reduction over zero axes is the store identity op e = e
            return f"{lhs}={self.expr(value)}"
        if s.op in ("max=", "min="):
            return f"{lhs}={s.op[:3]}({lhs},{self.expr(value)})"
        op = s.op[0]
        return f"{lhs}={lhs}{op}{self.expr(value, _PREC[op] + 1)}"

    def _implicit(self, s: A.Assign) -> A.Expr:
        """The value with casts the reader would insert by itself removed, if removing all
        promotion casts and re-inserting them gives back exactly the same value."""
        stripped = _strip_casts(s.value)
        if stripped is s.value:
            return s.value
        again = _coerce_value(stripped, self.tensors[s.tensor].dtype, self.tensors, "f64")
        return stripped if _same(again, s.value) else s.value

    def program(self) -> str:
        return self.stmts(self.p.body, [], set(), set())


def _as_chain(e: A.Expr) -> tuple[list[A.Expr], list[str]] | None:
    """``((a<b) and (b<c)) and (c<d)`` -> ([a, b, c, d], ['<', '<', '<']), else None."""
    if not (isinstance(e, A.Binary) and e.op == "and"):
        return None
    r = e.rhs
    if not (isinstance(r, A.Binary) and r.op in T.COMPARISONS):
        return None
    left = e.lhs
    if isinstance(left, A.Binary) and left.op in T.COMPARISONS:
        terms, ops = [left.lhs, left.rhs], [left.op]
    else:
        sub = _as_chain(left)
        if sub is None:
            return None
        terms, ops = sub
    if not _same(terms[-1], r.lhs):
        return None
    return terms + [r.rhs], ops + [r.op]


def _strip_casts(e: A.Expr) -> A.Expr:
    if isinstance(e, A.Call) and e.func in A.DTYPES:
        return _strip_casts(e.args[0])
    if isinstance(e, (A.Const, A.Var)):
        return e
    if isinstance(e, A.Load):
        idx = tuple(_strip_casts(i) for i in e.index)
        return e if all(a is b for a, b in zip(idx, e.index)) else A.Load(e.tensor, idx, e.pos)
    if isinstance(e, A.Unary):
        x = _strip_casts(e.operand)
        return e if x is e.operand else A.Unary(e.op, x, e.pos)
    if isinstance(e, A.Binary):
        a, b = _strip_casts(e.lhs), _strip_casts(e.rhs)
        return e if (a is e.lhs and b is e.rhs) else A.Binary(e.op, a, b, e.pos)
    if isinstance(e, A.Call):
        args = tuple(_strip_casts(x) for x in e.args)
        return e if all(a is b for a, b in zip(args, e.args)) else A.Call(e.func, args, e.pos)
    raise TypeError(e)  # pragma: no cover


def write_v1(program: A.Program) -> tuple[str, dict]:
    """Write a LEIR program as v1 text plus its signature dict.

    ``read_v1(*write_v1(p), name=p.name)`` gives back ``p`` (with tensors and loop variables
    renamed where v1 needs other names: tensors must be capitalized words, a bound loop's
    variable names its axis). Raises ``V1WriteError`` for what v1 cannot say: guards (``if``),
    a store that v1 would read as a reduction, a reduction that reads its own output.
    """
    w = _Writer(program)
    text = w.program()
    sig: dict = {"inputs": {w.tnames[t.name]: list(t.shape) for t in program.inputs},
                 "constants": {}, "params": {},
                 "outputs": {w.tnames[t.name]: list(t.shape) for t in program.outputs}}
    # dtypes of arguments that no access annotates
    accessed = {n.tensor for n in A.walk(program) if isinstance(n, A.Load)} | \
        {n.tensor for n in A.walk(program) if isinstance(n, A.Assign)}
    dt = {w.tnames[t.name]: t.dtype for t in program.inputs + program.outputs
          if t.name not in accessed and t.dtype != "f64"}
    if dt:
        sig["dtypes"] = dt
    # intermediates whose order or shape inference would not reproduce
    if program.intermediates:
        try:
            plain = read_v1(text, {**sig}, name=program.name, bind_as="thread")
            inferred = [(t.name, t.shape) for t in plain.intermediates]
        except V1SyntaxError:
            inferred = None
        want = [(w.tnames[t.name], t.shape) for t in program.intermediates]
        if inferred != want:
            sig["intermediates"] = {n: list(s) for n, s in want}
    return text, sig


def signature_of(record: Mapping) -> dict:
    """The signature part of a corpus record (inputs, constants, params, outputs)."""
    return {k: dict(record.get(k) or {}) for k in ("inputs", "constants", "params", "outputs")}
