"""Paths into a LEIR program and the structural questions asked along them.

A **path** is a tuple of body indices from the program root: ``(0,)`` is ``program.body[0]`` and
``(0, 1)`` is ``program.body[0].body[1]``. Nothing here mutates its input; an edit returns a new
tree (the AST is made of frozen dataclasses anyway). ``node_at`` and ``iter_stmts`` live in
:mod:`steptp.leir.ast`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from . import ast as A

Path = tuple[int, ...]


def chain(program: A.Program, path: Sequence[int]) -> list[A.Stmt] | None:
    """Every statement from the root down to ``path`` (inclusive), or None."""
    body: tuple = program.body
    out = []
    for k in path:
        if not isinstance(k, int) or k < 0 or k >= len(body):
            return None
        node = body[k]
        out.append(node)
        body = node.body if isinstance(node, (A.Loop, A.If)) else ()
    return out


def enclosing_loops(program: A.Program, path: Sequence[int]) -> list[A.Loop]:
    """Loops strictly enclosing the statement at ``path``, outermost first."""
    ch = chain(program, path) or []
    return [s for s in ch[:-1] if isinstance(s, A.Loop)]


def replace_at(program: A.Program, path: Sequence[int], new: Sequence[A.Stmt]) -> A.Program:
    """A copy of ``program`` where the statement at ``path`` is replaced by the statements
    ``new`` (zero, one or several)."""
    path = tuple(path)
    if not path:
        raise ValueError("empty path")

    def go(body: tuple, rest: tuple) -> tuple:
        k = rest[0]
        if len(rest) == 1:
            return body[:k] + tuple(new) + body[k + 1:]
        node = body[k]
        return body[:k] + (replace(node, body=go(node.body, rest[1:])),) + body[k + 1:]

    return replace(program, body=go(program.body, path))


def band(program: A.Program, path: Sequence[int], kinds: tuple[str, ...] = ("serial",)) -> list[A.Loop]:
    """The perfectly nested loop band starting at ``path``: the loop there, then its only child
    while that child is a loop, stopping at a loop whose kind is not in ``kinds``."""
    node = A.node_at(program, path)
    out: list[A.Loop] = []
    while isinstance(node, A.Loop) and node.kind in kinds:
        out.append(node)
        node = node.body[0] if len(node.body) == 1 else None
    return out


def perfect_nest(s: A.Stmt | None) -> tuple[tuple[A.Loop, ...], A.Assign] | None:
    """A perfect nest ``for a: for b: ... X[..] op e`` (loops of any kind) -> (its loops, the
    assignment); None when some loop holds more than one statement or it ends in no
    assignment."""
    loops = []
    while isinstance(s, A.Loop) and len(s.body) == 1:
        loops.append(s)
        s = s.body[0]
    return (tuple(loops), s) if isinstance(s, A.Assign) else None


def tensors_read(node: object) -> list[str]:
    seen: dict[str, None] = {}
    for n in A.walk(node):
        if isinstance(n, A.Load):
            seen.setdefault(n.tensor, None)
        elif isinstance(n, A.Assign) and n.is_reduction:
            seen.setdefault(n.tensor, None)
    return list(seen)


def tensors_written(node: object) -> list[str]:
    seen: dict[str, None] = {}
    for n in A.walk(node):
        if isinstance(n, A.Assign):
            seen.setdefault(n.tensor, None)
    return list(seen)


def statement_instances(node: A.Stmt) -> int:
    """Statement instances ``node`` runs: the copies unrolling all of it writes out."""
    if isinstance(node, A.Loop):
        return node.extent * sum(statement_instances(b) for b in node.body)
    if isinstance(node, A.If):
        return sum(statement_instances(b) for b in node.body)
    return 1


def reduction_axes(stmt: A.Assign, loops: Sequence[A.Loop]) -> list[str]:
    """The enclosing loop variables a reduction statement reduces over (absent from its LHS)."""
    if not stmt.is_reduction:
        return []
    used = set()
    for i in stmt.index:
        used.update(A.free_vars(i))
    return [lp.var for lp in loops if lp.var not in used]
