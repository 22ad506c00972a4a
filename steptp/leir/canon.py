"""Deterministic renaming of LEIR programs (docs/leir.md, "Canonical form").

* tensors are lettered in one sequence, signature first (inputs then outputs, in argument
  order), then intermediates in declaration order: ``A, B, ..., Z, AA, AB, ..., ZZ, AAA, ...``.
  One capital letter is one token, so the names that fill every access cost least;
* loop variables are named by nesting depth: ``i j k l m n o p q r s t u v w x y z``, then
  ``i1, j1, ...``; sibling nests reuse names.

The renaming is one simultaneous substitution over the tree (old name -> new name, with loop
variables resolved in their scope), so an old name equal to some new name is never captured.
Names that are neither declared nor bound by a loop (only in invalid programs) are left as they
are. ``canonicalize`` is idempotent.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import Any

from . import ast as A
from ..lru import LRU
from .printer import format_program, format_stmt

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOOP_LETTERS = "ijklmnopqrstuvwxyz"


def tensor_name(n: int) -> str:
    """Canonical name of the n-th (0-based) tensor: kernel arguments first, then intermediates."""
    name = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        name = _LETTERS[r] + name
    return name


def loop_name(depth: int) -> str:
    """Canonical name of a loop variable at nesting depth ``depth`` (0 = outermost)."""
    k = len(_LOOP_LETTERS)
    return _LOOP_LETTERS[depth] if depth < k else f"{_LOOP_LETTERS[depth % k]}{depth // k}"


def canonicalize(program: A.Program) -> tuple[A.Program, dict[str, Any]]:
    """The canonically renamed program and the original names.

    The metadata is JSON-ready: ``{"kernel": name, "tensors": {new: old}, "loops": [{"path":
    [...], "new": ..., "old": ...}, ...]}`` with one entry per loop in program order (``path`` as in
    ``steptp.leir.analysis``). The kernel name itself is kept.
    """
    tmap = _tensor_map(program)
    loops: list[dict[str, Any]] = []
    new = _renamed_decls(program, tmap, _Renamer(tmap, loops).body(program.body, (), {}))
    tensors: dict[str, str] = {}
    for t in program.params + program.intermediates:
        tensors.setdefault(tmap[t.name], t.name)
    return new, {"kernel": program.name, "tensors": tensors, "loops": loops}


def _tensor_map(program: A.Program) -> dict[str, str]:
    """Old tensor name -> canonical name: arguments first, then intermediates."""
    tmap: dict[str, str] = {}
    for n, t in enumerate(program.params + program.intermediates):
        tmap.setdefault(t.name, tensor_name(n))
    return tmap


def _renamed_decls(program: A.Program, tmap: dict[str, str], body: tuple) -> A.Program:
    return A.Program(program.name,
                     tuple(replace(t, name=tmap[t.name]) for t in program.inputs),
                     tuple(replace(t, name=tmap[t.name]) for t in program.outputs),
                     tuple(replace(t, name=tmap[t.name]) for t in program.intermediates), body)


def restore_names(program: A.Program, meta: dict[str, Any]) -> A.Program:
    """Undo ``canonicalize``: give a canonical program back its original names (``meta`` is the
    metadata ``canonicalize`` returned; loops are matched by path)."""
    tmap = {new: old for new, old in meta["tensors"].items()}
    by_path = {tuple(e["path"]): e["old"] for e in meta["loops"]}
    r = _Renamer(tmap, None, by_path)
    return A.Program(
        meta.get("kernel", program.name),
        tuple(replace(t, name=tmap.get(t.name, t.name)) for t in program.inputs),
        tuple(replace(t, name=tmap.get(t.name, t.name)) for t in program.outputs),
        tuple(replace(t, name=tmap.get(t.name, t.name)) for t in program.intermediates),
        r.body(program.body, (), {}),
    )


#: Printed canonical lines of top-level statements, keyed on the statement object (held, so
#: its ``id`` cannot be reused while the entry lives) and the program's declarations (which fix
#: the renaming and the printer's implicit loops). A search canonicalizes hundreds of
#: candidates of one state, each rewriting one nest and sharing every other statement object
#: with the state. Bounded; the text never depends on it.
_LINES_MAX = 4096
_LINES: "LRU[tuple[A.Stmt, str]]" = LRU(_LINES_MAX)


def canonical_text(program: A.Program) -> str:
    """The canonical text of the canonically renamed program (``format_program`` of
    ``canonicalize``, each top-level statement printed once per declarations)."""
    tmap = _tensor_map(program)
    shell = _renamed_decls(program, tmap, ())
    decls = (program.inputs, program.outputs, program.intermediates)
    r = _Renamer(tmap, None)
    parts = []
    for n, st in enumerate(program.body):
        key = (id(st), decls)
        hit = _LINES.get(key)
        if hit is None or hit[0] is not st:
            hit = _LINES.put(key, (st, format_stmt(r.stmt(st, (n,), {}), 1, shell)))
        parts.append(hit[1])
    head = format_program(shell)
    return head + "\n".join(parts) + "\n" if parts else head


def canonical_hash(program: A.Program) -> str:
    """SHA-256 (hex) of the canonical text with the kernel name replaced by ``k`` (the renamed
    program keeps the statement objects, so ``canonical_text``'s printed lines serve it too)."""
    text = canonical_text(replace(program, name="k"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Renamer:
    """Rebuilds a tree with tensors renamed by ``tmap`` and loop variables by depth (or, when
    ``by_path`` is given, by the loop's path)."""

    def __init__(self, tmap: dict[str, str], log: list | None, by_path: dict | None = None):
        self.tmap, self.log, self.by_path = tmap, log, by_path

    def body(self, stmts, path: tuple[int, ...], env: dict[str, str]) -> tuple:
        return tuple(self.stmt(s, path + (n,), env) for n, s in enumerate(stmts))

    def stmt(self, s: A.Stmt, path: tuple[int, ...], env: dict[str, str]) -> A.Stmt:
        """``env`` maps the old names of the enclosing loop variables to their new names; its
        length is the nesting depth."""
        if isinstance(s, A.Assign):
            return A.Assign(self.tmap.get(s.tensor, s.tensor),
                            tuple(self.expr(i, env) for i in s.index), s.op,
                            self.expr(s.value, env), s.pos)
        if isinstance(s, A.Loop):
            if self.by_path is not None:
                new = self.by_path.get(path, s.var)
            else:
                new = loop_name(len(env))
            if self.log is not None:
                self.log.append({"path": list(path), "new": new, "old": s.var})
            inner = dict(env)
            inner.pop(s.var, None)  # a shadowing loop (invalid) still counts one level deeper
            inner[s.var] = new
            if len(inner) == len(env):
                inner[f"\0{len(env)}"] = ""
            return A.Loop(new, s.extent, s.kind, self.body(s.body, path, inner), s.pos)
        if isinstance(s, A.If):
            return A.If(self.expr(s.cond, env), self.body(s.body, path, env), s.pos)
        raise TypeError(f"not a LEIR statement: {s!r}")

    def expr(self, e: A.Expr, env: dict[str, str]) -> A.Expr:
        if isinstance(e, A.Const):
            return e
        # direct constructors: ``dataclasses.replace`` dominated canonicalization, which the
        # search runs on every candidate
        if isinstance(e, A.Var):
            return A.Var(env.get(e.name, e.name), e.pos)
        if isinstance(e, A.Load):
            return A.Load(self.tmap.get(e.tensor, e.tensor),
                          tuple(self.expr(i, env) for i in e.index), e.pos)
        if isinstance(e, A.Unary):
            return A.Unary(e.op, self.expr(e.operand, env), e.pos)
        if isinstance(e, A.Binary):
            return A.Binary(e.op, self.expr(e.lhs, env), self.expr(e.rhs, env), e.pos)
        if isinstance(e, A.Call):
            return A.Call(e.func, tuple(self.expr(a, env) for a in e.args), e.pos)
        raise TypeError(f"not a LEIR expression: {e!r}")


# a numeric literal that is not part of a name (``i1``, ``f32``, ``float16`` keep their digits)
_NUMBER = re.compile(r"(?<![\w.])(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")
_INTEGER = re.compile(r"(?<![\w.])\d+(?![\w.])")
# the kernel's own name in its header (``kernel f32 NAME(``): names differ across extractions
_HEADER = re.compile(r"^(kernel\b[^(\n]*?)([A-Za-z_][A-Za-z0-9_]*)\(", re.M)


def shape_key(canonical: str, constants: bool = False) -> str | None:
    """A key equal for canonical LEIR texts (``canonical_text``, a ``KernelRecord.leir``) that
    differ only in their sizes: the kernel named ``k`` and every integer literal (shapes, loop
    extents, index offsets) replaced; with ``constants`` every floating-point literal too (an
    epsilon, a mean's 1/N). Lexical, no parse: it runs on thousands of kernels. None for an empty
    text (a kernel that did not raise)."""
    if not canonical.strip():
        return None
    text = (_NUMBER if constants else _INTEGER).sub("N", _HEADER.sub(r"\1k(", canonical, count=1))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
